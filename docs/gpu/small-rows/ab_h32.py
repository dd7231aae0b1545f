"""The 16-bit 16-head Gluon stage 1 at 32 heads (two 16-head tiles a row, not routed
there) against the stage 1 ``mla_decode`` routes to (the seesaw) and the tl stage 1, at
every H=32 shape of the sweep, both stages under CUDA graphs (``gluon_check.Launch.
time_us``): the 16-head kernel at the occupancy count and half of it. µs; the error
against float64 in brackets. ``docs/gpu/h16-bf16/ab_small.py``'s run at these shapes.
Run on 7acfd9d (logs/ab-h32.log), where ``gluon`` is the seesaw; on a tree that routes
32 heads in small steps to the 16-head kernel it is that kernel there."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "h16-bf16"))
from ab_small import main

SHAPES = [(b, 32, n) for b in (1, 4, 16, 64, 128) for n in (1024, 4096, 16384)]
SHAPES += [(1, 32, 65536), (4, 32, 65536)]


if __name__ == "__main__":
    main(SHAPES, divisors=(1, 2))
