"""The H200's warpgroup MMA rate at the shapes the fp8 stage 1s use: fp16 m64nNk16,
A from registers (RS, as the tokens-on-M kernels take K and V^T) or from shared memory
(SS), B from shared memory, one CTA of ``WARPGROUPS`` warpgroups an SM (each its own
N columns, as ``wide.py``'s two warpgroups take 32 heads each), ``CHAINS`` accumulators
in flight a warpgroup. Nothing else runs: the most those MMAs can do, in TFLOP/s.

    PYTHONPATH=$PWD python3 docs/gpu/fp8-wide/mma_rate.py
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

ITERS = 4096


@gluon.jit
def _rate_kernel(
    a_ptr,
    b_ptr,
    out_ptr,
    ITERS: gl.constexpr,
    N: gl.constexpr,
    WARPGROUPS: gl.constexpr,
    RS: gl.constexpr,
):
    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, WARPGROUPS], instr_shape=[16, N, 16]
    )
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    NT: gl.constexpr = N * WARPGROUPS
    b_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, NT], gl.float16)
    a_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16)
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, ld))
    c = gl.arange(0, NT, layout=gl.SliceLayout(0, ld))
    b = gl.allocate_shared_memory(
        gl.float16, [64, NT], b_smem_layout, gl.load(b_ptr + r[:, None] * NT + c[None, :])
    )
    ca = gl.arange(0, 64, layout=gl.SliceLayout(0, ld))
    a_vals = gl.load(a_ptr + r[:, None] * 64 + ca[None, :])
    a_smem = gl.allocate_shared_memory(gl.float16, [64, 64], a_smem_layout, a_vals)
    fence_async_shared()
    gl.thread_barrier()
    a = gl.convert_layout(a_vals, a_layout)
    acc0 = gl.zeros([64, NT], gl.float32, mma)
    acc1 = gl.zeros([64, NT], gl.float32, mma)
    for _ in range(ITERS):
        if RS:
            acc0 = warpgroup_mma(a, b, acc0, is_async=True)
            acc1 = warpgroup_mma(a, b, acc1, is_async=True)
        else:
            acc0 = warpgroup_mma(a_smem, b, acc0, is_async=True)
            acc1 = warpgroup_mma(a_smem, b, acc1, is_async=True)
        acc0, acc1 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0, acc1))
    out = gl.convert_layout(acc0 + acc1, ld)
    pid = gl.program_id(0)
    gl.store(out_ptr + pid * 64 * NT + r[:, None] * NT + c[None, :], out)


def rate(n, warpgroups, rs, sm):
    nt = n * warpgroups
    a = torch.randn(64, 64, device="cuda").half() * 0.01
    b = torch.randn(64, nt, device="cuda").half() * 0.01
    out = torch.empty(sm, 64, nt, device="cuda")
    fn = lambda: _rate_kernel[(sm,)](a, b, out, ITERS, n, warpgroups, rs, num_warps=4 * warpgroups)
    ms = triton.testing.do_bench(fn, rep=200, return_mode="median")
    flops = sm * ITERS * 2 * 64 * 64 * nt * 2  # two MMAs an iteration, k = 64
    return flops / ms / 1e9


def main():
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    for rs in (True, False):
        for warpgroups in (1, 2):
            for n in (16, 32, 64, 128, 256):
                if n * warpgroups > 256:
                    continue
                t = rate(n, warpgroups, rs, sm)
                kind = "RS" if rs else "SS"
                print(
                    f"{kind} warpgroups={warpgroups} m64n{n}k16 (k=64 an MMA): {t:6.0f} TFLOP/s",
                    flush=True,
                )


if __name__ == "__main__":
    main()
