"""What bounds ``wide.py``'s kernel: it against itself with the widening mostly gone
(``mma-only.patch``: one chunk of K and one latent pair of V^T widened a block, their
operands used in every MMA; the output is then wrong, its error is not a check), both
stages under CUDA graphs at one split, µs.

    PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/h16-bf16:$PWD/docs/gpu/fp8-wide" \\
        python3 docs/gpu/fp8-wide/ab_bound.py
"""

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

import ab_wide as ab
import gluon_check as gc
import torch
import wide
from ab_small import timed_cells

SHAPES = [(128, 128, 16384), (64, 128, 16384), (128, 128, 4096)]
PATCHES = sys.argv[1:] or ["docs/gpu/fp8-wide/mma-only.patch"]


def load(patch, folder):
    root = os.path.join(folder, os.path.basename(patch))
    os.makedirs(root)
    shutil.copy(wide.__file__, os.path.join(root, "wide.py"))
    subprocess.run(["git", "apply", os.path.abspath(patch)], cwd=root, check=True)
    name = "wide_" + os.path.basename(patch).replace("-", "_").removesuffix(".patch")
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "wide.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.mla_decode_stage1_gluon_fp8_wide


def main():
    gc.give_triton_scratch()
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool, kv_scale = gc.quantize_fp8(gc.new_pool(torch.bfloat16, gen))
    with tempfile.TemporaryDirectory() as folder:
        variants = [("wide", None)] + [(os.path.basename(p), load(p, folder)) for p in PATCHES]
        for batch, heads, length in SHAPES:
            q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen, torch.bfloat16)
            ref_out, _ = gc.reference(q, pool, table, lens, gc.SCALE, kv_scale)
            launch = functools.partial(ab.wide_launch, q, pool, table, lens, kv_scale)
            cells = timed_cells(launch, [1], ref_out, variants)
            print(f"B={batch:3d} H={heads} L={length:5d} | " + " | ".join(cells), flush=True)
            del q, table, lens, ref_out
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
