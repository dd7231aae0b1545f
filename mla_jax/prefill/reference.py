"""Causal attention over right-padded prompts in float64 numpy: the ground truth of
the tests."""

from __future__ import annotations

import numpy as np


def full_keys(k) -> np.ndarray:
    """float64 ``[B, T, H, D]`` keys from one array or MLA's pair ``(k_nope [B, T, H,
    D - R], k_pe [B, T, R])``, the rope keys repeated for every head."""
    if isinstance(k, tuple | list):
        k_nope, k_pe = (np.asarray(a).astype(np.float64) for a in k)
        k_pe = np.broadcast_to(k_pe[:, :, None, :], (*k_nope.shape[:3], k_pe.shape[-1]))
        return np.concatenate([k_nope, k_pe], axis=-1)
    return np.asarray(k).astype(np.float64)


def flash_prefill_reference(q, k, v, lengths, *, scale: float) -> np.ndarray:
    """``mla_jax.prefill.flash_prefill`` in float64: float64 ``[B, T, H, DV]``.

    Row ``t`` of prompt ``b`` is ``softmax(scale * q[b, t] . k[b, s]) v[b, s]`` over
    ``s <= t``, ``s < lengths[b]``, per head; rows ``t >= lengths[b]`` are zeros (no
    query, key or value past a length is read, so they may hold anything). Inputs of
    any float dtype (ml_dtypes' bfloat16 too) are read as float64."""
    q = np.asarray(q).astype(np.float64)
    k = full_keys(k)
    v = np.asarray(v).astype(np.float64)
    batch, tokens, heads, _ = q.shape
    out = np.zeros((batch, tokens, heads, v.shape[-1]))
    for b in range(batch):
        n = min(int(lengths[b]), tokens)
        if n == 0:
            continue
        logits = np.einsum("thd,shd->hts", q[b, :n], k[b, :n]) * scale
        logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        out[b, :n] = np.einsum("hts,shv->thv", weights, v[b, :n])
    return out
