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

from mla_jax._checks import check_array


def _check(out_a: jax.Array, lse_a: jax.Array, out_b: jax.Array, lse_b: jax.Array) -> None:
    # Under jit a list stays a list (of traced leaves): refused as mla_decode does.
    for name, x in (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b)):
        check_array(name, x)

    def desc(x: jax.Array) -> str:
        return f"{x.dtype}{list(x.shape)}"

    if out_a.shape != out_b.shape or out_a.dtype != out_b.dtype:
        raise ValueError(
            f"out_a {desc(out_a)} and out_b {desc(out_b)} must have the same shape and dtype"
        )
    if not jnp.issubdtype(out_a.dtype, jnp.floating) or out_a.ndim < 1:
        raise ValueError(f"out_a {desc(out_a)}: needed a floating [..., D] array")
    for name, lse in (("lse_a", lse_a), ("lse_b", lse_b)):
        if lse.shape != out_a.shape[:-1] or lse.dtype != jnp.float32:
            raise ValueError(
                f"{name} {desc(lse)} and out_a {desc(out_a)}: needed "
                f"{name} float32{list(out_a.shape[:-1])}"
            )


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
      where one is, the other passes through unchanged. An empty range's ``out`` is
      ignored even if it is NaN; a NaN ``lse`` (a range whose inputs were not finite)
      makes the merged ``out`` and ``lse`` NaN.

    Raises:
      ValueError: shapes or dtypes that do not match, or a list or scalar where an
        array belongs (at trace time).
    """
    _check(out_a, lse_a, out_b, lse_b)
    # Emptiness is lse == -inf exactly; a NaN lse is a range whose inputs were not
    # finite, and it must reach the result, never pass for an empty range.
    empty_a, empty_b = lse_a == -jnp.inf, lse_b == -jnp.inf
    both_empty = empty_a & empty_b
    m = jnp.where(both_empty, 0.0, jnp.maximum(lse_a, lse_b))  # NaN-propagating max
    w_a = jnp.exp(lse_a - m)
    w_b = jnp.exp(lse_b - m)
    denom = jnp.where(both_empty, 1.0, w_a + w_b)

    def weighted(empty: jax.Array, w: jax.Array, out: jax.Array) -> jax.Array:
        # `where`, not a product, so an empty range's NaN or inf never reaches the sum.
        return jnp.where(empty[..., None], 0.0, (w / denom)[..., None] * out.astype(jnp.float32))

    out = weighted(empty_a, w_a, out_a) + weighted(empty_b, w_b, out_b)
    lse = jnp.where(both_empty, -jnp.inf, m + jnp.log(denom))
    return out.astype(out_a.dtype), lse
