"""Does reserving the logits buffer once make decoding faster? Per-step time of one
MLA decode step run three ways:

  (a) donated   a host loop calling the jitted mla_decode, the buffer donated and threaded
  (b) internal  a host loop of a jitted step that allocates its buffer (jnp.empty) inside
  (c) scan      one jitted lax.scan of STEPS steps threading the buffer; time / STEPS
  (d) scan, unrolled  the same scan with unroll=SCAN_UNROLL: one loop trip (a host
                sync on XLA:GPU) per SCAN_UNROLL steps

Shapes (GPU): B in {1, 64}, H=128, L=4096, bfloat16, DeepSeek latent 512 + rope 64,
page 64, random data, shuffled block table; the triton backend. Each variant is
warmed up, then timed REPEATS times over STEPS steps; the median is reported, and the
three variants' last outputs are checked to agree. Reported either way.

  python scripts/step_timing.py [--out results.json]   # on a CUDA GPU
  python scripts/step_timing.py --dry-run              # tiny shapes, xla backend, any machine
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax.buffers import LOGITS_DTYPE, LogitsBuffer, gpu_sm_count, reserve_logits_buffer
from mla_jax.cache import new_paged_cache
from mla_jax.decode import mla_decode
from mla_jax.splits import DEFAULT_POLICY, kv_splits

GPU_SHAPES = dict(
    batches=(1, 64),
    heads=128,
    seq_len=4096,
    page_size=64,
    kv_lora_rank=512,
    rope_dim=64,
    dtype="bfloat16",
    backend="triton",
)
# XLA:CPU lacks the bf16 dot the xla backend needs, so the dry run is float32. 520
# tokens give several splits (8 at sm_count 132); longer rows only cost compile time.
DRY_SHAPES = dict(
    batches=(1, 4),
    heads=4,
    seq_len=520,
    page_size=16,
    kv_lora_rank=32,
    rope_dim=16,
    dtype="float32",
    backend="xla",
)
SCAN_UNROLL = 8
VARIANTS = {
    "a": "host loop, donated buffer",
    "b": "host loop, buffer allocated inside",
    "c": "lax.scan, donated buffer",
    "d": f"lax.scan, unroll={SCAN_UNROLL}",
}


def make_variants(reserved: LogitsBuffer, **decode_kw) -> dict[str, Callable]:
    """Each variant runs ``steps`` decode steps and returns the last ``out``.

    The large arrays are jit arguments, never closed over: a closed-over cache would
    be embedded in the executable as a constant.
    """
    shape = reserved.shape
    settings = dict(
        kv_lora_rank=reserved.kv_lora_rank,
        rope_dim=reserved.rope_dim,
        policy=reserved.policy,
        sm_count=reserved.sm_count,
    )
    # The static options are bound here for all three, so no call hashes them.
    decode = jax.jit(functools.partial(mla_decode, **decode_kw), donate_argnums=4)

    @jax.jit
    def step_internal(q, kv, bt, sl):
        buf = LogitsBuffer(jnp.empty(shape, LOGITS_DTYPE), **settings)
        out, _, _ = mla_decode(q, kv, bt, sl, buf, **decode_kw)
        return out

    @functools.partial(jax.jit, static_argnames=("steps", "unroll"), donate_argnames="buf")
    def scan(q, kv, bt, sl, buf, steps, unroll=1):
        def body(carry, _):
            buf, _ = carry
            out, _, buf = mla_decode(q, kv, bt, sl, buf, **decode_kw)
            return (buf, out), None  # out is carried so no step's stage 2 is dead code

        out0 = jnp.zeros(q.shape[:2] + (shape[-1] - 1,), q.dtype)
        (buf, out), _ = jax.lax.scan(body, (buf, out0), length=steps, unroll=unroll)
        return out, buf

    def donated(args, buf, steps):
        for _ in range(steps):
            out, _, buf = decode(*args, buf)
        return out, buf

    def internal(args, buf, steps):
        for _ in range(steps):
            out = step_internal(*args)
        return out, buf

    return {
        "a": donated,
        "b": internal,
        "c": lambda args, buf, steps: scan(*args, buf, steps),
        "d": lambda args, buf, steps: scan(*args, buf, steps, unroll=SCAN_UNROLL),
    }


def time_batch(
    batch: int, cfg: dict, *, sm_count: int, steps: int, repeats: int, seed: int
) -> list[dict]:
    """Rows of per-step times (microseconds) for the three variants at one batch size."""
    dtype = jnp.dtype(cfg["dtype"])
    heads, seq_len, lora = cfg["heads"], cfg["seq_len"], cfg["kv_lora_rank"]
    key_kv, key_q = jax.random.split(jax.random.key(seed))
    kv, bt = new_paged_cache(
        batch, seq_len, cfg["page_size"], lora + cfg["rope_dim"], dtype, key=key_kv
    )
    q = jax.random.normal(key_q, (batch, heads, lora + cfg["rope_dim"]), dtype)
    args = (q, kv, bt, jnp.full((batch,), seq_len, jnp.int32))
    policy = DEFAULT_POLICY
    buf = reserve_logits_buffer(
        batch,
        heads,
        seq_len,
        kv_lora_rank=lora,
        rope_dim=cfg["rope_dim"],
        sm_count=sm_count,
        policy=policy,
    )
    splits = kv_splits(policy, batch=batch, num_heads=heads, max_seq_len=seq_len, sm_count=sm_count)
    # (b) allocates inside its step what (a) and (c) reserve once: the same shape.
    variants = make_variants(
        buf, scale=(128 + cfg["rope_dim"]) ** -0.5, max_seq_len=seq_len, backend=cfg["backend"]
    )
    kv_bytes = batch * seq_len * (lora + cfg["rope_dim"]) * dtype.itemsize
    rows, outs = [], {}
    for name, run in variants.items():
        out, buf = jax.block_until_ready(run(args, buf, steps))  # compile and warm up
        pointer, times = buf.data.unsafe_buffer_pointer(), []
        for _ in range(repeats):
            start = time.perf_counter()
            out, buf = jax.block_until_ready(run(args, buf, steps))
            times.append((time.perf_counter() - start) / steps * 1e6)
        outs[name] = np.asarray(out.astype(jnp.float32))
        median = statistics.median(times)
        rows.append(
            {
                "batch": batch,
                "variant": name,
                "description": VARIANTS[name],
                "median_us": median,
                "min_us": min(times),
                "times_us": times,
                "kv_tb_per_s": kv_bytes / (median * 1e-6) / 1e12,
                "num_splits": splits,
                # (b) never sees the reserved buffer, so only (a) and (c) can move it.
                "buffer_pointer_unchanged": (
                    None if name == "b" else buf.data.unsafe_buffer_pointer() == pointer
                ),
                # Same inputs every step, so every variant must end on (a)'s output.
                "max_abs_diff_vs_a": float(np.abs(outs[name] - outs["a"]).max()),
            }
        )
    base = next(row["median_us"] for row in rows if row["variant"] == "b")
    for row in rows:
        row["speedup_vs_b"] = base / row["median_us"]
    return rows


def format_table(rows: list[dict]) -> str:
    """Speedup > 1: faster than (b); pointer: the reserved buffer kept its address."""
    lines = [
        f"{'B':>3}  {'variant':40s} {'median us':>10} {'min us':>9} {'KV TB/s':>8} "
        f"{'speedup vs (b)':>14} {'pointer':>7} {'max |out - (a)|':>15}"
    ]
    for row in rows:
        pointer = {None: "-", True: "same", False: "MOVED"}[row["buffer_pointer_unchanged"]]
        lines.append(
            f"{row['batch']:>3}  ({row['variant']}) {row['description']:36s} "
            f"{row['median_us']:10.2f} {row['min_us']:9.2f} "
            f"{row['kv_tb_per_s']:8.3f} {row['speedup_vs_b']:13.2f}x {pointer:>7} "
            f"{row['max_abs_diff_vs_a']:15.2e}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="tiny shapes, xla backend, few steps: runs anywhere, its times mean nothing",
    )
    parser.add_argument("--steps", type=int, default=None, help="steps per timing (default 256)")
    parser.add_argument("--repeats", type=int, default=None, help="timings per variant (default 7)")
    parser.add_argument("--out", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    on_gpu = jax.default_backend() == "gpu"
    if not (on_gpu or args.dry_run):
        print(
            f"step_timing: needs a CUDA GPU (JAX sees {jax.default_backend()}); "
            "--dry-run runs tiny shapes here",
            file=sys.stderr,
        )
        return 2
    cfg = DRY_SHAPES if args.dry_run else GPU_SHAPES
    steps = args.steps or (8 if args.dry_run else 256)
    repeats = args.repeats or (2 if args.dry_run else 7)
    sm_count = gpu_sm_count()
    device = jax.devices()[0]

    rows = [
        row
        for batch in cfg["batches"]
        for row in time_batch(
            batch, cfg, sm_count=sm_count, steps=steps, repeats=repeats, seed=args.seed
        )
    ]
    print(
        f"device {device.device_kind}, jax {jax.__version__}, {cfg['backend']} backend, "
        f"{cfg['dtype']}, H={cfg['heads']} L={cfg['seq_len']} latent {cfg['kv_lora_rank']}"
        f"+{cfg['rope_dim']} page {cfg['page_size']}, sm_count {sm_count}, "
        f"{steps} steps x {repeats} repeats{' (DRY RUN)' if args.dry_run else ''}"
    )
    print(format_table(rows))
    if args.out:
        report = {
            "device": device.device_kind,
            "jax": jax.__version__,
            "dry_run": args.dry_run,
            "sm_count": sm_count,
            "steps": steps,
            "repeats": repeats,
            **{k: v for k, v in cfg.items() if k != "batches"},
            "rows": rows,
        }
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
