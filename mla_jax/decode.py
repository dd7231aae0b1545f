"""``mla_decode``: one MLA decode step over a paged latent cache.

The step takes the logits buffer reserved by ``reserve_logits_buffer``, donates it,
lets stage 1 write its partials into it in place and returns it: thread the
returned buffer into the next step (the one passed in is deleted, and using it
again raises JAX's deleted-array error). Inside your own ``jit``/``scan`` the
buffer is a carry and XLA updates it in place.
"""

from __future__ import annotations

import functools
from typing import Literal

import jax
import jax.numpy as jnp

from mla_jax import xla_backend
from mla_jax.buffers import LOGITS_DTYPE, gpu_sm_count
from mla_jax.checks import check_block_table, check_row_vector, shape_error
from mla_jax.splits import DEFAULT_POLICY, Policy, kv_splits, max_kv_splits
from mla_jax.validate import validate_inputs

Backend = Literal["auto", "triton", "xla"]
QUERY_DTYPES = (jnp.bfloat16, jnp.float16, jnp.float32)
FP8_KV_DTYPE = jnp.float8_e4m3fn  # vLLM's fp8 KV cache format on NVIDIA GPUs


def _check_inputs(q_nope, q_pe, kv_cache, block_table, seq_lens, logits_buffer):
    """Trace-time checks; returns ``(kv_lora_rank, rope_dim)``."""
    if logits_buffer.ndim != 4 or logits_buffer.dtype != LOGITS_DTYPE:
        raise shape_error(
            "logits_buffer", f"{logits_buffer.dtype}{list(logits_buffer.shape)}",
            "float32 [max_num_seqs, num_heads, max_splits, kv_lora_rank + 1] "
            "from mla_jax.reserve_logits_buffer")
    rows, buf_heads, _, lora1 = logits_buffer.shape
    kv_lora_rank = lora1 - 1
    if kv_cache.ndim != 3:
        raise shape_error("kv_cache", list(kv_cache.shape),
                           "[num_pages, page_size, kv_lora_rank + rope_dim]")
    rope_dim = kv_cache.shape[2] - kv_lora_rank
    if rope_dim < 1:
        raise shape_error(
            "kv_cache", list(kv_cache.shape),
            f"last dim kv_lora_rank + rope_dim > {kv_lora_rank} (the buffer was "
            f"reserved for kv_lora_rank={kv_lora_rank})")
    if q_nope.ndim != 3:
        raise shape_error("q", list(q_nope.shape), "[B, H, kv_lora_rank + rope_dim]")
    batch, heads = q_nope.shape[:2]
    if q_pe is None:
        if q_nope.shape[2] != kv_lora_rank + rope_dim:
            raise shape_error(
                "q", list(q_nope.shape),
                f"[B, H, {kv_lora_rank + rope_dim}] to match kv_cache {list(kv_cache.shape)}")
    else:
        if q_nope.shape[2] != kv_lora_rank:
            raise shape_error("q_nope", list(q_nope.shape), f"[B, H, {kv_lora_rank}]")
        if q_pe.shape != (batch, heads, rope_dim):
            raise shape_error("q_pe", list(q_pe.shape), f"{[batch, heads, rope_dim]} "
                               f"(q_nope is {list(q_nope.shape)})")
        if q_pe.dtype != q_nope.dtype:
            raise shape_error("q_pe dtype", q_pe.dtype, f"q_nope's {q_nope.dtype}")
    if q_nope.dtype not in QUERY_DTYPES:
        raise shape_error("q dtype", q_nope.dtype, "bfloat16, float16 or float32")
    if kv_cache.dtype not in (q_nope.dtype, FP8_KV_DTYPE):
        raise shape_error("kv_cache dtype", kv_cache.dtype,
                           f"q's dtype {q_nope.dtype} or float8_e4m3fn (with k_scale)")
    check_block_table(block_table, batch)
    check_row_vector("seq_lens", seq_lens, batch)
    if batch > rows:
        raise ValueError(f"q: batch {batch} exceeds the logits buffer's {rows} rows "
                         f"(buffer {list(logits_buffer.shape)}); reserve with "
                         f"max_num_seqs >= {batch}")
    if heads != buf_heads:
        raise ValueError(f"q: {heads} heads, but the logits buffer "
                         f"{list(logits_buffer.shape)} was reserved for {buf_heads}")
    return kv_lora_rank, rope_dim


def split_max_seq_len(max_seq_len: int | jax.Array | None) -> tuple[int | None, jax.Array | None]:
    """``(static, dynamic)``: a Python int is static (the split count is fixed at trace
    time); an array (traced or not) is an int32 scalar read at run time; ``None``
    is neither (taken from ``seq_lens`` inside the step)."""
    if isinstance(max_seq_len, int):
        return max_seq_len, None
    return None, None if max_seq_len is None else jnp.asarray(max_seq_len, jnp.int32)


def resolve_backend(backend: Backend, compute_capability: int | None) -> str:
    """``"auto"``: the Triton kernels on a CUDA GPU (or when lowering for one), else XLA."""
    if backend not in ("auto", "triton", "xla"):
        raise ValueError(f"backend must be 'auto', 'triton' or 'xla', got {backend!r}")
    if backend != "auto":
        return backend
    return "triton" if compute_capability is not None or jax.default_backend() == "gpu" else "xla"


def _platform(x: jax.Array) -> str:
    """The platform ``x`` lives on; under a trace, the default backend's."""
    if isinstance(x, jax.core.Tracer):
        return jax.default_backend()
    return next(iter(x.devices())).platform


@functools.partial(
    jax.jit,
    static_argnames=("scale", "static_max_seq_len", "sm_count", "policy", "batch_invariant",
                     "backend", "compute_capability"),
    donate_argnames=("logits_buffer",),
)
def _decode_step(q_nope, q_pe, kv_cache, block_table, seq_lens, logits_buffer,
                 dynamic_max_seq_len, k_scale, *, scale, static_max_seq_len, sm_count, policy,
                 batch_invariant, backend, compute_capability):
    kv_lora_rank, rope_dim = _check_inputs(
        q_nope, q_pe, kv_cache, block_table, seq_lens, logits_buffer)
    if kv_cache.dtype == FP8_KV_DTYPE and k_scale is None:
        raise ValueError("kv_cache is float8_e4m3fn: pass k_scale, the float32 scale it was "
                         "quantised with (mla_jax.cache.quantize_fp8 returns it)")
    kv_scale = jnp.ones((1,), jnp.float32) if k_scale is None else jnp.asarray(
        k_scale, jnp.float32).reshape(1)
    buffer_splits = logits_buffer.shape[2]
    splits = functools.partial(kv_splits, policy, batch=q_nope.shape[0],
                               num_heads=q_nope.shape[1], sm_count=sm_count)
    if batch_invariant:
        # One split: each row is one program's one pass over its tokens, whatever
        # the batch, so its rounding never depends on its batch mates.
        grid_splits = 1
        num_splits = jnp.ones((1,), jnp.int32)
    elif static_max_seq_len is not None:
        grid_splits = splits(max_seq_len=static_max_seq_len)
        if grid_splits > buffer_splits:
            raise ValueError(
                f"max_seq_len={static_max_seq_len} needs {grid_splits} KV splits but the "
                f"logits buffer {list(logits_buffer.shape)} holds {buffer_splits}; reserve "
                f"it with max_model_len >= {static_max_seq_len} (and the same sm_count "
                f"and policy={policy!r})")
        num_splits = jnp.full((1,), grid_splits, jnp.int32)
    else:
        # Run-time count; a length past the reservation's reach is clamped to the
        # grid, which still partitions the row exactly. The grid is the most splits
        # this batch can ask for, not the buffer's axis (sized for batch 1).
        length = (jnp.max(seq_lens, initial=0) if dynamic_max_seq_len is None
                  else dynamic_max_seq_len)
        grid_splits = min(buffer_splits, max_kv_splits(
            policy, batch=q_nope.shape[0], num_heads=q_nope.shape[1], sm_count=sm_count))
        num_splits = jnp.minimum(splits(max_seq_len=length), grid_splits).reshape(1)

    if backend == "triton":
        from mla_jax import triton_backend  # jax_triton needs a GPU-capable jaxlib

        q_pe_arg, qp_offset = (q_nope, kv_lora_rank) if q_pe is None else (q_pe, 0)
        return triton_backend.decode(
            q_nope, q_pe_arg, qp_offset, kv_cache, block_table, seq_lens, num_splits,
            grid_splits, kv_scale, logits_buffer, scale=scale, kv_lora_rank=kv_lora_rank,
            rope_dim=rope_dim, compute_capability=compute_capability)
    q = q_nope if q_pe is None else jnp.concatenate([q_nope, q_pe], axis=-1)
    return xla_backend.decode(
        q, kv_cache, block_table, seq_lens, num_splits, grid_splits, kv_scale, logits_buffer,
        scale=scale, kv_lora_rank=kv_lora_rank,
        static_splits=batch_invariant or static_max_seq_len is not None)


def mla_decode(
    q: jax.Array | tuple[jax.Array, jax.Array],
    kv_cache: jax.Array,
    block_table: jax.Array,
    seq_lens: jax.Array,
    logits_buffer: jax.Array,
    *,
    scale: float,
    max_seq_len: int | jax.Array | None = None,
    sm_count: int | None = None,
    policy: Policy = DEFAULT_POLICY,
    batch_invariant: bool = False,
    k_scale: float | jax.Array | None = None,
    backend: Backend = "auto",
    compute_capability: int | None = None,
    validate: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One MLA decode step; the logits buffer is donated and returned.

    Args:
      q: absorbed query ``[B, H, kv_lora_rank + rope_dim]``, or the pair
        ``(q_nope [B, H, kv_lora_rank], q_pe [B, H, rope_dim])`` (no concatenation
        on the Triton path).
      kv_cache: paged latent cache ``[num_pages, page_size, kv_lora_rank + rope_dim]``
        in q's dtype, or ``float8_e4m3fn`` with ``k_scale``; each row is ``kv_c``
        followed by the rope key ``k_pe``.
      block_table: int32 ``[B, pages_per_seq]``, page indices into ``kv_cache``.
      seq_lens: int32 ``[B]``; a row of length 0 gives ``out = 0``, ``lse = -inf``.
      logits_buffer: float32 ``[rows >= B, H, splits, kv_lora_rank + 1]`` from
        ``reserve_logits_buffer``; donated.
      scale: softmax scale (a Python float; a new value compiles a new kernel).
      max_seq_len: the longest entry of ``seq_lens``, as vLLM passes it. A Python int
        fixes the split count at trace time (one compilation per split count); an
        int32 scalar array (traced is fine) or ``None`` (taken from ``seq_lens``)
        computes it at run time, so one executable serves every length.
      sm_count: the multiprocessor count the split rule caps at; ``None`` reads the
        GPU's. Use the value the buffer was reserved with.
      policy: the split rule (``mla_jax.splits.kv_splits``): ``"occupancy"``
        (``splits.DEFAULT_POLICY``, batch-aware) or ``"vllm"`` (vLLM's counts, for
        split-for-split comparisons with its kernel). Use the policy the buffer was reserved with.
      batch_invariant: vLLM's ``VLLM_BATCH_INVARIANT``: one split (``policy`` and
        ``max_seq_len`` then only matter for the reservation), so a row's output is
        bitwise the same whatever its batch mates, batch size or position. Holds for
        the triton backend and for the xla backend on the CPU; the xla backend on a
        GPU raises ValueError (XLA:GPU's dots are not batch-invariant).
      k_scale: the cache's float32 dequantisation scale (a Python float or a scalar
        array), used for the key and the value roles alike, as vLLM does; required
        for an fp8 cache (``mla_jax.cache.quantize_fp8``), 1 by default otherwise.
      backend: ``"triton"`` (jax-triton kernels, CUDA), ``"xla"`` (portable jnp) or
        ``"auto"`` (triton on a GPU, xla elsewhere).
      compute_capability: lower the Triton kernels for this CUDA capability (e.g. 90)
        without asking a GPU, as in ``jax.export(..., platforms=["cuda"])`` on a CPU.
      validate: check ``block_table`` and ``seq_lens`` first
        (``mla_jax.validate.validate_inputs``): on concrete arrays a host check that
        raises ValueError, naming the row and value, before any kernel runs or the
        buffer is donated; under a trace, checkify checks (wrap the enclosing
        function in ``checkify.checkify``). Off by default; costs ~0.2 ms on CPU at
        B=128 x 256 pages.

    Returns:
      ``out [B, H, kv_lora_rank]`` in q's dtype, ``lse`` float32 ``[B, H]``, and the
      logits buffer to pass to the next step.
    """
    q_nope, q_pe = q if isinstance(q, (tuple, list)) else (q, None)
    if validate:
        validate_inputs(kv_cache, block_table, seq_lens)
    if sm_count is None:
        sm_count = gpu_sm_count()
    static, dynamic = split_max_seq_len(max_seq_len)
    backend = resolve_backend(backend, compute_capability)
    if batch_invariant and backend == "xla" and _platform(q_nope) == "gpu":
        # Measured on the H200 (docs/gpu/2026-11-29-run11-x2-pytest-fixed.log): rows differ.
        raise ValueError(
            "batch_invariant=True with backend='xla' on a GPU: XLA:GPU chooses its dot "
            "algorithms by shape, so rows are not bitwise independent of the batch there; "
            "use backend='triton' (or 'auto') on a GPU, or run the xla backend on the CPU")
    return _decode_step(
        q_nope, q_pe, kv_cache, block_table, seq_lens, logits_buffer, dynamic, k_scale,
        scale=float(scale), static_max_seq_len=static, sm_count=sm_count, policy=policy,
        batch_invariant=bool(batch_invariant), backend=backend,
        compute_capability=compute_capability)

