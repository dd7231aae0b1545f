"""The 16-bit 16-head Gluon kernel at one and two latent slots, each copied whole or by
chunks, against the tl stage 1, both stages (CUDA graphs), at the occupancy split count
and at half of it (two slots: one CTA an SM); each output against the tl one."""

import gluon_check as gc
import torch

from mla_jax import _gluon_kernels as gk
from mla_jax.splits import occupancy_kv_splits

SHAPES = [(64, 16, 4096), (128, 16, 16384), (128, 16, 4096), (16, 16, 16384), (16, 16, 4096)]
SHAPES += [(4, 16, 16384), (1, 16, 65536), (64, 16, 1024)]
gc.give_triton_scratch()
sm = torch.cuda.get_device_properties(0).multi_processor_count
gen = torch.Generator(device="cuda").manual_seed(0)
pool = gc.new_pool(torch.bfloat16, gen)
for batch, heads, length in SHAPES:
    q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen)
    occ = occupancy_kv_splits(batch, heads, length, sm)
    cells = []
    for splits in sorted({occ, max(1, occ // 2)}, reverse=True):
        for slots, chunked in ((1, False), (1, True), (2, False), (2, True)):
            gk.H16_NUM_SLOTS, gk.H16_CHUNKED = slots, chunked
            run = gc.Launch(q, pool, table, lens, splits, routed=False)
            paths = ("tl", "gluon") if (slots, chunked) == (1, False) else ("gluon",)
            for path in paths:
                run.both(path)
                torch.cuda.synchronize()
                if path == "tl":
                    want = run.out.float().clone()
                err = float((run.out.float() - want).abs().max())
                us = run.time_us(run.both, path, rep=50)
                name = path if path == "tl" else f"s{slots}{'c' if chunked else 'w'}"
                cells.append(f"{name}@{splits} {us:6.1f} ({err:.0e})")
            del run
    print(f"B={batch:3d} H={heads} L={length:5d} occ={occ:3d} | " + " | ".join(cells), flush=True)
    torch.cuda.empty_cache()
