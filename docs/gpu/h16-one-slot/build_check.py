"""On the CPU: the sm_90 build of a 16-head Gluon stage 1 (the 16-bit one; with
``--fp8`` the fp8 one) as this tree has it and with the patches given
(``one-slot.patch``, ``fp8-deep-ring.patch``), side by side: registers, spills, shared
memory, HGMMA and cp.async counts (``tests.test_gluon_build.build_report``).

    PYTHONPATH=$PWD TRITON_CACHE_DIR=$(mktemp -d) scripts/dev python \\
        docs/gpu/h16-one-slot/build_check.py docs/gpu/h16-one-slot/one-slot.patch
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

import mla_jax
from mla_jax import _gluon_kernels
from tests import test_gluon_build

KEYS = ("registers", "spill_stores", "shared", "hgmma", "ldgsts", "bar_sync", "local")
SM90_SHARED_PER_SM = 233472  # 228 KB


def variant(patches, folder):
    """This tree's ``_gluon_kernels`` with ``patches`` applied (``git apply``)."""
    target = os.path.join(folder, "mla_jax", "_gluon_kernels.py")
    os.makedirs(os.path.dirname(target))
    shutil.copy(_gluon_kernels.__file__, target)
    for patch in patches:
        subprocess.run(["git", "apply", os.path.abspath(patch)], cwd=folder, check=True)
    spec = importlib.util.spec_from_file_location("variant", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report(module, dtype, splits, kv):
    mla_jax._gluon_kernels = module  # compile_sm90 imports it from the package
    r = test_gluon_build.build_report(16, dtype, kv, splits)
    ctas = SM90_SHARED_PER_SM // (r["shared"] + test_gluon_build.CTA_RESERVED_SHARED)
    return {k: r[k] for k in KEYS} | {"ctas_an_sm_by_shared": ctas}


def main():
    args = sys.argv[1:]
    kv = "fp8" if "--fp8" in args else "same"
    with tempfile.TemporaryDirectory() as folder:
        patched = variant([a for a in args if a != "--fp8"], folder)
        for dtype, splits in (("bf16", 4), ("bf16", 1), ("fp16", 4)):
            for name, module in (("main", _gluon_kernels), ("patched", patched)):
                r = report(module, dtype, splits, kv)
                print(f"{dtype} splits={splits} {name}: {json.dumps(r)}", flush=True)


if __name__ == "__main__":
    main()
