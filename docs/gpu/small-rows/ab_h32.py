"""The 16-bit 16-head Gluon stage 1 at 32 heads (two 16-head tiles a row, not routed
there) against the stage 1 ``mla_decode`` routes to (the seesaw) and the tl stage 1, at
every H=32 shape of the sweep, both stages under CUDA graphs (``gluon_check.Launch.
time_us``): the 16-head kernel at the occupancy count and half of it. µs; the error
against float64 in brackets. Uses ``docs/gpu/h16-bf16/ab_small.py``'s launch."""

import os
import sys

import gluon_check as gc
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "h16-bf16"))
from ab_small import error, h16_launch

from mla_jax.splits import occupancy_kv_splits

SHAPES = [(b, 32, n) for b in (1, 4, 16, 64, 128) for n in (1024, 4096, 16384)]
SHAPES += [(1, 32, 65536), (4, 32, 65536)]


def main():
    gc.give_triton_scratch()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = gc.new_pool(torch.bfloat16, gen)
    for batch, heads, length in SHAPES:
        q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen)
        occ = occupancy_kv_splits(batch, heads, length, sm)
        ref_out, _ = gc.reference(q, pool, table, lens, gc.SCALE)
        base = gc.Launch(q, pool, table, lens, occ)
        cells = [
            f"{path}@{occ} {base.time_us(base.both, path, rep=50):7.1f} "
            f"({error(base, path, ref_out):.0e})"
            for path in ("tl", "gluon")
        ]
        for splits in sorted({occ, max(1, occ // 2)}, reverse=True):
            run = h16_launch(q, pool, table, lens, splits)
            err = error(run, "gluon", ref_out)
            cells.append(f"h16@{splits} {run.time_us(run.both, 'gluon', rep=50):7.1f} ({err:.0e})")
            del run
        print(f"B={batch:3d} H={heads} L={length:5d} | " + " | ".join(cells), flush=True)
        del base, q, table, lens, ref_out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
