"""On the CPU: the sm_90 build of ``wide.py``'s kernel for B=128, H=128 (splits 4 and
1, bf16 q) next to the seesaw's fp8 build: registers, spills, shared memory, HGMMA.

    PYTHONPATH=$PWD:$PWD/docs/gpu/fp8-wide TRITON_CACHE_DIR=$(mktemp -d) \\
        scripts/dev python docs/gpu/fp8-wide/build.py
"""

import json
import os
import re
import subprocess
import sys
import tempfile

import wide
import wide_ws

from mla_jax import _gluon_kernels as gk
from mla_jax import _launch, kernels
from tests import test_gluon_build as tb


def report(compiled):
    ptx = compiled.asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        log = subprocess.run(
            [tb._tool("ptxas"), "-v", "--gpu-name", "sm_90a", "-o", os.devnull, path],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
    code = tb.sass(compiled)
    return {
        "registers": int(re.search(r"Used (\d+) registers", log).group(1)),
        "spill_stores": int(re.search(r"(\d+) bytes spill stores", log).group(1)),
        "wgmma_serialized": "C7515" in log,
        "shared": compiled.metadata.shared,
        "global_scratch": compiled.metadata.global_scratch_size,
        "hgmma": len(re.findall(r"HGMMA", code)),
        "hgmma_register_a": len(re.findall(r"HGMMA\.\S+ R\d+, R\d+, gdesc", code)),
        "f2fp_e4m3": len(re.findall(r"F2FP\.F16\.E4M3", code)),
        "ldgsts": len(re.findall(r"LDGSTS", code)),
        "local": len(re.findall(r" (?:STL|LDL)\b", code)),
    }


def build(splits, module=wide, extra=None):
    params = gk.launch_params(
        q_dtype="bfloat16", kv_dtype=gk.FP8, cluster_merge=False, **tb.geometry(128, 128, splits)
    )
    names = set(module.mla_decode_stage1_gluon_fp8_wide.arg_names)
    constexprs = {k: v for k, v in params["constexprs"].items() if k in names}
    one = splits == 1
    runtime = ["*bf16"] * 2 + ["*fp8e4nv"] + ["*i32"] * 3 + ["*fp32"] * 3
    runtime += ["*bf16", "*fp32"] if one else []
    spec = _launch.kernel_spec(
        module.mla_decode_stage1_gluon_fp8_wide,
        runtime,
        constexprs | kernels.stage1_absent(one) | (extra or {}),
        num_warps=module.NUM_WARPS,
        num_stages=1,
    )
    return _launch.compile_kernel(spec, 90)


if __name__ == "__main__":
    if "--ws" in sys.argv:
        for splits in (4, 1):
            for skew in (False, True):
                r = report(build(splits, wide_ws, {"SKEW": skew}))
                print(f"wide_ws skew={skew} splits={splits}: {json.dumps(r)}", flush=True)
        sys.exit()
    for splits in (4, 1):
        print(f"wide splits={splits}: {json.dumps(report(build(splits)))}", flush=True)
        r = tb.build_report(128, "bf16", "fp8", splits)
        keys = ("registers", "spill_stores", "shared", "hgmma", "ldgsts", "local")
        print(f"seesaw splits={splits}: {json.dumps({k: r[k] for k in keys})}", flush=True)
