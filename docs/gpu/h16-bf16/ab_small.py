"""The 16-bit 16-head Gluon kernel at 32 and 64 heads (two and four 16-head tiles a row,
each tile a CTA, launched by hand) against the seesaw and the tl
stage 1 at the small #21 rows, both stages under CUDA graphs
(``gluon_check.Launch.time_us``), the 16-head kernel at the occupancy count and at a half
and a quarter of it; each output against float64 (µs; errors in brackets). The question:
whether one-CTA-an-SM 16-head tiles, whose per-CTA start is shorter than the seesaw's
(no TMA descriptors, no warp specialisation), reach 60% of the floor at 16/32/1024 and
16/64/1024 (9.4 µs), where the seesaw takes 12.9 and 15.3; and, on rows of 128 and
256 tokens, what a call costs whatever its bytes. Run on 96a4676: logs/ab-small.log."""

import functools

import ab_seesaw
import gluon_check as gc
import torch

from mla_jax import _gluon_kernels as gk
from mla_jax import kernels
from mla_jax.splits import occupancy_kv_splits

SHAPES = [(16, 32, 1024), (16, 64, 1024), (16, 32, 4096), (16, 64, 4096)]
SHAPES += [(4, 32, 4096), (4, 64, 4096), (64, 32, 1024), (64, 64, 1024)]
# A call's fixed cost: rows of 128 and 256 tokens, where the bytes take under 1 µs.
SHAPES += [(16, 32, 128), (16, 64, 128), (16, 32, 256), (16, 64, 256)]


def h16_launch(q, pool, table, lens, splits, tile=gk.SMALL_BLOCK_H):
    """A ``gc.Launch`` whose Gluon path is the 16-bit 16-head kernel at ``splits``,
    built with ``tile`` heads a tile."""
    run = gc.Launch(q, pool, table, lens, splits, routed=False)
    q_dtype = str(q.dtype).removeprefix("torch.")
    problem = {k: v for k, v in run.s1["constexprs"].items() if k not in gk._TL_CHOICES}
    half = kernels.bf16_partials(q_dtype, splits)
    run.gluon_kernel = gk.mla_decode_stage1_gluon_h16
    run.g1 = {
        "grid": (-(-q.shape[1] // tile), q.shape[0], splits),
        "num_warps": gk.SMALL_NUM_WARPS,
        "num_stages": 1,
        "constexprs": problem | {"BLOCK_H": tile, "BLOCK_N": gk.BLOCK_N, "BF16_PARTIALS": half},
    }
    run.g2 = run.s2  # the tl stage 2, told the same partials' dtype as the tl stage 1
    return run


def routed_cell(q, pool, table, lens, sm, ref_out):
    """``routed KERNEL@splits µs (error)``: the stage 1 ``mla_decode`` routes the
    problem to (``ab_seesaw.routed_splits``' count), both stages under CUDA graphs."""
    batch, heads, _ = q.shape
    routed = ab_seesaw.routed_splits(q, pool, batch, heads, int(lens.max()), sm)
    base = gc.Launch(q, pool, table, lens, routed)
    kernel = base.gluon_kernel.fn.__name__.removeprefix("mla_decode_stage1_")
    us = base.time_us(base.both, "gluon", rep=50)
    return f"routed {kernel}@{routed} {us:6.1f} ({error(base, 'gluon', ref_out):.0e})"


def error(run, path, ref_out):
    run.out.fill_(float("nan"))
    run.both(path)
    torch.cuda.synchronize()
    return float((run.out.float().double() - ref_out).abs().max())


def timed_cells(launch, splits_list, ref_out, variants=(("h16", None),)):
    """``name@splits µs (error)``: for each split count, ``launch(splits)`` (a
    ``gc.Launch``) with each variant's stage 1 (None: the launch's own), both stages
    under CUDA graphs, the output's max abs distance from ``ref_out``."""
    cells = []
    for splits in splits_list:
        for name, kernel in variants:
            run = launch(splits)
            if kernel is not None:
                run.gluon_kernel = kernel
            err = error(run, "gluon", ref_out)
            us = run.time_us(run.both, "gluon", rep=50)
            cells.append(f"{name}@{splits} {us:7.1f} ({err:.0e})")
            del run
    return cells


def print_rows(pool, gen, sm, shapes, cells_of, q_dtype=None, kv_scale=1.0):
    """For each ``(batch, heads, length)`` of ``shapes``: a uniform problem on ``pool``
    (``gc.uniform_problem``, q in ``q_dtype``), the occupancy rule's split count for
    ``sm`` SMs and the float64 output (the cache's values ``pool * kv_scale``), then one
    printed row of ``cells_of(q, table, lens, occ, ref_out)``; the problem is freed
    before the next."""
    for batch, heads, length in shapes:
        q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen, q_dtype)
        occ = occupancy_kv_splits(batch, heads, length, sm)
        ref_out, _ = gc.reference(q, pool, table, lens, gc.SCALE, kv_scale)
        cells = cells_of(q, table, lens, occ, ref_out)
        print(f"B={batch:3d} H={heads} L={length:5d} | " + " | ".join(cells), flush=True)
        del q, table, lens, ref_out
        torch.cuda.empty_cache()


def main(shapes=SHAPES, divisors=(1, 2, 4)):
    """Each shape: the tl stage 1 and the seesaw at the occupancy count, then the
    16-head kernel at that count divided by each of ``divisors``."""
    gc.give_triton_scratch()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = gc.new_pool(torch.bfloat16, gen)

    def cells_of(q, table, lens, occ, ref_out):
        base = gc.Launch(q, pool, table, lens, occ)  # tl and the seesaw, as routed
        cells = [
            f"{path}@{occ} {base.time_us(base.both, path, rep=50):7.1f} "
            f"({error(base, path, ref_out):.0e})"
            for path in ("tl", "gluon")
        ]
        del base
        splits = sorted({max(1, occ // d) for d in divisors}, reverse=True)
        launch = functools.partial(h16_launch, q, pool, table, lens)
        return cells + timed_cells(launch, splits, ref_out)

    print_rows(pool, gen, sm, shapes, cells_of)


if __name__ == "__main__":
    main()
