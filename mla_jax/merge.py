"""Merging attention results computed over disjoint KV ranges.

Context parallelism splits each sequence's tokens across shards; every shard runs
``mla_decode`` on its part and returns ``(out, lse)``. Two such partials combine
exactly, like stage 2 of the split-KV decode merges its splits:

    lse = log(exp(lse_a) + exp(lse_b))
    out = exp(lse_a - lse) * out_a + exp(lse_b - lse) * out_b

The merge is commutative and associative (up to rounding), so any number of
shards reduce pairwise, in any tree. An empty shard (``lse = -inf``) is the
identity, whatever its ``out`` holds.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _check(out_a: jax.Array, lse_a: jax.Array, out_b: jax.Array, lse_b: jax.Array) -> None:
    def desc(x: jax.Array) -> str:
        return f"{x.dtype}{list(x.shape)}"

    if out_a.shape != out_b.shape or out_a.dtype != out_b.dtype:
        raise ValueError(f"out_a {desc(out_a)} and out_b {desc(out_b)} must have the same "
                         "shape and dtype")
    if not jnp.issubdtype(out_a.dtype, jnp.floating) or out_a.ndim < 1:
        raise ValueError(f"out_a {desc(out_a)}: needed a floating [..., D] array")
    for name, lse in (("lse_a", lse_a), ("lse_b", lse_b)):
        if lse.shape != out_a.shape[:-1] or lse.dtype != jnp.float32:
            raise ValueError(f"{name} {desc(lse)} and out_a {desc(out_a)}: needed "
                             f"{name} float32{list(out_a.shape[:-1])}")


@jax.jit
def merge_attention_states(
    out_a: jax.Array, lse_a: jax.Array, out_b: jax.Array, lse_b: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Attention over the union of two disjoint KV ranges, from each range's result.

    Args:
      out_a: ``[..., D]`` attention output over range A, any float dtype.
      lse_a: float32 ``[...]``, its log-sum-exp; ``-inf`` marks an empty range.
      out_b, lse_b: the same for range B (same shapes and dtypes as A's).

    Returns:
      ``out [..., D]`` in ``out_a``'s dtype (computed in float32) and float32
      ``lse [...]``. Where both ranges are empty, ``out = 0`` and ``lse = -inf``;
      where one is, the other passes through unchanged. Never NaN for finite
      outputs; an empty range's ``out`` is ignored even if it is NaN.

    Raises:
      ValueError: shapes or dtypes that do not match (at trace time).
    """
    _check(out_a, lse_a, out_b, lse_b)
    m = jnp.maximum(lse_a, lse_b)
    m_safe = jnp.where(jnp.isfinite(m), m, 0.0)  # both empty: m = -inf, avoid inf - inf
    w_a = jnp.exp(lse_a - m_safe)
    w_b = jnp.exp(lse_b - m_safe)
    denom = w_a + w_b
    nonempty = denom > 0
    inv = 1.0 / jnp.where(nonempty, denom, 1.0)

    def weighted(w: jax.Array, out: jax.Array) -> jax.Array:
        # `where`, not a product, so an empty range's NaN or inf never reaches the sum.
        return jnp.where((w > 0)[..., None], (w * inv)[..., None] * out.astype(jnp.float32), 0.0)

    out = weighted(w_a, out_a) + weighted(w_b, out_b)
    lse = jnp.where(nonempty, m_safe + jnp.log(jnp.where(nonempty, denom, 1.0)), -jnp.inf)
    return out.astype(out_a.dtype), lse
