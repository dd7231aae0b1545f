"""The two-stage split-KV algorithm in plain jnp: the portable backend.

Same buffer, same split rule, same partials as the Triton kernels, so it runs on
any JAX platform and can be compared slot by slot with them (its partials float32,
where the Triton kernels store a bf16 q's in bf16: ``kernels.bf16_partials``).
Stage 1 gathers each split's tokens into a window of static width ``cdiv(N, k)`` for
a static split count ``k`` (``N`` = pages_per_seq * page_size), so no work is spent
on other splits' tokens; a run-time split count picks its branch with ``lax.switch``
over the few counts the split rule can produce, all compiled once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def _dot_f32(spec: str, a: jax.Array, b: jax.Array) -> jax.Array:
    """``einsum`` accumulating in float32 (HIGHEST keeps float32 out of TF32 on GPUs).

    XLA:CPU has no bf16 x bf16 -> f32 dot, so on CPU the operands are upcast first.
    """
    dot = lambda x, y: jnp.einsum(
        spec,
        x,
        y,
        precision=lax.Precision.HIGHEST,
        preferred_element_type=jnp.float32,
    )
    return lax.platform_dependent(
        a, b, cpu=lambda x, y: dot(x.astype(jnp.float32), y.astype(jnp.float32)), default=dot
    )


def _stage1_static(q, kv_cache, block_table, seq_lens, kv_scale, *, k, scale, kv_lora_rank):
    """Partials ``[B, H, k, kv_lora_rank + 1]`` for a static split count ``k``."""
    page_size = kv_cache.shape[1]
    capacity = block_table.shape[1] * page_size
    width = -(-capacity // k)
    per_split = (seq_lens + k - 1) // k  # [B], vLLM's cdiv partition
    tokens = (
        jnp.arange(k)[None, :, None] * per_split[:, None, None] + jnp.arange(width)[None, None, :]
    )  # [B, k, W]
    live = (jnp.arange(width)[None, None, :] < per_split[:, None, None]) & (
        tokens < seq_lens[:, None, None]
    )
    tokens = jnp.where(live, tokens, 0)
    pages = jnp.take_along_axis(
        block_table, (tokens // page_size).reshape(tokens.shape[0], -1), axis=1
    ).reshape(tokens.shape)
    # An fp8 cache is widened to q's dtype; its scale folds into logits and output.
    rows = kv_cache[pages, tokens % page_size].astype(q.dtype)  # [B, k, W, D]
    logits = _dot_f32("bhd,bswd->bhsw", q, rows) * (scale * kv_scale)
    logits = jnp.where(live[:, None], logits, -jnp.inf)
    # Emptiness comes from the token count, never from the values: a NaN or inf in a
    # live row must give a NaN lse, not the -inf that marks an empty split.
    nonempty = jnp.any(live, axis=-1)[:, None]  # [B, 1, k]
    m = jnp.where(nonempty, jnp.max(logits, axis=-1), 0.0)
    p = jnp.exp(logits - m[..., None])
    denom = jnp.sum(p, axis=-1)
    acc = _dot_f32("bhsw,bswd->bhsd", p.astype(rows.dtype), rows[..., :kv_lora_rank])
    one = jnp.where(nonempty, denom, 1.0)
    part = jnp.where(nonempty[..., None], acc * (kv_scale / one)[..., None], 0.0)
    lse = jnp.where(nonempty, m + jnp.log(one), -jnp.inf)
    return jnp.concatenate([part, lse[..., None]], axis=-1)


def _split_counts(grid_splits: int) -> tuple[int, ...]:
    """Every count ``min(power of two, grid_splits)`` the split rule can yield."""
    counts, k = [], 1
    while k < grid_splits:
        counts.append(k)
        k *= 2
    return (*counts, grid_splits)


def decode(
    q,
    kv_cache,
    block_table,
    seq_lens,
    num_splits,
    grid_splits,
    kv_scale,
    logits_buffer,
    *,
    scale,
    kv_lora_rank,
    static_splits,
):
    """Both stages on checked inputs; mirrors ``triton_backend.decode``.

    Args:
      q: ``[B, H, kv_lora_rank + rope_dim]``.
      num_splits: int32 ``[1]``, the run-time split count (``<= grid_splits``).
      kv_scale: float32 ``[1]``, the cache's dequantisation scale (1 unless fp8).
      static_splits: whether ``grid_splits`` *is* the split count (known at trace
        time); otherwise the count is read from ``num_splits``.
    """
    batch = q.shape[0]
    # The kernels' bounds: lengths within the block table's row, pages within the pool.
    capacity = block_table.shape[1] * kv_cache.shape[1]
    seq_lens = jnp.clip(seq_lens, 0, capacity)
    num_pages = kv_cache.shape[0]
    block_table = jnp.where((block_table >= 0) & (block_table < num_pages), block_table, 0)
    stage1 = lambda k: (
        lambda buf: lax.dynamic_update_slice(
            buf,
            _stage1_static(
                q,
                kv_cache,
                block_table,
                seq_lens,
                kv_scale[0],
                k=k,
                scale=scale,
                kv_lora_rank=kv_lora_rank,
            ),
            (0, 0, 0, 0),
        )
    )
    if static_splits:
        buffer = stage1(grid_splits)(logits_buffer)
    else:
        counts = _split_counts(grid_splits)
        branch = jnp.searchsorted(jnp.array(counts, jnp.int32), num_splits[0])
        buffer = lax.switch(branch, [stage1(k) for k in counts], logits_buffer)

    # Stage 2: merge splits [0, live) of each row, where live = cdiv(len, per_split).
    parts = buffer[:batch, :, :grid_splits]
    per_split = (seq_lens + num_splits[0] - 1) // num_splits[0]
    live = (seq_lens + jnp.maximum(per_split, 1) - 1) // jnp.maximum(per_split, 1)
    mask = jnp.arange(grid_splits)[None, None, :] < live[:, None, None]
    part_lse = jnp.where(mask, parts[..., kv_lora_rank], -jnp.inf)
    nonempty = (seq_lens > 0)[:, None]
    m = jnp.where(nonempty, jnp.max(part_lse, axis=-1), 0.0)
    w = jnp.where(mask, jnp.exp(part_lse - m[..., None]), 0.0)
    one = jnp.where(nonempty, jnp.sum(w, axis=-1), 1.0)
    acc = jnp.einsum(
        "bhs,bhsd->bhd",
        w,
        jnp.where(mask[..., None], parts[..., :kv_lora_rank], 0.0),
        precision=lax.Precision.HIGHEST,
    )
    out = jnp.where(nonempty[..., None], acc / one[..., None], 0.0)
    lse = jnp.where(nonempty, m + jnp.log(one), -jnp.inf)
    return out.astype(q.dtype), lse, buffer
