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

    PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/h16-bf16" python3 docs/gpu/h32-tile/ab_tile.py
"""

import functools

import gluon_check as gc
import torch
from ab_small import h16_launch, routed_cell, timed_cells

from mla_jax.splits import occupancy_kv_splits

SHAPES = [(b, 32, n) for b in (1, 4, 16, 64, 128) for n in (1024, 4096, 16384)]
SHAPES += [(1, 32, 65536), (4, 32, 65536)]
SHAPES += [(16, 64, 1024), (4, 64, 4096), (16, 64, 4096), (64, 64, 1024), (1, 64, 4096)]
TILE = 32


def main():
    gc.give_triton_scratch()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = gc.new_pool(torch.bfloat16, gen)
    for batch, heads, length in SHAPES:
        q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen)
        occ = occupancy_kv_splits(batch, heads, length, sm)
        ref_out, _ = gc.reference(q, pool, table, lens, gc.SCALE)
        cells = [routed_cell(q, pool, table, lens, sm, ref_out)]
        splits = sorted({min(gc.MAX_SPLITS, 2 * occ), occ, max(1, occ // 2)}, reverse=True)
        launch = functools.partial(h16_launch, q, pool, table, lens, tile=TILE)
        cells += timed_cells(launch, splits, ref_out, (("h32tile", None),))
        print(f"B={batch:3d} H={heads} L={length:5d} | " + " | ".join(cells), flush=True)
        del q, table, lens, ref_out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
