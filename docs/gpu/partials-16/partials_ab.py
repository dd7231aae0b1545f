"""The seesaw's partials in bf16 (two a float32 slot of the buffer) against float32,
in one process on a Hopper GPU: both stages under CUDA graphs, and stage 1 alone, in
rounds main, bf16, bf16, main; each build's output and lse against the float64
reference (``gluon_check``'s error measures; the float32 partials' first).

The variant is this tree's ``mla_jax/_gluon_kernels.py`` and ``mla_jax/kernels.py``
with ``bf16-partials.patch`` applied, imported from a temporary folder: its seesaw
stores each split's normalised partial in bf16, its stage 2 reads them so. A record of
the run on 9087928: the patch applies there, not on the trees that landed it (0b3289b
on), where ``gluon_check.Launch`` runs the bf16 partials itself.

    python docs/gpu/partials-16/partials_ab.py --shapes 16x64x4096,16x64x1024
"""

import argparse
import importlib.util
import os
import shutil
import subprocess
import tempfile

import gluon_check as gc
import torch

from mla_jax import _gluon_kernels, kernels
from mla_jax.splits import occupancy_kv_splits

PATCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bf16-partials.patch")
SHAPES = "16x64x4096,16x64x1024,16x32x1024,16x128x4096,64x64x4096,4x128x4096,128x128x4096"


def load_variant(folder: str) -> tuple:
    """(seesaw stage 1, stage 2) of the patched copies."""
    for module in (_gluon_kernels, kernels):
        target = os.path.join(folder, "mla_jax", os.path.basename(module.__file__))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(module.__file__, target)
    subprocess.run(["git", "apply", PATCH], cwd=folder, check=True)
    loaded = {}
    for name in ("_gluon_kernels", "kernels"):
        spec = importlib.util.spec_from_file_location(
            f"half_{name}", os.path.join(folder, "mla_jax", f"{name}.py")
        )
        loaded[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded[name])
    return (
        loaded["_gluon_kernels"].mla_decode_stage1_gluon_seesaw,
        loaded["kernels"].mla_decode_stage2,
    )


class HalfLaunch(gc.Launch):
    """``gluon_check.Launch`` with the variant's stage 2 on the Gluon path."""

    stage2_kernel = None

    def stage2(self, name):
        s2 = self.s2
        if s2 is None or name != "gluon":
            return super().stage2(name)
        self.stage2_kernel[s2["grid"]](
            self.buf[name],
            self.args[3],
            self.ns,
            self.out,
            self.lse,
            num_warps=s2["num_warps"],
            num_stages=s2["num_stages"],
            **s2["constexprs"],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=SHAPES, help="BxHxL,...")
    parser.add_argument("--cache", choices=("bf16", "fp8"), default="bf16")
    parser.add_argument("--rep", type=int, default=50, help="ms of CUDA-graph replays a round")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        HalfLaunch.stage1_kernel, HalfLaunch.stage2_kernel = load_variant(folder)
        gc.give_triton_scratch()
        sm = torch.cuda.get_device_properties(0).multi_processor_count
        gen = torch.Generator(device="cuda").manual_seed(0)
        pool = gc.new_pool(gc.DTYPES["bf16"], gen)
        kv_scale = 1.0
        if args.cache == "fp8":
            pool, kv_scale = gc.quantize_fp8(pool)
        print(
            f"cache {args.cache}, q bf16; µs both stages (stage 1 alone); "
            "error of out, lse against float64 | rounds main half half main",
            flush=True,
        )
        for batch, heads, length in shapes:
            splits = occupancy_kv_splits(batch, heads, length, sm)
            q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen, gc.DTYPES["bf16"])
            ref_out, ref_lse = gc.reference(q, pool, table, lens, gc.SCALE, kv_scale)
            cells = []
            for name in ("main", "half", "half", "main"):
                run = (gc.Launch if name == "main" else HalfLaunch)(
                    q, pool, table, lens, splits, kv_scale
                )
                if name == "half":
                    run.gluon_kernel = HalfLaunch.stage1_kernel
                run.out.fill_(float("nan"))
                run.lse.fill_(float("nan"))
                run.both("gluon")
                torch.cuda.synchronize()
                err = (gc.out_error(run.out, ref_out), gc.lse_error(run.lse, ref_lse))
                both = run.time_us(run.both, "gluon", rep=args.rep)
                one = run.time_us(run.stage1, "gluon", rep=args.rep)
                cells.append(f"{name} {both:7.1f} ({one:7.1f}) [{err[0]:.1e} {err[1]:.1e}]")
                del run
            del q, table, lens
            torch.cuda.empty_cache()
            head = f"B={batch:3d} H={heads:3d} L={length:5d} splits={splits:3d} | "
            print(head + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
