"""The 16-bit 16-head Gluon kernel at 32-head tiles (two a row at 64 heads, four at 128)
against the tl stage 1 (the head tile ``mla_decode`` gives it for the step's tokens:
16 heads up to ``_tiling.SMALL_BATCH_TOKENS``, 64 above), both at the split count each
would run at (the tl kernel at the occupancy rule's, the tiles at it or half of it:
``_triton_backend.gluon_split_divisor``'s), both stages under CUDA graphs, µs, each
output's max abs distance from float64 in brackets; ``routed`` names what
``mla_decode`` runs. The shapes whose splits hold one 64-token block, where
``ab_wide.py`` and ``ab_tile.py --h64`` timed the seesaw in place of the tl kernel
that runs there. The question: where the rule that sends them to the tiles (the tl
kernel's 16-head grid over the SMs) holds, and whether the tiles beat the tl kernel's
64-head tile (steps of 4097-16384 tokens) at all.

    PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/h16-bf16" python3 docs/gpu/h64-tile/ab_tl.py
"""

import functools

import gluon_check as gc
import jax
import torch
from ab_small import error, h16_launch, print_rows, timed_cells

from mla_jax import _gluon_kernels as gk
from mla_jax import _triton_backend, kernels

SHAPES = [(1, 64, 1024), (2, 64, 1024), (1, 64, 4096), (4, 64, 1024), (2, 64, 2048)]
SHAPES += [(3, 64, 1024), (1, 128, 1024), (2, 128, 1024), (1, 128, 4096)]
SHAPES += [(2, 128, 2048), (4, 128, 1024), (8, 128, 512)]
# 4097-16384 tokens: the tl kernel's 64-head tile.
SHAPES += [(4, 64, 2048), (8, 64, 1024), (1, 64, 8192), (16, 64, 512)]
TILE = 32


def tl_cell(q, pool, table, lens, splits, ref_out):
    """``tl@splits µs (error)``: the tl stage 1 at ``mla_decode``'s head tile."""
    run = gc.Launch(q, pool, table, lens, splits, gluon=False)
    batch_tokens = q.shape[0] * int(lens.max())
    q_dtype = str(q.dtype).removeprefix("torch.")
    run.s1, run.s2 = kernels.launch_params(
        **run.geometry, q_dtype=q_dtype, batch_tokens=batch_tokens
    )
    err = error(run, "tl", ref_out)
    us = run.time_us(run.both, "tl", rep=50)
    tile = run.s1["constexprs"]["BLOCK_H"]
    return f"tl{tile}@{splits} {us:6.1f} ({err:.0e})"


def main():
    gc.give_triton_scratch()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = gc.new_pool(torch.bfloat16, gen)

    def cells_of(q, table, lens, occ, ref_out):
        batch, heads, _ = q.shape
        tokens = batch * int(lens.max())
        spec = lambda t: jax.ShapeDtypeStruct(tuple(t.shape), str(t.dtype).removeprefix("torch."))
        divisor = _triton_backend.gluon_split_divisor(
            spec(q), spec(pool), occ, int(lens.max()), gc.LORA, gc.ROPE, 90, sm, tokens
        )
        routed = "tl"
        if divisor is not None:
            kernel = gk.kernel_for("bfloat16", heads, batch_tokens=tokens)
            routed = kernel.fn.__name__.removeprefix("mla_decode_stage1_gluon_")
        # The tiles' count as the routing gives it where they run.
        halve = (
            batch * (heads // TILE) * occ > sm and gk.split_divisor("bfloat16", heads, tokens) > 1
        )
        tiles = occ // 2 if halve else occ
        launch = functools.partial(h16_launch, q, pool, table, lens, tile=TILE)
        cells = [f"routed {routed:6s}", tl_cell(q, pool, table, lens, occ, ref_out)]
        return cells + timed_cells(launch, [tiles], ref_out, (("h32tile", None),))

    print_rows(pool, gen, sm, SHAPES, cells_of)


if __name__ == "__main__":
    main()
