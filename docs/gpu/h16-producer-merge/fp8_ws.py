"""The 16-head fp8 kernel with a producer warpgroup (FP8_H16_PRODUCER; ws2: two blocks
ahead in the worker's registers, ws1: one) against the one without (reg), and the tl
stage 1 on the same fp8 cache: both stages (CUDA graphs), at the occupancy split count
and at half of it (the producer kernel holds one CTA an SM); each output against the tl
one."""

import gluon_check as gc
import torch

from mla_jax import _gluon_kernels as gk
from mla_jax.splits import occupancy_kv_splits

SHAPES = [(128, 16, 16384), (128, 16, 4096), (64, 16, 4096), (16, 16, 16384)]
SHAPES += [(16, 16, 4096), (4, 16, 16384), (64, 32, 4096), (128, 32, 16384), (1, 16, 65536)]
gc.give_triton_scratch()
sm = torch.cuda.get_device_properties(0).multi_processor_count
gen = torch.Generator(device="cuda").manual_seed(0)
pool16 = gc.new_pool(torch.bfloat16, gen)
pool8, scale = gc.quantize_fp8(pool16)
del pool16
torch.cuda.empty_cache()
for batch, heads, length in SHAPES:
    q, table, lens = gc.uniform_problem(pool8, batch, heads, length, gen, torch.bfloat16)
    occ = occupancy_kv_splits(batch, heads, length, sm)
    cells = []
    for splits in sorted({occ, max(1, occ // 2)}, reverse=True):
        for name, producer, ahead in (("reg", False, 0), ("ws2", True, 2), ("ws1", True, 1)):
            gk.FP8_H16_PRODUCER = producer
            gk.FP8_H16_WS = {"NUM_SLOTS": 2, "AHEAD": ahead or 2, "WORKER_REGS": 256}
            run = gc.Launch(q, pool8, table, lens, splits, scale)
            paths = ("tl", "gluon") if not producer else ("gluon",)
            for path in paths:
                run.out.fill_(float("nan"))
                run.both(path)
                torch.cuda.synchronize()
                if path == "tl":
                    want = run.out.float().clone()
                err = float((run.out.float() - want).abs().max())
                us = run.time_us(run.both, path, rep=50)
                label = path if path == "tl" else name
                cells.append(f"{label}@{splits} {us:6.1f} ({err:.0e})")
            del run
    tbs = batch * length * 576 / 1e6
    print(
        f"B={batch:3d} H={heads} L={length:5d} occ={occ:3d} ({tbs:.0f} MB) | " + " | ".join(cells),
        flush=True,
    )
    torch.cuda.empty_cache()
