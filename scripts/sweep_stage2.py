"""Stage 2's device time at each (HEAD_BLOCK, SPLIT_BLOCK, COL_BLOCK, warps) tiling.

Stage 2 merges ``splits`` partials per (row, head); its tiling (``kernels.stage2_tiling``)
decides how many programs there are and how many dependent load-and-merge rounds each
makes. For each shape this fills the buffer with stage 1 once, then times stage 2 alone
under a CUDA graph (``do_bench_cudagraph``, median) at the default tiling, at version
6's kernel (``--prev``) and at every candidate tiling, and checks each output against
the default's. One line per candidate, the best per shape; ``--out FILE`` writes JSON.

    python3 scripts/sweep_stage2.py --prev build/prev/mla_jax/kernels.py --out s2.json  # GPU
"""

import functools
import itertools
import json

import torch
import triton
import triton.testing
from ab_kernels import load_kernels
from stage_times import LORA, launchers, make_problem
from sweep_configs import SM, shapes_parser

from mla_jax import kernels
from mla_jax.splits import occupancy_kv_splits

# Small batches, where the split count (so stage 2's share) is largest.
SHAPES = [
    (1, 128, 4096),
    (1, 128, 1024),
    (4, 128, 4096),
    (1, 16, 16384),
    (1, 16, 4096),
    (4, 16, 4096),
    (1, 16, 1024),
    (16, 16, 1024),
    (64, 16, 4096),
]


def candidates(splits, heads):
    """Tilings of 4096 partial values at 4 warps and 8192 at 8 (32 registers a thread),
    heads filling what splits and columns leave."""
    for split_block, col_block, (tile, warps) in itertools.product(
        (8, 16, 32, 64, 128), (64, 128, 256, 512), ((4096, 4), (8192, 8))
    ):
        if split_block > max(8, triton.next_power_of_2(splits)) or split_block * col_block > tile:
            continue
        head_block = min(triton.next_power_of_2(heads), tile // (split_block * col_block))
        yield dict(
            HEAD_BLOCK=head_block, SPLIT_BLOCK=split_block, COL_BLOCK=col_block, num_warps=warps
        )


def main():
    parser = shapes_parser(SHAPES, "small batches, and 64/16/4096")
    parser.add_argument("--prev", required=True, help="version 6's kernels.py")
    args = parser.parse_args()
    prev = load_kernels(args.prev, "prev")
    rows = []
    for seed, (batch, heads, length) in enumerate(args.shapes):
        problem = make_problem(batch, heads, length, seed)
        splits = occupancy_kv_splits(batch, heads, length, SM)
        stage1, stage2, out, _ = launchers(*problem, splits)
        stage1()
        stage2()
        want = out.clone()
        # Version 6's stage 2 reads its own buffer: fill it with its own stage 1.
        prev_stage1, prev_stage2, prev_out, _ = launchers(*problem, splits, module=prev)
        prev_stage1()
        timed = {"default": stage2, "v6": prev_stage2}
        tilings = {"default": kernels.stage2_tiling(splits, heads, LORA, batch), "v6": {}}
        for tiling in candidates(splits, heads):
            name = "h{HEAD_BLOCK}s{SPLIT_BLOCK}c{COL_BLOCK}w{num_warps}".format(**tiling)
            timed[name] = functools.partial(stage2, **tiling)
            tilings[name] = tiling
        ms = {}
        for name, fn in timed.items():
            fn()
            got = prev_out if name == "v6" else out
            err = float((got.float() - want.float()).abs().max())
            assert err < 0.02, f"{name} disagrees with the default tiling by {err}"
            ms[name] = triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median")
        best = min(ms, key=ms.get)
        rows.append(
            dict(
                batch=batch,
                heads=heads,
                length=length,
                splits=splits,
                ms=ms,
                tilings=tilings,
                best=best,
            )
        )
        print(
            f"B={batch:4d} H={heads:4d} L={length:6d} splits={splits:3d}  default "
            f"{tilings['default']} {ms['default'] * 1e3:.2f} us  v6 {ms['v6'] * 1e3:.2f} us  "
            f"BEST {best} {ms[best] * 1e3:.2f} us  | "
            + " ".join(f"{n} {t * 1e3:.2f}" for n, t in sorted(ms.items(), key=lambda x: x[1])[:8]),
            flush=True,
        )
        del problem, out, want, prev_out
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
