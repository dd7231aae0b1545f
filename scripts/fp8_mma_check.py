"""The fp8-MMA stage 1 (``mla_decode(..., fp8_mma=True)``) on a Hopper GPU: its error
against float64, then its time against the default fp8 path and the bf16 one.

Accuracy: on the fp8 cache quantised from a bf16 pool (``gluon_check.quantize_fp8``),
each case runs the default fp8 Gluon stage 1 (the seesaw) and the fp8-MMA one, each
followed by the tl stage 2 (none with one split), NaN-poisoned first, and prints the
output's distance from the float64 reference on the dequantised cache in relative norm
(``tests/test_gpu.py``'s metric), the largest lse error over the live rows, and whether
any NaN was left: uniform rows at 1 to 16 splits, 64, 96 and 128 heads, and ragged rows
(an empty one, page edges) at three split counts.

Timing (``do_bench_cudagraph``, median µs), at each shape the bf16 seesaw on the bf16
pool, the default fp8 path and the fp8-MMA one on the fp8 pool quantised from it, same
q, table and lengths, at the occupancy rule's split count; each path twice, in the
order given and then reversed; stage 1 alone, then both stages.

    python scripts/fp8_mma_check.py [--skip-checks] [--shapes BxHxL,...]
"""

import argparse

import gluon_check as gc
import numpy as np
import torch

from mla_jax.splits import occupancy_kv_splits
from mla_jax.tools.bench import SCALE

CHECKS = [  # (B, H, L, splits)
    (4, 128, 4096, 1),
    (4, 128, 4096, 4),
    (4, 128, 4096, 16),
    (16, 64, 1024, 2),
    (2, 96, 16384, 8),
    (1, 128, 200, 1),
]
TIMING = ",".join(
    [
        "128x128x16384",
        "64x128x16384",
        "128x128x4096",
        "64x128x4096",
        "16x128x16384",
        "16x128x4096",
        "4x128x4096",
        "1x128x4096",
        "128x64x16384",
        "64x64x4096",
        "16x64x4096",
    ]
)


def errors(run, ref_out, ref_lse):
    """(relative norm of out - ref, largest lse error over live rows, any NaN) after
    both stages of ``run``'s Gluon path on poisoned outputs."""
    run.out.fill_(float("nan"))
    run.lse.fill_(float("nan"))
    run.buf["gluon"].fill_(float("nan"))
    run.both("gluon")
    torch.cuda.synchronize()
    rel = float((run.out.double() - ref_out).norm() / ref_out.norm())
    live = torch.isfinite(ref_lse)
    lse = float((run.lse.double()[live] - ref_lse[live]).abs().max()) if live.any() else 0.0
    return rel, lse, bool(torch.isnan(run.out).any())


def check(name, q, pool8, table, lens, splits, scale):
    ref_out, ref_lse = gc.reference(q, pool8, table, lens, SCALE, scale)
    cells = []
    for label, fp8_mma in (("default fp8", False), ("fp8_mma", True)):
        run = gc.Launch(q, pool8, table, lens, splits, scale, fp8_mma=fp8_mma)
        rel, lse, nan = errors(run, ref_out, ref_lse)
        cells.append(f"{label}: out {rel:.2e} lse {lse:.2e}{' NaN!' if nan else ''}")
    print(f"{name:<28} splits={splits:3d} | " + " | ".join(cells), flush=True)


def setup():
    """Triton's scratch allocator, then ``(sm, gen, pool16, pool8, scale)``: the SM
    count, a seeded generator, a bf16 pool and the fp8 pool quantised from it (its
    scale)."""
    gc.give_triton_scratch()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool16 = gc.new_pool(torch.bfloat16, gen)
    pool8, scale = gc.quantize_fp8(pool16)
    return sm, gen, pool16, pool8, scale


def check_problems(pool16, gen):
    """``(name, q, table, lens, splits)`` of each accuracy case: ``CHECKS``' uniform
    rows, then ragged rows (an empty one, page edges) at three split counts."""
    problems = [
        (f"uniform B={b} H={h} L={n}", *gc.uniform_problem(pool16, b, h, n, gen), s)
        for b, h, n, s in CHECKS
    ]
    q, table, _ = gc.uniform_problem(pool16, 5, 128, 16384, gen)
    lens = torch.tensor([0, 5000, 64 * 7 + 3, 17, 16384], dtype=torch.int32, device="cuda")
    return problems + [("ragged B=5 H=128", q, table, lens, s) for s in (1, 3, 8)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-checks", action="store_true")
    parser.add_argument("--shapes", default=TIMING, help="BxHxL,... to time")
    args = parser.parse_args()
    sm, gen, pool16, pool8, scale = setup()
    if not args.skip_checks:
        print("error against float64 (out: relative norm; lse: largest over live rows):")
        for name, q, table, lens, splits in check_problems(pool16, gen):
            check(name, q, pool8, table, lens, splits, scale)
    print("time (do_bench_cudagraph, median us; two rounds): stage 1 / both stages")
    for shape in args.shapes.split(","):
        batch, heads, length = (int(v) for v in shape.split("x"))
        q, table, lens = gc.uniform_problem(pool16, batch, heads, length, gen)
        splits = occupancy_kv_splits(batch, heads, length, sm)
        runs = {
            "bf16": gc.Launch(q, pool16, table, lens, splits),
            "fp8": gc.Launch(q, pool8, table, lens, splits, scale),
            "fp8_mma": gc.Launch(q, pool8, table, lens, splits, scale, fp8_mma=True),
        }
        times = {k: ([], []) for k in runs}
        for key in list(runs) + list(reversed(runs)):
            run = runs[key]
            run.both("gluon")
            times[key][0].append(run.time_us(run.stage1, "gluon"))
            times[key][1].append(run.time_us(run.both, "gluon"))
        cells = [
            f"{k} {', '.join(f'{v:.1f}' for v in one)} / {', '.join(f'{v:.1f}' for v in both)}"
            for k, (one, both) in times.items()
        ]
        ratio = np.median(times["fp8_mma"][1]) / np.median(times["fp8"][1])
        print(
            f"B={batch:3d} H={heads:3d} L={length:5d} splits={splits:3d} | "
            + " | ".join(cells)
            + f" | fp8_mma / fp8 {ratio:.2f}",
            flush=True,
        )
        del runs, q, table, lens
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
