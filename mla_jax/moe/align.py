"""The (token, expert) pairs sorted by expert and padded to the kernels' block of pairs.

Pair ``p = token * top_k + j`` is token ``token``'s ``j``-th choice, ``experts[token,
j]``. The kernels take the pairs in blocks of ``block_m``, each block all of one
expert, so each expert's pairs are padded to a multiple of ``block_m`` with ``-1``
(no pair). Everything is JAX ops of static shapes (jit-able): the padded length is
the bound ``config.max_blocks`` gives, and how much of it is used, ``num_padded``,
travels to the kernels as an int32 array, whose programs past it exit at once.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from mla_jax.moe.config import max_blocks

NO_PAIR = -1  # a padding slot of ``Alignment.pairs``
NARROW_SORT_PAIRS = 16384  # pairs from which the sort keys are narrowed (moe_align)


class Alignment(NamedTuple):
    """The pairs in the kernels' order.

    ``pairs``: int32 ``[max_blocks * block_m]``, pair ids grouped by expert in
    increasing expert order (within an expert, in increasing pair id), each expert's
    run padded with ``NO_PAIR`` to a multiple of ``block_m``; past ``num_padded``,
    ``NO_PAIR`` only.
    ``block_experts``: int32 ``[max_blocks]``, the expert of each block (past
    ``num_padded``: the last expert, never read). ``num_padded``: int32 ``[1]``, the
    slots in use (a multiple of ``block_m``).
    """

    pairs: jax.Array
    block_experts: jax.Array
    num_padded: jax.Array


def moe_align(experts: jax.Array, num_experts: int, block_m: int) -> Alignment:
    """``experts`` (int ``[tokens, top_k]``, each in ``[0, num_experts)``) as the
    kernels' ``Alignment`` for blocks of ``block_m`` pairs.

    An expert id outside ``[0, num_experts)`` cannot be checked in a traced array; its
    pair is in no block (its output rows are left unwritten) and nothing is read or
    written outside the arrays. (One token's pairs need no alignment: ``fused_moe``
    hands them to the kernels as they are, a block each.)
    """
    flat = experts.reshape(-1).astype(jnp.int32)
    num_pairs = flat.shape[0]
    blocks = max_blocks(num_pairs, num_experts, block_m)
    # The sort keys: the expert ids, any id out of range as num_experts (after every
    # expert's run). At a prefill's pair counts a GPU sorts (key, index) pairs by
    # radix (cub), one pass per 8 bits of key, so there the keys take the narrowest
    # unsigned type that holds them: one pass for up to 255 experts where int32 ids
    # take four. Below that XLA sorts int32 keys in a kernel of its own, inside the
    # step's command buffer, but hands narrow keys to cub, a launch apart that breaks
    # the buffer (docs/performance.md): those stay int32.
    key_type = jnp.int32
    if num_pairs >= NARROW_SORT_PAIRS:
        key_type = next(
            t for t in (jnp.uint8, jnp.uint16, jnp.uint32) if num_experts <= jnp.iinfo(t).max
        )
    keys = jnp.where((flat >= 0) & (flat < num_experts), flat, num_experts).astype(key_type)
    # Stable: within an expert the pairs keep token order, so a token's output does not
    # depend on how a sort breaks ties (and is the same run to run).
    order = jnp.argsort(keys, stable=True).astype(jnp.int32)
    expert = keys[order].astype(jnp.int32)
    # Each expert's run in sorted order, by counting (searchsorted's "compare_all"):
    # the out-of-range pairs, all past the last run, land in none. Its default binary
    # search is a while loop, whose body a GPU runs as kernels once an iteration; the
    # compare-and-count is a reduction XLA fuses, small at every size the MoE meets
    # (pairs x experts compares).
    ids = jnp.arange(num_experts, dtype=jnp.int32)
    first_pair = jnp.searchsorted(expert, ids, side="left", method="compare_all")
    counts = jnp.searchsorted(expert, ids, side="right", method="compare_all") - first_pair
    first_pair, counts = first_pair.astype(jnp.int32), counts.astype(jnp.int32)
    expert_blocks = (counts + block_m - 1) // block_m
    end_block = jnp.cumsum(expert_blocks)
    first_block = end_block - expert_blocks
    inside = expert < num_experts
    safe = jnp.minimum(expert, num_experts - 1)
    rank = jnp.arange(num_pairs, dtype=jnp.int32)  # place in sorted order
    slot = first_block[safe] * block_m + rank - first_pair[safe]
    # Out-of-range experts go past the end (each to its own slot, keeping the indices
    # unique), which the scatter drops.
    slot = jnp.where(inside, slot, blocks * block_m + rank)
    pairs = (
        jnp.full(blocks * block_m, NO_PAIR, jnp.int32)
        .at[slot]
        .set(order, mode="drop", unique_indices=True)
    )
    # Block b is the first expert's whose blocks end past it (the last expert's past
    # num_padded): a compare and count, where jnp.repeat scatters and scans.
    block = jnp.arange(blocks, dtype=jnp.int32)
    block_experts = jnp.minimum(
        (end_block[None, :] <= block[:, None]).sum(axis=1, dtype=jnp.int32), num_experts - 1
    )
    num_padded = (end_block[-1] * block_m).astype(jnp.int32).reshape(1)
    return Alignment(pairs, block_experts, num_padded)
