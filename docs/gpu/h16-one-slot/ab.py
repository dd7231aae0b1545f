"""The A/B that ran on the H200 (e548b62, 2026-12-04; ``logs/ab.log``, README.md): the
16-bit 16-head Gluon stage 1 with one latent slot (``one-slot.patch``: 94,464 bytes of
shared memory, two CTAs an SM; the build is ``build_check.py``'s) against the kernel as
it is (two slots, one CTA an SM) and the stage 1 ``mla_decode`` routes each problem to,
both stages under CUDA graphs (``gluon_check.Launch.time_us``), µs, each output's max
abs distance from the float64 reference in brackets. The 16-head kernels at the
occupancy rule's count and half of it (two CTAs an SM fill the wave the rule planned;
one takes half). The question was whether two CTAs an SM, each one's copies under the
other's MMAs, shorten the small rows that #21 leaves under 60% of their floor
(16/32/1024, 16/64/1024: the CTA chain, not the bytes, sets their time;
docs/performance.md, "Current results"), and what they cost where one CTA's two slots
keep a block in flight. They did not: one slot was slower than the routed kernel at
all 13 shapes (16/32/1024 13.1 µs at best against 12.1, 16/64/1024 17.7 against 15.9)
and was not landed.

    PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/h16-bf16" python3 docs/gpu/h16-one-slot/ab.py
"""

import functools
import tempfile

import ab_seesaw
import gluon_check as gc
import torch
from ab_small import h16_launch, print_rows, routed_cell, timed_cells

SHAPES = [(16, 32, 1024), (16, 64, 1024), (16, 16, 1024), (4, 32, 4096), (4, 64, 4096)]
SHAPES += [(16, 16, 4096), (64, 16, 4096), (16, 32, 4096), (64, 32, 1024), (1, 32, 16384)]
SHAPES += [(16, 64, 4096), (128, 16, 4096), (128, 16, 16384)]
PATCH = "docs/gpu/h16-one-slot/one-slot.patch"


def main():
    gc.give_triton_scratch()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = gc.new_pool(torch.bfloat16, gen)
    with tempfile.TemporaryDirectory() as folder:
        one_slot = ab_seesaw.load_variant("one_slot", [PATCH], folder)
        variants = (("two-slot", None), ("one-slot", one_slot.mla_decode_stage1_gluon_h16))

        def cells_of(q, table, lens, occ, ref_out):
            cells = [routed_cell(q, pool, table, lens, sm, ref_out)]
            splits = sorted({occ, max(1, occ // 2)}, reverse=True)
            launch = functools.partial(h16_launch, q, pool, table, lens)
            return cells + timed_cells(launch, splits, ref_out, variants)

        print_rows(pool, gen, sm, SHAPES, cells_of)


if __name__ == "__main__":
    main()
