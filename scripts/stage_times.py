"""Device time of each stage of the triton decode, launched from torch under CUDA graphs.

The bench times whole jitted calls (wall time, and kernel time from a profiler
trace), both stages together. This script
launches ``kernels.mla_decode_stage1`` and ``mla_decode_stage2`` with Triton's own
launcher on torch CUDA tensors (the same launch parameters the JAX path gets, the
default split policy, an exact-size buffer) and times, each with
``triton.testing.do_bench_cudagraph`` (median): stage 1 alone, stage 2 alone (and
version 6's stage 2, one head and 128 columns a program), both.
It reports each stage's rate against its own bytes (stage 1: the latent rows;
stage 2: the buffer it reads and the output it writes) and checks the output against
the dense torch reference.

Then it times the same two stages through JAX (``triton_backend.decode``, same
arrays through DLPack, same buffer shape; ``sweep_configs.direct`` and
``time_decode``) with ``bench.time_loop``: the wall clock of
K chained calls in one jit, for each K of ``--jax-calls``, with one sync per run
(``runs=1``, the bench before run 22) and with ``bench.RUNS_PER_REPEAT`` runs per
sync (the bench since). Where they disagree with the CUDA graph, the difference is
what the harness adds.

    python scripts/stage_times.py --out stage_times.json [--shapes 128x16x16384,...]   # CUDA GPU
"""

import functools
import inspect
import json

import jax
import jax.numpy as jnp
import torch
import triton.testing
from gluon_check import give_triton_scratch
from sweep_configs import PAGE, SCALE, SM, direct, shapes_parser, time_decode

from mla_jax import kernels, plan
from mla_jax.splits import occupancy_kv_splits
from mla_jax.tools import bench, bench_report
from mla_jax.torch_ref import mla_decode_dense_torch

LORA, ROPE = 512, 64
# The target shapes.
SHAPES = [
    (128, 16, 16384),
    (64, 16, 4096),
    (128, 128, 16384),
    (128, 128, 4096),
    (16, 128, 4096),
    (1, 128, 4096),
]


def make_problem(batch, heads, length, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pages_per_seq = length // PAGE
    q = torch.randn(batch, heads, LORA + ROPE, generator=gen, device="cuda").bfloat16()
    kv = torch.randn(
        batch * pages_per_seq, PAGE, LORA + ROPE, generator=gen, device="cuda"
    ).bfloat16()
    table = torch.randperm(batch * pages_per_seq, generator=gen, device="cuda")
    table = table.view(batch, pages_per_seq).int()
    lens = torch.full((batch,), length, dtype=torch.int32, device="cuda")
    return q, kv, table, lens


def launchers(
    q, kv, table, lens, splits, module=kernels, batch_tokens=None, gluon=False, fp8_mma=False
):
    """The two stages of ``module`` (``mla_jax.kernels`` or another version of it) on
    NaN-poisoned outputs: ``(stage1, stage2, out, lse)``. ``stage2(num_warps, **tiling)``
    launches stage 2 with ``launch_params``' tiling and warps, or with the ``num_warps``,
    ``HEAD_BLOCK``, ``SPLIT_BLOCK`` and ``COL_BLOCK`` given (its grid follows them).
    ``batch_tokens`` (rows x length, as a static ``max_seq_len`` gives it) picks the head
    tile in versions whose ``launch_params`` take it; None: the default tile. ``gluon``:
    stage 1 is this checkout's Gluon kernel for the cache's dtype
    (``plan.gluon_kernel``; sm_90, a problem it ``supports``), with ``fp8_mma``
    the one ``mla_decode(..., fp8_mma=True)`` picks (and with ``batch_tokens`` the one
    ``mla_decode`` picks at 32 heads)."""
    batch, heads, _ = q.shape
    buf = torch.full((batch, heads, splits, LORA + 1), float("nan"), device="cuda")
    out = torch.full((batch, heads, LORA), float("nan"), device="cuda").bfloat16()
    lse = torch.full((batch, heads), float("nan"), device="cuda")
    ns = torch.tensor([splits], dtype=torch.int32, device="cuda")
    kv_scale = torch.ones(1, device="cuda")
    # Versions before the clamped indices take no pool or table sizes.
    sizes = (
        dict(num_pages=kv.shape[0], pages_per_seq=table.shape[1])
        if "num_pages" in inspect.signature(module.launch_params).parameters
        else {}
    )
    if "batch_tokens" in inspect.signature(module.launch_params).parameters:
        sizes["batch_tokens"] = batch_tokens
    problem = dict(
        **sizes,
        batch=batch,
        num_heads=heads,
        page_size=PAGE,
        kv_lora_rank=LORA,
        rope_dim=ROPE,
        scale=SCALE,
        grid_splits=splits,
        q_nope_strides=q.stride(),
        q_pe_strides=q.stride(),
        qp_offset=LORA,
        kv_strides=kv.stride(),
        block_table_strides=table.stride(),
        buffer_strides=buf.stride(),
    )
    q_dtype = str(q.dtype).removeprefix("torch.")
    # Versions before the bf16 partials take whether q is float32 instead of its dtype.
    if "q_dtype" in inspect.signature(module.launch_params).parameters:
        s1, s2 = module.launch_params(**problem, q_dtype=q_dtype)
    else:
        s1, s2 = module.launch_params(**problem, float32_inputs=False)
    stage1_kernel = module.mla_decode_stage1
    if gluon:
        kv_dtype = str(kv.dtype).removeprefix("torch.")
        problem.pop("batch_tokens", None)
        # Triton's launcher makes no clusters: the build whose partials stage 2 merges.
        gluon_problem = plan.Problem.on_sm90(
            q_dtype=q_dtype,
            kv_dtype=kv_dtype,
            fp8_mma=fp8_mma,
            cluster_merge=False,
            batch_tokens=batch_tokens,
            **problem,
        )
        s1 = plan.gluon_stage1(gluon_problem, gluon_problem.grid_splits, batch_tokens)
        stage1_kernel = s1["kernel"]
        s2 = plan.gluon_stage2(s2, s1)

    # With one split stage 1 writes out / lse and there is no stage 2 (``stage2`` is a
    # no-op); versions before that take the buffer only.
    pointers = (
        module.stage1_pointers(s2 is None, buf, out, lse)
        if hasattr(module, "stage1_pointers")
        else {}
    )
    buffers = () if pointers else (buf, buf)

    def stage1():
        stage1_kernel[s1["grid"]](
            q,
            q,
            kv,
            table,
            lens,
            ns,
            kv_scale,
            *buffers,
            **pointers,
            num_warps=s1["num_warps"],
            num_stages=s1["num_stages"],
            **s1["constexprs"],
        )

    def stage2(num_warps=None, **tiling):
        if s2 is None:
            return
        num_warps = num_warps or s2["num_warps"]
        constexprs = s2["constexprs"] | tiling
        grid = (
            s2["grid"]
            if not tiling
            else (
                batch,
                triton.cdiv(heads, constexprs["HEAD_BLOCK"]),
                LORA // constexprs["COL_BLOCK"],
            )
        )
        module.mla_decode_stage2[grid](
            buf, lens, ns, out, lse, num_warps=num_warps, num_stages=s2["num_stages"], **constexprs
        )

    return stage1, stage2, out, lse


def jax_ms(q, kv, table, lens, splits, calls, runs):
    """Median per-call ms of ``calls`` chained ``triton_backend.decode`` calls in one jit,
    ``runs`` runs per sync, on the same arrays (shared through DLPack)."""
    inputs = tuple(jax.dlpack.from_dlpack(t) for t in (q, kv, table, lens))
    buf = jnp.zeros((q.shape[0], q.shape[1], splits, LORA + 1), jnp.float32)
    decode = direct(splits, None, q.shape[0] * int(lens.max()))  # the tile launchers got
    return time_decode(decode, calls, inputs, buf, repeats=5, runs=runs)[0]


def main():
    give_triton_scratch()
    parser = shapes_parser(SHAPES, "the targets")
    parser.add_argument(
        "--jax-calls",
        default="5,20",
        help="K values for the JAX timing (comma-separated; empty: skip)",
    )
    args = parser.parse_args()
    jax_calls = [int(k) for k in args.jax_calls.split(",") if k]
    results = []
    # Every CUDA-graph capture comes before the first JAX call: a capture is invalidated
    # by CUDA calls XLA's threads make meanwhile (run 23 lost its second shape to that).
    for seed, (batch, heads, length) in enumerate(args.shapes):
        q, kv, table, lens = make_problem(batch, heads, length, seed)
        splits = occupancy_kv_splits(batch, heads, length, SM)
        stage1, stage2, out, lse = launchers(
            q, kv, table, lens, splits, batch_tokens=batch * length
        )
        # Version 6's stage 2 tiling for comparison: one head and 128 columns a program,
        # up to MAX_SPLIT_BLOCK splits an iteration.
        stage2_v6 = functools.partial(
            stage2,
            HEAD_BLOCK=1,
            COL_BLOCK=min(128, LORA),
            SPLIT_BLOCK=min(kernels.MAX_SPLIT_BLOCK, triton.next_power_of_2(splits)),
        )
        stage1(), stage2_v6()
        out_v6 = out.clone()
        stage2()
        v6_diff = float((out.float() - out_v6.float()).abs().max())
        ref_out, ref_lse = mla_decode_dense_torch(
            q, kv, table, lens, scale=SCALE, kv_lora_rank=LORA
        )
        err = float((out.float() - ref_out.float()).abs().max())
        lse_err = float((lse - ref_lse).abs().max())
        ms = {
            name: triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
            for name, fn in (
                ("stage1", stage1),
                ("stage2", stage2),
                ("stage2_v6", stage2_v6),
                ("both", lambda stage1=stage1, stage2=stage2: (stage1(), stage2())),
            )
        }
        kv_bytes = bench_report.kv_bytes(batch, length)
        buf_bytes = batch * heads * splits * (LORA + 1) * 4
        out_bytes = batch * heads * (LORA * 2 + 4)  # bf16 out, float32 lse
        flops = bench_report.attention_flops(batch, heads, length)
        row = dict(
            batch=batch,
            heads=heads,
            length=length,
            splits=splits,
            ms=ms,
            stage1_tbps=kv_bytes / ms["stage1"] / 1e9,
            stage1_tflops=flops / ms["stage1"] / 1e9,
            stage2_tbps=(buf_bytes + out_bytes) / ms["stage2"] / 1e9,
            buffer_mib=buf_bytes / 2**20,
            max_abs_err=err,
            lse_max_abs_err=lse_err,
        )
        results.append(row)
        print(
            f"B={batch:4d} H={heads:4d} L={length:6d} splits={splits:3d}  stage1 "
            f"{ms['stage1']:.4f} ms ({row['stage1_tbps']:.2f} TB/s, "
            f"{row['stage1_tflops']:.0f} TFLOP/s)  stage2 {ms['stage2']:.4f} ms "
            f"(v6: {ms['stage2_v6']:.4f}; buffer {row['buffer_mib']:.1f} MiB)  "
            f"both {ms['both']:.4f} ms  "
            f"max|out-ref| {err:.1e} max|lse-ref| {lse_err:.1e}",
            flush=True,
        )
        assert err < 0.05 and lse_err < 1e-3, "output disagrees with the dense reference"
        assert v6_diff < 0.02, f"the two stage-2 tilings disagree by {v6_diff}"
        del q, kv, table, lens, out, lse
        torch.cuda.empty_cache()
    for seed, row in enumerate(results if jax_calls else []):
        q, kv, table, lens = make_problem(row["batch"], row["heads"], row["length"], seed)
        row["ms"] |= {
            f"jax_k{k}_runs{r}": jax_ms(q, kv, table, lens, row["splits"], k, r)
            for k in jax_calls
            for r in (1, bench.RUNS_PER_REPEAT)
        }
        print(
            f"B={row['batch']:4d} H={row['heads']:4d} L={row['length']:6d}  CUDA graph "
            f"{row['ms']['both']:.4f} ms  JAX, K calls x runs a sync: "
            + " ".join(
                f"{k}x{r} {row['ms'][f'jax_k{k}_runs{r}']:.4f}"
                for k in jax_calls
                for r in (1, bench.RUNS_PER_REPEAT)
            ),
            flush=True,
        )
        del q, kv, table, lens
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
