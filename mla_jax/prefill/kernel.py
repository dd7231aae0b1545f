"""The Triton kernel of prefill attention: causal FlashAttention-2 forward over
right-padded prompts, with MLA's rope keys shared by the heads.

No JAX here: the Triton interpreter loads this module with torch tensors (the
tests), and ``mla_jax.prefill.api`` launches the same kernel from JAX
(``mla_jax._launch``). Both drivers take the grid and constexprs from
``launch_params``.

Layout, all row-major and token-major as the layer computes them (no transposes):
``q [B, T, H, DN + DR]``, its last ``DR`` values read from ``q_pe [B, T, H, DR]``
instead where ``Q_PE`` (a projection's output passes as it is, its rope part rotated
beside it, with no concatenation); the keys in two parts, ``k_nope [B, T, H, DN]`` and
the rope part ``k_pe`` (``SHARED_PE``: ``[B, T, DR]``, one row a token read by every
head, as MLA's; else the keys are one ``[B, T, H, DN + DR]`` array passed as both
parts); ``v [B, T, H, DV]``; the output ``o [B, T, H, DV]`` in q's dtype. ``q . k`` is
the dot over the first ``DN`` dimensions plus the dot over the last ``DR`` (two
``tl.dot`` into one float32 accumulator); each part is loaded at its width rounded up to
a power of two (``BLOCK_DN``, ``BLOCK_DR``, ``BLOCK_DV``), the padding masked to zero.

Each program takes ``BLOCK_M`` query rows of one sequence and head and walks the keys
``BLOCK_N`` at a time with the online softmax in float32 (base 2, ``log2(e)`` folded
into the scale): ``m`` the running max, ``l`` the running sum, ``acc`` the unnormalised
output, rescaled when the max grows; ``p`` is rounded to v's dtype for the second dot.

Causality and lengths: sequence ``b``'s tokens ``[0, lengths[b])`` are its prompt.
Row ``t`` attends to keys ``k <= t`` with ``k < lengths[b]``. The key blocks below the
program's first row and below the length (rounded down to ``BLOCK_N``) need no mask
and are walked first; the blocks from there to ``min(first row + BLOCK_M, length)``
are masked key by key; blocks past that are never read (causal block skipping: a
program's work is its rows' key count, about half the square on average). A row past
its sequence's length is written as zeros, and a program whose rows all are skips the
loop: keys, values and queries past a length are never read, so padding that holds
NaN cannot reach any output. Every row of ``o`` is written.

Addressing: each key and value tile is a scalar base pointer, advanced ``BLOCK_N``
rows a step (all the loops carry), plus fixed int32 offsets inside the tile; a
sequence's or tile's first row is addressed in 64 bits. (Carrying the tiles' pointer
tensors instead built, at the default bf16 tiles for sm_90, to 255 registers a thread
and 812 bytes of spill stores, against 182 registers and none: ptxas -v.)

Grid: ``(H, B, cdiv(T, BLOCK_M))``, the query blocks taken last first (CUDA starts
programs x-fastest, so the longest rows, the last block's, start first and the short
ones fill in behind them). H and B come from the grid and T from ``tokens_ptr``, so
one build serves every batch, head count and prompt length (the head widths, the
scale, the dtype and the tiles are compiled in).
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from mla_jax.prefill.config import PrefillConfig, padded

_LOG2E = 1.4426950408889634


@triton.jit
def _load(ptrs, rows_ok, cols_ok):
    """A ``[rows, cols]`` tile, masked (to zero) only along the axes whose mask is not
    None: full blocks of keys at unpadded widths load without a mask."""
    if rows_ok is None:
        if cols_ok is None:
            tile = tl.load(ptrs)
        else:
            tile = tl.load(ptrs, mask=cols_ok[None, :], other=0.0)
    else:
        if cols_ok is None:
            tile = tl.load(ptrs, mask=rows_ok[:, None], other=0.0)
        else:
            tile = tl.load(ptrs, mask=rows_ok[:, None] & cols_ok[None, :], other=0.0)
    return tile


@triton.jit
def _step(
    acc,
    l_i,
    m_i,
    q_nope,
    q_pe,
    k_nope_ptrs,
    k_pe_ptrs,
    v_ptrs,
    start_n,
    rows,
    length,
    dn_ok,
    dr_ok,
    dv_ok,
    MASKED: tl.constexpr,
    QK_SCALE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """The block of ``BLOCK_N`` keys at ``start_n`` (the pointers are at its first
    key) into the online softmax; masked (causal and length) where ``MASKED``, else
    every key is below every row and the length. ``q_pe`` None: no rope part.
    Returns ``(acc, l_i, m_i)``."""
    keys = start_n + tl.arange(0, BLOCK_N)
    key_ok = None
    if MASKED:
        key_ok = keys < length
    k_nope = _load(k_nope_ptrs, key_ok, dn_ok)
    qk = tl.dot(q_nope, tl.trans(k_nope), input_precision=DOT_PRECISION)
    if q_pe is not None:
        k_pe = _load(k_pe_ptrs, key_ok, dr_ok)
        qk = tl.dot(q_pe, tl.trans(k_pe), acc=qk, input_precision=DOT_PRECISION)
    qk = qk * QK_SCALE
    if MASKED:
        live = (keys[None, :] <= rows[:, None]) & (keys < length)[None, :]
        qk = tl.where(live, qk, float("-inf"))
    # Every row has a live key by the time it meets a fully masked block (key 0 is
    # live for all rows and comes first), so m_new is finite: no exp2(-inf - -inf).
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = _load(v_ptrs, key_ok, dv_ok)
    acc = tl.dot(p.to(v.dtype), v, acc=acc * alpha[:, None], input_precision=DOT_PRECISION)
    return acc, l_i, m_new


@triton.jit
def flash_prefill_fwd(
    q_ptr,  # [B, T, H, DN + DR]
    qp_ptr,  # [B, T, H, DR] (Q_PE): q's rope part; else q again
    kn_ptr,  # [B, T, H, DN] (SHARED_PE), else the keys [B, T, H, DN + DR]
    kp_ptr,  # [B, T, DR] (SHARED_PE), else the keys again
    v_ptr,  # [B, T, H, DV]
    lengths_ptr,  # int32 [B]
    tokens_ptr,  # int32 [1]: T
    o_ptr,  # out [B, T, H, DV], q's dtype
    DN: tl.constexpr,
    DR: tl.constexpr,
    DV: tl.constexpr,
    SHARED_PE: tl.constexpr,
    Q_PE: tl.constexpr,
    BLOCK_DN: tl.constexpr,
    BLOCK_DR: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    QK_SCALE: tl.constexpr,  # softmax scale * log2(e)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Causal attention of ``BLOCK_M`` query rows of one sequence and head (the module
    docstring has the layout, the masking and the grid)."""
    head = tl.program_id(0)
    heads = tl.num_programs(0)
    batch = tl.program_id(1)
    start_m = (tl.num_programs(2) - 1 - tl.program_id(2)) * BLOCK_M
    tokens = tl.load(tokens_ptr)
    length = tl.minimum(tl.load(lengths_ptr + batch), tokens)
    # Token strides (one row of a sequence to the next), in elements. Offsets inside a
    # tile are int32; a tile's first row is addressed in 64 bits (a V3 prompt of 128k
    # tokens is past 2^31 elements of q).
    q_st = heads * (DN + DR)
    v_st = heads * DV
    seq = batch.to(tl.int64) * tokens  # the sequence's first row, of all B * T
    m = tl.arange(0, BLOCK_M)
    rows = start_m + m
    dv = tl.arange(0, BLOCK_DV)
    dv_ok = None  # None: no padding to mask
    if BLOCK_DV != DV:
        dv_ok = dv < DV
    o_ptrs = o_ptr + ((seq + start_m) * v_st + head * DV) + (m[:, None] * v_st + dv[None, :])
    out_ok = (rows < tokens)[:, None] & (dv < DV)[None, :]
    if start_m >= length:  # every row is padding (or the sequence is empty)
        zeros = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
        tl.store(o_ptrs, zeros.to(o_ptr.dtype.element_ty), mask=out_ok)
        return

    # Queries: rows past the length load as zeros (their output is zeros anyway).
    row_ok = rows < length
    q_ptrs = q_ptr + ((seq + start_m) * q_st + head * (DN + DR)) + m[:, None] * q_st
    dn = tl.arange(0, BLOCK_DN)
    dn_ok = None
    if BLOCK_DN != DN:
        dn_ok = dn < DN
    q_nope = _load(q_ptrs + dn[None, :], row_ok, dn_ok)
    # Keys and values: each a scalar base at the block's first key (all the loops
    # carry, advanced a block a step) plus fixed int32 offsets inside the block.
    n = tl.arange(0, BLOCK_N)
    if SHARED_PE:
        kn_st = heads * DN
        kn_base = kn_ptr + (seq * kn_st + head * DN)
    else:
        kn_st = q_st
        kn_base = kn_ptr + (seq * kn_st + head * (DN + DR))
    kn_offs = n[:, None] * kn_st + dn[None, :]
    v_base = v_ptr + (seq * v_st + head * DV)
    v_offs = n[:, None] * v_st + dv[None, :]
    q_pe = None  # None: no rope part
    dr_ok = None
    kp_st = 0
    kp_base = kn_base
    kp_offs = kn_offs
    if DR > 0:
        dr = tl.arange(0, BLOCK_DR)
        dr_ok = None
        if BLOCK_DR != DR:
            dr_ok = dr < DR
        if Q_PE:
            qp_st = heads * DR
            qp_ptrs = qp_ptr + ((seq + start_m) * qp_st + head * DR) + m[:, None] * qp_st
            q_pe = _load(qp_ptrs + dr[None, :], row_ok, dr_ok)
        else:
            q_pe = _load(q_ptrs + DN + dr[None, :], row_ok, dr_ok)
        if SHARED_PE:
            kp_st = DR
            kp_base = kp_ptr + seq * DR
        else:
            kp_st = q_st
            kp_base = kp_ptr + (seq * q_st + head * (DN + DR) + DN)
        kp_offs = n[:, None] * kp_st + dr[None, :]

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    # Keys below the first row and below the length: no mask. Then the diagonal
    # blocks and the length's block, masked. Nothing past min(last row + 1, length).
    full = tl.minimum(start_m // BLOCK_N, length // BLOCK_N) * BLOCK_N
    stop = tl.minimum(start_m + BLOCK_M, length)
    for start_n in range(0, full, BLOCK_N):
        acc, l_i, m_i = _step(
            acc,
            l_i,
            m_i,
            q_nope,
            q_pe,
            kn_base + kn_offs,
            kp_base + kp_offs,
            v_base + v_offs,
            start_n,
            rows,
            length,
            dn_ok,
            dr_ok,
            dv_ok,
            False,
            QK_SCALE,
            BLOCK_N,
            DOT_PRECISION,
        )
        kn_base += BLOCK_N * kn_st
        kp_base += BLOCK_N * kp_st
        v_base += BLOCK_N * v_st
    for start_n in range(full, stop, BLOCK_N):
        acc, l_i, m_i = _step(
            acc,
            l_i,
            m_i,
            q_nope,
            q_pe,
            kn_base + kn_offs,
            kp_base + kp_offs,
            v_base + v_offs,
            start_n,
            rows,
            length,
            dn_ok,
            dr_ok,
            dv_ok,
            True,
            QK_SCALE,
            BLOCK_N,
            DOT_PRECISION,
        )
        kn_base += BLOCK_N * kn_st
        kp_base += BLOCK_N * kp_st
        v_base += BLOCK_N * v_st
    out = tl.where(row_ok[:, None], acc / l_i[:, None], 0.0)
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=out_ok)


def launch_params(
    *,
    batch: int,
    tokens: int,
    heads: int,
    dim_nope: int,
    dim_rope: int,
    dim_v: int,
    shared_pe: bool,
    scale: float,
    float32: bool,
    config: PrefillConfig,
    q_pe: bool = False,
) -> dict[str, Any]:
    """The launch of ``flash_prefill_fwd``: ``{"grid", "constexprs", "num_warps",
    "num_stages"}`` for ``batch`` prompts of ``tokens`` (at least one) over ``heads``
    heads, ``q . k`` over ``dim_nope`` then ``dim_rope`` dimensions (``shared_pe``:
    the rope keys one row a token for all heads), values of ``dim_v``; ``float32``
    inputs take IEEE float32 dots (TF32 would round them to 10 mantissa bits);
    ``q_pe``: q's rope part comes from an array of its own."""
    return {
        "grid": (heads, batch, triton.cdiv(tokens, config.block_m)),
        "constexprs": {
            "DN": dim_nope,
            "DR": dim_rope,
            "DV": dim_v,
            "SHARED_PE": shared_pe,
            "Q_PE": q_pe,
            "BLOCK_DN": padded(dim_nope),
            "BLOCK_DR": padded(dim_rope),
            "BLOCK_DV": padded(dim_v),
            "QK_SCALE": float(scale) * _LOG2E,
            "BLOCK_M": config.block_m,
            "BLOCK_N": config.block_n,
            "DOT_PRECISION": "ieee" if float32 else "tf32",
        },
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
    }
