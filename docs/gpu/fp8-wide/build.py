"""On the CPU: the sm_90 build of ``wide.py``'s kernel for B=128, H=128 (splits 4 and
1, bf16 q) next to the seesaw's fp8 build: registers, spills, shared memory, HGMMA.

    PYTHONPATH=$PWD:$PWD/docs/gpu/fp8-wide TRITON_CACHE_DIR=$(mktemp -d) \\
        scripts/dev python docs/gpu/fp8-wide/build.py
"""

import json
import sys

import wide
import wide_ws

from mla_jax import _gluon_kernels as gk
from mla_jax import _launch, kernels
from tests import test_gluon_build as tb

KEYS = ("registers", "spill_stores", "wgmma_serialized", "shared", "global_scratch_size")
KEYS += ("hgmma", "hgmma_register_a", "f2fp_e4m3", "ldgsts", "local")


def report(compiled):
    """``tests.test_gluon_build.compiled_report``'s counts that matter here."""
    r = tb.compiled_report(compiled)
    return {k: r[k] for k in KEYS}


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
