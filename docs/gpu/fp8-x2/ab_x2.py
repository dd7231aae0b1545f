"""The fp8-MMA stage 1 on two e4m3 terms of q and of P (``x2.patch``: q as ``q_hi +
q_lo``, P times 16 under a lazy-rescale threshold of 4 as ``P_hi + P_lo``, each pair of
MMAs into one accumulator; a 4-stage ring) against the fp8-MMA kernel as it is and the
default, exact fp8 path (the seesaw), on a Hopper GPU. The question: whether fp8 MMAs
reach the exact path's accuracy (the numpy simulation: 0.93-1.62e-3 in relative norm,
``docs/gpu/fp8-mma-accuracy/``) in under 1.1 ms at 128/128/16384, #21's exact fp8 row.

Accuracy (``fp8_mma_check``'s cases and metric, against float64 on the dequantised
cache), then time (both stages under CUDA graphs, median µs, in rounds in the order
given and reversed): the bf16 seesaw on the bf16 pool, the default fp8 path, the
fp8-MMA kernel and its two-term variant on the fp8 pool quantised from it.

    PYTHONPATH="$PWD:$PWD/scripts" python3 docs/gpu/fp8-x2/ab_x2.py [--shapes BxHxL,...]
"""

import argparse
import os
import tempfile

import ab_seesaw
import fp8_mma_check as fc
import gluon_check as gc
import torch

from mla_jax.splits import occupancy_kv_splits
from mla_jax.tools.bench import SCALE

PATCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "x2.patch")
SHAPES = "128x128x16384,64x128x16384,128x128x4096,16x128x4096,128x64x16384,16x64x4096"


def launches(x2, q, pool16, pool8, table, lens, splits, scale):
    """{path: gc.Launch} for the four paths of one problem."""
    variant = gc.Launch(q, pool8, table, lens, splits, scale, fp8_mma=True)
    variant.gluon_kernel = x2.mla_decode_stage1_gluon_fp8_mma
    return {
        "bf16": gc.Launch(q, pool16, table, lens, splits),
        "fp8": gc.Launch(q, pool8, table, lens, splits, scale),
        "fp8_mma": gc.Launch(q, pool8, table, lens, splits, scale, fp8_mma=True),
        "x2": variant,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=SHAPES, help="BxHxL,... to time")
    args = parser.parse_args()
    sm, gen, pool16, pool8, scale = fc.setup()
    with tempfile.TemporaryDirectory() as folder:
        x2 = ab_seesaw.load_variant("x2", [PATCH], folder)
        print("error against float64 (out: relative norm; lse: largest over live rows):")
        for name, q, table, lens, splits in fc.check_problems(pool16, gen):
            ref_out, ref_lse = gc.reference(q, pool8, table, lens, SCALE, scale)
            runs = launches(x2, q, pool16, pool8, table, lens, splits, scale)
            cells = []
            for label in ("fp8", "fp8_mma", "x2"):
                rel, lse, nan = fc.errors(runs[label], ref_out, ref_lse)
                cells.append(f"{label}: out {rel:.2e} lse {lse:.2e}{' NaN!' if nan else ''}")
            print(f"{name:<28} splits={splits:3d} | " + " | ".join(cells), flush=True)
            del runs
        print("time (do_bench_cudagraph, median us, both stages; two rounds):")
        for shape in args.shapes.split(","):
            batch, heads, length = (int(v) for v in shape.split("x"))
            q, table, lens = gc.uniform_problem(pool16, batch, heads, length, gen)
            splits = occupancy_kv_splits(batch, heads, length, sm)
            runs = launches(x2, q, pool16, pool8, table, lens, splits, scale)
            times = {k: [] for k in runs}
            for key in list(runs) + list(reversed(runs)):
                runs[key].both("gluon")
                times[key].append(runs[key].time_us(runs[key].both, "gluon"))
            cells = [f"{k} {', '.join(f'{v:.1f}' for v in t)}" for k, t in times.items()]
            print(
                f"B={batch:3d} H={heads:3d} L={length:5d} splits={splits:3d} | "
                + " | ".join(cells),
                flush=True,
            )
            del runs, q, table, lens
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
