"""The paged latent cache: appending a decode step's rows, and allocating one.

A cache is ``[num_pages, page_size, kv_lora_rank + rope_dim]``. Token ``t`` of
sequence ``b`` lives at row ``t % page_size`` of page ``block_table[b, t // page_size]``,
the layout ``mla_decode`` reads.
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax._checks import (
    check_array,
    check_block_table,
    check_row_vector,
    narrow_int32,
    positive_int,
    shape_error,
)


def append_latent(
    kv_cache: jax.Array, latent: jax.Array, block_table: jax.Array, positions: jax.Array
) -> jax.Array:
    """Writes each sequence's new latent row at its token position.

    A pure scatter: under a jitted step with ``kv_cache`` donated, XLA writes the
    ``B`` rows in place instead of copying the cache.

    Args:
      kv_cache: ``[num_pages, page_size, width]``.
      latent: ``[B, width]`` in ``kv_cache``'s dtype; row ``b`` is sequence ``b``'s
        new ``kv_c ++ k_pe``.
      block_table: int32 ``[B, pages_per_seq]``.
      positions: int32 ``[B]``, the token index each row is written at. A position
        outside ``[0, pages_per_seq * page_size)``, or one whose page entry is
        negative or past ``num_pages``, writes nothing.

    Integer arrays wider than int32 are narrowed after checking their values fit.

    Returns:
      The cache with the rows written, same shape and dtype.
    """
    for name, x in (
        ("kv_cache", kv_cache),
        ("latent", latent),
        ("block_table", block_table),
        ("positions", positions),
    ):
        check_array(name, x)
    block_table = narrow_int32("block_table", block_table)
    positions = narrow_int32("positions", positions)
    if kv_cache.ndim != 3:
        raise shape_error("kv_cache", list(kv_cache.shape), "[num_pages, page_size, width]")
    num_pages, page_size, width = kv_cache.shape
    if latent.ndim != 2 or latent.shape[1] != width:
        raise shape_error(
            "latent", list(latent.shape), f"[B, {width}] to match kv_cache {list(kv_cache.shape)}"
        )
    if latent.dtype != kv_cache.dtype:
        raise shape_error("latent dtype", latent.dtype, f"kv_cache's {kv_cache.dtype}")
    batch = latent.shape[0]
    check_block_table(block_table, batch)
    check_row_vector("positions", positions, batch)

    pages_per_seq = block_table.shape[1]
    slot = positions // page_size
    page = jnp.take_along_axis(block_table, jnp.clip(slot, 0, pages_per_seq - 1)[:, None], axis=1)[
        :, 0
    ]
    inside = (positions >= 0) & (slot < pages_per_seq) & (page >= 0)
    # Page index num_pages is out of bounds, so mode="drop" skips the row; clamping
    # (the default) would overwrite a live page, and a negative index would wrap.
    page = jnp.where(inside, page, num_pages)
    return kv_cache.at[page, positions % page_size].set(latent, mode="drop")


def new_block_table(num_seqs: int, max_len: int, page_size: int, *, key: jax.Array) -> jax.Array:
    """A shuffled page assignment: int32 ``[num_seqs, cdiv(max_len, page_size)]``.

    Every page of a ``num_seqs * cdiv(max_len, page_size)``-page cache is used once,
    in random order, so a kernel that assumes contiguous pages shows up.
    """
    # As Python ints: numpy's unsigned ones would wrap in the arithmetic below.
    num_seqs = positive_int("num_seqs", num_seqs)
    max_len = positive_int("max_len", max_len)
    page_size = positive_int("page_size", page_size)
    pages_per_seq = -(-max_len // page_size)
    pages = jax.random.permutation(key, num_seqs * pages_per_seq).astype(jnp.int32)
    return pages.reshape(num_seqs, pages_per_seq)


def new_paged_cache(
    num_seqs: int,
    max_len: int,
    page_size: int,
    width: int,
    dtype: jnp.dtype = jnp.float32,
    *,
    key: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """A paged cache for ``num_seqs`` sequences of up to ``max_len`` tokens.

    Args:
      width: ``kv_lora_rank + rope_dim`` (576 for DeepSeek-V2/V3).

    Returns:
      ``kv_cache [num_seqs * pages_per_seq, page_size, width]`` in ``dtype`` and
      its shuffled int32 ``block_table [num_seqs, pages_per_seq]``, with
      ``pages_per_seq = cdiv(max_len, page_size)``.
    """
    width = positive_int("width", width)
    table_key, data_key = jax.random.split(key)
    block_table = new_block_table(num_seqs, max_len, page_size, key=table_key)
    # Standard-normal rows: stand-ins for prompt latents, never zeros (which hide
    # unwritten outputs and wrong indexing).
    kv_cache = jax.random.normal(data_key, (block_table.size, page_size, width), dtype)
    return kv_cache, block_table


FP8_DTYPE = jnp.float8_e4m3fn  # vLLM's fp8 KV cache format on NVIDIA GPUs
FP8_MAX = 448.0  # the largest finite float8_e4m3fn


# The smallest scale quantize_fp8 takes or returns: float32's smallest normal number.
# A smaller one is a subnormal that XLA flushes to zero on the CPU and the GPU, and a
# zero scale turns every entry into 0 / 0 = NaN (an all-zero cache, what a fresh
# decode state holds, had amax / 448 = 0).
FP8_SCALE_FLOOR = float(np.finfo(np.float32).tiny)


def _check_fp8_scale(scale) -> jax.Array:
    """A given scale: one real value, finite and ``>= FP8_SCALE_FLOOR`` where concrete."""
    if isinstance(scale, bool) or not (isinstance(scale, numbers.Real) or hasattr(scale, "dtype")):
        raise ValueError(f"scale: got {scale!r}, needed None, a float or a scalar float32 array")
    if jnp.size(scale) != 1 or not jnp.issubdtype(jnp.result_type(scale), jnp.number):
        raise shape_error(
            "scale", f"{jnp.result_type(scale)}{list(jnp.shape(scale))}", "one real value"
        )
    wide = jnp.asarray(scale, jnp.float32).reshape(())
    if not isinstance(wide, jax.core.Tracer):
        value = float(wide)
        if not (math.isfinite(value) and value >= FP8_SCALE_FLOOR):
            raise ValueError(
                f"scale: got {value}, needed a finite scale >= {FP8_SCALE_FLOOR:g} "
                "(float32's smallest normal; the cache is divided by it)"
            )
    return wide


def quantize_fp8(
    kv_cache: jax.Array, scale: float | jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """An fp8 (``float8_e4m3fn``) copy of a latent cache and its dequantisation scale.

    One scale for the whole cache, serving the key and value roles alike (vLLM's
    ``k_scale``): ``cache ~= fp8 * scale``. ``scale=None`` takes
    ``max(amax / 448, FP8_SCALE_FLOOR)`` so the largest entry maps to fp8's largest
    finite value; the floor (float32's smallest normal, 1.2e-38) keeps the scale finite
    and positive, so an all-zero cache quantises to zeros. Entries beyond
    ``448 * scale`` saturate; entries under about ``scale / 2**9`` become 0, and so
    may float32 subnormals (XLA flushes them to zero).

    Non-finite entries: on a concrete cache a ``ValueError`` names the first one (the
    check reads one flag back from the device). Under a trace the scale is taken over
    the finite entries, and each non-finite entry becomes NaN (e4m3fn has no inf), so
    only the rows that read it give NaN, as ``mla_decode`` documents.

    Args:
      kv_cache: the cache, any float dtype and shape.
      scale: ``None``, or the scale to use (a float or a scalar array): finite and
        ``>= FP8_SCALE_FLOOR``, checked where concrete.

    Returns:
      ``(kv_cache_fp8, scale)``: the cache's shape in ``float8_e4m3fn`` and a float32 scalar.
    """
    check_array("kv_cache", kv_cache)
    if not jnp.issubdtype(kv_cache.dtype, jnp.floating):
        raise shape_error("kv_cache", f"{kv_cache.dtype}{list(kv_cache.shape)}", "a float array")
    wide = jnp.asarray(kv_cache, jnp.float32)
    finite = jnp.isfinite(wide)
    if not isinstance(wide, jax.core.Tracer) and not bool(jnp.all(finite)):
        index = tuple(int(i) for i in np.argwhere(~np.asarray(finite))[0])
        raise ValueError(
            f"kv_cache[{', '.join(map(str, index))}] = {float(wide[index])}: quantize_fp8 "
            "needs finite entries (one non-finite value would decide the scale of all)"
        )
    if scale is None:
        amax = jnp.max(jnp.where(finite, jnp.abs(wide), 0.0), initial=0.0)
        scale = jnp.maximum(amax / FP8_MAX, FP8_SCALE_FLOOR)
    else:
        scale = _check_fp8_scale(scale)
    fp8 = jnp.where(finite, jnp.clip(wide / scale, -FP8_MAX, FP8_MAX), jnp.nan)
    return fp8.astype(FP8_DTYPE), scale


def write_latents(
    kv_cache: jax.Array,
    latents: jax.Array,
    block_table: jax.Array,
    start_positions: jax.Array,
    lengths: jax.Array,
) -> jax.Array:
    """Writes up to ``T`` consecutive latent rows per sequence (a prompt's, at prefill).

    Row ``t`` of sequence ``b`` goes to token position ``start_positions[b] + t`` when
    ``t < lengths[b]``; later rows (padding) are dropped. Positions outside the block
    table, or on a negative or out-of-range page entry, write nothing, as in
    ``append_latent``. A pure scatter: in place when ``kv_cache`` is donated.

    Args:
      kv_cache: ``[num_pages, page_size, width]``.
      latents: ``[B, T, width]`` in ``kv_cache``'s dtype.
      block_table: int32 ``[B, pages_per_seq]``.
      start_positions: int32 ``[B]``, where each sequence's first row goes.
      lengths: int32 ``[B]``, how many of its ``T`` rows are real.

    Returns:
      The cache with the rows written, same shape and dtype.
    """
    for name, x in (
        ("kv_cache", kv_cache),
        ("latents", latents),
        ("block_table", block_table),
        ("start_positions", start_positions),
        ("lengths", lengths),
    ):
        check_array(name, x)
    block_table = narrow_int32("block_table", block_table)
    start_positions = narrow_int32("start_positions", start_positions)
    lengths = narrow_int32("lengths", lengths)
    if kv_cache.ndim != 3:
        raise shape_error("kv_cache", list(kv_cache.shape), "[num_pages, page_size, width]")
    num_pages, page_size, width = kv_cache.shape
    if latents.ndim != 3 or latents.shape[2] != width:
        raise shape_error(
            "latents",
            list(latents.shape),
            f"[B, T, {width}] to match kv_cache {list(kv_cache.shape)}",
        )
    if latents.dtype != kv_cache.dtype:
        raise shape_error("latents dtype", latents.dtype, f"kv_cache's {kv_cache.dtype}")
    batch, steps = latents.shape[:2]
    check_block_table(block_table, batch)
    check_row_vector("start_positions", start_positions, batch)
    check_row_vector("lengths", lengths, batch)

    t = jnp.arange(steps, dtype=jnp.int32)
    positions = start_positions[:, None] + t[None, :]
    pages_per_seq = block_table.shape[1]
    slot = positions // page_size
    page = jnp.take_along_axis(block_table, jnp.clip(slot, 0, pages_per_seq - 1), axis=1)
    inside = (
        (t[None, :] < lengths[:, None]) & (positions >= 0) & (slot < pages_per_seq) & (page >= 0)
    )
    # An out-of-bounds page index with mode="drop" skips the row (see append_latent).
    page = jnp.where(inside, page, num_pages)
    return kv_cache.at[page, positions % page_size].set(latents, mode="drop")
