"""What choosing stage 1's head tile at run time would cost at H=128 (perf notes, session 7).

16-head tiles beat 64-head tiles at H=128 only while the batch holds about 4096 tokens
(runs 24, 39), which depends on the run-time lengths; the head tile is fixed at trace
time. This times, as the config sweep does (``sweep_configs.time_decode``), each tile
alone and both behind a ``lax.cond`` on ``batch * max(seq_lens) <= 4096``, at shapes on
either side of that line, so the cond's own cost shows. Every variant's output must
agree with the first one's.

    python scripts/cond_tiles.py --out cond.json [--shapes 1x128x1024,4x128x4096]
"""

import json

import jax.numpy as jnp
from jax import lax
from sweep_configs import CONFIGS, SM, direct, shape_inputs, shapes_parser, time_decode

from mla_jax.splits import _occupancy_splits

SHAPES = [(1, 128, 1024), (1, 128, 4096), (4, 128, 4096), (16, 128, 1024)]
SMALL_TOKENS = 4096  # runs 24 and 39: where 16-head tiles stop winning
WIDE, NARROW = CONFIGS[128]  # 64-head and 16-head tiles


def with_cond(narrow_splits, wide_splits):
    """16-head tiles at ``narrow_splits`` while the batch holds few tokens, else 64-head."""
    narrow, wide = direct(narrow_splits, NARROW), direct(wide_splits, WIDE)

    def decode(q, kv, bt, sl, buf):
        small = q.shape[0] * jnp.max(sl) <= SMALL_TOKENS
        return lax.cond(small, narrow, wide, q, kv, bt, sl, buf)

    return decode


def main():
    args = shapes_parser(SHAPES, "SHAPES").parse_args()
    results = []
    for batch, heads, length in args.shapes:
        inputs, calls = shape_inputs(batch, heads, length)
        # The 64-head tile's count (the default before the trace-time tile choice).
        occ = _occupancy_splits(batch, heads, length, SM, batch_tokens=None)
        variants = [(f"64-head, {occ} splits (default)", direct(occ, WIDE))]
        for s in (16, 32):
            variants += [
                (f"16-head, {s} splits", direct(s, NARROW)),
                (f"cond(16-head {s} | 64-head {occ})", with_cond(s, occ)),
            ]
        grid = max(occ, 32)  # one buffer wide enough for every variant's grid
        baseline = None
        for name, decode in variants:
            buf = jnp.zeros((batch, heads, grid, 513), jnp.float32)
            ms, out, _ = time_decode(decode, calls, inputs, buf)
            out = out.astype(jnp.float32)
            baseline = out if baseline is None else baseline
            diff = float(jnp.max(jnp.abs(out - baseline)))
            results.append(
                dict(
                    batch=batch,
                    heads=heads,
                    length=length,
                    variant=name,
                    calls=calls,
                    ms=ms,
                    max_diff=diff,
                )
            )
            print(
                f"B={batch:4d} H={heads:4d} L={length:6d} {name:36s} {ms * 1e3:7.1f} us "
                f"diff {diff:.1e}",
                flush=True,
            )
        del inputs
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
