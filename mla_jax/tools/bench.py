"""``python -m mla_jax bench``: time of MLA decode paths on a GPU, side by side.

Paths per shape (``bench_report.PATH_LABELS``): our Triton kernels and our XLA
backend through ``mla_decode``, plain JAX gather+einsum, and vLLM's Triton
``decode_attention_fwd`` (when ``mla_jax.tools.vllm_kernel.load()`` finds its source).
Wall time per call, one host sync per many calls:

- JAX paths: K chained calls unrolled in one jit (``timed_chain``), timed around
  ``block_until_ready``, divided by K (K makes one run last ~2 ms or more). Every
  call's results are outputs of the jit, so XLA deletes none of their work; on a GPU
  the compiled chain must hold every call's Triton custom calls for the Triton paths
  (as many a call as one call lowers to, ``kernels_per_call``: stage 1 and stage 2,
  or stage 1 alone where it writes the output), or the sweep stops
  (``ChainCheckError``).
- vLLM: a CUDA graph of K calls, replayed between CUDA events.

On a GPU each timed path is then run once more under ``jax.profiler.trace`` (CUPTI
sees the kernels of JAX and of torch alike): ``device_ms`` is the time some kernel of
the path was running, per call (the union of the kernels' intervals on the GPU's
streams, so launch gaps between kernels are not in it), and ``kernels_per_call``
says which kernels ran how often a call. That is one instrument for every path; the
targets of ``docs/performance.md`` are stated in it.

Both ceilings (device copy, bf16 matmul) are measured in the same run, and every
path gets bandwidth, flop rate, % of the roofline floor and speed-up over vLLM.
Writes ``results.json`` and PNG plots into ``--out`` and the markdown page next to
that folder (``docs/benchmarks.md`` for the default ``docs/benchmarks``). A run on a
platform other than a GPU never replaces a ``results.json`` measured on a GPU.

``--dry-run`` runs on a CPU with tiny shapes and exercises every code path except
the GPU timing calls: the Triton path is lowered for CUDA but not run (its lowered
chain is checked like the compiled one: every call's custom calls, each reaching the
outputs), and the vLLM path runs a dense torch stand-in of ``decode_attention_fwd``
(``vllm_decode``'s plumbing included), timed by the wall clock instead of a CUDA
graph. It traces no kernel time, on a GPU too, so that its report has the same form
on every machine (wall time only; no path with a kernel time beside one without).
Its outputs go to ``build/bench-dry-run`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import functools
import importlib.metadata
import itertools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mla_jax import kv_splits, mla_decode, num_kv_splits, reserve_logits_buffer
from mla_jax.buffers import DEFAULT_SM_COUNT, gpu_sm_count
from mla_jax.cache import new_paged_cache, quantize_fp8
from mla_jax.tools import bench_report, vllm_kernel
from mla_jax.tools.bench_report import PATH_LABELS, SPLIT_POLICY
from mla_jax.tools.chain_calls import (
    ChainCheckError,
    check_chain_calls,
    compiled_custom_calls,
    stablehlo_custom_calls,
)
from mla_jax.tools.cli import (
    Parser,
    fail,
    positive_float,
    positive_int,
    positive_ints,
    unwritable_folder,
)
from mla_jax.tools.problem import QK_NOPE_HEAD_DIM, softmax_scale

BATCHES = (1, 4, 16, 64, 128)
# The fp8 cache is timed on request (--paths triton-fp8,triton-fp8-mma), not in every
# sweep.
FP8_PATHS = ("triton-fp8", "triton-fp8-mma")
DEFAULT_PATHS = tuple(p for p in PATH_LABELS if p not in FP8_PATHS)
HEADS = (16, 32, 64, 128)  # 32 and 64: DeepSeek-V3 at tensor parallelism 4 and 2
LENS = (1024, 4096, 16384, 65536)
LONG_LEN, LONG_MAX_BATCH = 16384, 4  # lengths past LONG_LEN only for B <= 4
QUICK = {"batches": (4, 128), "heads": (16, 128), "lens": (4096, 16384), "repeats": 3}
DRY = {
    "batches": (1, 2),
    "heads": (16,),
    "lens": (128, 256),
    "repeats": 2,
    "calls": 2,
    "page_size": 16,
}

# Where results go: a dry run's must never land on the committed GPU results.
DEFAULT_OUT, DRY_RUN_OUT = Path("docs/benchmarks"), Path("build/bench-dry-run")

KV_LORA_RANK, ROPE_DIM = 512, 64
LATENT_DIM = KV_LORA_RANK + ROPE_DIM
SCALE = softmax_scale(QK_NOPE_HEAD_DIM, ROPE_DIM)  # DeepSeek-V3's
# The calls are unrolled (timed_chain): more than ~20 makes XLA compiles of the XLA
# paths dominate the sweep (measured: 23 s a shape at 100 calls).
TARGET_RUN_MS, MIN_CALLS, MAX_CALLS = 2.0, 5, 20
# Runs dispatched back to back per timed repeat, one sync at the end: dispatch then
# overlaps the device's work, and the sync is paid once per RUNS_PER_REPEAT runs. With
# one sync per run, the fixed ~0.3 ms around it added 12% at 128/16/16384 (K=5) and
# 60-100% at 1/128/4096 (K=20) to the CUDA-graph device time (measured with
# scripts/stage_times.py); with 10 runs a sync, within 6% of it (13% at 1/128/4096).
RUNS_PER_REPEAT = 10
# Where XLA's GPU profiler puts kernels in a trace: one plane per GPU, one line per
# CUDA stream (other lines of the plane are XLA's own annotations).
GPU_PLANE_PREFIX, STREAM_LINE_PREFIX = "/device:GPU:", "Stream #"


@dataclass(frozen=True)
class Settings:
    """Everything a sweep depends on besides the shapes."""

    dry_run: bool
    repeats: int
    calls: int | None  # K; None: per shape, from its floor (calls_for)
    page_size: int
    sm_count: int
    paths: tuple[str, ...]
    time_budget_s: float
    bytes_budget: int
    # A dry run's times mean nothing: one run a repeat keeps it short.
    runs_per_repeat: int = RUNS_PER_REPEAT
    # Trace each path once more for its kernel time (``device_ms``).
    kernel_time: bool = True


def sweep_shapes(
    batches: Sequence[int], heads: Sequence[int], lens: Sequence[int]
) -> list[tuple[int, int, int]]:
    """(B, H, L) in sweep order; lengths past ``LONG_LEN`` only for small batches."""
    return [
        (b, h, n)
        for b, h, n in itertools.product(batches, heads, lens)
        if n <= LONG_LEN or b <= LONG_MAX_BATCH
    ]


def calls_for(floor_ms: float) -> int:
    """K calls per jitted run: enough that a run lasts ~TARGET_RUN_MS even for the
    fastest path (``time_loop`` then times RUNS_PER_REPEAT runs per repeat)."""
    return int(min(MAX_CALLS, max(MIN_CALLS, round(TARGET_RUN_MS / max(floor_ms, 0.02)))))


def xla_temp_bytes(batch: int, heads: int, seq_len: int) -> int:
    """Rough peak temporaries of the XLA paths: the gathered rows plus three float32
    [B, H, L] arrays (logits, probabilities, their cast)."""
    return bench_report.kv_bytes(batch, seq_len) + 3 * batch * heads * seq_len * 4


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def make_inputs(
    key: jax.Array, batch: int, heads: int, seq_len: int, page_size: int
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Random bf16 ``(q, kv_cache)``, a shuffled block table, every row of length L
    (one compilation per shape, rather than one per random op; an "rbg" key compiles
    and runs faster than threefry's)."""
    kq, kcache = jax.random.split(key)
    q = jax.random.normal(kq, (batch, heads, LATENT_DIM), jnp.bfloat16)
    kv_cache, block_table = new_paged_cache(
        batch, seq_len, page_size, LATENT_DIM, jnp.bfloat16, key=kcache
    )
    return q, kv_cache, block_table, jnp.full((batch,), seq_len, jnp.int32)


def dense_decode(
    q: jax.Array,
    kv_cache: jax.Array,
    block_table: jax.Array,
    seq_lens: jax.Array,
    *,
    scale: float,
    kv_lora_rank: int = KV_LORA_RANK,
) -> tuple[jax.Array, jax.Array]:
    """Plain JAX MLA decode in bf16: gather every page of each row, one softmax."""
    rows = kv_cache[block_table].reshape(q.shape[0], -1, kv_cache.shape[-1])  # [B, N, D]
    logits = jnp.einsum("bhd,bnd->bhn", q, rows, preferred_element_type=jnp.float32) * scale
    live = jnp.arange(rows.shape[1])[None, :] < seq_lens[:, None]
    logits = jnp.where(live[:, None, :], logits, -jnp.inf)
    lse = jax.nn.logsumexp(logits, axis=-1)
    p = jnp.exp(logits - lse[..., None]).astype(q.dtype)
    out = jnp.einsum(
        "bhn,bnd->bhd", p, rows[..., :kv_lora_rank], preferred_element_type=jnp.float32
    )
    return out.astype(q.dtype), lse


# -------------------------------------------------------------------------- timing


def timed_chain(
    decode: Callable, calls: int, *, perturb_table: bool, keep_outs: bool
) -> jax.stages.Wrapped:
    """jit of ``calls`` chained decode steps: ``(q, kv, bt, lens, buf) -> (outs, lses, buf)``.

    ``decode(q, kv, bt, lens, buf) -> (out, lse, buf)``. ``buf`` (the logits buffer,
    or None) is threaded and donated. ``lses`` is the tuple of every call's lse and
    ``outs`` of every call's out with ``keep_outs``, else of the last one only
    (``outs[-1]`` is the last call's either way). A result left unused is dead code
    that XLA deletes with the work only it needs; as outputs of their own the results
    cost no op at all, where stacking them would add a concatenate. A custom call is
    kept whole when any of its results is used, and Triton's last kernel (stage 2, or
    stage 1 alone with one split) yields out and lse together, so the lses keep every
    call's kernels; the XLA paths compute out with ops of their own, so they need
    ``keep_outs``.

    The XLA paths read only loop-invariant arrays, and XLA would compute identical
    calls once; with ``perturb_table`` each call adds ``lse[0, 0] == inf`` (always 0,
    which XLA cannot know) to the block table the next one reads.
    """

    def run(q, kv_cache, block_table, seq_lens, buf):
        table, outs, lses = block_table, [], []
        # Unrolled: a rolled GPU while loop syncs with the host on every trip (~10 us),
        # which would swamp the small shapes; straight-line calls do not.
        for _ in range(calls):
            out, lse, buf = decode(q, kv_cache, table, seq_lens, buf)
            if perturb_table:
                table = table + (lse[0, 0] == jnp.inf).astype(table.dtype)
            outs.append(out)
            lses.append(lse)
        return tuple(outs if keep_outs else outs[-1:]), tuple(lses), buf

    return jax.jit(run, donate_argnums=4)


def time_loop(
    step: Callable, state: Any, *, calls: int, repeats: int, runs: int = RUNS_PER_REPEAT
) -> tuple[list[float], Any]:
    """Per-call ms of ``state = step(state)``, a jitted chain of ``calls`` calls, per
    repeat after a warm-up (which compiles); returns ``(times, last state)``.

    Each repeat dispatches ``runs`` steps back to back (each takes the last one's
    state, so they run in order on the device) and syncs once.
    """
    state = run_steps(step, state, 1)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        state = run_steps(step, state, runs)
        times.append((time.perf_counter() - start) * 1e3 / (calls * runs))
    return times, state


def run_steps(step: Callable, state: Any, runs: int) -> Any:
    """``state = step(state)`` ``runs`` times, dispatched back to back, then waited for."""
    for _ in range(runs):
        state = step(state)
    return jax.block_until_ready(state)


def time_cuda_graph(
    fn: Callable, *, calls: int, repeats: int, trace: bool = False
) -> tuple[list[float], Any, KernelTime | None]:
    """Per-call ms of ``fn`` from a CUDA graph of ``calls`` calls replayed between CUDA
    events, per repeat; returns ``(times, out of an eager call, with ``trace`` the
    trace of one more replay)``. GPU only."""
    import torch

    out, _ = fn()  # compiles the Triton kernels outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    # thread_local: only this thread's CUDA calls must be capture-safe, not JAX's.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(calls):
            fn()
    graph.replay()  # warm-up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    traced = trace_kernels(functools.partial(_replay, graph))[0] if trace else None
    del graph
    torch.cuda.empty_cache()  # the graph's pool, before the next shape's JAX arrays
    return times, out, traced


def _replay(graph: Any) -> None:
    import torch

    graph.replay()
    torch.cuda.synchronize()


class KernelTime(NamedTuple):
    """What a profiler trace saw on the GPU: the nanoseconds some kernel was running,
    and each kernel's launches."""

    busy_ns: int
    launches: dict[str, int]
    # Why there is no trace (the profiler did not start), or None.
    error: str | None = None

    def per_call(self, calls: int) -> tuple[float, dict[str, float]] | None:
        """``(ms, {kernel: launches})`` per call of ``calls`` traced, or None when the
        trace saw no kernel (no GPU, or a profiler that saw nothing)."""
        if not self.launches:
            return None
        return self.busy_ns / 1e6 / calls, {k: n / calls for k, n in self.launches.items()}


def kernel_time(planes: Iterable[Any]) -> KernelTime:
    """``KernelTime`` of a trace's planes (``jax.profiler.ProfileData.planes``): the
    union of the intervals of the events on the GPU planes' stream lines."""
    spans: list[tuple[int, int]] = []
    launches: collections.Counter[str] = collections.Counter()
    for plane in planes:
        if not plane.name.startswith(GPU_PLANE_PREFIX):
            continue
        for line in plane.lines:
            if not line.name.startswith(STREAM_LINE_PREFIX):
                continue
            for event in line.events:
                spans.append((event.start_ns, event.end_ns))
                launches[event.name] += 1
    busy, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            busy += end - start
            reach = end
        elif end > reach:
            busy += end - reach
            reach = end
    return KernelTime(int(busy), dict(launches))


def trace_kernels(run: Callable[[], Any]) -> tuple[KernelTime, Any]:
    """``(kernel_time of run(), what run returned)``, ``run`` traced by the JAX
    profiler; ``run`` must wait for its work. Where the profiler does not start (one
    already running in the process, say), ``run`` runs untraced and the
    ``KernelTime`` says why."""
    from jax.profiler import ProfileData

    with tempfile.TemporaryDirectory() as folder:
        try:
            jax.profiler.start_trace(folder)
        except Exception as e:
            return KernelTime(0, {}, f"{type(e).__name__}: {e}"[:300]), run()
        try:
            result = run()
        finally:
            jax.profiler.stop_trace()
        found = sorted(Path(folder).rglob("*.xplane.pb"))
        traced = (
            kernel_time(ProfileData.from_file(str(found[-1])).planes)
            if found
            else KernelTime(0, {})
        )
    return traced, result


def kernel_facts(traced: KernelTime, calls: int) -> dict:
    """The results entry's ``device_ms`` and ``kernels_per_call``; nothing where the
    trace saw no kernel, or ``kernel_time_error`` where there was no trace."""
    per_call = traced.per_call(calls)
    if per_call is None:
        return {} if traced.error is None else {"kernel_time_error": traced.error}
    return {"device_ms": per_call[0], "kernels_per_call": per_call[1]}


def time_wall(fn: Callable, *, calls: int, repeats: int) -> tuple[list[float], Any]:
    """The dry run's stand-in for ``time_cuda_graph``: the wall clock of eager calls."""
    out, _ = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) * 1e3 / calls)
    return times, out


def measure_ceilings(*, dry_run: bool, repeats: int, runs: int = RUNS_PER_REPEAT) -> dict:
    """Device copy bandwidth (bytes read + written / time) and bf16 matmul rate in JAX,
    each timed like the decode paths: a jitted loop of dependent calls."""
    copy_elems, n, calls = (1 << 20, 256, 2) if dry_run else (1 << 29, 8192, 20)

    def per_call_ms(step: Callable, x: jax.Array) -> float:
        # The barrier keeps XLA from fusing or simplifying consecutive calls together,
        # should it ever unroll the loop.
        body = lambda _, x: lax.optimization_barrier(step(x))
        loop = jax.jit(lambda x: lax.fori_loop(0, calls, body, x), donate_argnums=0)
        return float(np.median(time_loop(loop, x, calls=calls, repeats=repeats, runs=runs)[0]))

    # Negation: one read and one write per element, each call needing the last.
    copy_ms = per_call_ms(jnp.negative, jnp.ones((copy_elems,), jnp.bfloat16))
    copy_bytes = 2 * copy_elems * 2
    kx, kw = jax.random.split(jax.random.key(1))
    # w ~ N(0, 1/n) keeps x's scale, so the chained products stay finite.
    w = jax.random.normal(kw, (n, n), jnp.bfloat16) * jnp.bfloat16(n**-0.5)
    matmul_ms = per_call_ms(lambda x: x @ w, jax.random.normal(kx, (n, n), jnp.bfloat16))
    # What one iteration of a rolled JAX loop costs with almost no work in it (the
    # decode loops are unrolled, since a rolled GPU loop syncs with the host each trip).
    loop_step_ms = per_call_ms(lambda x: x + 1, jnp.zeros((1,), jnp.float32))
    return {
        "copy_bytes": copy_bytes,
        "copy_ms": copy_ms,
        "copy_tbps": copy_bytes / (copy_ms * 1e-3) / 1e12,
        "matmul_n": n,
        "matmul_ms": matmul_ms,
        "matmul_tflops": 2 * n**3 / (matmul_ms * 1e-3) / 1e12,
        "jax_loop_step_ms": loop_step_ms,
    }


# --------------------------------------------------------------------------- paths


@dataclass(frozen=True)
class PathRun:
    """One path at one shape: per-call times and the last output, or why not; and
    facts for its results entry."""

    times: list[float] | None
    out: np.ndarray | jax.Array | None
    skipped: str | None = None
    facts: dict = field(default_factory=dict)


def path_splits(path: str, batch: int, heads: int, seq_len: int, sm_count: int) -> int | None:
    """The KV split count ``path`` runs at this shape (None: the dense path has none)."""
    policy = SPLIT_POLICY[path]
    if policy is None:
        return None
    return int(
        kv_splits(policy, batch=batch, num_heads=heads, max_seq_len=seq_len, sm_count=sm_count)
    )


def kernels_per_call(decode: Callable, inputs: tuple, buf: Any) -> int:
    """Triton kernels one ``decode(*inputs, buf)`` launches: the custom calls of one
    call lowered for CUDA (stage 1 and stage 2, or stage 1 alone where it writes the
    output), counted rather than derived from the split rule, so the check follows
    whatever the library launches."""
    lowered = jax.jit(decode).trace(*inputs, buf).lower(lowering_platforms=("cuda",))
    return stablehlo_custom_calls(lowered.as_text()).total


def run_jax_path(settings: Settings, path: str, inputs: tuple, calls: int) -> PathRun:
    """A JAX path timed as ``timed_chain``'s compiled chain, after checking that the
    chain keeps every call's Triton custom calls (``kernels_per_call``) on the Triton
    paths; a dry run only
    lowers the Triton paths for CUDA and checks the lowered chain."""
    q, _, _, seq_lens = inputs
    seq_len = int(seq_lens.max())
    # "triton-occupancy", "triton-fp8", "triton-fp8-mma": the triton backend too.
    triton = path.partition("-")[0] == "triton"
    k_scale = None
    if path in FP8_PATHS:
        kv8, k_scale = quantize_fp8(inputs[1])
        inputs = (inputs[0], kv8, *inputs[2:])
    lower_only = settings.dry_run and triton
    policy = SPLIT_POLICY[path]
    if policy is None:  # the dense path: no splits, no buffer

        def decode(q, kv, bt, sl, buf):
            return *dense_decode(q, kv, bt, sl, scale=SCALE), buf

        buf = None
    else:

        def decode(q, kv, bt, sl, buf):
            return mla_decode(
                q,
                kv,
                bt,
                sl,
                buf,
                scale=SCALE,
                max_seq_len=seq_len,
                k_scale=k_scale,
                backend="triton" if triton else "xla",
                compute_capability=90 if lower_only else None,
                fp8_mma=path == "triton-fp8-mma",
            )

        buf = reserve_logits_buffer(
            q.shape[0], q.shape[1], seq_len, sm_count=settings.sm_count, policy=policy
        )
    chain = timed_chain(decode, calls, perturb_table=not triton, keep_outs=not triton)
    per_call = kernels_per_call(decode, inputs, buf) if triton else 0
    if lower_only:
        lowered = stablehlo_custom_calls(
            chain.trace(*inputs, buf).lower(lowering_platforms=("cuda",)).as_text()
        )
        where = "in the module lowered for CUDA"
        check_chain_calls(path, lowered.total, calls, per_call, where)
        check_chain_calls(
            path,
            lowered.reaching_return,
            calls,
            per_call,
            "whose results reach the outputs of the module lowered for CUDA",
        )
        return PathRun(
            None,
            None,
            "dry run: lowered for CUDA, not run",
            {"triton_kernel_calls": lowered.reaching_return},
        )
    compiled = chain.lower(*inputs, buf).compile()
    found = compiled_custom_calls(compiled.as_text() or "")
    if triton:
        check_chain_calls(path, found, calls, per_call, "in the compiled executable")
    # The checked executable itself is timed (donation as the jit declares it).
    step = lambda state: compiled(*inputs, state[2])
    times, state = time_loop(
        step,
        (None, None, buf),
        calls=calls,
        repeats=settings.repeats,
        runs=settings.runs_per_repeat,
    )
    if not settings.kernel_time:
        return PathRun(times, state[0][-1], None, {"triton_kernel_calls": found})
    runs = settings.runs_per_repeat
    traced, (outs, _, _) = trace_kernels(lambda: run_steps(step, state, runs))
    return PathRun(
        times,
        outs[-1],
        None,
        {"triton_kernel_calls": found, **kernel_facts(traced, calls * runs)},
    )


def run_vllm_path(settings: Settings, module: Any, inputs: tuple, calls: int) -> PathRun:
    """vLLM's kernel on the same arrays, shared via DLPack, with vLLM's split rule."""
    import torch

    from mla_jax.interop import to_torch

    q, kv_cache, block_table, seq_lens = (to_torch(x) for x in inputs)
    batch, heads = inputs[0].shape[:2]
    splits = path_splits("vllm", batch, heads, int(inputs[3].max()), settings.sm_count)
    ones = torch.ones((), dtype=torch.float32, device=q.device)  # k/v scales, made once

    def fn():
        return vllm_kernel.vllm_decode(
            module,
            q,
            kv_cache,
            block_table,
            seq_lens,
            scale=SCALE,
            num_kv_splits=splits,
            kv_lora_rank=KV_LORA_RANK,
            k_scale=ones,
            v_scale=ones,
        )

    if settings.dry_run:
        times, out = time_wall(fn, calls=calls, repeats=settings.repeats)
        return PathRun(times, out.float().cpu().numpy())
    times, out, traced = time_cuda_graph(
        fn, calls=calls, repeats=settings.repeats, trace=settings.kernel_time
    )
    facts = {} if traced is None else kernel_facts(traced, calls)
    return PathRun(times, out.float().cpu().numpy(), None, facts)


def vllm_module(settings: Settings) -> tuple[Any, str | None]:
    """``(module, None)`` or ``(None, why not)``: vLLM's kernel, or in a dry run the
    torch stand-in (vLLM's file is still loaded when found: that needs no GPU)."""
    if "vllm" not in settings.paths:
        return None, None
    try:
        import torch

        found = vllm_kernel.load()
    except Exception as e:  # no torch, or a vLLM file this cannot patch
        return None, f"vLLM's kernel did not load: {type(e).__name__}: {e}"
    if settings.dry_run:
        return vllm_kernel.torch_reference_module(), None
    if found is None:
        return None, (
            f"vLLM's kernel file not found: set {vllm_kernel.ENV_VAR} to a copy of "
            "vllm/v1/attention/ops/triton_decode_attention.py"
        )
    if not torch.cuda.is_available():
        return None, "torch sees no CUDA device"
    return found, None


# --------------------------------------------------------------------------- sweep


def machine_info(sm_count: int) -> dict:
    device = jax.devices()[0]
    info = {
        "device": device.device_kind,
        "platform": device.platform,
        "sm_count": sm_count,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    # jaxlib too: XLA, and the custom calls the Triton kernels launch through.
    for dist in ("jax", "jaxlib", "jax-triton", "triton", "torch"):
        try:
            info[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            info[dist] = None
    return info


def skip_reason(
    settings: Settings,
    path: str,
    shape: tuple[int, int, int],
    elapsed_s: float,
    vllm_missing: str | None,
) -> str | None:
    """Why ``path`` is not measured at ``shape``, or None."""
    if elapsed_s > settings.time_budget_s:
        return f"time budget ({settings.time_budget_s:.0f} s) spent"
    if path == "vllm" and vllm_missing:
        return vllm_missing
    if path in ("xla", "dense") and xla_temp_bytes(*shape) > settings.bytes_budget:
        return (
            f"needs ~{xla_temp_bytes(*shape) / 2**30:.1f} GiB of temporaries, over the "
            f"{settings.bytes_budget / 2**30:.1f} GiB budget"
        )
    return None


class _PlainProgress:
    """tqdm's part the sweep uses, as lines on stderr, for when tqdm is missing."""

    def __init__(self, items: list):
        self.items = items

    def __iter__(self):
        for i, item in enumerate(self.items):
            print(f"[{i + 1}/{len(self.items)}] B, H, L = {item}", file=sys.stderr)
            yield item

    def set_postfix_str(self, text: str) -> None:
        print(f"  {text}", file=sys.stderr)


def _progress(items: list):
    try:
        from tqdm import tqdm
    except ImportError:
        return _PlainProgress(items)
    # mininterval: a log, not a terminal, is the usual reader on the GPU machine.
    return tqdm(items, desc="bench", unit="shape", file=sys.stderr, mininterval=5.0)


def add_metrics(record: dict, outs: dict[str, np.ndarray]) -> None:
    """Rates, % of floor and speed-up over vLLM per timed path of a shape record, and
    each path's largest difference from the dense JAX output."""
    vllm = record["paths"].get("vllm", {})
    vllm_ms, vllm_device_ms = vllm.get("ms"), vllm.get("device_ms")
    ref = outs.get("dense")
    for path, entry in record["paths"].items():
        if "ms" in entry:
            entry.update(
                bench_report.path_metrics(
                    entry["ms"],
                    bytes_=record["kv_bytes"],
                    flops=record["flops"],
                    floor=record["floor_ms"],
                    vllm_ms=vllm_ms,
                )
            )
            entry["max_abs_err"] = None if ref is None else float(np.max(np.abs(outs[path] - ref)))
        if "device_ms" in entry:
            entry.update(
                bench_report.device_metrics(
                    entry["device_ms"],
                    floor=record["floor_ms"],
                    vllm_ms=vllm_device_ms,
                )
            )


def measure_shape(
    settings: Settings,
    shape: tuple[int, int, int],
    *,
    ceilings: dict,
    paths: Sequence[str],
    vllm: tuple,
    start: float,
    progress,
) -> dict:
    """The record of one shape: its floor, and per path times or why it was skipped.

    ``vllm`` is ``vllm_module``'s pair; ``start`` the sweep's start (the time budget).
    """
    batch, heads, seq_len = shape
    nbytes = bench_report.kv_bytes(batch, seq_len)
    flops = bench_report.attention_flops(batch, heads, seq_len)
    floor = bench_report.floor_ms(
        nbytes, flops, copy_tbps=ceilings["copy_tbps"], matmul_tflops=ceilings["matmul_tflops"]
    )
    calls = settings.calls or calls_for(floor)
    # Shape-level: vLLM's split count (the baseline's); each path records its own.
    record: dict[str, Any] = {
        "B": batch,
        "H": heads,
        "L": seq_len,
        "num_kv_splits": num_kv_splits(seq_len, settings.sm_count),
        "kv_bytes": nbytes,
        "flops": flops,
        "floor_ms": floor,
        "paths": {},
    }
    inputs, outs = None, {}
    for path in paths:
        progress.set_postfix_str(f"B={batch} H={heads} L={seq_len} {path}")
        splits = path_splits(path, batch, heads, seq_len, settings.sm_count)
        entry = {} if splits is None else {"num_kv_splits": splits}
        run = PathRun(
            None, None, skip_reason(settings, path, shape, time.perf_counter() - start, vllm[1])
        )
        if run.skipped is None:
            try:  # one failing path (an OOM, a compile error) must not end the sweep
                inputs = inputs or jax.block_until_ready(
                    make_inputs(
                        jax.random.key(0, impl="rbg"), batch, heads, seq_len, settings.page_size
                    )
                )
                run = (
                    run_vllm_path(settings, vllm[0], inputs, calls)
                    if path == "vllm"
                    else run_jax_path(settings, path, inputs, calls)
                )
            except ChainCheckError:
                raise  # a chain that skips work would make every time of the sweep wrong
            except Exception as e:
                run = PathRun(None, None, f"error: {type(e).__name__}: {e}"[:400])
        if run.skipped is not None:
            record["paths"][path] = {"skipped": run.skipped, **entry, **run.facts}
            continue
        outs[path] = np.asarray(run.out, np.float32)
        times = run.times or []
        record["paths"][path] = {
            "ms": float(np.median(times)),
            "times_ms": times,
            "calls": calls,
            **entry,
            **run.facts,
        }
    add_metrics(record, outs)
    return record


def run_sweep(
    shapes: list[tuple[int, int, int]],
    settings: Settings,
    checkpoint: Callable[[dict], object] | None = None,
) -> dict:
    """Measures the ceilings, then every path at every shape: the results dict.

    ``checkpoint`` gets the results so far after each shape, so a run cut short by a
    time limit still leaves them behind.
    """
    start = time.perf_counter()
    paths = [p for p in PATH_LABELS if p in settings.paths]
    calls_rule = (
        f"K={settings.calls} calls"
        if settings.calls
        else f"K calls (~{TARGET_RUN_MS:g} ms a run, K in {MIN_CALLS}..{MAX_CALLS})"
    )
    results: dict[str, Any] = {
        "what": (
            "wall time per call of one MLA decode step, median of repeats; JAX: "
            f"{settings.runs_per_repeat} runs of K chained calls unrolled in one jit, "
            "every call's outputs kept, dispatched back to back, one sync / "
            f"({settings.runs_per_repeat} K); vLLM: a CUDA graph of K calls replayed "
            "between CUDA events / K"
            + (
                "; and kernel time per call (device_ms): the union of the kernels' "
                "intervals in a jax.profiler trace of one more run, / its calls."
                if settings.kernel_time
                else "."
            )
        ),
        "machine": machine_info(settings.sm_count),
        "config": {
            "dry_run": settings.dry_run,
            "repeats": settings.repeats,
            "calls_rule": calls_rule,
            "page_size": settings.page_size,
            "kv_lora_rank": KV_LORA_RANK,
            "rope_dim": ROPE_DIM,
            "dtype": "bfloat16",
            "scale": SCALE,
            "time_budget_s": settings.time_budget_s,
            "bytes_budget": settings.bytes_budget,
            "kernel_time": settings.kernel_time,
            "vllm_kernel": os.environ.get(vllm_kernel.ENV_VAR),
        },
        "paths": {p: PATH_LABELS[p] for p in paths},
        "ceilings": measure_ceilings(
            dry_run=settings.dry_run, repeats=settings.repeats, runs=settings.runs_per_repeat
        ),
        "shapes": [],
    }
    vllm = vllm_module(settings)
    progress = _progress(shapes)
    for shape in progress:
        results["shapes"].append(
            measure_shape(
                settings,
                shape,
                ceilings=results["ceilings"],
                paths=paths,
                vllm=vllm,
                start=start,
                progress=progress,
            )
        )
        results["elapsed_s"] = time.perf_counter() - start
        if checkpoint:
            checkpoint(results)
    results["elapsed_s"] = time.perf_counter() - start
    return results


# ----------------------------------------------------------------------------- CLI


def _paths(text: str) -> tuple[str, ...]:
    paths = tuple(p for p in text.split(",") if p)
    unknown = [p for p in paths if p not in PATH_LABELS]
    if unknown or not paths:
        raise argparse.ArgumentTypeError(
            f"got {text!r}, needed paths separated by commas, of {','.join(PATH_LABELS)}"
        )
    return paths


def _parser() -> Parser:
    p = Parser("bench", description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("--batch", type=positive_ints, help=f"batch sizes (default {BATCHES})")
    p.add_argument("--heads", type=positive_ints, help=f"query heads (default {HEADS})")
    p.add_argument(
        "--lens",
        type=positive_ints,
        help=f"sequence lengths (default {LENS}; "
        f"those > {LONG_LEN} only for B <= {LONG_MAX_BATCH})",
    )
    p.add_argument(
        "--paths",
        type=_paths,
        default=DEFAULT_PATHS,
        help=f"paths to time, of {','.join(PATH_LABELS)} (default {','.join(DEFAULT_PATHS)})",
    )
    p.add_argument(
        "--out",
        type=Path,
        help=f"folder for results.json and the plots (default {DEFAULT_OUT}; with "
        f"--dry-run, {DRY_RUN_OUT}, so a dry run never touches the committed "
        "results). A results.json measured on a GPU there is replaced only by "
        "results measured on a GPU",
    )
    p.add_argument(
        "--markdown", type=Path, help=f"the markdown page (default <out>.md: {DEFAULT_OUT}.md)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"B {QUICK['batches']}, H {QUICK['heads']}, L {QUICK['lens']}, "
        f"{QUICK['repeats']} repeats",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="CPU, tiny shapes: every code path but the GPU timing calls; writes "
        f"into {DRY_RUN_OUT} unless --out is given",
    )
    p.add_argument("--repeats", type=positive_int, help="timed runs per path (default 5)")
    p.add_argument(
        "--kernel-time",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="trace each path once more for its kernel time per call (default on; "
        "never in a dry run)",
    )
    p.add_argument("--calls", type=positive_int, help="K calls per timed run (default: per shape)")
    p.add_argument("--page-size", type=positive_int, help="cache page size (default 64)")
    p.add_argument(
        "--sm-count",
        type=positive_int,
        help=f"for the split rule (default: the GPU's, else {DEFAULT_SM_COUNT})",
    )
    p.add_argument(
        "--time-budget",
        type=positive_float,
        default=420.0,
        help="seconds; paths after it are recorded as skipped (default 420)",
    )
    p.add_argument(
        "--bytes-budget-gib",
        type=positive_float,
        help="skip the XLA paths where their temporaries would exceed this "
        "(default: a quarter of the GPU's memory, else 16)",
    )
    p.add_argument(
        "--report-only",
        nargs="+",
        metavar="RESULTS_JSON[:PATHS]",
        help="measure nothing: copy a results.json (or merge those of a sweep "
        "run in parts, shape by shape, or path by path where parts timed disjoint "
        "paths) into --out and render its plots and markdown page; ':xla,dense' after "
        "a file takes only those paths from it",
    )
    return p


def _device_defaults(args: argparse.Namespace) -> tuple[int, int]:
    """(sm_count, bytes budget) from the arguments, else from the first device."""
    device = jax.devices()[0]
    gpu = device.platform == "gpu"
    sm_count = args.sm_count or gpu_sm_count()
    if args.bytes_budget_gib is not None:
        return sm_count, int(args.bytes_budget_gib * 2**30)
    limit = (device.memory_stats() or {}).get("bytes_limit") if gpu else None
    return sm_count, int(limit // 4 if limit else 16 * 2**30)


def replace_refusal(out_dir: Path, platform: str | None, *, dry_run: bool = False) -> str | None:
    """Why new results (from ``platform``, or a dry run) must not replace
    ``out_dir``'s results.json: it was measured on a GPU and they were not. Else None."""
    path = out_dir / "results.json"
    if (platform == "gpu" and not dry_run) or not path.is_file():
        return None
    try:
        old = json.loads(path.read_text())
        machine, measured = old.get("machine") or {}, not (old.get("config") or {}).get("dry_run")
    except (OSError, ValueError, AttributeError):
        return None  # not a results file this command wrote: nothing measured to keep
    if machine.get("platform") != "gpu" or not measured:
        return None
    new = "a dry run's results" if dry_run else f"results from platform {platform!r}"
    return (
        f"{path} holds results measured on a GPU ({machine.get('device', '?')}, "
        f"{machine.get('date', '?')}); {new} would replace them. Choose another folder "
        f"with --out (a dry run writes to {DRY_RUN_OUT} by default)."
    )


def write_json(results: dict, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    return path


def write_outputs(results: dict, out_dir: Path, markdown: Path | None) -> Path:
    """Plots and ``results.json`` into ``out_dir``, then the markdown page (default
    ``<out_dir>.md``); returns the page's path."""
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    results["plots"] = bench_report.write_plots(results, out_dir)
    write_json(results, out_dir)
    page = (markdown or out_dir.with_name(out_dir.name + ".md")).resolve()
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(
        bench_report.render_markdown(results, image_dir=os.path.relpath(out_dir, page.parent))
    )
    return page


# A results.json's fields that --report-only reads, and their JSON types.
RESULTS_FIELDS = {
    "what": str,
    "machine": dict,
    "config": dict,
    "paths": dict,
    "ceilings": dict,
    "shapes": list,
}


def _read_part(arg: str) -> dict:
    """A ``--report-only`` argument's results: ``RESULTS_JSON``, or ``RESULTS_JSON:PATHS``
    for only the comma-separated paths of it."""
    path, keep = Path(arg), None
    if not path.is_file() and ":" in arg:
        name, _, paths = arg.rpartition(":")
        path, keep = Path(name), [p for p in paths.split(",") if p]
    if not path.is_file():
        raise FileNotFoundError(f"--report-only: got {arg!r}, but there is no file {str(path)!r}")
    try:
        results = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"--report-only: {str(path)!r} is not JSON ({e})") from None
    if not isinstance(results, dict) or not all(
        isinstance(results.get(k), kind) for k, kind in RESULTS_FIELDS.items()
    ):
        raise ValueError(
            f"--report-only: {str(path)!r} is not a results.json this command wrote "
            f"(needed a JSON object with {', '.join(RESULTS_FIELDS)})"
        )
    try:
        return results if keep is None else bench_report.select_paths(results, keep)
    except ValueError as e:
        raise ValueError(f"--report-only: {arg!r}: {e}") from None


def unwritable(out_dir: Path, markdown: Path | None) -> str | None:
    """Why the outputs cannot be written (``--out`` or ``--markdown`` under a file or a
    folder this user cannot write), or None; checked before a sweep, not after it."""
    page = (markdown or out_dir.with_name(out_dir.name + ".md")).resolve()
    for flag, folder in (("--out", out_dir), ("--markdown", page.parent)):
        if reason := unwritable_folder(flag, folder):
            return reason
    if page.is_dir():
        return f"--markdown: {str(page)!r} is a folder, needed a file path"
    return None


def _write_outputs(results: dict, args: argparse.Namespace) -> Path | None:
    """``write_outputs``, or None after a one-line error where the writing failed (a
    path the check before the run could not foresee, e.g. root in a read-only place)."""
    try:
        return write_outputs(results, args.out, args.markdown)
    except OSError as e:
        fail("bench", f"--out: cannot write the outputs to {str(args.out)!r}: {e}")
        return None


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    args.out = args.out or (DRY_RUN_OUT if args.dry_run and not args.report_only else DEFAULT_OUT)
    problem = unwritable(args.out, args.markdown)
    if problem:
        return fail("bench", problem)
    if args.report_only:
        try:
            results = bench_report.merge_results([_read_part(arg) for arg in args.report_only])
        except (OSError, ValueError) as e:
            return fail("bench", str(e))
        refusal = replace_refusal(
            args.out,
            results.get("machine", {}).get("platform"),
            dry_run=bool(results.get("config", {}).get("dry_run")),
        )
        if refusal:
            return fail("bench", refusal)
        page = _write_outputs(results, args)
        if page is None:
            return 2
        print(bench_report.summary_table(results))
        print(f"wrote {args.out / 'results.json'}, {len(results['plots'])} plots and {page}")
        return 0
    # Else JAX takes 75% of the GPU when its backend starts, leaving torch (vLLM) little.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if not args.dry_run and jax.default_backend() != "gpu":
        return fail("bench", f"no GPU visible to JAX ({jax.devices()}); use --dry-run on a CPU")
    refusal = replace_refusal(args.out, jax.devices()[0].platform, dry_run=args.dry_run)
    if refusal:
        return fail("bench", refusal)
    preset: dict[str, Any] = DRY if args.dry_run else QUICK if args.quick else {}
    shapes = sweep_shapes(
        args.batch or preset.get("batches", BATCHES),
        args.heads or preset.get("heads", HEADS),
        args.lens or preset.get("lens", LENS),
    )
    sm_count, bytes_budget = _device_defaults(args)
    settings = Settings(
        dry_run=args.dry_run,
        repeats=args.repeats or preset.get("repeats", 5),
        calls=args.calls or preset.get("calls"),
        page_size=args.page_size or preset.get("page_size", 64),
        sm_count=sm_count,
        paths=args.paths,
        time_budget_s=args.time_budget,
        bytes_budget=bytes_budget,
        runs_per_repeat=1 if args.dry_run else RUNS_PER_REPEAT,
        kernel_time=args.kernel_time and not args.dry_run,
    )
    results = run_sweep(shapes, settings, checkpoint=lambda r: write_json(r, args.out))
    page = _write_outputs(results, args)
    if page is None:
        return 2
    print(bench_report.summary_table(results))
    print(
        f"wrote {args.out / 'results.json'}, {len(results['plots'])} plots and {page} "
        f"in {results['elapsed_s']:.0f} s"
    )
    return 0
