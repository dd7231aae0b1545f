"""Stage-1 configurations x split counts on a GPU, timed as `mla_jax bench` times.

For each shape, every (configuration, split count) of the triton decode (both stages,
``_triton_backend.decode``) is timed with ``bench.timed_chain`` / ``bench.time_loop``:
K chained calls in one jit, the buffer threaded and donated, median of repeats. Each
shape also times the public ``mla_decode`` with its defaults (what the bench's
"occupancy splits (default)" row measures), so the two harnesses can be compared.
Every variant's output must agree with the shape's first one. One line per variant
(wall time, and kernel time from a profiler trace), the best per shape by kernel time;
``--out FILE`` writes JSON.

    python scripts/sweep_configs.py --out sweep.json [--shapes 128x16x16384,1x128x4096]
"""

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax import _triton_backend as triton_backend
from mla_jax.buffers import reserve_logits_buffer
from mla_jax.decode import mla_decode
from mla_jax.splits import num_kv_splits, occupancy_kv_splits
from mla_jax.tools import bench, bench_report

REPEATS, PAGE, SM = 3, 64, 132
SCALE = bench.SCALE
# The target shapes, then the small batches where the split count matters most.
SHAPES = [
    (128, 16, 16384),
    (64, 16, 4096),
    (128, 128, 16384),
    (128, 128, 4096),
    (16, 128, 4096),
    (1, 128, 4096),
    (1, 16, 4096),
    (1, 16, 16384),
    (1, 128, 16384),
    (4, 128, 4096),
    (1, 128, 1024),
]
# 16-head tiles with the latent dims in 8, 4, 2 or 1 column chunks (kernels._attend;
# 4 is the default, 1 is version 6; run 23), each at its own split counts.
CONFIGS = {
    16: [
        dict(BLOCK_N=32, num_warps=4, num_stages=3, LORA_CHUNKS=8),
        dict(BLOCK_N=32, num_warps=4, num_stages=3, LORA_CHUNKS=4),
        dict(BLOCK_N=32, num_warps=4, num_stages=3, LORA_CHUNKS=2),
        dict(BLOCK_N=32, num_warps=4, num_stages=3, LORA_CHUNKS=1),
    ],
    # 16-head tiles at H=128: eight programs share each latent tile through L2, but
    # as many programs need 4x fewer splits, so 4x fewer partials at small batches
    # (run 22: at B=1, L=4k the 64-head tiles' 64 splits write 16.8 MB of partials
    # for 4.7 MB of KV). Run 24: they win only while the batch holds about 4096 tokens.
    # 32-head tiles (mma.sync, 4 latent chunks) lost to one of these two at every
    # shape of run 39 (B = 1, 4, 16, 128), so they are not swept.
    128: [
        dict(BLOCK_H=64, BLOCK_N=64, num_warps=8, num_stages=2, LORA_CHUNKS=1),
        dict(BLOCK_H=16, BLOCK_N=32, num_warps=4, num_stages=3, LORA_CHUNKS=4),
    ],
}


def split_choices(batch, heads, length, factors=None):
    """vLLM's count, the occupancy count and its neighbours; at small batches every
    power of two up to one split per 64 tokens. ``factors``: only these multiples of
    the occupancy count instead."""
    occ = occupancy_kv_splits(batch, heads, length, SM)
    if factors:
        return sorted({max(1, int(occ * f)) for f in factors})
    choices = {num_kv_splits(length, SM), occ, 2 * occ, max(1, occ // 2)}
    if batch <= 4:
        choices |= {s for s in (8, 16, 32, 64, 128) if s <= max(1, length // 64)}
    return sorted(choices)


def configs(heads, default_only, given=None):
    if given is not None:
        return given
    return [None] if default_only else CONFIGS[16 if heads <= 16 else 128]


def parse_shapes(text):
    """``"128x16x16384,1x128x4096"`` -> ``[(128, 16, 16384), (1, 128, 4096)]``."""
    return [tuple(int(v) for v in s.split("x")) for s in text.split(",")]


def shapes_parser(default, described):
    """An argument parser with ``--out`` (the results' JSON file) and ``--shapes``
    (comma-separated BxHxL, parsed to ``(B, H, L)`` tuples; ``default`` without it)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument(
        "--shapes",
        type=parse_shapes,
        default=default,
        help=f"comma-separated BxHxL (default: {described})",
    )
    return parser


def time_decode(decode, calls, inputs, buf, *, repeats=REPEATS, runs=bench.RUNS_PER_REPEAT):
    """``(ms, last output, kernel ms)`` of ``decode``: the median per-call wall time as
    the bench times it, and the kernel time per call of ``runs`` more runs under the
    profiler (``bench.trace_kernels``; None where it saw no kernel)."""
    loop = bench.timed_chain(decode, calls, perturb_table=False, keep_outs=False)
    step = lambda st: loop(*inputs, st[2])
    times, state = bench.time_loop(step, (None, None, buf), calls=calls, repeats=repeats, runs=runs)
    traced, (outs, _, _) = bench.trace_kernels(lambda: bench.run_steps(step, state, runs))
    per_call = traced.per_call(calls * runs)
    return float(np.median(times)), outs[-1], None if per_call is None else per_call[0]


def shape_inputs(batch, heads, length):
    """The bench's inputs for one shape, and its K calls a run (from the brief's floor)."""
    inputs = bench.make_inputs(jax.random.key(0), batch, heads, length, PAGE)
    floor = bench_report.floor_ms(
        bench_report.kv_bytes(batch, length),
        bench_report.attention_flops(batch, heads, length),
        copy_tbps=4.22,
        matmul_tflops=790,
    )
    return inputs, bench.calls_for(floor)


def direct(splits, config, batch_tokens=None):
    """The triton decode at a fixed split count and stage-1 configuration (None: the
    one ``kernels.stage1_config`` picks with ``batch_tokens``, as ``mla_decode`` passes
    it for a static length; None: the default tile)."""

    def decode(q, kv, bt, sl, buf):
        return triton_backend.decode(
            q,
            q,
            512,
            kv,
            bt,
            sl,
            jnp.full((1,), splits, jnp.int32),
            splits,
            jnp.ones((1,), jnp.float32),
            buf,
            scale=SCALE,
            kv_lora_rank=512,
            rope_dim=64,
            compute_capability=None,
            batch_tokens=batch_tokens,
            config=config,
        )

    return decode


def main():
    parser = shapes_parser(SHAPES, "SHAPES")
    parser.add_argument(
        "--default-config", action="store_true", help="only kernels.stage1_config's configuration"
    )
    parser.add_argument(
        "--configs", type=json.loads, help="a JSON list of stage-1 configurations to sweep"
    )
    parser.add_argument(
        "--occupancy-factors",
        type=lambda t: [float(v) for v in t.split(",")],
        help="comma-separated multiples of the occupancy split count (e.g. 0.5,1)",
    )
    args = parser.parse_args()
    results = []
    for batch, heads, length in args.shapes:
        inputs, calls = shape_inputs(batch, heads, length)
        occ = occupancy_kv_splits(batch, heads, length, SM)
        # (name, splits, config, buffer): None splits is mla_decode with its defaults;
        # a "reserved" buffer is reserve_logits_buffer's (sized for batch 1), else exact.
        variants = (
            [("mla_decode defaults", None, None, "reserved")]
            + [
                (f"splits={s:3d} {c or 'default config'}", s, c, "exact")
                for c in configs(heads, args.default_config, args.configs)
                for s in split_choices(batch, heads, length, args.occupancy_factors)
            ]
            + [
                (f"splits={occ:3d} mla_decode's config, reserved buffer", occ, None, "reserved"),
                ("mla_decode defaults, timed last", None, None, "reserved"),
            ]
        )
        best, baseline = None, None
        for name, splits, config, buffer in variants:
            try:
                buf = (
                    reserve_logits_buffer(batch, heads, length, sm_count=SM)
                    if buffer == "reserved"
                    else jnp.zeros((batch, heads, splits, 513), jnp.float32)
                )
                if splits is None:
                    decode = lambda q, kv, bt, sl, buf, length=length: mla_decode(
                        q, kv, bt, sl, buf, scale=SCALE, max_seq_len=length
                    )
                else:
                    # "default config" rows: the default tile; the reserved-buffer row:
                    # the tile mla_decode picks for this static length.
                    tokens = batch * length if buffer == "reserved" else None
                    decode = direct(splits, config, tokens)
                    # The backend takes the reservation's array, not the LogitsBuffer.
                    buf = buf.data if buffer == "reserved" else buf
                ms, out, kernel_ms = time_decode(decode, calls, inputs, buf)
            except Exception as e:  # a config that does not compile or fit: record why
                print(f"B={batch} H={heads} L={length} {name}: {e!r}"[:300], flush=True)
                continue
            out = out.astype(jnp.float32)
            baseline = out if baseline is None else baseline
            diff = float(jnp.max(jnp.abs(out - baseline)))
            tbs = bench_report.kv_bytes(batch, length) / ms / 1e9
            row = dict(
                batch=batch,
                heads=heads,
                length=length,
                variant=name,
                splits=splits,
                config=config,
                calls=calls,
                ms=ms,
                kernel_ms=kernel_ms,
                tb_s=tbs,
                max_diff=diff,
            )
            results.append(row)
            print(
                f"B={batch:4d} H={heads:4d} L={length:6d} {name:75s} {ms:8.4f} ms "
                f"kernels {kernel_ms or 0:8.4f} ms {tbs:5.2f} TB/s diff {diff:.1e}",
                flush=True,
            )
            if best is None or (kernel_ms or ms) < (best["kernel_ms"] or best["ms"]):
                best = row
        del inputs
        print(f"BEST B={batch} H={heads} L={length}: {best}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
