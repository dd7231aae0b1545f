"""DeepSeek through mla_jax on a GPU: parity with transformers through the Triton
kernels, and decode throughput of a DeepSeek-V2-Lite-shaped model.

1. Parity (needs torch and transformers; skipped with a message otherwise): the tiny
   random V2 and V3 models of the tests, float32, greedy generation of 20 tokens for
   ragged prompts with backend="triton": tokens against transformers' greedy
   generate, each step's logits (teacher-forced) and the prefill logits.
2. Throughput: DeepSeek-V2-Lite's shapes (hidden 2048, 16 heads, kv_lora_rank 512,
   q_lora_rank None, nope 128 + rope 64, v 128, 64 experts top-6 + 2 shared, first
   layer dense, vocab 102400) with random bf16 weights, ``--layers`` layers (27 in
   the real model). Caches hold 4096-token contexts of random latents; decode
   tokens/s at B=1 and B=64 over ``--steps`` steps of the one-executable decode loop,
   the time of the attention op alone (``mla_decode`` on the same shapes, times the
   layer count) as a share of the step, and the prefill time of one 4096-token prompt
   (and of a batch of them) next to it.

  python scripts/deepseek_gpu.py --out DIR          # on a CUDA GPU: DIR/deepseek_gpu.{log,json}
  python scripts/deepseek_gpu.py --out DIR --dry-run  # tiny shapes, xla backend, any machine
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax.buffers import gpu_sm_count, reserve_logits_buffer
from mla_jax.decode import mla_decode
from mla_jax.deepseek import DeepseekConfig, generate, init_params, load_checkpoint
from mla_jax.deepseek.generate import _prefill, decode_loop, new_decode_state
from mla_jax.layer import PRESETS

CONTEXT = 4096
# What the logits buffers are reserved for on a dry run (an H200's multiprocessor
# count; there may be no GPU to ask).
DRY_RUN_SM_COUNT = 132


def v2_lite(layers: int, dry_run: bool) -> DeepseekConfig:
    if dry_run:
        attention = PRESETS["tiny"]
        return DeepseekConfig(
            model_type="deepseek_v2",
            vocab_size=512,
            num_hidden_layers=layers,
            attention=attention,
            intermediate_size=128,
            moe_intermediate_size=32,
            n_routed_experts=16,
            n_shared_experts=2,
            num_experts_per_tok=6,
            first_k_dense_replace=1,
        )
    return DeepseekConfig(
        model_type="deepseek_v2",
        vocab_size=102400,
        num_hidden_layers=layers,
        attention=PRESETS["deepseek-v2-lite"],
        intermediate_size=10944,
        moe_intermediate_size=1408,
        n_routed_experts=64,
        n_shared_experts=2,
        num_experts_per_tok=6,
        first_k_dense_replace=1,
    )


def log(lines: list[str], text: str) -> None:
    print(text, flush=True)
    lines.append(text)


def parity(backend: str, sm: int, lines: list[str]) -> dict:
    """The tests' parity checks through ``backend``; {} when transformers is missing."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        log(lines, f"parity: SKIPPED, needs torch and transformers ({e})")
        return {"skipped": str(e)}
    from mla_jax.tools import hf_reference as hf

    results = {}
    lens = np.array([40, 23, 7])
    with jax.default_matmul_precision("highest"), tempfile.TemporaryDirectory() as tmp:
        for kind, q_lora in (("deepseek_v3", 24), ("deepseek_v2", None)):
            model = hf.tiny_model(hf.tiny_config(kind, q_lora_rank=q_lora), seed=len(kind))
            model.save_pretrained(f"{tmp}/{kind}")
            config, params = load_checkpoint(f"{tmp}/{kind}")
            prompts = np.random.default_rng(1).integers(0, config.vocab_size, (3, 40))
            out = generate(
                params, config, prompts, lens, 20, backend=backend, return_logits=True, sm_count=sm
            )
            same, err = True, 0.0
            for b, n in enumerate(lens):
                same &= bool(
                    (np.asarray(out.tokens[b]) == hf.greedy(model, prompts[b, :n], 20)).all()
                )
                sequence = np.concatenate([prompts[b, :n], np.asarray(out.tokens[b])])
                want = hf.logits(model, sequence)[n - 1 : n + 19]
                err = max(
                    err, float(np.abs(np.asarray(out.logits[b]) - want).max() / np.abs(want).max())
                )
            ok = same and err < 1e-4
            results[kind] = {"tokens_identical": same, "logits_max_rel_err": err, "pass": ok}
            log(
                lines,
                f"parity {kind} ({backend}): 20 greedy tokens x 3 ragged prompts "
                f"identical: {same}; step logits max rel err {err:.2e} -> "
                f"{'PASS' if ok else 'FAIL'}",
            )
    return results


def timed(fn, repeats: int = 3) -> float:
    """Median seconds of ``fn()`` (which blocks), after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def throughput(args, sm: int, lines: list[str]) -> dict:
    config = v2_lite(args.layers, args.dry_run)
    context = 64 if args.dry_run else CONTEXT
    dtype = jnp.float32 if args.dry_run else jnp.bfloat16
    backend = "xla" if args.dry_run else "triton"
    start = time.perf_counter()
    params = jax.jit(init_params, static_argnums=(0, 2))(config, jax.random.key(0), dtype)
    jax.block_until_ready(params)
    n_params = sum(x.size for x in jax.tree.leaves(params))
    log(
        lines,
        f"model: V2-Lite shapes, {config.num_hidden_layers} layers, {n_params / 1e9:.2f}B "
        f"params {jnp.dtype(dtype).name}, random weights ({time.perf_counter() - start:.1f} s "
        f"to build); backend {backend}, contexts {context} tokens",
    )
    results = {
        "layers": config.num_hidden_layers,
        "params": int(n_params),
        "context": context,
        "backend": backend,
        "dtype": jnp.dtype(dtype).name,
        "batches": {},
    }
    for batch in args.batches:
        entry = _decode_throughput(params, config, batch, context, dtype, backend, sm, args.steps)
        results["batches"][batch] = entry
        log(
            lines,
            f"decode B={batch}: {entry['step_ms']:.2f} ms/step, "
            f"{entry['tokens_per_s']:.0f} tokens/s; attention alone "
            f"({config.num_hidden_layers} x mla_decode) "
            f"{entry['attention_ms_per_step']:.2f} ms = "
            f"{100 * entry['attention_share']:.0f}% of the step; first call "
            f"(compile + run) {entry['decode_compile_s']:.1f} s",
        )
    for batch in args.prefill_batches:
        seconds = _prefill_time(params, config, batch, context, dtype, sm, backend)
        results.setdefault("prefill", {})[batch] = {
            "seconds": seconds,
            "tokens_per_s": batch * context / seconds,
        }
        log(
            lines,
            f"prefill B={batch} x {context} tokens: {seconds * 1e3:.1f} ms "
            f"({batch * context / seconds:.0f} tokens/s; dense causal attention)",
        )
    return results


def _decode_throughput(params, config, batch, context, dtype, backend, sm, steps) -> dict:
    """Seconds per step of the decode loop from ``context``-token caches of random
    latents, and of the attention op alone (``mla_decode``, once per layer)."""
    a = config.attention
    max_len = context + 2 * steps + 8
    state = new_decode_state(config, batch, max_len, page_size=64, dtype=dtype, sm_count=sm)
    keys = jax.random.split(jax.random.key(batch), config.num_hidden_layers)
    state = state._replace(
        kv_caches=tuple(
            jax.random.normal(k, c.shape, dtype) for k, c in zip(keys, state.kv_caches)
        ),
        positions=jnp.full(batch, context, jnp.int32),
    )
    logits = jax.random.normal(jax.random.key(7), (batch, config.vocab_size), jnp.float32)
    kwargs = {
        "num_steps": steps,
        "temperature": 0.0,
        "top_k": None,
        "eos_id": None,
        "backend": backend,
        "return_logits": False,
    }
    start = time.perf_counter()
    out = decode_loop(params, config, logits, state, jax.random.key(0), **kwargs)
    tokens, state = out.tokens, out.state
    tokens.block_until_ready()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = decode_loop(params, config, logits, state, jax.random.key(0), **kwargs)
    tokens, state = out.tokens, out.state
    tokens.block_until_ready()
    step_s = (time.perf_counter() - start) / steps

    q = jax.random.normal(jax.random.key(3), (batch, a.num_heads, a.latent_dim), dtype)
    seq_lens = jnp.full(batch, context + 1, jnp.int32)
    buffer = reserve_logits_buffer(
        batch,
        a.num_heads,
        max_len,
        kv_lora_rank=a.kv_lora_rank,
        rope_dim=a.qk_rope_head_dim,
        sm_count=sm,
    )

    @jax.jit
    def attention_steps(q, cache, table, seq_lens, buffer):
        def body(_, carry):
            total, buffer = carry
            out, _, buffer = mla_decode(
                q,
                cache,
                table,
                seq_lens,
                buffer,
                scale=a.softmax_scale,
                backend=backend,
            )
            # Summed so no call's output is dead code.
            return total + out[..., 0].astype(jnp.float32), buffer

        total = jnp.zeros((batch, a.num_heads), jnp.float32)
        return jax.lax.fori_loop(0, config.num_hidden_layers * steps, body, (total, buffer))[0]

    args = (q, state.kv_caches[0], state.block_table, seq_lens, buffer)
    attn_s = timed(lambda: attention_steps(*args).block_until_ready()) / steps
    return {
        "step_ms": step_s * 1e3,
        "tokens_per_s": batch / step_s,
        "attention_ms_per_step": attn_s * 1e3,
        "attention_share": attn_s / step_s,
        "decode_compile_s": compile_s,
    }


def _prefill_time(params, config, batch, context, dtype, sm, backend) -> float:
    """Median seconds to prefill ``batch`` prompts of ``context`` tokens (``backend``
    the MoE layers')."""
    state = new_decode_state(config, batch, context, page_size=64, dtype=dtype, sm_count=sm)
    prompts = jax.random.randint(jax.random.key(5), (batch, context), 0, config.vocab_size)
    lens = jnp.full(batch, context, jnp.int32)
    caches = [state.kv_caches]

    def run():
        logits, caches[0] = _prefill(
            params, config, prompts, lens, caches[0], state.block_table, backend=backend
        )
        logits.block_until_ready()

    return timed(run, repeats=2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the log and JSON")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="tiny shapes, xla backend: checks the script on any machine",
    )
    parser.add_argument("--layers", type=int, default=27, help="layers (27: V2-Lite)")
    parser.add_argument("--steps", type=int, default=32, help="decode steps timed per call")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--prefill-batches", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--skip-parity", action="store_true")
    args = parser.parse_args(argv)
    if not args.dry_run and jax.default_backend() != "gpu":
        print("deepseek_gpu: no GPU visible to JAX; use --dry-run here", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    log(lines, f"jax {jax.__version__}, device {jax.devices()[0].device_kind}")
    sm = DRY_RUN_SM_COUNT if args.dry_run else gpu_sm_count()
    report = {
        "device": jax.devices()[0].device_kind,
        "sm_count": sm,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    if not args.skip_parity:
        report["parity"] = parity("xla" if args.dry_run else "triton", sm, lines)
    report["throughput"] = throughput(args, sm, lines)
    (args.out / "deepseek_gpu.log").write_text("\n".join(lines) + "\n")
    (args.out / "deepseek_gpu.json").write_text(json.dumps(report, indent=1, default=str))
    failed = [
        k
        for k, v in report.get("parity", {}).items()
        if isinstance(v, dict) and not v.get("pass", True)
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
