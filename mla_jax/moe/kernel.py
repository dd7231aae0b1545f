"""Triton kernels of the fused MoE: the routed experts' SwiGLU over (token, expert) pairs.

No JAX here: the Triton interpreter loads this module with torch tensors (the
tests), and ``mla_jax.moe.api`` launches the same kernels from JAX
(``mla_jax._launch``). Both drivers take the grid and constexprs from
``launch_params``.

The pairs arrive sorted by expert and padded per expert to blocks of ``BLOCK_M``
(``mla_jax.moe.align``: ``pairs``, ``block_experts``, ``num_padded``); pair ``p`` is
token ``p // TOP_K``'s ``p % TOP_K``-th expert. Each program takes one block of pairs,
all of one expert, and one tile of ``BLOCK_N`` output columns; it reads that expert's
weight tile straight from the stacked ``[E, K, N]`` weights (no gathered copy), so a
step reads each routed expert's weights once per block of its pairs, and an expert no
pair chose not at all. Products accumulate in float32 with ``tl.dot``.

- ``moe_gate_up``: ``h[p] = silu(x[t] @ gate[e]) * (x[t] @ up[e])`` for each pair
  ``p`` of token ``t`` and expert ``e``: both matrices in one program (one read of
  the token rows, two accumulators), the SwiGLU in float32, ``h`` stored in x's dtype.
- ``moe_down``: ``out[p] = weight[p] * (h[p] @ down[e])``, the product and the
  weighting in float32, stored in x's dtype; the caller sums each token's ``TOP_K``
  rows in float32.

Both write every row of their output whose pair is in a block (the rows of ``h`` and
``out`` are pairs, not slots) and no other: padding slots (``-1``) are masked.

Shared experts (``SHARED > 0``) ride along as experts ``E .. E + SHARED - 1``: the
shared MLP's ``[K, SHARED * N]`` gate and up split into ``SHARED`` column slices of
``N`` (SwiGLU is separable over its columns) and its ``[SHARED * N, K]`` down into as
many row slices, each read in place through its own pointer and row stride.

Programs are numbered along one grid axis, ``GROUP_M`` blocks of pairs at a time per
column tile (Triton's grouped ordering: those blocks share an expert's weight tile
in L2); the block count is the grid's size over ``N_TILES``, so one build serves
every token count. Programs whose block starts at or past ``num_padded`` exit at once.

One token (``ONE_TOKEN``, a decode step at batch one) needs no alignment: block
``b`` is the token's pair ``b`` alone, ``block_experts`` holds its ``ROUTED`` routed
experts as the router chose them and ``weights`` their routing weights; pairs from
``ROUTED`` on are the shared experts, at weight 1; ``pairs`` and ``num_padded`` are
not read. That leaves nothing to compute between the router and the kernels. With
no routed experts (``ROUTED`` 0, ``E`` 0) the pairs are a dense MLP's column slices
(``mla_jax.moe.api.fused_mlp``): nothing is read but x and the MLP.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from mla_jax.moe.config import MoEConfig, max_blocks


@triton.jit
def _tile(N_TILES: tl.constexpr, GROUP_M: tl.constexpr):
    """``(block of pairs, column tile)`` of this program, in grouped order."""
    pid = tl.program_id(0)
    num_blocks = tl.num_programs(0) // N_TILES
    per_group = GROUP_M * N_TILES
    first = (pid // per_group) * GROUP_M
    rows = tl.minimum(num_blocks - first, GROUP_M)  # the last group may be short
    return first + (pid % per_group) % rows, (pid % per_group) // rows


@triton.jit
def _block_pairs(pairs_ptr, block, BLOCK_M: tl.constexpr):
    """The block's pair ids (int64) and which slots hold one (padding holds -1)."""
    pair = tl.load(pairs_ptr + block * BLOCK_M + tl.arange(0, BLOCK_M))
    live = pair >= 0
    # Padding reads row 0 under a false mask; int64 so that rows times widths cannot
    # wrap at prefill sizes (65536 tokens x 8 experts x 7168 columns is past 2^31).
    return tl.where(live, pair, 0).to(tl.int64), live


@triton.jit
def _block(
    pairs_ptr,
    block_experts_ptr,
    num_padded_ptr,
    block,
    E: tl.constexpr,
    BLOCK_M: tl.constexpr,
    ONE_TOKEN: tl.constexpr,
    ROUTED: tl.constexpr,
):
    """``(pair ids, live, expert, unused)`` of a block: its slots' pair ids (int64)
    and which slots hold one, its expert (int64), and whether the block is past the
    slots in use. One token's block ``b`` (``ONE_TOKEN``) is pair ``b`` in slot 0: its
    routed expert ``b`` below ``ROUTED``, a shared one from there; a routed expert id
    outside ``[0, E)`` leaves its pair out (nothing read outside the arrays)."""
    if ONE_TOKEN:
        pair = tl.zeros((BLOCK_M,), tl.int64) + block
        first = tl.arange(0, BLOCK_M) == 0
        if ROUTED > 0:
            chosen = tl.load(block_experts_ptr + tl.minimum(block, ROUTED - 1))
            routed = block < ROUTED
            ok = ~routed | ((chosen >= 0) & (chosen < E))
            expert = tl.where(routed, tl.where(ok, chosen, 0), E + block - ROUTED)
            live = first & ok
        else:  # shared experts alone (``fused_mlp``)
            expert = E + block
            live = first
        unused = False
    else:
        pair, live = _block_pairs(pairs_ptr, block, BLOCK_M)
        expert = tl.load(block_experts_ptr + block)
        unused = block * BLOCK_M >= tl.load(num_padded_ptr)
    return pair, live, expert.to(tl.int64), unused


@triton.jit
def _weight_cols(col_tile, N: tl.constexpr, BLOCK_N: tl.constexpr):
    """The tile's output columns, and the columns its weight loads read: the same
    where ``BLOCK_N`` divides ``N``; wrapped into ``[0, N)`` otherwise, so the loads
    need no mask (the extra columns are computed and never stored)."""
    cols = col_tile * BLOCK_N + tl.arange(0, BLOCK_N)
    if N % BLOCK_N == 0:
        read = cols
    else:
        read = cols % N
    return cols, read


@triton.jit
def _weights(
    routed_ptr,
    shared_ptr,
    expert,
    K: tl.constexpr,
    N: tl.constexpr,
    E: tl.constexpr,
    SHARED: tl.constexpr,
    SLICED: tl.constexpr,
):
    """``(base, row stride)`` of ``expert``'s ``[K, N]`` matrix: routed experts' in the
    stacked ``[E, K, N]`` array; shared expert ``s = expert - E``'s in the shared MLP's
    array, its columns ``[s N, (s + 1) N)`` of ``[K, SHARED N]`` where ``SLICED`` (gate,
    up), else its rows ``[s K, (s + 1) K)`` of ``[SHARED K, N]`` (down). The base in 64
    bits (256 experts of 7168 x 2048 pass 2^31 values)."""
    routed_base = routed_ptr + expert * (K * N)
    if SHARED == 0:
        return routed_base, N
    shared = tl.maximum(expert - E, 0)
    if SLICED:
        return (
            tl.where(expert < E, routed_base, shared_ptr + shared * N),
            tl.where(expert < E, N, SHARED * N),
        )
    return tl.where(expert < E, routed_base, shared_ptr + shared * (K * N)), N


@triton.jit
def _load_k(ptrs, row_ok, k_ok, K: tl.constexpr, BLOCK_K: tl.constexpr, ROWS: tl.constexpr):
    """One ``BLOCK_K`` step of a tile: ``ROWS`` (token rows, ``[M, BLOCK_K]``) masked
    by ``row_ok``, else a weight tile (``[BLOCK_K, N]``); the reduction tail masked
    only where ``BLOCK_K`` does not divide ``K``."""
    if ROWS:
        if K % BLOCK_K == 0:
            mask = row_ok[:, None]
        else:
            mask = row_ok[:, None] & k_ok[None, :]
        tile = tl.load(ptrs, mask=mask, other=0.0)
    else:
        if K % BLOCK_K == 0:
            tile = tl.load(ptrs)
        else:
            tile = tl.load(ptrs, mask=k_ok[:, None], other=0.0)
    return tile


@triton.jit
def moe_gate_up(
    x_ptr,  # [tokens, K]
    gate_ptr,  # [E, K, N]
    up_ptr,  # [E, K, N]
    shared_gate_ptr,  # [K, SHARED * N] (gate_ptr when SHARED is 0: never read)
    shared_up_ptr,  # [K, SHARED * N]
    pairs_ptr,  # int32 [slots]: pair ids by expert, -1 padding
    block_experts_ptr,  # int32 [slots / BLOCK_M] (one token: [ROUTED], its experts)
    num_padded_ptr,  # int32 [1]: slots in use
    h_ptr,  # out [tokens * TOP_K, N], x's dtype
    K: tl.constexpr,
    N: tl.constexpr,
    TOP_K: tl.constexpr,
    E: tl.constexpr,
    SHARED: tl.constexpr,
    ONE_TOKEN: tl.constexpr,
    ROUTED: tl.constexpr,
    N_TILES: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """``h[p] = silu(x[p // TOP_K] @ gate[e]) * (x[p // TOP_K] @ up[e])`` for the pairs
    ``p`` of one block (expert ``e``), over one tile of columns."""
    block, col_tile = _tile(N_TILES, GROUP_M)
    pair, live, expert, unused = _block(
        pairs_ptr, block_experts_ptr, num_padded_ptr, block, E, BLOCK_M, ONE_TOKEN, ROUTED
    )
    if unused:
        return
    cols, read = _weight_cols(col_tile, N, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + (pair // TOP_K)[:, None] * K + ks[None, :]
    gate_base, row = _weights(gate_ptr, shared_gate_ptr, expert, K, N, E, SHARED, True)
    up_base, _ = _weights(up_ptr, shared_up_ptr, expert, K, N, E, SHARED, True)
    w_off = ks[:, None] * row + read[None, :]  # inside the matrix: 32 bits
    gate_ptrs = gate_base + w_off
    up_ptrs = up_base + w_off
    acc_gate = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        k_ok = ks < K - k
        rows = _load_k(x_ptrs, live, k_ok, K, BLOCK_K, True)
        gate = _load_k(gate_ptrs, live, k_ok, K, BLOCK_K, False)
        up = _load_k(up_ptrs, live, k_ok, K, BLOCK_K, False)
        acc_gate = tl.dot(rows, gate, acc_gate, input_precision=DOT_PRECISION)
        acc_up = tl.dot(rows, up, acc_up, input_precision=DOT_PRECISION)
        x_ptrs += BLOCK_K
        gate_ptrs += BLOCK_K * row
        up_ptrs += BLOCK_K * row
    h = acc_gate * tl.sigmoid(acc_gate) * acc_up  # SwiGLU in float32, rounded once
    out = h_ptr + pair[:, None] * N + cols[None, :]
    tl.store(out, h.to(h_ptr.dtype.element_ty), mask=live[:, None] & (cols < N)[None, :])


@triton.jit
def moe_down(
    h_ptr,  # [pairs, K]: moe_gate_up's output
    down_ptr,  # [E, K, N]
    shared_down_ptr,  # [SHARED * K, N] (down_ptr when SHARED is 0: never read)
    pairs_ptr,  # int32 [slots]
    block_experts_ptr,  # int32 [slots / BLOCK_M] (one token: [ROUTED], its experts)
    num_padded_ptr,  # int32 [1]
    weights_ptr,  # float32 [pairs]: the routing weights (one token: [ROUTED])
    out_ptr,  # out [pairs, N], h's dtype
    K: tl.constexpr,
    N: tl.constexpr,
    E: tl.constexpr,
    SHARED: tl.constexpr,
    ONE_TOKEN: tl.constexpr,
    ROUTED: tl.constexpr,
    N_TILES: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """``out[p] = weights[p] * (h[p] @ down[e])`` for the pairs ``p`` of one block
    (expert ``e``), over one tile of columns."""
    block, col_tile = _tile(N_TILES, GROUP_M)
    pair, live, expert, unused = _block(
        pairs_ptr, block_experts_ptr, num_padded_ptr, block, E, BLOCK_M, ONE_TOKEN, ROUTED
    )
    if unused:
        return
    cols, read = _weight_cols(col_tile, N, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    h_ptrs = h_ptr + pair[:, None] * K + ks[None, :]
    w_base, _ = _weights(down_ptr, shared_down_ptr, expert, K, N, E, SHARED, False)
    w_ptrs = w_base + (ks[:, None] * N + read[None, :])
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        k_ok = ks < K - k
        rows = _load_k(h_ptrs, live, k_ok, K, BLOCK_K, True)
        w = _load_k(w_ptrs, live, k_ok, K, BLOCK_K, False)
        acc = tl.dot(rows, w, acc, input_precision=DOT_PRECISION)
        h_ptrs += BLOCK_K
        w_ptrs += BLOCK_K * N
    if ONE_TOKEN:  # the shared experts' weight is 1
        if ROUTED > 0:
            routing = tl.load(weights_ptr + tl.minimum(block, ROUTED - 1))
            acc *= tl.where(block < ROUTED, routing, 1.0)
    else:
        acc *= tl.load(weights_ptr + pair, mask=live, other=0.0)[:, None]
    out = out_ptr + pair[:, None] * N + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=live[:, None] & (cols < N)[None, :])


def launch_params(
    *,
    num_pairs: int,
    top_k: int,
    num_experts: int,
    hidden: int,
    intermediate: int,
    float32: bool,
    config: MoEConfig,
    shared: int = 0,
    one_token: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The launches of ``moe_gate_up`` and ``moe_down``: each ``{"grid", "constexprs",
    "num_warps", "num_stages"}`` for ``num_pairs`` (token, expert) pairs (at least
    one) of ``top_k`` a token over ``num_experts`` routed experts of ``hidden ->
    intermediate -> hidden`` and ``shared`` shared ones (``top_k`` and ``num_pairs``
    count a token's shared pairs too); ``float32`` weights take IEEE float32 dots
    (TF32 would round the inputs to 10 mantissa bits). ``one_token``: one token's
    pairs, a block each, taken straight from its experts (``ROUTED``), no alignment."""
    if one_token and num_pairs != top_k:
        raise ValueError(f"one_token: got {num_pairs} pairs of {top_k} a token")
    blocks = num_pairs if one_token else max_blocks(num_pairs, num_experts + shared, config.block_m)

    def launch(k: int, n: int, **extra: int) -> dict[str, Any]:
        block_k, block_n = config.tile(k, n)
        n_tiles = triton.cdiv(n, block_n)
        return {
            "grid": (blocks * n_tiles,),
            "constexprs": {
                "K": k,
                "N": n,
                **extra,
                "N_TILES": n_tiles,
                "BLOCK_M": config.block_m,
                "BLOCK_N": block_n,
                "BLOCK_K": block_k,
                "GROUP_M": config.group_m,
                "DOT_PRECISION": "ieee" if float32 else "tf32",
            },
            "num_warps": config.num_warps,
            "num_stages": config.num_stages,
        }

    experts = {
        "E": num_experts,
        "SHARED": shared,
        "ONE_TOKEN": one_token,
        "ROUTED": top_k - shared if one_token else 0,
    }
    return launch(hidden, intermediate, TOP_K=top_k, **experts), launch(
        intermediate, hidden, **experts
    )
