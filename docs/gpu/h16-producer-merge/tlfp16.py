"""tl stage 1 on an fp8 cache with fp16 q (Triton's e4m3 -> f16 conversion) against
bf16 q, the tl kernel on the bf16 cache, and the 16-head Gluon fp8 kernel; stage 1 and
both stages, CUDA graphs, plus each path's error against float64."""

import sys

import torch

sys.path.insert(0, "scripts")
import gluon_check as g

from mla_jax.splits import occupancy_kv_splits
from mla_jax.tools.bench import SCALE

sm = torch.cuda.get_device_properties(0).multi_processor_count
gen = torch.Generator(device="cuda").manual_seed(2)
pool16 = g.new_pool(torch.bfloat16, gen)
pool8, scale = g.quantize_fp8(pool16)
shapes = [
    (128, 16, 16384),
    (64, 16, 4096),
    (16, 16, 16384),
    (4, 16, 16384),
    (64, 32, 4096),
    (16, 16, 4096),
    (128, 16, 4096),
    (16, 64, 4096),
]
for b, h, n in shapes:
    q, table, lens = g.uniform_problem(pool16, b, h, n, gen)
    s = occupancy_kv_splits(b, h, n, sm)
    runs = {
        "tl bf16": (g.Launch(q, pool16, table, lens, s, gluon=False), "tl"),
        "tl fp8 bf16q": (g.Launch(q, pool8, table, lens, s, scale, gluon=False), "tl"),
        "tl fp8 fp16q": (g.Launch(q.half(), pool8, table, lens, s, scale, gluon=False), "tl"),
        "gluon fp8": (g.Launch(q, pool8, table, lens, s, scale), "gluon"),
    }
    ref = {}
    if b <= 64:
        ref[16] = g.reference(q, pool16, table, lens, SCALE)
        ref[8] = g.reference(q, pool8, table, lens, SCALE, scale)
    line = []
    for k, (run, path) in runs.items():
        run.both(path)
        torch.cuda.synchronize()
        err = ""
        if ref:
            r = ref[16 if k == "tl bf16" else 8]
            err = f" ({g.out_error(run.out, r[0]):.0e})"
        t1 = run.time_us(run.stage1, path)
        t2 = run.time_us(run.both, path)
        line.append(f"{k} {t1:7.1f} / {t2:7.1f}{err}")
    print(f"B={b:3d} H={h:3d} L={n:5d} s={s:3d} | " + " | ".join(line), flush=True)
    del runs, q, table, lens
    torch.cuda.empty_cache()
