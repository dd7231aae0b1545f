"""The Triton kernel of ``skinny_matmul``: a few rows times a weight, a weight stream.

No JAX here: the Triton interpreter loads this module with torch tensors (the tests),
and ``mla_jax.skinny.api`` launches the same kernel from JAX (``mla_jax._launch``).
Both take the grid and constexprs from ``launch_params``.

``out[s, g, m, n] = sum_{k in split s} x[g, m, k] * w[g, k, n]``: ``G`` independent
products (heads, or one), each of ``M <= BLOCK_M`` rows. Every operand is addressed
through constexpr element strides, so a weight is read in its own layout (an
absorbed ``[C, H, n]`` projection as ``H`` matrices ``[n, C]`` with a column stride
of ``H n``), and nothing is transposed or copied before the call.

Each program takes one tile of ``BLOCK_N`` columns of one product and one slice of
``K_SPLIT`` of the reduction (a multiple of ``BLOCK_K``; ``EVEN_K`` where the slices
tile ``K`` exactly, so no load needs a mask), so a decode step's matrices, a
few dozen column tiles wide, still give every SM programs of their own; the caller
sums the slices' float32 partials. Products accumulate in float32 with ``tl.dot`` on
rows padded to ``BLOCK_M`` (the weight tile is the traffic; the padded rows cost
tensor-core time only).
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from mla_jax.skinny.config import SkinnyConfig


@triton.jit
def skinny_matmul(
    x_ptr,  # [G, M, K] through X_G, X_M, X_K
    w_ptr,  # [G, K, N] through W_G, W_K, W_N
    out_ptr,  # out [SPLITS, G, M, N] through O_S, O_G, O_M, O_N
    M: tl.constexpr,
    K: tl.constexpr,
    N: tl.constexpr,
    X_G: tl.constexpr,
    X_M: tl.constexpr,
    X_K: tl.constexpr,
    W_G: tl.constexpr,
    W_K: tl.constexpr,
    W_N: tl.constexpr,
    O_S: tl.constexpr,
    O_G: tl.constexpr,
    O_M: tl.constexpr,
    O_N: tl.constexpr,
    K_SPLIT: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One column tile of one product over one slice of the reduction."""
    col_tile = tl.program_id(0)
    split = tl.program_id(1)
    g = tl.program_id(2).to(tl.int64)
    rows = tl.arange(0, BLOCK_M)
    cols = col_tile * BLOCK_N + tl.arange(0, BLOCK_N)
    if N % BLOCK_N == 0:
        read = cols
    else:  # wrapped into [0, N): the weight loads need no column mask
        read = cols % N
    ks = split * K_SPLIT + tl.arange(0, BLOCK_K)
    row_ok = rows < M
    x_ptrs = x_ptr + g * X_G + rows[:, None] * X_M + ks[None, :] * X_K
    w_ptrs = w_ptr + g * W_G + ks[:, None] * W_K + read[None, :] * W_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K_SPLIT, BLOCK_K):
        if EVEN_K:
            xt = tl.load(x_ptrs, mask=row_ok[:, None], other=0.0)
            wt = tl.load(w_ptrs)
        else:
            k_ok = ks < K - k
            xt = tl.load(x_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            wt = tl.load(w_ptrs, mask=k_ok[:, None], other=0.0)
        acc = tl.dot(xt, wt, acc, input_precision=DOT_PRECISION)
        x_ptrs += BLOCK_K * X_K
        w_ptrs += BLOCK_K * W_K
    out = out_ptr + split * O_S + g * O_G + rows[:, None] * O_M + cols[None, :] * O_N
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols < N)[None, :])


def launch_params(
    *,
    groups: int,
    m: int,
    k: int,
    n: int,
    x_strides: tuple[int, int, int],
    w_strides: tuple[int, int, int],
    out_strides: tuple[int, int, int],
    float32: bool,
    config: SkinnyConfig,
) -> dict[str, Any]:
    """``{"grid", "constexprs", "num_warps", "num_stages"}`` of one call: ``groups``
    products of ``[m, k] @ [k, n]``, the operands' ``(g, m, k)`` / ``(g, k, n)`` element
    strides, the output's ``(g, m, n)`` strides within one split (the splits are
    ``config.splits`` slabs of ``groups * m * n`` before them); ``float32`` operands take
    IEEE float32 dots."""
    block_k, block_n = config.tile(k, n)
    k_split = triton.cdiv(triton.cdiv(k, config.splits), block_k) * block_k
    return {
        "grid": (triton.cdiv(n, block_n), config.splits, groups),
        "constexprs": {
            "M": m,
            "K": k,
            "N": n,
            **dict(zip(("X_G", "X_M", "X_K"), x_strides)),
            **dict(zip(("W_G", "W_K", "W_N"), w_strides)),
            "O_S": groups * m * n,
            **dict(zip(("O_G", "O_M", "O_N"), out_strides)),
            "K_SPLIT": k_split,
            "EVEN_K": k_split * config.splits == k,  # no step past K: no masks
            "BLOCK_M": config.block_m(m),
            "BLOCK_N": block_n,
            "BLOCK_K": block_k,
            "DOT_PRECISION": "ieee" if float32 else "tf32",
        },
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
    }
