"""The paged latent cache: appending a decode step's rows, and allocating one.

A cache is ``[num_pages, page_size, kv_lora_rank + rope_dim]``. Token ``t`` of
sequence ``b`` lives at row ``t % page_size`` of page ``block_table[b, t // page_size]``,
the layout ``mla_decode`` reads.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mla_jax._checks import check_block_table, check_positive, check_row_vector, shape_error


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

    Returns:
      The cache with the rows written, same shape and dtype.
    """
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
    check_positive(num_seqs=num_seqs, max_len=max_len, page_size=page_size)
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
    check_positive(width=width)
    table_key, data_key = jax.random.split(key)
    block_table = new_block_table(num_seqs, max_len, page_size, key=table_key)
    # Standard-normal rows: stand-ins for prompt latents, never zeros (which hide
    # unwritten outputs and wrong indexing).
    kv_cache = jax.random.normal(data_key, (block_table.size, page_size, width), dtype)
    return kv_cache, block_table


FP8_DTYPE = jnp.float8_e4m3fn  # vLLM's fp8 KV cache format on NVIDIA GPUs
FP8_MAX = 448.0  # the largest finite float8_e4m3fn


def quantize_fp8(
    kv_cache: jax.Array, scale: float | jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """An fp8 (``float8_e4m3fn``) copy of a latent cache and its dequantisation scale.

    One scale for the whole cache, serving the key and value roles alike (vLLM's
    ``k_scale``): ``cache ~= fp8 * scale``. ``scale=None`` takes ``amax / 448`` so the
    largest entry maps to fp8's largest finite value; entries beyond ``448 * scale``
    saturate. Pass the returned scale to ``mla_decode(..., k_scale=scale)``.

    Returns:
      ``(kv_cache_fp8, scale)``: the cache's shape in ``float8_e4m3fn`` and a float32 scalar.
    """
    wide = kv_cache.astype(jnp.float32)
    if scale is None:
        scale = jnp.maximum(jnp.max(jnp.abs(wide)), jnp.finfo(jnp.float32).tiny) / FP8_MAX
    scale = jnp.asarray(scale, jnp.float32)
    return jnp.clip(wide / scale, -FP8_MAX, FP8_MAX).astype(FP8_DTYPE), scale


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
