"""A/B of a Gluon stage 1 against variants of it, in one process on a Hopper GPU.

Each variant is this tree's ``mla_jax/_gluon_kernels.py`` with patches applied in
order (``name=a.patch+b.patch``; ``main`` is the tree's module as it is), copied
into a temporary folder and imported from there; at each shape it supplies the
kernel ``mla_decode`` routes the problem to (the seesaw, a 16-head kernel, ...), at
the split count ``mla_decode`` gives that kernel (the occupancy rule's, halved where
``_triton_backend.gluon_split_divisor`` says). Every variant runs
both stages (its stage 1, the tl stage 2) under a CUDA graph
(``gluon_check.Launch.time_us``), in rounds in the order given and then reversed;
before its timing each variant's output, NaN-poisoned first, is compared with the tl
stage 1's on the same problem (max abs distance, in brackets). Prints one line a
shape: µs a round, the error in brackets.

    python scripts/ab_seesaw.py --cache fp8 --shapes 128x128x16384,16x128x4096 \\
        main pv=docs/gpu/x/a.patch both=docs/gpu/x/a.patch+docs/gpu/x/b.patch
"""

import argparse
import importlib.util
import os
import shutil
import subprocess
import tempfile

import gluon_check as gc
import jax
import torch

from mla_jax import _gluon_kernels, _triton_backend
from mla_jax.splits import occupancy_kv_splits

DEFAULT_SHAPES = "128x128x16384,16x128x4096,64x64x4096"


def load_variant(name: str, patches: list[str], folder: str):
    """The kernel module with ``patches`` applied (``git apply``), imported as
    ``variant_<name>``."""
    root = os.path.join(folder, name)
    target = os.path.join(root, "mla_jax", "_gluon_kernels.py")
    os.makedirs(os.path.dirname(target))
    shutil.copy(_gluon_kernels.__file__, target)
    for patch in patches:
        subprocess.run(["git", "apply", os.path.abspath(patch)], cwd=root, check=True)
    spec = importlib.util.spec_from_file_location(f"variant_{name}", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_variants(specs: list[str], folder: str) -> dict:
    """``main`` or ``name=a.patch+b.patch`` -> {name: the patched kernel module, None
    for main}."""
    variants = {}
    for spec in specs:
        name, _, patches = spec.partition("=")
        if name in variants:
            raise SystemExit(f"variant {name!r} given twice")
        if not patches:
            if name != "main":
                raise SystemExit(f"{spec!r}: give a variant as name=a.patch[+b.patch...]")
            variants[name] = None
            continue
        variants[name] = load_variant(name, patches.split("+"), folder)
    return variants


def routed_splits(q, pool, batch, heads, length, sm):
    """The split count ``mla_decode`` gives the Gluon stage 1 of this problem: the
    occupancy rule's, divided where ``_triton_backend.gluon_split_divisor`` divides it
    (the 16-bit 16-head kernel); the rule's where no Gluon kernel would run."""
    splits = occupancy_kv_splits(batch, heads, length, sm)
    spec = lambda t: jax.ShapeDtypeStruct(tuple(t.shape), str(t.dtype).removeprefix("torch."))
    divisor = _triton_backend.gluon_split_divisor(
        spec(q), spec(pool), splits, length, gc.LORA, gc.ROPE, 90, sm, batch * length
    )
    return splits // (divisor or 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="+", help="main, or name=a.patch[+b.patch...]")
    parser.add_argument("--cache", choices=("bf16", "fp16", "fp8"), default="bf16")
    parser.add_argument(
        "--q", choices=("bf16", "fp16"), default="bf16", help="q's dtype on an fp8 cache"
    )
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="BxHxL,...")
    parser.add_argument("--rep", type=int, default=50, help="ms of CUDA-graph replays a round")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        variants = parse_variants(args.variants, folder)
        order = list(variants) + list(reversed(variants))
        gc.give_triton_scratch()
        sm = torch.cuda.get_device_properties(0).multi_processor_count
        gen = torch.Generator(device="cuda").manual_seed(0)
        # A 16-bit cache has q's dtype; an fp8 one is quantised from a bf16 pool.
        q_name = args.q if args.cache == "fp8" else args.cache
        pool = gc.new_pool(gc.DTYPES["bf16" if args.cache == "fp8" else args.cache], gen)
        kv_scale = 1.0
        if args.cache == "fp8":
            pool, kv_scale = gc.quantize_fp8(pool)
        print(f"cache {args.cache}, q {q_name}, rounds {' '.join(order)}", flush=True)
        for batch, heads, length in shapes:
            q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen, gc.DTYPES[q_name])
            splits = routed_splits(q, pool, batch, heads, length, sm)
            cells = []
            want = None
            for name in order:
                run = gc.Launch(q, pool, table, lens, splits, kv_scale)
                if variants[name] is not None:
                    # The variant module's version of the kernel the problem routes to.
                    run.gluon_kernel = getattr(variants[name], run.gluon_kernel.fn.__name__)
                if want is None:
                    run.both("tl")
                    torch.cuda.synchronize()
                    want = run.out.float().clone()
                run.out.fill_(float("nan"))
                run.both("gluon")
                torch.cuda.synchronize()
                err = float((run.out.float() - want).abs().max())
                us = run.time_us(run.both, "gluon", rep=args.rep)
                cells.append(f"{name} {us:7.1f} ({err:.0e})")
                del run
            del q, table, lens
            torch.cuda.empty_cache()
            head = f"B={batch:3d} H={heads:3d} L={length:5d} splits={splits:3d} | "
            print(head + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
