"""The 64-head fp8 kernel with tokens on M (``wide.py``) against the stage 1
``mla_decode`` runs on an fp8 cache at 64+ heads (the seesaw, each block widened in
shared memory) and the ``fp8_mma=True`` kernel, both stages under CUDA graphs
(``gluon_check.Launch.time_us``), µs, each output's max abs distance from the float64
reference (on the dequantised cache) in brackets; the wide kernel at the occupancy
rule's count, half and twice it. Then the wide kernel on ragged rows (``gluon_check``'s:
lengths 0 to past the capacity, NaN past each length, a page index out of range) at 1, 7
and 16 splits, H=128 and H=96 (a partial tile): out and lse against float64.

    PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/h16-bf16:$PWD/docs/gpu/fp8-wide" \\
        python3 docs/gpu/fp8-wide/ab_wide.py
"""

import functools

import gluon_check as gc
import torch
import wide
from ab_small import error, print_rows, timed_cells

SHAPES = [(128, 128, 16384), (64, 128, 16384), (128, 128, 4096), (16, 128, 4096)]
SHAPES += [(1, 128, 4096), (4, 128, 16384), (128, 64, 16384), (16, 64, 4096)]


def wide_launch(q, pool, table, lens, kv_scale, splits, module=wide, extra=None):
    """A ``gc.Launch`` whose Gluon path is ``module``'s kernel (``wide``'s, or
    ``wide_ws``'s with ``extra`` constexprs) at ``splits``."""
    run = gc.Launch(q, pool, table, lens, splits, kv_scale=kv_scale)
    kernel = module.mla_decode_stage1_gluon_fp8_wide
    names = set(kernel.arg_names)
    run.gluon_kernel = kernel
    run.g1 = run.g1 | {
        "grid": (-(-q.shape[1] // 64), q.shape[0], splits),
        "num_warps": module.NUM_WARPS,
        "constexprs": {k: v for k, v in run.g1["constexprs"].items() if k in names} | (extra or {}),
    }
    if run.s2 is not None:  # float32 partials
        run.g2 = run.s2 | {"constexprs": run.s2["constexprs"] | {"BF16_PARTIALS": False}}
    else:
        run.g2 = None
    return run


def timing(pool, kv_scale, gen, sm):
    def cells_of(q, table, lens, occ, ref_out):
        cells = []
        for name, mma in (("seesaw", False), ("fp8_mma", True)):
            run = gc.Launch(q, pool, table, lens, occ, kv_scale=kv_scale, fp8_mma=mma)
            err = error(run, "gluon", ref_out)
            cells.append(f"{name}@{occ} {run.time_us(run.both, 'gluon', rep=50):7.1f} ({err:.0e})")
            del run
        splits = sorted({occ, max(1, occ // 2), min(gc.MAX_SPLITS, 2 * occ)}, reverse=True)
        launch = functools.partial(wide_launch, q, pool, table, lens, kv_scale)
        return cells + timed_cells(launch, splits, ref_out, (("wide", None),))

    print_rows(pool, gen, sm, SHAPES, cells_of, torch.bfloat16, kv_scale)


def ragged(pool, kv_scale, gen, launch=wide_launch, name="wide"):
    failed = 0
    table, lens = gc.ragged_problem(pool, gen)
    for heads in (128, 96):
        q = torch.randn(len(lens), heads, gc.D, generator=gen, device="cuda").bfloat16()
        ref_out, ref_lse = gc.reference(q, pool, table, lens, gc.SCALE, kv_scale)
        for splits in (1, 7, 16):
            run = launch(q, pool, table, lens, kv_scale, splits)
            run.out.fill_(float("nan"))
            run.lse.fill_(float("nan"))
            run.both("gluon")
            torch.cuda.synchronize()
            out_err = float((run.out.double() - ref_out).abs().nan_to_num(float("inf")).max())
            lse_err = gc.lse_error(run.lse, ref_lse)
            ok = out_err < 2e-2 and lse_err < 2e-3
            failed += not ok
            print(
                f"{'PASS' if ok else 'FAIL'} {name} ragged H={heads} splits={splits:3d} "
                f"out {out_err:.1e} lse {lse_err:.1e}",
                flush=True,
            )
    return failed


def main():
    gc.give_triton_scratch()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool, kv_scale = gc.quantize_fp8(gc.new_pool(torch.bfloat16, gen))
    failed = ragged(pool.clone(), kv_scale, gen)
    timing(pool, kv_scale, gen, sm)
    print(f"ragged failures: {failed}")


if __name__ == "__main__":
    main()
