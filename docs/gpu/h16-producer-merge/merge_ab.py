"""wip/merge-stage1: the tl stage 1 that merges its own splits (its last program of a
(row, head tile), counters in an extra split slot of the buffer) against stage 1 +
stage 2, both under CUDA graphs, at the occupancy split count; the merged output
against the two-stage one, after the timing too (the counters must reset)."""

import sys

import gluon_check as gc
import torch
import triton

from mla_jax import kernels
from mla_jax.splits import occupancy_kv_splits

SHAPES = [(64, 16, 4096), (128, 16, 4096), (128, 16, 16384), (64, 16, 1024), (128, 16, 1024)]
SHAPES += [(32, 16, 4096), (16, 16, 16384), (16, 16, 4096), (4, 16, 16384), (64, 32, 4096)]
if len(sys.argv) > 1:  # BxHxL,...
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
sm = torch.cuda.get_device_properties(0).multi_processor_count
gen = torch.Generator(device="cuda").manual_seed(0)
pool = gc.new_pool(torch.bfloat16, gen)
for batch, heads, length in SHAPES:
    q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen)
    splits = occupancy_kv_splits(batch, heads, length, sm)
    if splits == 1:
        print(f"B={batch} H={heads} L={length}: one split, nothing to merge", flush=True)
        continue
    buf = torch.full((batch, heads, splits + 1, 513), float("nan"), device="cuda")
    buf[:, :, -1] = 0.0
    ns = torch.tensor([splits], dtype=torch.int32, device="cuda")
    one = torch.ones(1, device="cuda")
    outs = {}
    times = {}
    for merge in (False, True):
        geometry = dict(
            batch=batch,
            num_heads=heads,
            num_pages=pool.shape[0],
            page_size=64,
            pages_per_seq=table.shape[1],
            kv_lora_rank=512,
            rope_dim=64,
            scale=gc.SCALE,
            grid_splits=splits,
            q_nope_strides=q.stride(),
            q_pe_strides=q.stride(),
            qp_offset=512,
            kv_strides=pool.stride(),
            block_table_strides=table.stride(),
            buffer_strides=buf.stride(),
            float32_inputs=False,
        )
        s1, s2 = kernels.launch_params(**geometry, merge_slot=splits if merge else None)
        out = torch.full((batch, heads, 512), float("nan"), device="cuda", dtype=q.dtype)
        lse = torch.full((batch, heads), float("nan"), device="cuda")
        ptrs = kernels.stage1_pointers(s2 is None, buf, out, lse)

        # The loop's values bound at definition (called within this iteration only).
        def call(
            q=q,
            pool=pool,
            table=table,
            lens=lens,
            ns=ns,
            one=one,
            ptrs=ptrs,
            s1=s1,
            s2=s2,
            buf=buf,
            out=out,
            lse=lse,
        ):
            kernels.mla_decode_stage1[s1["grid"]](
                q,
                q,
                pool,
                table,
                lens,
                ns,
                one,
                **ptrs,
                num_warps=s1["num_warps"],
                num_stages=s1["num_stages"],
                **s1["constexprs"],
            )
            if s2 is not None:
                kernels.mla_decode_stage2[s2["grid"]](
                    buf,
                    lens,
                    ns,
                    out,
                    lse,
                    num_warps=s2["num_warps"],
                    num_stages=s2["num_stages"],
                    **s2["constexprs"],
                )

        call()
        torch.cuda.synchronize()
        first = out.float().clone()
        times[merge] = 1e3 * triton.testing.do_bench_cudagraph(call, rep=50, return_mode="median")
        out.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        outs[merge] = (first, out.float().clone(), lse.clone())
    err = float((outs[True][0] - outs[False][0]).abs().max())
    err_after = float((outs[True][1] - outs[False][0]).abs().max())
    lse_err = float((outs[True][2] - outs[False][2]).abs().max())
    counters = int(buf[:, :, -1].view(torch.int32).abs().max())
    print(
        f"B={batch:3d} H={heads} L={length:5d} splits={splits:3d} | "
        f"two stages {times[False]:7.1f} us"
        f" | merged {times[True]:7.1f} us ({times[True] / times[False]:.3f}) | out err {err:.1e}, "
        f"after timing {err_after:.1e}, lse {lse_err:.1e} | counters {counters}",
        flush=True,
    )
    del q, table, lens, buf
    torch.cuda.empty_cache()
