"""``wide_ws.py``'s kernel (two warp-specialised warpgroups of 32 heads, a three-stage
ring, mbarriers, no CTA-wide barrier in the loop), with and without ``SKEW``, against
``wide.py``'s (8 warps, CTA barriers) and the routed seesaw on the fp8 cache, both
stages under CUDA graphs, µs, errors against float64 in brackets; first each variant
on ``ab_wide.ragged``'s rows (out and lse against float64).

    PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/h16-bf16:$PWD/docs/gpu/fp8-wide" \\
        python3 docs/gpu/fp8-wide/ab_ws.py
"""

import functools

import ab_wide as ab
import gluon_check as gc
import torch
import wide_ws
from ab_small import error, print_rows, timed_cells

SHAPES = [(128, 128, 16384), (64, 128, 16384), (128, 128, 4096), (16, 128, 4096)]
SHAPES += [(1, 128, 4096), (128, 64, 16384)]


def ws_launch(skew):
    return functools.partial(_ws, skew=skew)


def _ws(q, pool, table, lens, kv_scale, splits, skew):
    return ab.wide_launch(q, pool, table, lens, kv_scale, splits, wide_ws, {"SKEW": skew})


def main():
    gc.give_triton_scratch()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool, kv_scale = gc.quantize_fp8(gc.new_pool(torch.bfloat16, gen))
    failed = 0
    for skew in (False, True):
        failed += ab.ragged(pool.clone(), kv_scale, gen, ws_launch(skew), f"ws skew={skew}")
    print(f"ragged failures: {failed}", flush=True)

    def cells_of(q, table, lens, occ, ref_out):
        run = gc.Launch(q, pool, table, lens, occ, kv_scale=kv_scale)
        err = error(run, "gluon", ref_out)
        cells = [f"seesaw@{occ} {run.time_us(run.both, 'gluon', rep=50):7.1f} ({err:.0e})"]
        del run
        for name, launch in (
            ("wide", ab.wide_launch),
            ("ws", ws_launch(False)),
            ("ws-skew", ws_launch(True)),
        ):
            bound = functools.partial(launch, q, pool, table, lens, kv_scale)
            cells += timed_cells(bound, [occ], ref_out, ((name, None),))
        return cells

    print_rows(pool, gen, sm, SHAPES, cells_of, torch.bfloat16, kv_scale)


if __name__ == "__main__":
    main()
