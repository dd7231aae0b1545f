"""The 16-bit "16-head" Gluon stage 1 (``mla_decode_stage1_gluon_h16``: tokens on M,
every operand from shared memory) built with a 32-head tile (``BLOCK_H=32``: N = 32,
O^T 128 registers a thread, 188,928 bytes of shared memory, no spills on the CPU),
launched by hand, against the stage 1 ``mla_decode`` routes each problem to (when it
ran, on e7b0820: at 32 heads in small steps that kernel's 16-head tile twice a row,
else the seesaw; ``logs/ab-tile.log``), both stages under CUDA graphs
(``gluon_check.Launch.time_us``), µs, each output's max abs distance from float64 in
brackets. The 32-head tile at the occupancy count, half and twice it. The question:
whether one tile a row at 32 heads (the cache read once, where two 16-head tiles read
it twice) brings 16/32/1024 (11.8 µs in the sweep; 60% of its floor is 9.4) and the
other H=32 rows down, and what two 32-head tiles a row do at 64.

    PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/h16-bf16" \\
        python3 docs/gpu/h32-tile/ab_tile.py [--h64]
"""

import functools
import sys

import gluon_check as gc
import torch
from ab_small import h16_launch, print_rows, routed_cell, timed_cells

SHAPES = [(b, 32, n) for b in (1, 4, 16, 64, 128) for n in (1024, 4096, 16384)]
SHAPES += [(1, 32, 65536), (4, 32, 65536)]
SHAPES += [(16, 64, 1024), (4, 64, 4096), (16, 64, 4096), (64, 64, 1024), (1, 64, 4096)]
TILE = 32


# Prepared, not run: every H=64 shape of the sweep (B 1-128; L 1024-16384, 65536 at
# B 1 and 4), two 32-head tiles a row at the rule's count and a half and a quarter of
# it (``--h64``): whether a rule for 64 heads in small steps holds at every row.
SHAPES_H64 = [(b, 64, n) for b in (1, 4, 16, 64, 128) for n in (1024, 4096, 16384)]
SHAPES_H64 += [(1, 64, 65536), (4, 64, 65536)]


def main(shapes=SHAPES, divisors=None):
    """Each shape: the routed stage 1, then the 32-head tile at twice, once and half the
    rule's count (``divisors`` given: the count divided by each)."""
    gc.give_triton_scratch()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = gc.new_pool(torch.bfloat16, gen)

    def cells_of(q, table, lens, occ, ref_out):
        cells = [routed_cell(q, pool, table, lens, sm, ref_out)]
        if divisors is None:
            counts = {min(gc.MAX_SPLITS, 2 * occ), occ, max(1, occ // 2)}
        else:
            counts = {max(1, occ // d) for d in divisors}
        splits = sorted(counts, reverse=True)
        launch = functools.partial(h16_launch, q, pool, table, lens, tile=TILE)
        return cells + timed_cells(launch, splits, ref_out, (("h32tile", None),))

    print_rows(pool, gen, sm, shapes, cells_of)


if __name__ == "__main__":
    if "--h64" in sys.argv:
        main(SHAPES_H64, divisors=(1, 2, 4))
    else:
        main()
