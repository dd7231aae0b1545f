"""The even block's widening split between the warpgroups (build/gk_even.py) against
this tree's seesaw, fp8 cache, rounds old/new/new/old, both stages under CUDA graphs
(µs), bf16 and fp16 q; each output's max distance from the tl fp8 path's in brackets;
the bf16 seesaw on the bf16 pool once."""

import sys

import gk_even
import gluon_check as gc
import torch

from mla_jax.splits import occupancy_kv_splits

SHAPES = [(128, 128, 16384), (128, 128, 4096), (16, 128, 4096), (64, 64, 4096)]
if len(sys.argv) > 1:
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
gc.give_triton_scratch()
sm = torch.cuda.get_device_properties(0).multi_processor_count
gen = torch.Generator(device="cuda").manual_seed(0)
pool16 = gc.new_pool(torch.bfloat16, gen)
pool8, scale = gc.quantize_fp8(pool16)
for batch, heads, length in SHAPES:
    splits = occupancy_kv_splits(batch, heads, length, sm)
    cells = []
    for q_dtype in (torch.bfloat16, torch.float16):
        q, table, lens = gc.uniform_problem(pool8, batch, heads, length, gen, q_dtype)
        want = None
        for name in ("old", "new", "new", "old"):
            run = gc.Launch(q, pool8, table, lens, splits, scale)
            if name == "new":
                run.gluon_kernel = gk_even.mla_decode_stage1_gluon_seesaw
            if want is None:
                run.both("tl")
                torch.cuda.synchronize()
                want = run.out.float().clone()
            run.out.fill_(float("nan"))
            run.both("gluon")
            torch.cuda.synchronize()
            err = float((run.out.float() - want).abs().max())
            us = run.time_us(run.both, "gluon", rep=50)
            cells.append(f"{str(q_dtype)[6:10]} {name} {us:7.1f} ({err:.0e})")
            del run
        if q_dtype == torch.bfloat16:
            run = gc.Launch(q, pool16, table, lens, splits)
            cells.append(f"bf16 cache {run.time_us(run.both, 'gluon', rep=50):7.1f}")
            del run
        del q, table, lens
        torch.cuda.empty_cache()
    head = f"B={batch:3d} H={heads:3d} L={length:5d} splits={splits:3d} | "
    print(head + " | ".join(cells), flush=True)
