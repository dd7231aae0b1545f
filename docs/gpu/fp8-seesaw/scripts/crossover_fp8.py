"""gluon_check's fp8 crossover alone (CROSSOVER_FP8: tl fp8 at the occupancy split count
against the routed Gluon fp8 kernel at that count and fewer, longer splits)."""

import gluon_check as gc
import torch

gc.give_triton_scratch()
sm = torch.cuda.get_device_properties(0).multi_processor_count
gen = torch.Generator(device="cuda").manual_seed(2)
pool16 = gc.new_pool(torch.bfloat16, gen)
pool8, scale = gc.quantize_fp8(pool16)
del pool16
torch.cuda.empty_cache()
gc.run_crossover(pool8, gen, sm, gc.CROSSOVER_FP8, scale)
