"""DeepSeek generation (``mla_jax.deepseek.generate``) on a mesh spanning processes.

Every process runs this same program. It joins the others through
``jax.distributed.initialize``, builds one mesh over every process's devices (axis
``"dp"``), and calls ``generate`` with

- the parameters replicated: every process builds the same seeded tiny model and
  places its copy on its own devices (``jax.make_array_from_process_local_data``
  with a replicated sharding, no communication);
- the prompts split on the batch axis: each process passes only its rows;
- ``prompt_lens`` as a host array, the whole batch's, the same in every process
  (``generate`` reads it on the host).

``generate`` then jit-compiles the prefill and the decode loop for the whole mesh:
XLA partitions them from the shardings of the arguments (the xla backend's
attention is plain XLA, so it partitions like the rest). The tokens come back split
on the batch like the prompts and are gathered with ``process_allgather``.

``--unsharded`` is the one-process reference: ``generate`` on this process's first
device, no mesh. With the same ``--seed`` and sizes, the gathered tokens must equal
its tokens; a test compares the two runs' files.

The exit status is 1 on an error. ``--out DIR`` writes ``results-<process id>.json``
(tokens, the logits' SHA-256 digest, shardings, times) and, from process 0,
``generated.npz`` (the gathered tokens and float32 logits); the JSON is also printed
on one line that starts with ``MULTIHOST_GENERATE``.

Two processes on one CPU machine, two simulated CPU devices each (a 4-device mesh),
then the one-process reference:

    PORT=29500
    for i in 0 1; do
      python scripts/multihost_generate.py --num-processes 2 --process-id $i \\
          --coordinator 127.0.0.1:$PORT --local-device-count 2 --out /tmp/mhg &
    done; wait
    python scripts/multihost_generate.py --unsharded --out /tmp/mhg-reference
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multihost_decode import (
    add_process_arguments,
    check_process_args,
    configure_environment,
    initialize,
    process_local_part,
)

MARK = "MULTIHOST_GENERATE "
JOINED = "multihost_generate: joined:"  # printed once jax.distributed is up
AXIS = "dp"
SM_COUNT = 1  # the split rule's multiprocessor count: no GPU to ask on the CPU


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = add_process_arguments(p)
    g.add_argument(
        "--unsharded",
        action="store_true",
        help="the one-process reference: generate() on the first device, no mesh",
    )
    g = p.add_argument_group("model and prompts")
    g.add_argument("--batch", type=int, default=4, help="a multiple of the mesh size")
    g.add_argument("--prompt-len", type=int, default=12, help="the longest prompt")
    g.add_argument("--new-tokens", type=int, default=8)
    g.add_argument("--layers", type=int, default=2, help="the first dense, the others MoE")
    g.add_argument("--backend", choices=("auto", "xla", "triton"), default="xla")
    g.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="directory for the result files")
    args = p.parse_args(argv)
    check_args(args)
    return args


def check_args(args: argparse.Namespace) -> None:
    """ValueErrors naming the argument to change."""
    check_process_args(args)
    if args.unsharded and (args.num_processes > 1 or args.coordinator is not None):
        raise ValueError("--unsharded is the one-process reference: drop the process options")
    for name in ("batch", "prompt_len", "new_tokens", "layers"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")


# ------------------------------------------------------------------- model, prompts


def tiny_config(layers: int) -> Any:
    """A DeepSeek-V3 decoder: 4 heads, latent 32 + 16, 8 experts in 4 groups."""
    from mla_jax.deepseek import DeepseekConfig
    from mla_jax.layer import MLAConfig

    attention = MLAConfig(
        hidden_size=64,
        num_heads=4,
        q_lora_rank=24,
        kv_lora_rank=32,
        qk_rope_head_dim=16,
        qk_nope_head_dim=16,
        v_head_dim=16,
        rms_norm_eps=1e-5,
    )
    return DeepseekConfig(
        model_type="deepseek_v3",
        vocab_size=128,
        num_hidden_layers=layers,
        attention=attention,
        intermediate_size=96,
        moe_intermediate_size=32,
        n_routed_experts=8,
        n_shared_experts=1,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        routed_scaling_factor=2.5,
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
        rms_norm_eps=1e-5,
    )


def tiny_params(config: Any, seed: int) -> Any:
    """float32 weights of ``init_params``'s structure, drawn with numpy: norms 1, the
    router's correction bias normal with std 0.1, every other weight normal with
    std 0.3 (large weights keep the logits far from ties). The same in every
    process, and quicker to build than ``init_params``'s jitted draws."""
    import jax
    import jax.numpy as jnp

    from mla_jax.deepseek import init_params

    shapes = jax.eval_shape(lambda k: init_params(config, k, jnp.float32), jax.random.key(0))
    rng = np.random.default_rng(seed)

    def draw(path: tuple[Any, ...], leaf: jax.ShapeDtypeStruct) -> np.ndarray:
        name = getattr(path[-1], "name", "")
        if name.endswith("norm"):
            return np.ones(leaf.shape, np.float32)
        std = 0.1 if name == "router_bias" else 0.3
        return (rng.standard_normal(leaf.shape) * std).astype(np.float32)

    return jax.tree_util.tree_map_with_path(draw, shapes)


def tiny_prompts(args: argparse.Namespace, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded prompts ``[B, T]`` and their lengths: one of each length ``T``
    and 1, the others in between."""
    rng = np.random.default_rng(args.seed + 1)
    prompts = rng.integers(0, vocab, (args.batch, args.prompt_len)).astype(np.int32)
    lens = rng.integers(1, args.prompt_len + 1, args.batch).astype(np.int32)
    lens[0] = args.prompt_len
    lens[-1] = 1
    return prompts, lens


# --------------------------------------------------------------------------- run


def digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    return hashlib.sha256(f"{a.dtype}{a.shape}".encode() + a.tobytes()).hexdigest()[:16]


def run(args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    initialize(args)
    import jax
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from mla_jax.deepseek import generate

    init_s = time.perf_counter() - start
    devices = jax.devices()
    print(f"{JOINED} process {jax.process_index()} of {jax.process_count()}, "
          f"{len(jax.local_devices())} of {len(devices)} devices", flush=True)  # fmt: skip

    config = tiny_config(args.layers)
    params = tiny_params(config, args.seed)
    prompts, lens = tiny_prompts(args, config.vocab_size)
    options = dict(backend=args.backend, return_logits=True, sm_count=SM_COUNT)

    start = time.perf_counter()
    if args.unsharded:
        device = jax.local_devices()[0]
        params = jax.device_put(params, device)
        out = generate(params, config, jax.device_put(prompts, device), lens,
                       args.new_tokens, **options)  # fmt: skip
        tokens, logits = np.asarray(out.tokens), np.asarray(out.logits)
        mesh_shape, specs = {}, {}
    else:
        mesh = Mesh(np.array(devices), (AXIS,))
        if args.batch % mesh.size:
            raise ValueError(f"--batch {args.batch} must be a multiple of the {mesh.size} "
                             "mesh devices (every device of every process)")  # fmt: skip
        replicated = NamedSharding(mesh, PartitionSpec())
        rows = NamedSharding(mesh, PartitionSpec(AXIS))
        # Every process holds the whole (identical) model: its part of a replicated
        # array is all of it.
        params = jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(replicated, x), params
        )
        prompts_global = jax.make_array_from_process_local_data(
            rows, process_local_part(rows, prompts), prompts.shape
        )
        out = generate(params, config, prompts_global, lens, args.new_tokens, **options)
        assert out.logits is not None
        tokens = np.asarray(multihost_utils.process_allgather(out.tokens, tiled=True))
        logits = np.asarray(multihost_utils.process_allgather(out.logits, tiled=True))
        mesh_shape = dict(mesh.shape)
        specs = {"tokens": str(out.tokens.sharding.spec), "logits": str(out.logits.sharding.spec)}
    generate_s = time.perf_counter() - start

    results = {
        "ok": True,
        "process_id": jax.process_index(),
        "num_processes": jax.process_count(),
        "unsharded": args.unsharded,
        "mesh": mesh_shape,
        "local_devices": [str(d) for d in jax.local_devices()],
        "platform": devices[0].platform,
        "prompt_lens": lens.tolist(),
        "tokens": tokens.tolist(),
        "logits_digest": digest(logits),
        "specs": specs,
        "seconds": {"initialize": round(init_s, 2), "generate": round(generate_s, 2)},
    }
    return {"results": results, "arrays": {"tokens": tokens, "logits": logits}}


def write(args: argparse.Namespace, results: dict[str, Any], arrays: dict[str, Any]) -> None:
    print(MARK + json.dumps(results), flush=True)
    if args.out is None:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    index = results.get("process_id", args.process_id)
    (args.out / f"results-{index}.json").write_text(json.dumps(results, indent=1))
    if index == 0 and arrays:
        np.savez(args.out / "generated.npz", **arrays)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_environment(args)
    start = time.perf_counter()
    try:
        out = run(args)
    except Exception:  # reported in the JSON and the exit status
        results = {"ok": False, "process_id": args.process_id, "error": traceback.format_exc()}
        write(args, results, {})
        print(results["error"], file=sys.stderr, flush=True)
        return 1
    out["results"]["seconds"]["total"] = round(time.perf_counter() - start, 2)
    write(args, out["results"], out["arrays"])
    if args.coordinator is not None:
        import jax

        jax.distributed.shutdown()  # every process reaches it: a clean exit together
    return 0


if __name__ == "__main__":
    sys.exit(main())
