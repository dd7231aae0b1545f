"""This tree's two 16-head fp8 kernels (gluon_check.H16_KERNELS: the register one and the
ring one) against each other and the tl stage 1 on the same fp8 cache: both stages (CUDA
graphs, µs), at the occupancy split count (and at half with HALF=1), rounds
reg/ring/ring/reg; each output against the tl one in brackets."""

import os
import sys

import gluon_check as gc
import torch

from mla_jax.splits import occupancy_kv_splits

SHAPES = [(128, 16, 16384), (64, 16, 4096), (16, 16, 16384), (16, 16, 4096)]
SHAPES += [(64, 32, 4096), (1, 16, 65536), (32, 16, 4096)]
if len(sys.argv) > 1:  # BxHxL,...
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
KERNELS = {"reg": gc.H16_KERNELS["fp8-h16"], "ring": gc.H16_KERNELS["fp8-h16-ring"]}
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
    counts = {occ, max(1, occ // 2)} if os.environ.get("HALF") == "1" else {occ}
    for splits in sorted(counts, reverse=True):
        for rnd, name in enumerate(("reg", "ring", "ring", "reg")):
            run = gc.Launch(q, pool8, table, lens, splits, scale, kernel=KERNELS[name])
            for path in ("tl", "gluon") if rnd == 0 else ("gluon",):
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
    mb = batch * length * 576 / 1e6
    print(
        f"B={batch:3d} H={heads} L={length:5d} occ={occ:3d} ({mb:.0f} MB) | " + " | ".join(cells),
        flush=True,
    )
    torch.cuda.empty_cache()
