"""A/B of the tree's tl kernels (stage 2's first partials loaded before the row's
length; the tl stage 1's split count and length loaded together) against a previous
kernels.py (argv[1]). At a seesaw shape both versions run the tree's Gluon stage 1 and
their own stage 2 on its buffer; at a tl shape each runs its own two stages. Both
stages, stage 1 alone and stage 2 alone under CUDA graphs, rounds prev/new/new/prev,
outputs compared bit for bit (uniform rows at each shape; ragged rows, a NaN-poisoned
buffer and run-time split counts 1-16 at the end). Run from the repository root with
scripts/ on PYTHONPATH."""

import functools
import importlib.util
import sys

import gluon_check as gc
import torch
import triton.testing

from mla_jax import kernels
from mla_jax.splits import occupancy_kv_splits

SHAPES = [  # (batch, heads, length, stage-1 path)
    (16, 64, 4096, "gluon"),
    (64, 64, 1024, "gluon"),
    (16, 64, 1024, "gluon"),
    (16, 32, 1024, "gluon"),
    (16, 128, 4096, "gluon"),
    (4, 128, 4096, "gluon"),
    (1, 128, 4096, "gluon"),
    (64, 64, 4096, "gluon"),
    (64, 16, 4096, "tl"),
    (16, 16, 4096, "tl"),
    (4, 16, 4096, "tl"),
    (1, 16, 1024, "tl"),
    (128, 16, 16384, "tl"),
    (128, 16, 1024, "tl"),
    (64, 16, 1024, "tl"),
]


def load(path):
    spec = importlib.util.spec_from_file_location("prev_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stage2(run, kernel):
    """``run``'s stage 2 with ``kernel`` (its constexprs those it takes)."""
    s2 = run.s2
    names = set(kernel.arg_names)
    kernel[s2["grid"]](
        run.buf["x"],
        run.args[3],
        run.ns,
        run.out,
        run.lse,
        num_warps=s2["num_warps"],
        num_stages=s2["num_stages"],
        **{k: v for k, v in s2["constexprs"].items() if k in names},
    )


def stage1(run, path, module):
    """``run``'s stage 1: the Gluon kernel, or ``module``'s tl kernel."""
    if path == "gluon":
        run.stage1(path)
        return
    q, pool, table, lens = run.args
    s1 = run.s1
    pointers = kernels.stage1_pointers(run.s2 is None, run.buf["x"], run.out, run.lse)
    module.mla_decode_stage1[s1["grid"]](
        q,
        q,
        pool,
        table,
        lens,
        run.ns,
        run.kv_scale,
        **pointers,
        num_warps=s1["num_warps"],
        num_stages=s1["num_stages"],
        **s1["constexprs"],
    )


def both_stages(run, path, module):
    stage1(run, path, module)
    if run.s2 is not None:
        stage2(run, module.mla_decode_stage2)


def outputs(run, path, module):
    """Both stages of ``module`` (stage 1 the Gluon one at a seesaw shape) into a
    NaN-poisoned buffer, output and lse: copies of the output and lse."""
    run.buf["x"].fill_(float("nan"))
    run.out.fill_(float("nan"))
    run.lse.fill_(float("nan"))
    both_stages(run, path, module)
    torch.cuda.synchronize()
    return run.out.clone(), run.lse.clone()


def same(a, b):
    """Bit for bit, NaN where NaN."""
    return all(
        torch.equal(x.nan_to_num(), y.nan_to_num()) and torch.equal(x.isnan(), y.isnan())
        for x, y in zip(a, b)
    )


def main():
    modules = {"prev": load(sys.argv[1]), "new": kernels}
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(3)
    pool = gc.new_pool(torch.bfloat16, gen)
    bench = functools.partial(triton.testing.do_bench_cudagraph, rep=40, return_mode="median")
    for batch, heads, length, path in SHAPES:
        q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen, torch.bfloat16)
        splits = occupancy_kv_splits(batch, heads, length, sm)
        run = gc.Launch(q, pool, table, lens, splits, gluon=path == "gluon")
        run.buf["x"] = run.buf[path]
        outs = {name: outputs(run, path, m) for name, m in modules.items()}
        times = {name: {"both": [], "stage 1": [], "stage 2": []} for name in modules}
        for name in ("prev", "new", "new", "prev"):
            m = modules[name]
            t = times[name]
            t["both"].append(1e3 * bench(functools.partial(both_stages, run, path, m)))
            t["stage 1"].append(1e3 * bench(functools.partial(stage1, run, path, m)))
            if run.s2 is not None:
                t["stage 2"].append(
                    1e3 * bench(functools.partial(stage2, run, m.mla_decode_stage2))
                )
        cells = " | ".join(
            f"{name}: "
            + "; ".join(f"{k} {', '.join(f'{x:.2f}' for x in v)}" for k, v in t.items() if v)
            for name, t in times.items()
        )
        print(
            f"{batch}/{heads}/{length} {path} splits={splits} "
            f"identical={same(outs['prev'], outs['new'])} | {cells}",
            flush=True,
        )
        del run, q, table, lens
        torch.cuda.empty_cache()
    # Ragged rows (lengths 0 to past the capacity; NaN past each length), a
    # NaN-poisoned buffer, run-time split counts under the grid's 16.
    table, lens = gc.ragged_problem(pool, gen)
    for path, heads in (("tl", 16), ("gluon", 64)):
        q = torch.randn(lens.shape[0], heads, gc.D, generator=gen, device="cuda").bfloat16()
        for ns in (1, 2, 5, 16):
            run = gc.Launch(q, pool, table, lens, 16, gluon=path == "gluon")
            run.ns.fill_(ns)
            run.buf["x"] = run.buf[path]
            outs = {name: outputs(run, path, m) for name, m in modules.items()}
            print(
                f"ragged H={heads} {path} run-time splits={ns}: "
                f"identical={same(outs['prev'], outs['new'])}",
                flush=True,
            )


if __name__ == "__main__":
    gc.give_triton_scratch()
    main()
