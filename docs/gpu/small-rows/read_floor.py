"""What a single kernel that only reads takes on the H200 at the byte counts of #21's
small rows, in kernel time (torch.profiler) and under a CUDA graph: a tl kernel in which
each program sums its share of a bf16 buffer and stores one float (the best of several
grids and widths), ``torch.sum`` of the same buffer, and an empty kernel once and twice
in a row. The question: how close a read of 18.9 MB (16 rows of 1024 tokens of 576 bf16
values: 16/32/1024, 16/64/1024) can come to the bench's floor (its copy rate, 3.34
TB/s) in one launch, and what one launch costs."""

import functools

import torch
import triton
import triton.language as tl
from torch.profiler import ProfilerActivity, profile

COPY_TBPS = 3.338  # the sweep's measured copy rate (docs/benchmarks/results.json)


@triton.jit
def read_kernel(x, out, iters, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in tl.range(iters):
        acc += tl.load(x + (pid * iters + i) * BLOCK + offs).to(tl.float32)
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def empty_kernel(out):
    tl.store(out + tl.program_id(0), 1.0)


def launch_read(x, out, programs, iters, block, warps):
    read_kernel[(programs,)](x, out, iters, block, num_warps=warps)


def kernel_us(fn, reps=200):
    """Mean device time of the kernels ``fn`` launches, a call (torch.profiler)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in prof.key_averages() if e.device_time_total > 0)
    return total / reps


def graph_us(fn):
    return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median")


def main():
    gen = torch.Generator(device="cuda").manual_seed(0)
    out = torch.empty(1 << 16, device="cuda", dtype=torch.float32)
    one = lambda: empty_kernel[(132,)](out)
    two = lambda: (one(), one())
    print(
        f"empty kernel: kernel {kernel_us(one):.2f} us, graph {graph_us(one):.2f} us; "
        f"two in a row: kernel {kernel_us(two):.2f} us, graph {graph_us(two):.2f} us"
    )
    for rows, tokens in [(16, 128), (16, 1024), (64, 1024), (16, 4096), (128, 4096)]:
        n = rows * tokens * 576
        x = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
        floor = 2 * n / (COPY_TBPS * 1e12) * 1e6
        best = None
        for block in (2048, 4096, 8192):
            for programs in (128, 144, 256, 288, 512, 576, 1024, 1152, 2048, 2304, 4608):
                if n % (block * programs):
                    continue
                iters = n // (block * programs)
                for warps in (4, 8):
                    fn = functools.partial(launch_read, x, out, programs, iters, block, warps)
                    us = kernel_us(fn, reps=50)
                    if best is None or us < best[0]:
                        best = (us, block, programs, warps, fn)
        us, block, programs, warps, fn = best
        ref = x.float().view(programs, -1).sum(1)
        fn()
        err = float((out[:programs] - ref).abs().max() / ref.abs().max())
        tsum = functools.partial(torch.sum, x)
        print(
            f"{rows:3d} rows x {tokens:5d} tokens ({2 * n / 1e6:6.1f} MB, "
            f"floor {floor:6.2f} us): read kernel {us:6.2f} us kernel "
            f"({100 * floor / us:5.1f}% of floor), "
            f"graph {graph_us(fn):6.2f} us [block {block}, {programs} programs, {warps} warps, "
            f"rel err {err:.0e}]; torch.sum kernel {kernel_us(tsum):6.2f} us",
            flush=True,
        )


if __name__ == "__main__":
    main()
