"""Launch both stages at one shape a few times, for a profiler to read (no timing here).

    ncu --clock-control none --kernel-name regex:mla_decode_stage1 --launch-skip 2 \
        --launch-count 1 --set full python3 scripts/profile_stages.py 1x128x4096   # GPU

The default split policy unless ``--splits`` is given; ``--cache fp8`` casts the latent
pool to ``float8_e4m3fn``; ``--gluon`` launches stage 1 as the Gluon kernel for the
cache (``mla_decode_stage1_gluon_*``, sm_90), with ``--fp8-mma`` the one
``mla_decode(..., fp8_mma=True)`` picks. ``scripts/gpu_checks.sh --out DIR ncu``
runs it at the target shapes and a one-block shape, ``ncu-gluon`` with the Gluon kernels.
"""

import argparse

import torch
from gluon_check import give_triton_scratch
from stage_times import launchers, make_problem
from sweep_configs import SM, parse_shapes

from mla_jax.splits import occupancy_kv_splits

LAUNCHES = 3


def main():
    give_triton_scratch()  # the seesaw's TMA descriptors on the 16-bit cache
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", type=parse_shapes, help="one BxHxL")
    parser.add_argument("--splits", type=int, help="default: the occupancy policy's")
    parser.add_argument("--cache", choices=("bf16", "fp8"), default="bf16")
    parser.add_argument("--gluon", action="store_true", help="stage 1 as the Gluon kernel")
    parser.add_argument("--fp8-mma", action="store_true", help="with --gluon: fp8_mma=True's")
    args = parser.parse_args()
    ((batch, heads, length),) = args.shape
    splits = args.splits or occupancy_kv_splits(batch, heads, length, SM)
    q, kv, table, lens = make_problem(batch, heads, length, 0)
    if args.cache == "fp8":
        kv = kv.to(torch.float8_e4m3fn)  # standard normal values: inside e4m3's range
    stage1, stage2, out, _ = launchers(
        q,
        kv,
        table,
        lens,
        splits,
        batch_tokens=batch * length,
        gluon=args.gluon,
        fp8_mma=args.fp8_mma,
    )
    for _ in range(LAUNCHES):
        stage1()
        stage2()
    torch.cuda.synchronize()
    assert not out.isnan().any(), "unwritten output"
    print(
        f"B={batch} H={heads} L={length} splits={splits} cache={args.cache} "
        f"gluon={args.gluon}: {LAUNCHES} launches of each stage"
    )


if __name__ == "__main__":
    main()
