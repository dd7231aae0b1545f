"""The split-count rule shared by buffer reservation and every decode step.

One pure function decides how many pieces each sequence's KV range is cut into.
The reservation sizes the logits buffer's split axis with it at the worst case and
the decode step calls it again at run time, so the two cannot drift.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

# vLLM's rule: one split per this many KV tokens of the longest sequence ...
TOKENS_PER_SPLIT = 512
# ... rounded up to a power of two and capped at this many splits per SM.
MAX_SPLITS_PER_SM = 2


def next_pow2(x):
    """Smallest power of two >= x, for x >= 1 (Python int or int32 array)."""
    if isinstance(x, int):
        return 1 << (x - 1).bit_length()
    x = jnp.asarray(x, jnp.int32)
    # 1 << (32 - clz(x - 1)); clz(0) == 32 gives 1 for x == 1.
    return jnp.left_shift(jnp.int32(1), 32 - lax.clz(x - 1))


def num_kv_splits(max_seq_len: int | jax.Array, sm_count: int) -> int | jax.Array:
    """vLLM's split count: ``min(next_pow2(max(1, max_seq_len // 512)), 2 * sm_count)``.

    Args:
      max_seq_len: the longest sequence in the batch; a Python int, or an int32
        scalar array (traced values included).
      sm_count: the GPU's multiprocessor count (a Python int).

    Returns:
      A Python int for an int input, otherwise an int32 scalar array; both give
      the same value for the same input.
    """
    if not isinstance(sm_count, int) or sm_count < 1:
        raise ValueError(f"sm_count must be a positive Python int, got {sm_count!r}")
    cap = MAX_SPLITS_PER_SM * sm_count
    if isinstance(max_seq_len, int):
        if max_seq_len < 0:
            raise ValueError(f"max_seq_len must be >= 0, got {max_seq_len}")
        return min(next_pow2(max(1, max_seq_len // TOKENS_PER_SPLIT)), cap)
    n = jnp.asarray(max_seq_len, jnp.int32)
    if n.shape != ():
        raise ValueError(f"max_seq_len must be a scalar, got shape {n.shape}")
    return jnp.minimum(next_pow2(jnp.maximum(1, n // TOKENS_PER_SPLIT)), cap)
