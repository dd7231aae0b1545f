"""``mla_decode``: one MLA decode step over a paged latent cache.

The step takes the ``LogitsBuffer`` reserved by ``reserve_logits_buffer``, donates
it, lets stage 1 write its partials into it in place and returns it: thread the
returned buffer into the next step (the one passed in is deleted, and using it
again raises a ValueError saying so). Inside your own ``jit``/``scan`` the
buffer is a carry and XLA updates it in place. The split rule and SM count come
from the buffer, so the step always plans its splits as the reservation did.

Out-of-range indices never make a kernel read outside its arrays (see
``mla_decode``'s ``seq_lens`` and ``block_table``); ``validate=True`` turns them
into errors instead.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import Literal

import jax
import jax.numpy as jnp

from mla_jax import _xla_backend as xla_backend
from mla_jax._checks import (
    check_array,
    check_block_table,
    check_compute_capability,
    check_row_vector,
    from_torch,
    narrow_int32,
    shape_error,
)
from mla_jax.buffers import LOGITS_DTYPE, LogitsBuffer
from mla_jax.cache import FP8_DTYPE
from mla_jax.splits import kv_splits, max_kv_splits
from mla_jax.validate import validate_inputs

Backend = Literal["auto", "triton", "xla"]

QUERY_DTYPES = (jnp.bfloat16, jnp.float16, jnp.float32)


def _describe(x) -> str:
    return f"{x.dtype}{list(x.shape)}"


def check_buffer(logits_buffer) -> None:
    """``logits_buffer`` must be a ``LogitsBuffer`` whose array matches its settings."""
    if not isinstance(logits_buffer, LogitsBuffer):
        got = (
            _describe(logits_buffer)
            if hasattr(logits_buffer, "dtype")
            else type(logits_buffer).__name__
        )
        raise ValueError(
            f"logits_buffer: got {got}, needed the LogitsBuffer that "
            "mla_jax.reserve_logits_buffer returns (or the previous step returned)"
        )
    data = logits_buffer.data
    if (
        data.ndim != 4
        or data.dtype != LOGITS_DTYPE
        or data.shape[3] != logits_buffer.kv_lora_rank + 1
    ):
        raise shape_error(
            "logits_buffer.data",
            _describe(data),
            f"float32 [max_num_seqs, num_heads, max_splits, {logits_buffer.kv_lora_rank + 1}]",
        )
    if logits_buffer.is_donated():
        raise ValueError(
            f"logits_buffer: {logits_buffer.describe()} was donated to an earlier step "
            "and deleted; pass the buffer that step returned "
            "(out, lse, logits_buffer = mla_decode(..., logits_buffer, ...))"
        )


def check_scale(scale) -> float:
    """A finite real Python number (it is compiled into the kernels)."""
    if (
        isinstance(scale, bool)
        or not isinstance(scale, numbers.Real)
        or not math.isfinite(float(scale))
    ):
        raise ValueError(
            f"scale: got {scale!r}, needed a finite Python float (e.g. "
            "qk_head_dim ** -0.5); it is a compile-time constant, not an array"
        )
    return float(scale)


def _check_inputs(q_nope, q_pe, kv_cache, block_table, seq_lens, k_scale, buf: LogitsBuffer):
    """Trace-time checks of shapes and dtypes against each other and the buffer."""
    lora, rope = buf.kv_lora_rank, buf.rope_dim
    width = lora + rope
    if kv_cache.ndim != 3 or kv_cache.shape[0] < 1 or kv_cache.shape[1] < 1:
        raise shape_error(
            "kv_cache", list(kv_cache.shape), f"[num_pages >= 1, page_size >= 1, {width}]"
        )
    if kv_cache.shape[2] != width:
        raise ValueError(
            f"kv_cache: rows are {kv_cache.shape[2]} wide, but {buf.describe()} was reserved "
            f"for kv_lora_rank + rope_dim = {lora} + {rope} = {width}; reserve the buffer "
            "with the cache's kv_lora_rank and rope_dim"
        )
    if q_nope.ndim != 3 or q_nope.shape[0] < 1:
        raise shape_error("q", list(q_nope.shape), f"[B >= 1, H, {width}]")
    batch, heads = q_nope.shape[:2]
    if q_pe is None:
        if q_nope.shape[2] != width:
            raise shape_error(
                "q", list(q_nope.shape), f"[B, H, {width}] to match kv_cache {list(kv_cache.shape)}"
            )
    else:
        if q_nope.shape[2] != lora:
            raise shape_error("q_nope", list(q_nope.shape), f"[B, H, {lora}]")
        if q_pe.shape != (batch, heads, rope):
            raise shape_error(
                "q_pe", list(q_pe.shape), f"{[batch, heads, rope]} (q_nope is {list(q_nope.shape)})"
            )
        if q_pe.dtype != q_nope.dtype:
            raise shape_error("q_pe dtype", q_pe.dtype, f"q_nope's {q_nope.dtype}")
    if q_nope.dtype not in QUERY_DTYPES:
        raise shape_error("q dtype", q_nope.dtype, "bfloat16, float16 or float32")
    if kv_cache.dtype not in (q_nope.dtype, FP8_DTYPE):
        raise shape_error(
            "kv_cache dtype",
            kv_cache.dtype,
            f"q's dtype {q_nope.dtype} or float8_e4m3fn (with k_scale)",
        )
    if kv_cache.dtype == FP8_DTYPE and k_scale is None:
        raise ValueError(
            "kv_cache is float8_e4m3fn: pass k_scale, the float32 scale it was "
            "quantised with (mla_jax.cache.quantize_fp8 returns it)"
        )
    if k_scale is not None and jnp.size(k_scale) != 1:
        raise shape_error(
            "k_scale",
            f"shape {list(jnp.shape(k_scale))}",
            "one scale for the whole cache: a Python float or a scalar array",
        )
    check_block_table(block_table, batch)
    check_row_vector("seq_lens", seq_lens, batch)
    if batch > buf.max_num_seqs:
        raise ValueError(
            f"q: batch {batch} exceeds the rows of {buf.describe()}; reserve "
            f"with max_num_seqs >= {batch}"
        )
    if heads != buf.num_heads:
        raise ValueError(
            f"q: {heads} heads, but {buf.describe()} was reserved for "
            f"{buf.num_heads}; reserve with num_heads={heads}"
        )


def check_triton_sizes(kv_lora_rank: int, rope_dim: int) -> None:
    """The Triton kernels tile both latent parts with power-of-two ranges and dots."""
    for name, value in (("kv_lora_rank", kv_lora_rank), ("rope_dim", rope_dim)):
        if value < 16 or value & (value - 1):
            raise ValueError(
                f"{name}={value}: the triton backend needs a power of two >= 16; "
                "use backend='xla' for other sizes"
            )


def split_max_seq_len(max_seq_len: int | jax.Array | None) -> tuple[int | None, jax.Array | None]:
    """``(static, dynamic)``: a Python int is static (the split count is fixed at trace
    time); an array (traced or not) is an int32 scalar read at run time; ``None``
    is neither (taken from ``seq_lens`` inside the step)."""
    if isinstance(max_seq_len, bool):
        raise ValueError(
            f"max_seq_len: got {max_seq_len!r}, needed an int, an int32 scalar array or None"
        )
    if isinstance(max_seq_len, numbers.Integral):
        if max_seq_len < 0:
            raise ValueError(f"max_seq_len must be >= 0, got {max_seq_len}")
        return int(max_seq_len), None
    if max_seq_len is None:
        return None, None
    check_array("max_seq_len", max_seq_len)
    if jnp.ndim(max_seq_len) != 0 or not jnp.issubdtype(jnp.result_type(max_seq_len), jnp.integer):
        raise shape_error("max_seq_len", _describe(max_seq_len), "an int32 scalar")
    return None, jnp.asarray(max_seq_len, jnp.int32)


def resolve_backend(backend: Backend, compute_capability: int | None) -> Backend:
    """``"auto"``: the Triton kernels on a CUDA GPU (or when lowering for one), else XLA.

    ``"triton"`` needs a GPU or ``compute_capability`` (lowering for CUDA elsewhere).
    """
    if backend not in ("auto", "triton", "xla"):
        raise ValueError(f"backend must be 'auto', 'triton' or 'xla', got {backend!r}")
    on_gpu = jax.default_backend() == "gpu"
    if backend == "triton" and not on_gpu and compute_capability is None:
        raise ValueError(
            f"backend='triton' needs a CUDA GPU, and JAX's backend here is "
            f"{jax.default_backend()!r}; use backend='xla' (or 'auto'), or pass "
            "compute_capability=90 to lower for CUDA without running (jax.export)"
        )
    if backend != "auto":
        return backend
    return "triton" if compute_capability is not None or on_gpu else "xla"


def _platform(x) -> str:
    """The platform ``x`` lives on; for a tracer or a host array, the default backend's."""
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        return next(iter(x.devices())).platform
    return jax.default_backend()


@functools.partial(
    jax.jit,
    static_argnames=(
        "scale",
        "static_max_seq_len",
        "batch_invariant",
        "backend",
        "compute_capability",
        "fp8_mma",
    ),
    donate_argnames=("logits_buffer",),
)
def _decode_step(
    q_nope,
    q_pe,
    kv_cache,
    block_table,
    seq_lens,
    logits_buffer,
    dynamic_max_seq_len,
    k_scale,
    *,
    scale,
    static_max_seq_len,
    batch_invariant,
    backend,
    compute_capability,
    fp8_mma,
):
    buf: LogitsBuffer = logits_buffer
    _check_inputs(q_nope, q_pe, kv_cache, block_table, seq_lens, k_scale, buf)
    kv_lora_rank, rope_dim = buf.kv_lora_rank, buf.rope_dim
    kv_scale = (
        jnp.ones((1,), jnp.float32)
        if k_scale is None
        else jnp.asarray(k_scale, jnp.float32).reshape(1)
    )
    batch, heads = q_nope.shape[:2]
    splits = functools.partial(
        kv_splits, buf.policy, batch=batch, num_heads=heads, sm_count=buf.sm_count
    )
    # The head tile's input (``_tiling.head_tile``), as the split rule reads it: the
    # batch's tokens where the split count is planned with a static length, else None
    # (the default tile).
    batch_tokens = None
    if batch_invariant:
        # One split: each row is one program's one pass over its tokens, whatever
        # the batch, so its rounding never depends on its batch mates (nor, with the
        # default tile, on the batch's size).
        grid_splits = 1
        num_splits = jnp.ones((1,), jnp.int32)
    elif static_max_seq_len is not None:
        grid_splits = splits(max_seq_len=static_max_seq_len)
        batch_tokens = batch * static_max_seq_len
        if grid_splits > buf.max_splits:
            raise ValueError(
                f"max_seq_len={static_max_seq_len} needs {grid_splits} KV splits under "
                f"policy={buf.policy!r}, sm_count={buf.sm_count}, but {buf.describe()} holds "
                f"{buf.max_splits}; reserve it with max_model_len >= {static_max_seq_len}"
            )
        num_splits = jnp.full((1,), grid_splits, jnp.int32)
    else:
        # Run-time count; a length past the reservation's reach is clamped to the
        # grid, which still partitions the row exactly. The grid is the most splits
        # this batch can ask for, not the buffer's axis (sized for batch 1).
        length = (
            jnp.max(seq_lens, initial=0) if dynamic_max_seq_len is None else dynamic_max_seq_len
        )
        grid_splits = min(
            buf.max_splits,
            max_kv_splits(buf.policy, batch=batch, num_heads=heads, sm_count=buf.sm_count),
        )
        num_splits = jnp.minimum(splits(max_seq_len=length), grid_splits).reshape(1)

    if backend == "triton":
        check_triton_sizes(kv_lora_rank, rope_dim)
        from mla_jax import _triton_backend  # Triton: an optional dependency

        q_pe_arg, qp_offset = (q_nope, kv_lora_rank) if q_pe is None else (q_pe, 0)
        out, lse, data = _triton_backend.decode(
            q_nope,
            q_pe_arg,
            qp_offset,
            kv_cache,
            block_table,
            seq_lens,
            num_splits,
            grid_splits,
            kv_scale,
            buf.data,
            scale=scale,
            kv_lora_rank=kv_lora_rank,
            rope_dim=rope_dim,
            compute_capability=compute_capability,
            max_tokens=static_max_seq_len,
            batch_tokens=batch_tokens,
            fp8_mma=fp8_mma,
            # The occupancy rule's count (not batch-invariant mode's one split, whose
            # kernel must not depend on the batch).
            occupancy_sms=(
                buf.sm_count if buf.policy == "occupancy" and not batch_invariant else None
            ),
        )
    else:
        q = q_nope if q_pe is None else jnp.concatenate([q_nope, q_pe], axis=-1)
        out, lse, data = xla_backend.decode(
            q,
            kv_cache,
            block_table,
            seq_lens,
            num_splits,
            grid_splits,
            kv_scale,
            buf.data,
            scale=scale,
            kv_lora_rank=kv_lora_rank,
            static_splits=batch_invariant or static_max_seq_len is not None,
        )
    return out, lse, dataclasses.replace(buf, data=data)


def split_query(q) -> tuple[jax.Array, jax.Array | None]:
    """``(q_nope, q_pe)`` of a pair, ``(q, None)`` of one array; checks both forms."""
    if isinstance(q, (tuple, list)):
        if len(q) != 2:
            raise ValueError(
                f"q: got a {type(q).__name__} of {len(q)} arrays, needed one "
                "array [B, H, kv_lora_rank + rope_dim] or the pair (q_nope, q_pe)"
            )
        check_array("q_nope", q[0])
        check_array("q_pe", q[1])
        return q[0], q[1]
    check_array("q", q)
    return q, None


def mla_decode(
    q: jax.Array | tuple[jax.Array, jax.Array],
    kv_cache: jax.Array,
    block_table: jax.Array,
    seq_lens: jax.Array,
    logits_buffer: LogitsBuffer,
    *,
    scale: float,
    max_seq_len: int | jax.Array | None = None,
    batch_invariant: bool = False,
    k_scale: float | jax.Array | None = None,
    backend: Backend = "auto",
    compute_capability: int | None = None,
    validate: bool = False,
    fp8_mma: bool = False,
) -> tuple[jax.Array, jax.Array, LogitsBuffer]:
    """One MLA decode step; the logits buffer is donated and returned.

    Args:
      q: absorbed query ``[B, H, kv_lora_rank + rope_dim]``, or the pair
        ``(q_nope [B, H, kv_lora_rank], q_pe [B, H, rope_dim])`` (no concatenation
        on the Triton path).
      kv_cache: paged latent cache ``[num_pages, page_size, kv_lora_rank + rope_dim]``
        in q's dtype, or ``float8_e4m3fn`` with ``k_scale``; each row is ``kv_c``
        followed by the rope key ``k_pe``.
      block_table: int32 ``[B, pages_per_seq]``, page indices into ``kv_cache`` (a
        wider integer array is narrowed after checking its values fit int32). A
        live entry outside ``[0, num_pages)`` reads page 0 (no path reads outside
        the cache); entries past a row's length are never read.
      seq_lens: int32 ``[B]`` (or wider, narrowed likewise); a row of length 0 gives
        ``out = 0``, ``lse = -inf``.
        Lengths are clamped to ``[0, pages_per_seq * page_size]`` (a negative length
        is an empty row; one past the block table's capacity reads the capacity).
      logits_buffer: the ``LogitsBuffer`` from ``reserve_logits_buffer`` (or the
        previous step); donated. Its split policy and SM count plan the splits (on
        sm_90 on a 16-bit cache at 16 heads, or 32 in a step of at most 16384 tokens,
        the occupancy rule's count is halved where its grid holds more programs than
        SMs: that stage 1 holds one program an SM, ``docs/performance.md``, "A Gluon
        stage 1 for a 16-bit cache at 16 heads").
      scale: softmax scale (a finite Python float; a new value compiles a new kernel).
      max_seq_len: the longest entry of ``seq_lens``, as vLLM passes it. A Python int
        fixes the split count at trace time (one compilation per split count), and
        a batch of at most 4096 tokens (``B * max_seq_len``) then runs stage 1 with
        16-head tiles (``mla_jax._tiling.head_tile``); an int32 scalar array (traced
        is fine) or ``None`` (taken from ``seq_lens``) computes the count at run time
        with the default tile, so one executable serves every length.
      batch_invariant: vLLM's ``VLLM_BATCH_INVARIANT``: one split and the default
        head tile (``max_seq_len`` then only matters for the reservation), so a row's
        output is bitwise the same whatever its batch mates, batch size or position.
        Holds for the triton backend and for the xla backend on the CPU; the xla
        backend on a GPU raises ValueError (XLA:GPU's dots are not batch-invariant).
      k_scale: the cache's float32 dequantisation scale (a Python float or a scalar
        array), used for the key and the value roles alike, as vLLM does; required
        for an fp8 cache (``mla_jax.cache.quantize_fp8``), 1 by default otherwise.
      backend: ``"triton"`` (the Triton/Gluon kernels, CUDA), ``"xla"`` (portable jnp) or
        ``"auto"`` (triton on a GPU, xla elsewhere).
      compute_capability: lower the Triton kernels for this CUDA capability (e.g. 90)
        without asking a GPU, as in ``jax.export(..., platforms=["cuda"])`` on a CPU:
        an int (numpy's too) of ``mla_jax._checks.CUDA_CAPABILITIES``, at least 89
        for an fp8 cache.
      validate: check ``block_table`` and ``seq_lens`` first
        (``mla_jax.validate.validate_inputs``): on concrete arrays a host check that
        raises ValueError, naming the row and value, before any kernel runs or the
        buffer is donated; under a trace, checkify checks (wrap the enclosing
        function in ``checkify.checkify``). Off by default.
      fp8_mma: an fp8 cache only (ValueError otherwise): allow e4m3 MMAs, trading
        accuracy for speed. Where stage 1 is a Gluon kernel on sm_90 and the model
        has at least 64 heads, q is rounded to e4m3 (one scale a head: its amax /
        448) and so are the softmax's probabilities, and both products run on the
        fp8 tensor cores: 5-18% less time than the default fp8 path (1.04 against
        1.22 ms at 128 rows, 128 heads, 16384 tokens on the H200), with the output
        3.2-4.4e-2 from float64 in relative norm where the default's is 1.7e-3 and
        the lse up to about 0.1 off (``docs/performance.md``, "fp8 MMAs").
        Everywhere else (the xla backend, other GPUs, fewer heads, splits under 128
        tokens) the result is the default path's.

    Returns:
      ``out [B, H, kv_lora_rank]`` in q's dtype, ``lse`` float32 ``[B, H]``, and the
      logits buffer to pass to the next step. Non-finite values in a live row's
      inputs give a NaN ``lse`` (never ``-inf``, which only marks an empty row).

    Raises:
      ValueError: for any argument of the wrong kind, shape or dtype, naming it,
        what it got and what it needed, before any kernel runs.
    """
    q_nope, q_pe = split_query(q)
    # torch tensors come in through DLPack; JAX's own error would not say how.
    q_nope, q_pe, kv_cache, block_table, seq_lens = (
        from_torch(name, x)
        for name, x in (
            ("q", q_nope),
            ("q_pe", q_pe),
            ("kv_cache", kv_cache),
            ("block_table", block_table),
            ("seq_lens", seq_lens),
        )
    )
    for name, x in (("kv_cache", kv_cache), ("block_table", block_table), ("seq_lens", seq_lens)):
        check_array(name, x)
    block_table = narrow_int32("block_table", block_table)
    seq_lens = narrow_int32("seq_lens", seq_lens)
    check_buffer(logits_buffer)
    scale = check_scale(scale)
    static, dynamic = split_max_seq_len(max_seq_len)
    if k_scale is not None and not isinstance(k_scale, numbers.Real):
        check_array("k_scale", k_scale)
    if fp8_mma and jnp.dtype(kv_cache.dtype) != FP8_DTYPE:
        raise ValueError(
            f"fp8_mma=True needs a float8_e4m3fn kv_cache, got {kv_cache.dtype}: quantise "
            "the cache (mla_jax.cache.quantize_fp8) or leave fp8_mma off"
        )
    resolved = resolve_backend(backend, compute_capability)
    compute_capability = check_compute_capability(
        compute_capability, fp8=resolved == "triton" and jnp.dtype(kv_cache.dtype) == FP8_DTYPE
    )
    if validate:
        validate_inputs(kv_cache, block_table, seq_lens)
    if batch_invariant and resolved == "xla" and _platform(q_nope) == "gpu":
        raise ValueError(
            "batch_invariant=True with backend='xla' on a GPU: XLA:GPU chooses its dot "
            "algorithms by shape, so rows are not bitwise independent of the batch there; "
            "use backend='triton' (or 'auto') on a GPU, or run the xla backend on the CPU"
        )
    return _decode_step(
        q_nope,
        q_pe,
        kv_cache,
        block_table,
        seq_lens,
        logits_buffer,
        dynamic,
        k_scale,
        scale=scale,
        static_max_seq_len=static,
        batch_invariant=bool(batch_invariant),
        backend=resolved,
        compute_capability=compute_capability,
        fp8_mma=bool(fp8_mma),
    )
