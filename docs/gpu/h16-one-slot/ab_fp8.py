"""The A/B that ran on the H200 (e548b62, 2026-12-04; ``logs/ab_fp8.log``, README.md):
the 16-head fp8 Gluon stage 1 with a ring of four 36 KB stages
(``fp8-deep-ring.patch``: 168,192 bytes of shared memory, one CTA an SM, three blocks in
flight; the build is ``build_check.py --fp8``'s) against the kernel as it is (two
stages, two CTAs an SM), both at the occupancy rule's count and half of it (the move
that made the 16-bit 16-head kernel 4-19% faster), both stages under CUDA graphs
(``gluon_check.Launch.time_us``), µs, each output's max abs distance from the float64
reference (on the dequantised cache) in brackets. The question was whether #21's fp8
128/16/16384 row (0.312-0.349 ms across runs against its 0.33 target) goes clearly
under. It did not: four stages were slower at all 10 shapes (128/16/16384 419.5 µs at
half the splits against 350.2 for the kernel as it is at the rule's count) and were not
landed.

    PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/h16-bf16" python3 docs/gpu/h16-one-slot/ab_fp8.py
"""

import functools
import tempfile

import ab_seesaw
import gluon_check as gc
import torch
from ab_small import print_rows, timed_cells

SHAPES = [(128, 16, 16384), (64, 16, 16384), (128, 16, 4096), (64, 16, 4096), (16, 16, 16384)]
SHAPES += [(16, 16, 4096), (4, 16, 16384), (1, 16, 16384), (16, 32, 4096), (128, 32, 16384)]
PATCH = "docs/gpu/h16-one-slot/fp8-deep-ring.patch"


def main():
    gc.give_triton_scratch()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool, kv_scale = gc.quantize_fp8(gc.new_pool(torch.bfloat16, gen))
    with tempfile.TemporaryDirectory() as folder:
        deep = ab_seesaw.load_variant("deep_ring", [PATCH], folder)
        variants = (("two-stage", None), ("four-stage", deep.mla_decode_stage1_gluon_fp8_h16))

        def cells_of(q, table, lens, occ, ref_out):
            splits = sorted({occ, max(1, occ // 2)}, reverse=True)
            launch = functools.partial(gc.Launch, q, pool, table, lens, kv_scale=kv_scale)
            return timed_cells(launch, splits, ref_out, variants)

        print_rows(pool, gen, sm, SHAPES, cells_of, torch.bfloat16, kv_scale)


if __name__ == "__main__":
    main()
