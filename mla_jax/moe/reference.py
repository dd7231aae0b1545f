"""The routed experts in float64 numpy, pair by pair: the ground truth of the tests."""

from __future__ import annotations

import numpy as np


def pair_outputs_reference(
    x: np.ndarray,
    weights: np.ndarray,
    experts: np.ndarray,
    gate: np.ndarray,
    up: np.ndarray,
    down: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``(h, out)`` per (token, expert) pair ``p = t * top_k + j`` in float64: ``h[p] =
    silu(x[t] @ gate[e]) * (x[t] @ up[e])`` (``[pairs, intermediate]``) and ``out[p] =
    weights[t, j] * (h[p] @ down[e])`` (``[pairs, hidden]``), ``e = experts[t, j]``.
    Inputs of any float dtype (ml_dtypes' bfloat16 too) are read as float64."""
    f64 = lambda a: np.asarray(a).astype(np.float64)
    x, weights, gate, up, down = map(f64, (x, weights, gate, up, down))
    tokens, top_k = experts.shape
    token = np.repeat(np.arange(tokens), top_k)
    e = np.asarray(experts).reshape(-1)
    rows = x[token]
    g = np.einsum("ph,phi->pi", rows, gate[e])
    h = g / (1.0 + np.exp(-g)) * np.einsum("ph,phi->pi", rows, up[e])
    out = weights.reshape(-1, 1) * np.einsum("pi,pih->ph", h, down[e])
    return h, out


def fused_moe_reference(
    x: np.ndarray,
    weights: np.ndarray,
    experts: np.ndarray,
    gate: np.ndarray,
    up: np.ndarray,
    down: np.ndarray,
) -> np.ndarray:
    """``mla_jax.moe.fused_moe`` in float64: float64 ``[tokens, hidden]``."""
    _, out = pair_outputs_reference(x, weights, experts, gate, up, down)
    tokens, top_k = experts.shape
    return out.reshape(tokens, top_k, -1).sum(axis=1)
