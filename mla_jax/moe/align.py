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


class Alignment(NamedTuple):
    """The pairs in the kernels' order.

    ``pairs``: int32 ``[max_blocks * block_m]``, pair ids grouped by expert in
    increasing expert order (within an expert, in increasing pair id), each expert's
    run padded with ``NO_PAIR`` to a multiple of ``block_m``; past ``num_padded``,
    ``NO_PAIR`` only (one token's pairs instead keep their own order, a block each).
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
    written outside the arrays.

    One token (a decode step at batch 1) needs no sort: each of its pairs is already a
    block of one pair, in the pairs' own order, so the alignment is one elementwise op
    where the sort and the scatter are several kernels. A row that names an expert
    twice then reads its weights twice (top-k routing never does).
    """
    flat = experts.reshape(-1).astype(jnp.int32)
    num_pairs = flat.shape[0]
    if experts.shape[0] == 1 and num_pairs <= num_experts:  # max_blocks is num_pairs
        inside = (flat >= 0) & (flat < num_experts)
        head = jnp.where(inside, jnp.arange(num_pairs, dtype=jnp.int32), NO_PAIR)
        padding = jnp.full((num_pairs, block_m - 1), NO_PAIR, jnp.int32)
        return Alignment(
            jnp.concatenate([head[:, None], padding], axis=1).reshape(-1),
            jnp.clip(flat, 0, num_experts - 1),
            jnp.full(1, num_pairs * block_m, jnp.int32),
        )
    blocks = max_blocks(num_pairs, num_experts, block_m)
    # Stable: within an expert the pairs keep token order, so a token's output does not
    # depend on how a sort breaks ties (and is the same run to run).
    order = jnp.argsort(flat, stable=True).astype(jnp.int32)
    expert = flat[order]
    # Each expert's run in sorted order, by counting (searchsorted's "compare_all"):
    # an id out of range then lands in no expert's run (bincount would clip a negative
    # one to 0). Its default binary search is a while loop, whose body a GPU runs as
    # kernels once an iteration; the compare-and-count is a reduction XLA fuses, small
    # at every size the MoE meets (pairs x experts compares).
    ids = jnp.arange(num_experts, dtype=jnp.int32)
    first_pair = jnp.searchsorted(expert, ids, side="left", method="compare_all")
    counts = jnp.searchsorted(expert, ids, side="right", method="compare_all") - first_pair
    first_pair, counts = first_pair.astype(jnp.int32), counts.astype(jnp.int32)
    expert_blocks = (counts + block_m - 1) // block_m
    end_block = jnp.cumsum(expert_blocks)
    first_block = end_block - expert_blocks
    inside = (expert >= 0) & (expert < num_experts)
    safe = jnp.clip(expert, 0, num_experts - 1)
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
