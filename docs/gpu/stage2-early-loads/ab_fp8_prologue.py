"""A/B of the fp8 Gluon stage 1s' prologue: the split count and the length loaded
before one branch (the tree) against a previous _gluon_kernels.py (argv[1]), the
16-head fp8 kernel and the fp8-MMA one, both stages (the tree's stage 2) under CUDA
graphs, rounds prev/new/new/prev, outputs compared bit for bit. Run from the
repository root with scripts/ on PYTHONPATH."""

import importlib.util
import sys

import gluon_check as gc
import torch

from mla_jax.splits import occupancy_kv_splits

SHAPES = [(1, 16, 4096, False), (16, 16, 4096, False), (64, 16, 4096, False)]
SHAPES += [(1, 128, 4096, True), (16, 128, 4096, True)]


def load(path):
    spec = importlib.util.spec_from_file_location("prev_gluon_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    prev = load(sys.argv[1])
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(4)
    pool8, scale = gc.quantize_fp8(gc.new_pool(torch.bfloat16, gen))
    for batch, heads, length, fp8_mma in SHAPES:
        q, table, lens = gc.uniform_problem(pool8, batch, heads, length, gen, torch.bfloat16)
        splits = occupancy_kv_splits(batch, heads, length, sm)
        run = gc.Launch(q, pool8, table, lens, splits, scale, fp8_mma=fp8_mma)
        kernels = {"new": run.gluon_kernel, "prev": getattr(prev, run.gluon_kernel.fn.__name__)}
        outs = {}
        for name, k in kernels.items():
            run.gluon_kernel = k
            run.out.fill_(float("nan"))
            run.both("gluon")
            torch.cuda.synchronize()
            outs[name] = (run.out.clone(), run.lse.clone())
        same = all(torch.equal(a, b) for a, b in zip(outs["prev"], outs["new"]))
        times = {"prev": [], "new": []}
        for name in ("prev", "new", "new", "prev"):
            run.gluon_kernel = kernels[name]
            times[name].append(run.time_us(run.both, "gluon", rep=40))
        cells = " | ".join(f"{n} {', '.join(f'{x:.2f}' for x in t)}" for n, t in times.items())
        print(
            f"{batch}/{heads}/{length} fp8 {'fp8_mma ' if fp8_mma else ''}splits={splits} "
            f"identical={same} | {cells}",
            flush=True,
        )
        del run, q, table, lens
        torch.cuda.empty_cache()


if __name__ == "__main__":
    gc.give_triton_scratch()
    main()
