"""Warpgroup 1's P0 V0_R issued before its softmax (build/gk_reorder.py, `new`) against
this tree's seesaw (`old`), on the bf16 cache and on the fp8 cache quantised from it,
bf16 q, rounds old/new/new/old, both stages under CUDA graphs (µs); each output's max
distance from the tl path's on the same cache in brackets."""

import sys

import gk_reorder
import gluon_check as gc
import torch

from mla_jax.splits import occupancy_kv_splits

SHAPES = [(128, 128, 16384), (128, 128, 4096), (16, 128, 4096), (64, 64, 4096), (16, 64, 4096)]
if len(sys.argv) > 1:
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
gc.give_triton_scratch()
sm = torch.cuda.get_device_properties(0).multi_processor_count
gen = torch.Generator(device="cuda").manual_seed(0)
pool16 = gc.new_pool(torch.bfloat16, gen)
pool8, scale = gc.quantize_fp8(pool16)
for batch, heads, length in SHAPES:
    splits = occupancy_kv_splits(batch, heads, length, sm)
    q, table, lens = gc.uniform_problem(pool8, batch, heads, length, gen, torch.bfloat16)
    cells = []
    for cache, pool, kv_scale in (("bf16", pool16, 1.0), ("fp8", pool8, scale)):
        want = None
        for name in ("old", "new", "new", "old"):
            run = gc.Launch(q, pool, table, lens, splits, kv_scale)
            if name == "new":
                run.gluon_kernel = gk_reorder.mla_decode_stage1_gluon_seesaw
            if want is None:
                run.both("tl")
                torch.cuda.synchronize()
                want = run.out.float().clone()
            run.out.fill_(float("nan"))
            run.both("gluon")
            torch.cuda.synchronize()
            err = float((run.out.float() - want).abs().max())
            us = run.time_us(run.both, "gluon", rep=50)
            cells.append(f"{cache} {name} {us:7.1f} ({err:.0e})")
            del run
    del q, table, lens
    torch.cuda.empty_cache()
    head = f"B={batch:3d} H={heads:3d} L={length:5d} splits={splits:3d} | "
    print(head + " | ".join(cells), flush=True)
