"""Ground truths: a dense jnp MLA decode (float32 math) and a float64 numpy one.

Neither splits the KV range: they gather every live latent row of a sequence and
take one softmax, so they check the split-KV paths without sharing their algorithm.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def mla_decode_reference(
    q: jax.Array | tuple[jax.Array, jax.Array],
    kv_cache: jax.Array,
    block_table: jax.Array,
    seq_lens: jax.Array,
    *,
    scale: float,
    kv_lora_rank: int = 512,
) -> tuple[jax.Array, jax.Array]:
    """Dense MLA decode in float32.

    Args:
      q: ``[B, H, kv_lora_rank + rope_dim]`` or ``(q_nope [B, H, kv_lora_rank],
        q_pe [B, H, rope_dim])``.
      kv_cache: ``[num_pages, page_size, kv_lora_rank + rope_dim]``.
      block_table: int ``[B, pages_per_seq]``; seq_lens: int ``[B]``.

    Returns:
      ``out [B, H, kv_lora_rank]`` float32 and ``lse [B, H]`` float32; rows of
      length 0 give ``out = 0`` and ``lse = -inf``.
    """
    if isinstance(q, (tuple, list)):
        q = jnp.concatenate(q, axis=-1)
    rows = kv_cache[block_table].astype(jnp.float32)  # [B, pages, page, D]
    rows = rows.reshape(rows.shape[0], -1, rows.shape[-1])  # [B, N, D]
    logits = (
        jnp.einsum("bhd,bnd->bhn", q.astype(jnp.float32), rows, precision=jax.lax.Precision.HIGHEST)
        * scale
    )
    live = jnp.arange(rows.shape[1])[None, :] < seq_lens[:, None]
    logits = jnp.where(live[:, None, :], logits, -jnp.inf)
    lse = jax.nn.logsumexp(logits, axis=-1)
    weights = jnp.where(
        live[:, None, :], jnp.exp(logits - jnp.where(jnp.isfinite(lse), lse, 0.0)[..., None]), 0.0
    )
    out = jnp.einsum(
        "bhn,bnd->bhd", weights, rows[..., :kv_lora_rank], precision=jax.lax.Precision.HIGHEST
    )
    return out, lse


def mla_decode_reference_np(
    q: np.ndarray,
    kv_cache: np.ndarray,
    block_table: np.ndarray,
    seq_lens: np.ndarray,
    *,
    scale: float,
    kv_lora_rank: int = 512,
) -> tuple[np.ndarray, np.ndarray]:
    """The same function in float64 numpy, one sequence at a time.

    ``q`` is ``[B, H, kv_lora_rank + rope_dim]``; returns float64 ``out`` and ``lse``.
    """
    q = np.asarray(q, np.float64)
    kv_cache = np.asarray(kv_cache, np.float64)
    batch, heads, _ = q.shape
    page_size = kv_cache.shape[1]
    out = np.zeros((batch, heads, kv_lora_rank))
    lse = np.full((batch, heads), -np.inf)
    for b in range(batch):
        n = int(seq_lens[b])
        if n == 0:
            continue
        tokens = np.arange(n)
        rows = kv_cache[np.asarray(block_table)[b, tokens // page_size], tokens % page_size]
        logits = q[b] @ rows.T * scale  # [H, n]
        m = logits.max(axis=1, keepdims=True)
        p = np.exp(logits - m)
        out[b] = (p @ rows[:, :kv_lora_rank]) / p.sum(axis=1, keepdims=True)
        lse[b] = (m + np.log(p.sum(axis=1, keepdims=True)))[:, 0]
    return out, lse
