"""``python -m mla_jax demo``: a multi-layer decode loop, and the facts about its buffer.

Ragged prompts (the longest 560 tokens by default) are decoded by ``decode_loop``
in equal chunks of scan steps with a progress line after each, so one executable
serves every chunk while the longest sequence crosses a split-count boundary (the
default occupancy policy at batch 4: 576 tokens, 8 -> 16 splits, for the tiny
configuration and DeepSeek-V3's 128 heads alike; ``--policy vllm``
crosses at 1024 tokens, 1 -> 2 splits, with ``--prompt-len 1000``). The run is done
twice from the same state: a warm-up that compiles, then the timed one. Printed:
steps/s, the logits buffer's size, whether the buffer and the caches kept their
device addresses, the number of compilations, and the attention error on the final
caches against the dense reference. Exit status 1 when that error exceeds the dtype's
tolerance (or an output is not finite), 2 when this machine cannot run what was asked.
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from typing import NamedTuple, get_args

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax._checks import INT32_MAX
from mla_jax.buffers import DEFAULT_SM_COUNT, LOGITS_DTYPE, gpu_sm_count, plan_logits_buffer
from mla_jax.decode import Backend, mla_decode, resolve_backend
from mla_jax.layer import PRESETS, MLAConfig, MLAParams, init_params
from mla_jax.loop import DecodeState, decode_loop, init_decode_state, rms_normalise
from mla_jax.reference import mla_decode_reference
from mla_jax.splits import DEFAULT_POLICY, Policy, kv_splits
from mla_jax.tools.cli import Parser, fail, int_at_least, positive_int
from mla_jax.tools.compare import TOLERANCE, device_memory_bytes

# jax.random.key takes a seed in int64's range.
MAX_SEED = int(np.iinfo(np.int64).max)

# Progress lines per run; the steps are rounded up to equal chunks (one executable).
MAX_CHUNKS = 4


def _parser() -> Parser:
    on_gpu = jax.default_backend() == "gpu"
    parser = Parser(
        "demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--backend",
        choices=("auto", "triton", "xla"),
        default="auto",
        help="auto: triton on a CUDA GPU, xla elsewhere",
    )
    parser.add_argument(
        "--config",
        choices=tuple(PRESETS),
        default="deepseek-v3" if on_gpu else "tiny",
        help="default: deepseek-v3 on a GPU, tiny elsewhere",
    )
    parser.add_argument("--layers", type=positive_int, default=2, help="default: 2")
    parser.add_argument("--batch", type=positive_int, default=4, help="default: 4")
    parser.add_argument(
        "--steps", type=positive_int, default=64, help="decode steps per run (default: 64)"
    )
    parser.add_argument(
        "--prompt-len",
        type=positive_int,
        default=560,
        help="the longest prompt (default: 560); the others are ragged, down to half of it",
    )
    parser.add_argument(
        "--policy",
        choices=get_args(Policy),
        default=DEFAULT_POLICY,
        help=f"the split rule (default: {DEFAULT_POLICY})",
    )
    parser.add_argument("--page-size", type=positive_int, default=16, help="default: 16")
    parser.add_argument(
        "--dtype",
        choices=tuple(TOLERANCE),
        default="bfloat16" if on_gpu else "float32",
        help="of the caches, weights and activations (default: bfloat16 "
        "on a GPU, float32 elsewhere)",
    )
    parser.add_argument(
        "--sm-count",
        type=positive_int,
        default=None,
        help=f"for the split rule (default: the GPU's, else {DEFAULT_SM_COUNT})",
    )
    parser.add_argument("--seed", type=int_at_least(0, MAX_SEED), default=0)
    return parser


def _prompt_lens(batch: int, longest: int, seed: int) -> np.ndarray:
    """Ragged lengths in ``[longest // 2, longest]``; the first is ``longest``."""
    lens = np.random.default_rng(seed).integers(max(1, longest // 2), longest + 1, batch)
    lens[0] = longest
    return lens.astype(np.int32)


def _pointers(state: DecodeState) -> list[int]:
    return [state.logits_buffer.data.unsafe_buffer_pointer()] + [
        c.unsafe_buffer_pointer() for c in state.kv_caches
    ]


def _cache_size() -> int | None:
    """Executables ``decode_loop`` holds (None where this JAX lacks the private hook)."""
    size = getattr(decode_loop, "_cache_size", None)
    return None if size is None else size()


def _mib(x: jax.Array) -> str:
    return f"{x.dtype}{list(x.shape)} = {x.size * x.dtype.itemsize / 2**20:.3f} MiB"


class Run(NamedTuple):
    """What one decode run left: the state, its time, the split counts it used, and
    whether the last step's outputs were all finite."""

    state: DecodeState
    seconds: float
    first_splits: int
    last_splits: int
    finite: bool


def decode_chunks(
    params: list[MLAParams],
    config: MLAConfig,
    x: jax.Array,
    state: DecodeState,
    *,
    chunk: int,
    chunks: int,
    backend: Backend,
    label: str,
) -> Run:
    """``chunks`` calls of ``decode_loop`` of ``chunk`` steps each (one executable),
    a progress line after each; ``state`` is donated."""
    buffer = state.logits_buffer

    def splits(length: int) -> int:
        # What the step computes inside the graph: from a run-time length (an array,
        # so the default head tile; a Python int would plan a static-length step).
        return int(
            kv_splits(
                buffer.policy,
                batch=x.shape[0],
                num_heads=config.num_heads,
                max_seq_len=jnp.asarray(length, jnp.int32),
                sm_count=buffer.sm_count,
            )
        )

    longest = int(np.asarray(state.positions).max())
    first_splits = splits(longest + 1)
    width = len(str(chunk * chunks))
    start = time.perf_counter()
    for i in range(1, chunks + 1):
        outputs, state = decode_loop(params, config, x, state, chunk, backend=backend)
        # As decode_loop feeds a step, so the chunks make one continuous decode.
        x = rms_normalise(outputs[-1], config.rms_norm_eps)
        longest = int(np.asarray(state.positions).max())  # waits for the chunk
        print(
            f"  {label} step {i * chunk:>{width}}/{chunk * chunks}  longest sequence "
            f"{longest}  splits {splits(longest)}  "
            f"{time.perf_counter() - start:.2f} s",
            flush=True,
        )
    seconds = time.perf_counter() - start
    return Run(
        state,
        seconds,
        first_splits,
        splits(longest),
        bool(np.isfinite(np.asarray(outputs.astype(jnp.float32))).all()),
    )


def attention_error(
    state: DecodeState, config: MLAConfig, *, backend: Backend, key: jax.Array
) -> float:
    """Largest ``||a - b|| / ||b||`` over layers of one ``mla_decode`` on each final cache
    (random query, ``seq_lens`` = the final positions) against the dense reference.

    The decodes thread ``state.logits_buffer`` through, so it is donated.
    """
    dtype, batch = state.kv_caches[0].dtype, state.positions.shape[0]
    q = jax.random.normal(key, (batch, config.num_heads, config.latent_dim), dtype)
    reference = jax.jit(mla_decode_reference, static_argnames=("scale", "kv_lora_rank"))
    buffer, worst = state.logits_buffer, 0.0
    for cache in state.kv_caches:
        out, _, buffer = mla_decode(
            q,
            cache,
            state.block_table,
            state.positions,
            buffer,
            scale=config.softmax_scale,
            backend=backend,
        )
        ref, _ = reference(
            q,
            cache,
            state.block_table,
            state.positions,
            scale=config.softmax_scale,
            kv_lora_rank=config.kv_lora_rank,
        )
        a, b = (np.asarray(v.astype(jnp.float32), np.float64) for v in (out, ref))
        worst = max(worst, float(np.linalg.norm(a - b) / np.linalg.norm(b)))
    return worst


def _check_machine(backend: str, dtype: str) -> str | None:
    """Why this machine cannot run the demo as asked, or None."""
    platform = jax.default_backend()
    if backend == "xla" and platform == "cpu" and dtype == "bfloat16":
        return (
            "XLA:CPU has no bfloat16 x bfloat16 = float32 dot, which the xla backend "
            "needs; use --dtype float32 or float16 here"
        )
    return None


def _size_problem(
    args: argparse.Namespace, config: MLAConfig, max_len: int, sm_count: int
) -> str | None:
    """Why the caches and logits buffer asked for cannot exist here, or None; checked
    before anything is allocated (an oversized ``--batch`` would fill the memory)."""
    pages = args.batch * -(-max_len // args.page_size)
    sizes = f"--batch {args.batch}, --prompt-len {args.prompt_len}, --steps {args.steps}"
    if pages > INT32_MAX:
        return f"{sizes}: {pages} cache pages, past the block table's int32 indices"
    shape, _ = plan_logits_buffer(
        args.batch,
        config.num_heads,
        max_len,
        kv_lora_rank=config.kv_lora_rank,
        rope_dim=config.qk_rope_head_dim,
        sm_count=sm_count,
        policy=args.policy,
    )
    cache = pages * args.page_size * config.latent_dim * jnp.dtype(args.dtype).itemsize
    need = args.layers * cache + math.prod(shape) * jnp.dtype(LOGITS_DTYPE).itemsize
    have = device_memory_bytes()
    if need > have:
        return (
            f"{sizes}, --layers {args.layers}: the caches and logits buffer need "
            f"{need / 2**30:.1f} GiB, more than this device's {have / 2**30:.1f} GiB"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        backend = resolve_backend(args.backend, None)
    except ValueError as e:
        return fail("demo", str(e))
    problem = _check_machine(backend, args.dtype)
    try:
        sm_count = gpu_sm_count() if args.sm_count is None else args.sm_count
    except ValueError as e:
        problem = problem or str(e)
    if problem:
        return fail("demo", problem)

    config, dtype = PRESETS[args.config], jnp.dtype(args.dtype)
    chunks = min(MAX_CHUNKS, args.steps)
    chunk = math.ceil(args.steps / chunks)
    steps = chunk * chunks
    max_len = args.prompt_len + steps
    problem = _size_problem(args, config, max_len, sm_count)
    if problem:
        return fail("demo", problem)
    prompts = _prompt_lens(args.batch, args.prompt_len, args.seed)
    # RngBitGenerator keys: threefry's unrolled rounds dominate compile time on a CPU.
    keys = jax.random.split(jax.random.key(args.seed, impl="rbg"), 4)
    # Jitted so each init compiles once, not once per random op and shape.
    init_layer = jax.jit(init_params, static_argnums=(0, 2))
    params = [init_layer(config, k, dtype) for k in jax.random.split(keys[0], args.layers)]
    new_state = functools.partial(
        jax.jit(
            init_decode_state,
            static_argnums=tuple(range(5)),
            static_argnames=("sm_count", "prompt_lens", "dtype", "policy"),
        ),
        config,
        args.layers,
        args.batch,
        max_len,
        args.page_size,
        sm_count=sm_count,
        key=keys[1],
        prompt_lens=tuple(prompts.tolist()),
        dtype=dtype,
        policy=args.policy,
    )
    x = jax.random.normal(keys[2], (args.batch, config.hidden_size), dtype)
    decode = functools.partial(
        decode_chunks, params, config, x, chunk=chunk, chunks=chunks, backend=backend
    )

    device = jax.devices()[0]
    sm_note = (
        ""
        if args.sm_count is not None or device.platform == "gpu"
        else (" (an H200's; here it only feeds the split rule)")
    )
    print(
        f"config: {args.config} (hidden {config.hidden_size}, heads {config.num_heads}, "
        f"kv_lora_rank {config.kv_lora_rank} + rope {config.qk_rope_head_dim}), "
        f"{args.layers} layers, batch {args.batch}, {args.dtype}, page {args.page_size}"
    )
    print(
        f"backend: {backend}  device: {device} ({device.device_kind})  "
        f"sm_count: {sm_count}{sm_note}  policy: {args.policy}"
    )
    rounded = f" ({args.steps} asked, rounded up to equal chunks)" if steps != args.steps else ""
    print(
        f"prompts: {prompts.tolist()} tokens; {steps} steps{rounded} in {chunks} chunks "
        f"of {chunk}, run twice from the same state: a warm-up that compiles, then timed"
    )

    cache_size = _cache_size()
    warm = decode(new_state(), label="warm-up")
    print(f"warm-up run, compile included: {warm.seconds:.2f} s")
    del warm  # its state goes before the timed run's is made
    state = new_state()
    before = _pointers(state)
    run = decode(state, label="timed")
    after = _cache_size()
    compilations = "n/a" if cache_size is None or after is None else after - cache_size
    unchanged = _pointers(run.state) == before

    print(
        f"steps/s: {steps / run.seconds:.1f} ({steps * args.batch / run.seconds:.1f} "
        f"tokens/s; {steps} steps in {run.seconds:.3f} s)"
    )
    crossed = (
        "one executable across it"
        if run.last_splits != run.first_splits
        else ("no boundary crossed: raise --steps or --prompt-len")
    )
    print(f"split count: {run.first_splits} -> {run.last_splits} ({crossed})")
    print(
        f"logits buffer: {_mib(run.state.logits_buffer.data)}, reserved once for {max_len} "
        f"tokens; kv caches: {args.layers} x {_mib(run.state.kv_caches[0])}"
    )
    print(
        f"pointer unchanged: {'yes' if unchanged else 'NO'} (logits buffer and "
        f"{args.layers} caches, before vs after the timed run)"
    )
    print(f"compilations: {compilations} (decode_loop, over both runs' {2 * chunks} calls)")

    error = attention_error(run.state, config, backend=backend, key=keys[3])
    tolerance = TOLERANCE[args.dtype]
    passed = error <= tolerance and run.finite
    print(
        f"attention error: {error:.2e} max rel err over {args.layers} layers (mla_decode "
        f"on the final caches vs the dense reference; tolerance {tolerance:g})"
    )
    print(f"outputs finite: {'yes' if run.finite else 'NO'}")
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1
