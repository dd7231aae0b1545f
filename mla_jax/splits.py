"""The split-count rules shared by buffer reservation and every decode step.

A pure function decides how many pieces each sequence's KV range is cut into. The
reservation sizes the logits buffer's split axis with it at the worst case and the
decode step calls it again at run time, so the two cannot drift. Two policies:
vLLM's rule (length only) and an occupancy rule that also looks at the batch.
"""

from __future__ import annotations

from typing import Literal, get_args

import jax
import jax.numpy as jnp
from jax import lax

from mla_jax._checks import check_positive, is_int, positive_int
from mla_jax._tiling import head_tiles, programs_per_sm

Policy = Literal["vllm", "occupancy"]
# Every entry point's default: in the H200 sweep it beat vLLM's rule at 61 of 68
# shapes and was within 3.1% at the other 7 (docs/performance.md, "Split rule"). The
# reservation records its policy, and every step reads it from the buffer.
DEFAULT_POLICY: Policy = "occupancy"

# vLLM's rule: one split per this many KV tokens of the longest sequence ...
TOKENS_PER_SPLIT = 512
# ... rounded up to a power of two and capped at this many splits per SM.
MAX_SPLITS_PER_SM = 2
# The occupancy policy: one wave of stage-1 programs (as many as fit on the SMs at
# once, ``_tiling.programs_per_sm``), but about no split shorter than this: below one
# 64-token block the split's fixed cost (loading q, writing a 2 KB partial per head,
# merging it) outweighs more parallelism (H200; docs/performance.md, "Split rule").
MIN_TOKENS_PER_SPLIT = 64
# ... and at most this many, which bounds the reservation (it is sized at batch 1):
# 256 splits were no faster at B=1, H=16, L=16384; at L=65536, 256 splits took
# 0.049 ms against 0.065 ms for 128, a trade taken for half the buffer
# (docs/performance.md, "Split rule").
MAX_OCCUPANCY_SPLITS = 128
# A length past any cap of either rule (max_kv_splits).
_UNBOUNDED_LEN = 1 << 40


def next_pow2(x):
    """Smallest power of two >= x, for x >= 1 (Python int or int32 array)."""
    if isinstance(x, int):
        return 1 << (x - 1).bit_length()
    x = jnp.asarray(x, jnp.int32)
    # 1 << (32 - clz(x - 1)); clz(0) == 32 gives 1 for x == 1.
    return jnp.left_shift(jnp.int32(1), 32 - lax.clz(x - 1))


def prev_pow2(x: int) -> int:
    """Largest power of two <= x, for an int x >= 1."""
    return 1 << (x.bit_length() - 1)


def check_policy(policy: str) -> None:
    """``policy`` must name a split rule."""
    if policy not in get_args(Policy):
        raise ValueError(f"policy must be one of {get_args(Policy)}, got {policy!r}")


def _as_length(max_seq_len):
    """A Python or numpy integer becomes a Python int (checked >= 0); anything else an
    int32 scalar array."""
    if is_int(max_seq_len):
        max_seq_len = int(max_seq_len)
        if max_seq_len < 0:
            raise ValueError(f"max_seq_len must be >= 0, got {max_seq_len}")
        return max_seq_len
    n = jnp.asarray(max_seq_len, jnp.int32)
    if n.shape != ():
        raise ValueError(f"max_seq_len must be a scalar, got shape {n.shape}")
    return n


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
    sm_count = positive_int("sm_count", sm_count)
    cap = MAX_SPLITS_PER_SM * sm_count
    n = _as_length(max_seq_len)
    if isinstance(n, int):
        return min(next_pow2(max(1, n // TOKENS_PER_SPLIT)), cap)
    return jnp.minimum(next_pow2(jnp.maximum(1, n // TOKENS_PER_SPLIT)), cap)


def occupancy_kv_splits(
    batch: int, num_heads: int, max_seq_len: int | jax.Array, sm_count: int
) -> int | jax.Array:
    """A batch-aware split count: enough stage-1 programs for one wave, no more.

    ``prev_pow2(programs_per_sm * sm_count // (batch * head_tiles))`` splits fill the
    GPU once with programs, capped so a split keeps ``MIN_TOKENS_PER_SPLIT`` tokens
    (``next_pow2(max_seq_len // MIN_TOKENS_PER_SPLIT)``), at ``MAX_OCCUPANCY_SPLITS``
    and at vLLM's ``2 * sm_count``.

    The programs are those of the head tile the step launches with
    (``_tiling.head_tile``): a Python int ``max_seq_len`` is known at trace time, and
    ``batch * max_seq_len`` may pick 16-head tiles; an array length keeps the default
    tile. A power of two. With the default tile it is non-increasing in ``batch`` and
    non-decreasing in ``max_seq_len``, and 16-head tiles never ask for more splits
    than the default tile at the same shape (twice the programs an SM, but at least
    twice the tiles a row), so the count at ``batch = 1, max_model_len`` with the
    default tile covers every smaller problem (``reserved_splits``).
    """
    sm_count = positive_int("sm_count", sm_count)
    batch = positive_int("batch", batch)
    num_heads = positive_int("num_heads", num_heads)
    n = _as_length(max_seq_len)
    return _occupancy_splits(
        batch, num_heads, n, sm_count, batch_tokens=batch * n if isinstance(n, int) else None
    )


def _occupancy_splits(
    batch: int, num_heads: int, n: int | jax.Array, sm_count: int, *, batch_tokens: int | None
) -> int | jax.Array:
    """``occupancy_kv_splits`` for a checked length ``n``, on the grid of
    ``_tiling.head_tile(num_heads, batch_tokens)``."""
    resident = programs_per_sm(num_heads, batch_tokens) * sm_count
    wave = prev_pow2(max(1, resident // (batch * head_tiles(num_heads, batch_tokens))))
    cap = min(wave, MAX_SPLITS_PER_SM * sm_count, MAX_OCCUPANCY_SPLITS)
    if isinstance(n, int):
        return min(next_pow2(max(1, n // MIN_TOKENS_PER_SPLIT)), cap)
    return jnp.minimum(next_pow2(jnp.maximum(1, n // MIN_TOKENS_PER_SPLIT)), cap)


def kv_splits(
    policy: Policy, *, batch: int, num_heads: int, max_seq_len: int | jax.Array, sm_count: int
) -> int | jax.Array:
    """The split count of ``policy`` for one decode step.

    ``"vllm"``: vLLM's rule (``num_kv_splits``), for bitwise parity with its kernel.
    ``"occupancy"``: ``occupancy_kv_splits``, which also looks at the batch.
    """
    check_policy(policy)
    if policy == "vllm":
        return num_kv_splits(max_seq_len, sm_count)
    return occupancy_kv_splits(batch, num_heads, max_seq_len, sm_count)


def reserved_splits(policy: Policy, *, num_heads: int, max_model_len: int, sm_count: int) -> int:
    """The split axis a reservation needs: the most ``policy`` asks for at any batch
    and any length up to ``max_model_len``, whether the step knows the length at trace
    time or only at run time. That is the count at batch 1 and ``max_model_len`` with
    the default head tile (``occupancy_kv_splits``): what a step whose length is known
    only at run time asks for there."""
    check_policy(policy)
    if policy == "vllm":
        return int(num_kv_splits(max_model_len, sm_count))
    check_positive(sm_count=sm_count, num_heads=num_heads)
    return int(
        _occupancy_splits(1, num_heads, _as_length(max_model_len), sm_count, batch_tokens=None)
    )


def max_kv_splits(policy: Policy, *, batch: int, num_heads: int, sm_count: int) -> int:
    """The most ``kv_splits`` returns at ``batch``, whatever the length: the split grid
    of a step whose length is only known at run time (programs past the run-time
    count exit at once, but each still takes a launch slot). Both rules stop growing
    with the length at their caps, long before ``_UNBOUNDED_LEN``; that length gives
    the default head tile, which such a step launches and whose count bounds a 16-head
    tile's (``occupancy_kv_splits``)."""
    return int(
        kv_splits(
            policy, batch=batch, num_heads=num_heads, max_seq_len=_UNBOUNDED_LEN, sm_count=sm_count
        )
    )
