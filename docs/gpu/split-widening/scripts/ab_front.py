"""Not run yet. The fp8 seesaw with P0 V0_R before warpgroup 1's softmax (`pv0r`,
build/gk_reorder.py), then with the fp8 blocks staged in the front half of their
slots and slot 0 refilled by warpgroup 0 under its P1 V1_L (`front`, build/gk_front.py),
then with that refill issued under warpgroup 1's softmax (`early`, build/gk_early.py),
and this tree's (`main`); both stages under CUDA graphs (µs), bf16 q, the fp8 cache,
rounds in order and then reversed; each output's max distance from the tl fp8 path's
in brackets. The modules: copies of mla_jax/_gluon_kernels.py with
pv0r-before-softmax.patch, then fp8-front-staging.patch, then
fp8-front-staging-early.patch applied in turn."""

import sys

import gk_early
import gk_front
import gk_reorder
import gluon_check as gc
import torch

from mla_jax.splits import occupancy_kv_splits

SHAPES = [(128, 128, 16384), (16, 128, 4096), (64, 64, 4096)]
if len(sys.argv) > 1:
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
KERNELS = {"main": None, "pv0r": gk_reorder, "front": gk_front, "early": gk_early}
ORDER = list(KERNELS) + list(reversed(KERNELS))
gc.give_triton_scratch()
sm = torch.cuda.get_device_properties(0).multi_processor_count
gen = torch.Generator(device="cuda").manual_seed(0)
pool16 = gc.new_pool(torch.bfloat16, gen)
pool8, scale = gc.quantize_fp8(pool16)
del pool16
for batch, heads, length in SHAPES:
    splits = occupancy_kv_splits(batch, heads, length, sm)
    q, table, lens = gc.uniform_problem(pool8, batch, heads, length, gen, torch.bfloat16)
    cells = []
    want = None
    for name in ORDER:
        run = gc.Launch(q, pool8, table, lens, splits, scale)
        if KERNELS[name] is not None:
            run.gluon_kernel = KERNELS[name].mla_decode_stage1_gluon_seesaw
        if want is None:
            run.both("tl")
            torch.cuda.synchronize()
            want = run.out.float().clone()
        run.out.fill_(float("nan"))
        run.both("gluon")
        torch.cuda.synchronize()
        err = float((run.out.float() - want).abs().max())
        us = run.time_us(run.both, "gluon", rep=50)
        cells.append(f"{name} {us:7.1f} ({err:.0e})")
        del run
    del q, table, lens
    torch.cuda.empty_cache()
    head = f"B={batch:3d} H={heads:3d} L={length:5d} splits={splits:3d} | "
    print(head + " | ".join(cells), flush=True)
