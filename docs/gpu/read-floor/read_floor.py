"""How fast this card reads a decode's paged latent rows when that is all a kernel does.

For one B/H/L shape (default 64/16/4096: 302 MB of bf16 latent rows, 64-token pages
in a random order), time under CUDA graphs (median, ``do_bench_cudagraph``):

- ``copy``: a device copy of the whole cache (bytes read + written);
- ``split``: a ``tl`` kernel with a program per (row, split), as stage 1's grid is,
  that reads its split's pages through the block table and sums them by column (one
  float row a program out: nothing else to do but the loads);
- ``flat``: the same reads, the (row, page) list cut into P equal runs whatever the
  rows (a FlashMLA-like plan; P = 132, 264, ...), through the table, and ``flat-id``
  the same over the pages in memory order (no table);
- our own stage 1 and both stages at the same shape and split counts
  (``stage_times.launchers``).

Each read kernel at 4 and 8 warps and 2, 3 and 4 stages; the best of them is the read
floor of that partition. Each result is checked: the sums of all programs add up to
the cache's own sum.

    PYTHONPATH=$PWD:$PWD/scripts python docs/gpu/read-floor/read_floor.py [--shape 64x16x4096]
"""

import argparse

import torch
import triton
import triton.language as tl
import triton.testing
from gluon_check import give_triton_scratch
from stage_times import launchers, make_problem

LORA, ROPE = 512, 64


@triton.jit
def _sum_page(kv, page, stride_page, stride_tok, acc, acc_pe, PAGE: tl.constexpr):
    tok = tl.arange(0, PAGE)[:, None]
    base = kv + page.to(tl.int64) * stride_page + tok * stride_tok
    nope = tl.load(base + tl.arange(0, 512)[None, :])
    pe = tl.load(base + 512 + tl.arange(0, 64)[None, :])
    return acc + tl.sum(nope.to(tl.float32), 0), acc_pe + tl.sum(pe.to(tl.float32), 0)


@triton.jit
def read_split(
    kv,
    table,
    out,
    stride_page,
    stride_tok,
    pages_per_seq,
    PAGES_PER_SPLIT: tl.constexpr,
    PAGE: tl.constexpr,
):
    row, split = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros([512], tl.float32)
    acc_pe = tl.zeros([64], tl.float32)
    first = row * pages_per_seq + split * PAGES_PER_SPLIT
    for i in range(PAGES_PER_SPLIT):
        page = tl.load(table + first + i)
        acc, acc_pe = _sum_page(kv, page, stride_page, stride_tok, acc, acc_pe, PAGE)
    prog = row * tl.num_programs(1) + split
    tl.store(out + prog * 576 + tl.arange(0, 512), acc)
    tl.store(out + prog * 576 + 512 + tl.arange(0, 64), acc_pe)


@triton.jit
def read_flat(kv, table, out, stride_page, stride_tok, total_pages, PAGE: tl.constexpr):
    prog = tl.program_id(0)
    lo = (prog * total_pages) // tl.num_programs(0)
    hi = ((prog + 1) * total_pages) // tl.num_programs(0)
    acc = tl.zeros([512], tl.float32)
    acc_pe = tl.zeros([64], tl.float32)
    for i in range(lo, hi):
        page = tl.load(table + i)
        acc, acc_pe = _sum_page(kv, page, stride_page, stride_tok, acc, acc_pe, PAGE)
    tl.store(out + prog * 576 + tl.arange(0, 512), acc)
    tl.store(out + prog * 576 + 512 + tl.arange(0, 64), acc_pe)


def main():
    give_triton_scratch()
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="64x16x4096")
    parser.add_argument("--splits", default="2,4,8")
    parser.add_argument("--programs", default="132,264,528")
    args = parser.parse_args()
    batch, heads, length = map(int, args.shape.split("x"))
    q, kv, table, lens = make_problem(batch, heads, length, seed=0)
    page = kv.shape[1]
    pages_per_seq = table.shape[1]
    total = batch * pages_per_seq
    kv_bytes = kv.numel() * kv.element_size()
    expect = kv.double().sum().item()
    flat_table = table.reshape(-1).contiguous()
    identity = torch.arange(total, dtype=torch.int32, device="cuda")
    print(f"shape {args.shape}: {kv_bytes / 1e6:.1f} MB of latent rows, {total} pages")

    def timed(name, fn, nbytes=kv_bytes):
        ms = triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
        print(f"{name:44s} {ms * 1e3:8.1f} us  {nbytes / ms / 1e9:5.2f} TB/s", flush=True)
        return ms

    dst = torch.empty_like(kv)
    timed("copy (read + write)", lambda: dst.copy_(kv), 2 * kv_bytes)

    def check(name, out):
        got = out.double().sum().item()
        if abs(got - expect) > 1e-3 * kv.double().abs().sum().item():
            raise SystemExit(f"{name}: sums {got} against the cache's {expect}")

    best = {}
    configs = [(w, s) for w in (4, 8) for s in (2, 3, 4)]
    for splits in map(int, args.splits.split(",")):
        out = torch.full((batch * splits, 576), float("nan"), device="cuda")
        for warps, stages in configs:

            def run(splits=splits, out=out, warps=warps, stages=stages):
                read_split[(batch, splits)](
                    kv,
                    table,
                    out,
                    kv.stride(0),
                    kv.stride(1),
                    pages_per_seq,
                    PAGES_PER_SPLIT=pages_per_seq // splits,
                    PAGE=page,
                    num_warps=warps,
                    num_stages=stages,
                )

            run()
            check(f"split {splits}", out)
            name = f"split {splits} ({batch * splits} programs) w{warps} s{stages}"
            ms = timed(name, run)
            key = f"split {splits}"
            best[key] = min(best.get(key, ms), ms)
    for order, tab in (("flat", flat_table), ("flat-id", identity)):
        for programs in map(int, args.programs.split(",")):
            out = torch.full((programs, 576), float("nan"), device="cuda")
            for warps, stages in configs:

                def run(tab=tab, out=out, programs=programs, warps=warps, stages=stages):
                    read_flat[(programs,)](
                        kv,
                        tab,
                        out,
                        kv.stride(0),
                        kv.stride(1),
                        total,
                        PAGE=page,
                        num_warps=warps,
                        num_stages=stages,
                    )

                run()
                check(f"{order} {programs}", out)
                ms = timed(f"{order} {programs} programs w{warps} s{stages}", run)
                key = f"{order} {programs}"
                best[key] = min(best.get(key, ms), ms)
    for splits in map(int, args.splits.split(",")):
        stage1, stage2, _, _ = launchers(q, kv, table, lens, splits, batch_tokens=batch * length)
        stage1(), stage2()
        best[f"ours stage 1, {splits} splits"] = timed(f"ours stage 1, {splits} splits", stage1)
        best[f"ours both, {splits} splits"] = timed(
            f"ours both stages, {splits} splits",
            lambda stage1=stage1, stage2=stage2: (stage1(), stage2()),
        )
    print("\nbest of each partition:")
    for key, ms in best.items():
        print(f"  {key:36s} {ms * 1e3:8.1f} us  {kv_bytes / ms / 1e9:5.2f} TB/s")


if __name__ == "__main__":
    main()
