"""fp8 seesaw variants (gk.SEESAW_VARIANT bits: 1 no widening (timing only), 2 TMA for
interior fp8 blocks, 4 slot 0's refill before P1 V1_R) against the column-split fp8
kernel, both stages under CUDA graphs (µs), error against tl fp8 in brackets."""

import sys

import gluon_check as gc
import torch

from mla_jax import _gluon_kernels as gk
from mla_jax.splits import occupancy_kv_splits

SHAPES = [(128, 128, 16384), (16, 128, 4096), (64, 64, 4096), (128, 128, 4096)]
if len(sys.argv) > 1:
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
ORDER = {
    "bfloat16": ["old", 16, (16, "bits"), 48, 48, (16, "bits"), 16, "old"],
    "float16": ["old", 0, 32, 32, 0, "old"],
}
gc.give_triton_scratch()
sm = torch.cuda.get_device_properties(0).multi_processor_count
gen = torch.Generator(device="cuda").manual_seed(0)
pool16 = gc.new_pool(torch.bfloat16, gen)
pool8, scale = gc.quantize_fp8(pool16)
del pool16
torch.cuda.empty_cache()
for batch, heads, length in SHAPES:
    splits = occupancy_kv_splits(batch, heads, length, sm)
    for q_name, order in ORDER.items():
        q_dtype = getattr(torch, q_name)
        q, table, lens = gc.uniform_problem(pool8, batch, heads, length, gen, q_dtype)
        want = None
        cells = []
        for v in order:
            run = gc.Launch(q, pool8, table, lens, splits, scale)
            if v == "old":
                run.gluon_kernel = gk.mla_decode_stage1_gluon_fp8
                run.g1["num_warps"] = gk.NUM_WARPS
                del run.g1["constexprs"]["VARIANT"]
            else:
                if isinstance(v, tuple):
                    v, run.g1["constexprs"]["WIDEN"] = v
                run.g1["constexprs"]["VARIANT"] = v
            if want is None:
                run.both("tl")
                torch.cuda.synchronize()
                want = run.out.float().clone()
            run.out.fill_(float("nan"))
            run.both("gluon")
            torch.cuda.synchronize()
            err = float((run.out.float() - want).abs().max())
            us = run.time_us(run.both, "gluon", rep=50)
            w = run.g1["constexprs"].get("WIDEN", "")
            cells.append(f"{v}{'' if w == 'auto' else w} {us:7.1f} ({err:.0e})")
            del run
        head = f"B={batch:3d} H={heads:3d} L={length:5d} s={splits:3d} {q_name[:4]} | "
        print(head + " | ".join(cells), flush=True)
        del q, table, lens
        torch.cuda.empty_cache()
