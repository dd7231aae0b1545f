"""The 16-head Gluon stage 1 kernels: tokens on the warpgroup MMA's M (64), heads on
its N (16 or 32), one warpgroup. ``mla_decode_stage1_gluon_fp8_h16`` reads an fp8
cache through a ``cp.async`` ring of fp8 words and widens K and V^T in registers;
``mla_decode_stage1_gluon_h16`` (16- or 32-head tiles: ``BLOCK_H``) reads a 16-bit
cache into two shared-memory slots and takes every MMA operand from there. Both are
one program, ``_narrow_stage1``, its ``FP8`` constexpr choosing the cache's pieces
(the copies, the two products, the partials' stores); the split, the block loop, the
column softmax and the rest exist once. Design and measurements: docs/kernels.md."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from mla_jax.gluon import SMALL_BLOCK_H
from mla_jax.gluon.common import (
    _LN2,
    _LOG2E,
    _THREAD_ANY_8,
    _THREAD_ANY_16,
    RESCALE_THRESHOLD,
    _copy_block_rows,
    _copy_query,
    _copy_rows,
    _cta_any,
    _head_rows,
    _one_split_result,
    _opaque_zero,
    _safe_page,
    _split_bounds,
    _write_empty_row,
    _write_partials,
)
from mla_jax.gluon.widen import (
    _CHUNK,
    _CHUNK_WORDS_LAYOUT,
    _PV_WORDS_LAYOUT,
    _copy_query_f16,
    _pv_operands,
    _qk_operand,
    _widen_f16,
)


@gluon.jit
def _column_softmax(s, qk_scale, live, m_i, l_acc, accs, pt, i):
    """One block's softmax over S^T (tokens on rows, heads on columns) in the 16-head
    kernels: the logits ``s * qk_scale`` (rows outside the split, ``live`` false, at
    -inf), P^T on the running max ``m_i`` stored into ``pt`` (its dtype) and fenced for
    the MMAs; then a CTA vote (``_cta_any``, whose barrier publishes P^T; ``i`` any
    scalar) on whether a column grew past ``m_i`` by more than ``RESCALE_THRESHOLD``,
    and only then the exact column max, P^T again, and the row sums ``l_acc`` and each
    accumulator of ``accs`` (O^T tiles, heads on columns) rescaled. Returns ``(m_i,
    l_acc, accs)``; ``l_acc`` (``[tokens, heads]``) holds per-thread partial sums of P."""
    s = gl.where(live[:, None], s * qk_scale, float("-inf"))
    p = gl.exp2(s - m_i[None, :])
    pt.store(p.to(pt.dtype))
    fence_async_shared()
    flags = (s - m_i[None, :] > RESCALE_THRESHOLD).to(gl.int32)
    if s.shape[1] == 16:  # the flags a thread holds: 64 tokens x the tile's heads / 128
        grew = _cta_any(flags, i, _THREAD_ANY_8)
    else:
        grew = _cta_any(flags, i, _THREAD_ANY_16)
    if grew != 0:
        m_new = gl.maximum(m_i, gl.max(s, 0))
        grow = m_new - m_i > RESCALE_THRESHOLD
        alpha = gl.where(grow, gl.exp2(m_i - m_new), 1.0)
        m_i = gl.where(grow, m_new, m_i)
        p = gl.exp2(s - m_i[None, :])
        l_acc = l_acc * alpha[None, :] + p
        rescaled = ()
        for k in gl.static_range(len(accs)):
            rescaled = rescaled + (accs[k] * alpha[None, :],)
        accs = rescaled
        pt.store(p.to(pt.dtype))
        fence_async_shared()
        gl.thread_barrier()
    else:
        l_acc = l_acc + p
    return m_i, l_acc, accs


# A latent pair (128 fp8 columns, 32 words a row) in the ring: 16-byte units swizzled
# by row, unit ^ (2 * ((row >> 1) & 3) ^ 4 * (row & 1)). Both reads are then free of
# bank conflicts: S^T's (a quarter warp reads rows r, r + 1 of one 64-column chunk:
# the row bit moves them to the other half of the units) and V^T's (a warp reads one
# word of rows 2c + e, c < 4, at 8 consecutive words: row bits 1-2 spread the four
# rows over the units).
_RING_PAIR_LAYOUT = gl.constexpr(
    gl.SharedLinearLayout(
        offset_bases=[
            [0, 1],
            [0, 2],
            [0, 4],
            [0, 8],
            [0, 16],
            [1, 16],
            [2, 8],
            [4, 16],
            [8, 0],
            [16, 0],
            [32, 0],
        ]
    )
)


@gluon.jit
def _ring_copy(
    dst,
    kv_ptr,
    page,
    n0,
    start,
    end,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
):
    """``cp.async`` of the block at token ``n0`` (raw page index ``page``) into one ring
    stage ``dst`` (its four latent pairs' views, then the rope one) as int32 words, rows
    outside ``[start, end)`` zero-filled; commits no group."""
    lat0, lat1, lat2, lat3, pe = dst
    lat_layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    pe_layout: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    words = kv_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    page_base = words + _safe_page(page, NUM_PAGES).to(gl.int64) * (stride_kv_page // 4)
    # Rows of the page, as the seesaw's copies (offsets that change block to block are
    # not hoisted out of the loop).
    offs = gl.arange(0, _CHUNK, layout=gl.SliceLayout(1, lat_layout))
    rows = n0 % PAGE_SIZE + offs
    ok = (n0 + offs >= start) & (n0 + offs < end)
    _copy_rows(lat0, page_base, rows, ok, stride_kv_row // 4, 32, lat_layout)
    _copy_rows(lat1, page_base + 32, rows, ok, stride_kv_row // 4, 32, lat_layout)
    _copy_rows(lat2, page_base + 64, rows, ok, stride_kv_row // 4, 32, lat_layout)
    _copy_rows(lat3, page_base + 96, rows, ok, stride_kv_row // 4, 32, lat_layout)
    offs = gl.arange(0, _CHUNK, layout=gl.SliceLayout(1, pe_layout))
    rows = n0 % PAGE_SIZE + offs
    ok = (n0 + offs >= start) & (n0 + offs < end)
    _copy_rows(pe, page_base + 128, rows, ok, stride_kv_row // 4, 16, pe_layout)


@gluon.jit
def _qk_chunk(words, s, q_chunk, FIRST: gl.constexpr, a_layout: gl.constexpr):
    """``S^T += K_c Q_c^T`` for one 64-column chunk's ``words`` (read from the ring),
    widened into the register A operand; waits for the chunk before (its registers
    are then free)."""
    a = _qk_operand(_widen_f16(words), a_layout)
    s = warpgroup_mma(a, q_chunk.permute((1, 0)), s, use_acc=not FIRST, is_async=True)
    return warpgroup_mma_wait(num_outstanding=1, deps=(s,))


# A latent pair's O^T ([128 dims, 16 heads]) in the dims' order: a thread's four values
# of a head are four consecutive dims (its rows q and q + 8 of the pair's two M-tiles).
_PAIR_OUT_LAYOUT = gl.constexpr(
    gl.DistributedLinearLayout(
        reg_bases=[[1, 0], [2, 0], [0, 1], [0, 8]],
        lane_bases=[[0, 2], [0, 4], [4, 0], [8, 0], [16, 0]],
        warp_bases=[[32, 0], [64, 0]],
        block_bases=[],
        shape=[128, 16],
    )
)


# A pair's staged partials read back by rows (a head's 128 dims), 32 consecutive dims a
# warp store: the rows in the buffer are 513 float32 apart, so 4-byte stores.
_PAIR_ROWS_LAYOUT = gl.constexpr(gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0]))


# The staged pair, [16 heads, 128 dims] float32, a row 132 words apart (16-byte
# aligned): a quarter warp's 16-byte stores of the tile (4 heads two apart, 2 dim groups)
# then fall on distinct banks, and the reads by rows too.
_PAIR_STAGE_LAYOUT = gl.constexpr(
    gl.PaddedSharedLayout.with_identity_for([[128, 4]], [SMALL_BLOCK_H, 128], [1, 0])
)


@gluon.jit
def _pair_out(o_b0, o_b1, norm):
    """The pair's two normalised M-tiles as one ``[128, 16]`` tile in the dims' order
    (``_PAIR_OUT_LAYOUT``: a relabelling of the accumulators' registers)."""
    x = gl.join(o_b0 * norm[None, :], o_b1 * norm[None, :])  # [r, head, b]
    x = gl.permute(gl.reshape(x, [4, 2, 8, 16, 2]), [0, 2, 4, 1, 3])  # w, q, b, h, head
    return gl.convert_layout(gl.reshape(x, [128, 16]), _PAIR_OUT_LAYOUT, assert_trivial=True)


@gluon.jit
def _stage_pair(pair, o_b0, o_b1, norm):
    """Stage a pair's normalised O^T tiles into its (dead) ring allocation ``pair`` as
    ``[16 heads, 128 dims]``; returns that view."""
    st = pair._reinterpret(gl.float32, [16, 128], _PAIR_STAGE_LAYOUT)
    st.permute((1, 0)).store(_pair_out(o_b0, o_b1, norm))
    return st


@gluon.jit
def _store_pair(dst_ptr, off, ok, st, P: gl.constexpr):
    """A staged pair (``_stage_pair``) into latent dims ``[128 P, 128 P + 128)`` of each
    head's row at ``off`` (heads not ``ok`` skipped), by rows."""
    dims = 128 * P + gl.arange(0, 128, layout=gl.SliceLayout(0, _PAIR_ROWS_LAYOUT))
    out = st.load(_PAIR_ROWS_LAYOUT).to(dst_ptr.dtype.element_ty)
    gl.store(dst_ptr + off[:, None] + dims[None, :], out, mask=ok[:, None])


@gluon.jit
def _ring_stage(ring, stage):
    """The views of stage ``stage`` (0 or 1) of each allocation of ``ring`` (a tuple of
    ``[2, ...]`` shared allocations), as a tuple in the same order."""
    views = ()
    for k in gl.static_range(len(ring)):
        views = views + (ring[k].index(stage),)
    return views


@gluon.jit
def _zero_tiles(N: gl.constexpr, ROWS: gl.constexpr, COLS: gl.constexpr, layout: gl.constexpr):
    """``N`` float32 zero tiles ``[ROWS, COLS]`` in ``layout``, as a tuple."""
    tiles = ()
    for _ in gl.static_range(N):
        tiles = tiles + (gl.zeros([ROWS, COLS], gl.float32, layout=layout),)
    return tiles


@gluon.jit
def _copy_block(
    FP8: gl.constexpr,
    dst,
    kv_ptr,
    page,
    n0,
    start,
    end,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    BLOCK_N: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
):
    """``cp.async`` of the block at token ``n0`` (raw page index ``page``) into one stage
    ``dst`` (``_ring_stage``), rows outside ``[start, end)`` zero-filled: an fp8 block as
    words into the ring's five views (``_ring_copy``), a 16-bit one as it is into the
    slot's latent and rope views (``_copy_block_rows``). Commits no group."""
    if FP8:
        _ring_copy(
            dst, kv_ptr, page, n0, start, end, PAGE_SIZE, NUM_PAGES, stride_kv_page, stride_kv_row
        )
    else:
        _copy_block_rows(
            dst[0],
            dst[1],
            kv_ptr,
            page,
            n0,
            start,
            end,
            PAGE_SIZE,
            NUM_PAGES,
            LORA,
            ROPE,
            BLOCK_N,
            stride_kv_page,
            stride_kv_row,
        )


@gluon.jit
def _qk_fp8(k, s, q_nope, q_pe, a_layout: gl.constexpr):
    """``S^T = K Q^T`` of an fp8 ring stage ``k`` (``_ring_stage``: four latent pairs,
    then the rope words), 9 chunks widened into the register A operand (``_qk_chunk``),
    left in flight (the caller waits). Also reads the first two pairs' V^T words, whose
    load latency then passes under the wait and the softmax: returns ``(s, x0, x1)``."""
    k0, k1, k2, k3, kp = k
    # Each chunk's words are read one chunk ahead of its widening, so that the
    # shared load's latency passes under the MMA before.
    w = k0.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
    w_next = k0.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
    s = _qk_chunk(w, s, q_nope.slice(0, 64, 1), True, a_layout)
    w = k1.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
    s = _qk_chunk(w_next, s, q_nope.slice(64, 64, 1), False, a_layout)
    w_next = k1.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
    s = _qk_chunk(w, s, q_nope.slice(128, 64, 1), False, a_layout)
    w = k2.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
    s = _qk_chunk(w_next, s, q_nope.slice(192, 64, 1), False, a_layout)
    w_next = k2.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
    s = _qk_chunk(w, s, q_nope.slice(256, 64, 1), False, a_layout)
    w = k3.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
    s = _qk_chunk(w_next, s, q_nope.slice(320, 64, 1), False, a_layout)
    w_next = k3.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
    s = _qk_chunk(w, s, q_nope.slice(384, 64, 1), False, a_layout)
    w = kp.load(_CHUNK_WORDS_LAYOUT)
    s = _qk_chunk(w_next, s, q_nope.slice(448, 64, 1), False, a_layout)
    s = _qk_chunk(w, s, q_pe, False, a_layout)
    # The first two pairs' V^T words too, under the softmax.
    x0 = k0.load(_PV_WORDS_LAYOUT)
    x1 = k1.load(_PV_WORDS_LAYOUT)
    return s, x0, x1


@gluon.jit
def _pv_fp8(k, x0, x1, pt, accs, a_layout: gl.constexpr):
    """``O^T += V^T P^T`` from an fp8 ring stage ``k``, a latent pair (two M-tiles of the
    8 in ``accs``) at a time, V^T widened into registers (``_pv_operands``; the first
    two pairs' words ``x0``, ``x1`` read by ``_qk_fp8``); a pair's operands are freed
    once the next pair's MMAs are issued and its own are done. Waited."""
    o0, o1, o2, o3, o4, o5, o6, o7 = accs
    a0, a1 = _pv_operands(x0, a_layout)
    o0 = warpgroup_mma(a0, pt, o0, is_async=True)
    o1 = warpgroup_mma(a1, pt, o1, is_async=True)
    x2 = k[2].load(_PV_WORDS_LAYOUT)
    a2, a3 = _pv_operands(x1, a_layout)
    o2 = warpgroup_mma(a2, pt, o2, is_async=True)
    o3 = warpgroup_mma(a3, pt, o3, is_async=True)
    x3 = k[3].load(_PV_WORDS_LAYOUT)
    o0, o1 = warpgroup_mma_wait(num_outstanding=2, deps=(o0, o1))
    a4, a5 = _pv_operands(x2, a_layout)
    o4 = warpgroup_mma(a4, pt, o4, is_async=True)
    o5 = warpgroup_mma(a5, pt, o5, is_async=True)
    o2, o3 = warpgroup_mma_wait(num_outstanding=2, deps=(o2, o3))
    a6, a7 = _pv_operands(x3, a_layout)
    o6 = warpgroup_mma(a6, pt, o6, is_async=True)
    o7 = warpgroup_mma(a7, pt, o7, is_async=True)
    o4, o5, o6, o7 = warpgroup_mma_wait(num_outstanding=0, deps=(o4, o5, o6, o7))
    return o0, o1, o2, o3, o4, o5, o6, o7


@gluon.jit
def _qk_16(k, s, q_nope, q_pe):
    """``S^T = K Q^T`` of a 16-bit slot ``k`` (latent, rope): A the slot (K-major), B Q
    seen transposed; left in flight (the caller waits)."""
    s = warpgroup_mma(k[0], q_nope.permute((1, 0)), s, use_acc=False, is_async=True)
    return warpgroup_mma(k[1], q_pe.permute((1, 0)), s, is_async=True)


@gluon.jit
def _pv_16(k, pt, accs):
    """``O^T += V^T P^T`` from a 16-bit slot ``k``: V^T is its latent part seen
    transposed (M-major), one accumulator (``accs``' one tile) of 8 M-tiles of 64
    dims. Waited."""
    o = warpgroup_mma(k[0].permute((1, 0)), pt, accs[0], is_async=True)
    return (warpgroup_mma_wait(num_outstanding=0, deps=(o,)),)


@gluon.jit
def _store_through_ring(
    ring,
    accs,
    l_i,
    m_i,
    kv_scale,
    buf_ptr,
    out_ptr,
    lse_ptr,
    tile,
    row,
    split,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    BLOCK_H: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """The fp8 kernel's float32 partials and lse (or with one split, ``out_ptr`` given,
    the output and lse) from its 8 O^T tiles ``accs``, the partials through the
    ``ring``, dead once every warp is past its last reads (the barrier): a pair's tile
    stored in the dims' order, read back by rows, so that a warp's store writes 32
    consecutive dims (from the accumulators, 8 dims four apart of 4 heads: four times
    the sectors)."""
    o0, o1, o2, o3, o4, o5, o6, o7 = accs
    out_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=l_i.type.layout)
    out_ok = out_heads < NUM_HEADS
    out_off = _head_rows(
        out_ptr, row, out_heads, split, NUM_HEADS, LORA, stride_buf_b, stride_buf_h, stride_buf_s
    )
    if out_ptr is None:
        dst_ptr = buf_ptr
        norm = kv_scale / l_i
    else:
        dst_ptr = out_ptr
        norm, lse = _one_split_result(kv_scale / l_i, (m_i + gl.log2(l_i)) * _LN2, True)
    gl.thread_barrier()
    st0 = _stage_pair(ring[0], o0, o1, norm)
    st1 = _stage_pair(ring[1], o2, o3, norm)
    st2 = _stage_pair(ring[2], o4, o5, norm)
    st3 = _stage_pair(ring[3], o6, o7, norm)
    gl.thread_barrier()
    row_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, _PAIR_ROWS_LAYOUT))
    row_ok = row_heads < NUM_HEADS
    row_off = _head_rows(
        out_ptr, row, row_heads, split, NUM_HEADS, LORA, stride_buf_b, stride_buf_h, stride_buf_s
    )
    _store_pair(dst_ptr, row_off, row_ok, st0, 0)
    _store_pair(dst_ptr, row_off, row_ok, st1, 1)
    _store_pair(dst_ptr, row_off, row_ok, st2, 2)
    _store_pair(dst_ptr, row_off, row_ok, st3, 3)
    if out_ptr is None:
        lse = (m_i + gl.log2(l_i)) * _LN2
        gl.store(buf_ptr + out_off + LORA, lse, mask=out_ok)
    else:
        gl.store(lse_ptr + row * NUM_HEADS + out_heads, lse, mask=out_ok)


@gluon.jit
def _narrow_stage1(
    q_nope_ptr,
    q_pe_ptr,
    kv_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_splits_ptr,
    kv_scale_ptr,
    buf_ptr,
    out_ptr,
    lse_ptr,
    SM_SCALE: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    CAPACITY: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_bt_b: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
    FP8: gl.constexpr,
):
    """Both 16-head kernels' program (docs/kernels.md), the cache's dtype a constexpr:
    ``FP8`` an fp8 cache through a ring of words widened into register operands
    (``_copy_block``, ``_qk_fp8``, ``_pv_fp8``, ``_store_through_ring``), else a
    16-bit one in two slots that the MMAs read (``_qk_16``, ``_pv_16``,
    ``_write_partials``). The rest is one schedule: the split, the block j + 1 copied
    while block j is multiplied, S^T, the column softmax, O^T."""
    gl.static_assert(PAGE_SIZE % BLOCK_N == 0, "blocks must lie inside one page")
    gl.static_assert(gl.num_warps() == 4, "one warpgroup")
    gl.static_assert(BLOCK_N == _CHUNK, "a block is one warpgroup MMA's M")
    # The MMAs' dtype: fp16 on an fp8 cache (e4m3 widens to fp16 exactly), else q's.
    dtype: gl.constexpr = gl.float16 if FP8 else q_nope_ptr.dtype.element_ty
    if FP8:
        gl.static_assert(LORA == 8 * _CHUNK and ROPE == _CHUNK, "DeepSeek's 512 + 64 columns")
        gl.static_assert(kv_ptr.dtype.element_ty == gl.float8e4nv, "a float8_e4m3fn cache")
    else:
        gl.static_assert(kv_ptr.dtype.element_ty == dtype, "a cache of q's dtype")

    tile = gl.program_id(0)
    row = gl.program_id(1)
    split = gl.program_id(2)
    _, start, end = _split_bounds(
        seq_lens_ptr, num_splits_ptr, row, split, out_ptr is not None, CAPACITY
    )
    if end <= start:
        if out_ptr is not None:
            _write_empty_row(out_ptr, lse_ptr, tile, row, NUM_HEADS, LORA, BLOCK_H)
        return

    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_H, 16]
    )
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    cols_layout: gl.constexpr = gl.SliceLayout(0, mma_layout)
    rows_layout: gl.constexpr = gl.SliceLayout(1, mma_layout)
    q_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    q_nope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, LORA], dtype)
    q_pe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, ROPE], dtype)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_H], dtype)
    q_nope_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, LORA], q_nope_layout)
    q_pe_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, ROPE], q_pe_layout)
    pt_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_N, BLOCK_H], p_layout)
    if FP8:
        # The ring: two stages of the block's fp8 words, the latent as four pairs of
        # 64-column chunks, the rope columns apart.
        pe_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        ring = (
            gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT),
            gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT),
            gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT),
            gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT),
            gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 16], pe_layout),
        )
    else:
        # Two slots of the block as the cache holds it, the latent and rope columns apart.
        kv_c_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, LORA], dtype)
        k_pe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, ROPE], dtype)
        ring = (
            gl.allocate_shared_memory(dtype, [2, BLOCK_N, LORA], kv_c_layout),
            gl.allocate_shared_memory(dtype, [2, BLOCK_N, ROPE], k_pe_layout),
        )

    bt_row = block_table_ptr + row * stride_bt_b
    first = start - start % BLOCK_N
    page = gl.load(bt_row + first // PAGE_SIZE)
    if not FP8:  # Q by cp.async, in the first block's group
        _copy_query(
            q_nope_smem.index(0),
            q_pe_smem.index(0),
            q_nope_ptr,
            q_pe_ptr,
            tile,
            row,
            NUM_HEADS,
            BLOCK_H,
            LORA,
            ROPE,
            QP_OFFSET,
            stride_qn_b,
            stride_qn_h,
            stride_qp_b,
            stride_qp_h,
            q_layout,
        )
    _copy_block(
        FP8,
        _ring_stage(ring, 0),
        kv_ptr,
        page,
        first,
        start,
        end,
        PAGE_SIZE,
        NUM_PAGES,
        LORA,
        ROPE,
        BLOCK_N,
        stride_kv_page,
        stride_kv_row,
    )
    async_copy.commit_group()
    page = gl.load(bt_row + (first + BLOCK_N) // PAGE_SIZE, mask=first + BLOCK_N < end, other=0)
    if FP8:  # Q through registers, in fp16 (each bf16 head scaled), under the first copy
        logit_factor = _copy_query_f16(
            q_nope_smem.index(0),
            q_pe_smem.index(0),
            q_nope_ptr,
            q_pe_ptr,
            tile,
            row,
            NUM_HEADS,
            BLOCK_H,
            LORA,
            ROPE,
            QP_OFFSET,
            stride_qn_b,
            stride_qn_h,
            stride_qp_b,
            stride_qp_h,
            q_layout,
        )
        fence_async_shared()  # Q is read by the MMAs (the async proxy)

    kv_scale = gl.load(kv_scale_ptr)
    if FP8:  # per head (a column of S^T): the logit factor of its fp16 scaling
        qk_factor = gl.convert_layout(logit_factor, cols_layout)
        qk_scale = (qk_factor * (SM_SCALE * _LOG2E * kv_scale))[None, :]
    else:
        qk_scale = SM_SCALE * _LOG2E * kv_scale
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=cols_layout)
    l_acc = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma_layout)
    if FP8:  # O^T as 8 M-tiles of 64 dims, a latent pair's two widened together
        accs = _zero_tiles(LORA // _CHUNK, _CHUNK, BLOCK_H, mma_layout)
    else:  # one accumulator of 8 M-tiles
        accs = _zero_tiles(1, LORA, BLOCK_H, mma_layout)
    s = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma_layout)
    s_rows = gl.arange(0, BLOCK_N, layout=rows_layout)

    for n0 in range(first, end, BLOCK_N):
        stage = ((n0 - first) // BLOCK_N) & 1
        z = _opaque_zero(n0)
        q_nope = q_nope_smem.index(z)
        q_pe = q_pe_smem.index(z)
        pt = pt_smem.index(z)
        # This block has landed (this thread's copies, then, past the barrier, every
        # thread's); every warp is past the last block's reads of the other stage and
        # its PV MMAs, so the next block may be copied there and P^T overwritten.
        async_copy.wait_group(0)
        if not FP8:  # (the fp8 ring is read by shared loads, the generic proxy)
            fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads async
        gl.thread_barrier()
        # The page index two blocks ahead first: the copies issued after it would
        # otherwise stand before it in the load queue.
        nxt = n0 + BLOCK_N
        page_after = gl.load(
            bt_row + (nxt + BLOCK_N) // PAGE_SIZE, mask=nxt + BLOCK_N < end, other=0
        )
        _copy_block(
            FP8,
            _ring_stage(ring, 1 - stage),
            kv_ptr,
            page,
            nxt,
            start,
            end,
            PAGE_SIZE,
            NUM_PAGES,
            LORA,
            ROPE,
            BLOCK_N,
            stride_kv_page,
            stride_kv_row,
        )
        async_copy.commit_group()
        page = page_after
        k = _ring_stage(ring, stage)
        if FP8:
            s, x0, x1 = _qk_fp8(k, s, q_nope, q_pe, a_layout)
        else:
            s = _qk_16(k, s, q_nope, q_pe)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        tokens = n0 + s_rows
        live = (tokens >= start) & (tokens < end)
        m_i, l_acc, accs = _column_softmax(s, qk_scale, live, m_i, l_acc, accs, pt, n0)
        if FP8:
            accs = _pv_fp8(k, x0, x1, pt, accs, a_layout)
        else:
            accs = _pv_16(k, pt, accs)

    async_copy.wait_group(0)  # the phantom copy past the last block
    l_i = gl.sum(l_acc, 0)
    if FP8:
        _store_through_ring(
            ring,
            accs,
            l_i,
            m_i,
            kv_scale,
            buf_ptr,
            out_ptr,
            lse_ptr,
            tile,
            row,
            split,
            NUM_HEADS,
            LORA,
            BLOCK_H,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
    else:
        # By heads for the stores: a warp writes a head's consecutive dims.
        by_heads: gl.constexpr = gl.BlockedLayout([1, 2], [1, 32], [4, 1], [1, 0])
        acc = gl.convert_layout(gl.permute(accs[0], (1, 0)), by_heads)
        _write_partials(
            buf_ptr,
            out_ptr,
            lse_ptr,
            acc,
            l_i,
            m_i,
            kv_scale,
            tile,
            row,
            split,
            True,
            None,
            0,
            True,
            BF16_PARTIALS,
            NUM_HEADS,
            LORA,
            BLOCK_H,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )


@gluon.jit
def mla_decode_stage1_gluon_fp8_h16(
    q_nope_ptr,
    q_pe_ptr,
    kv_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_splits_ptr,
    kv_scale_ptr,
    buf_in_ptr,  # noqa: ARG001 (the aliased buffer as an input, never read)
    buf_ptr,
    out_ptr,
    lse_ptr,
    SM_SCALE: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    CAPACITY: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_bt_b: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
):
    """Stage 1 for an fp8 cache, 16-head tiles, tokens on the MMAs' M (docs/kernels.md): the
    blocks through a two-stage ``cp.async`` ring of fp8 words (block j + 1 in flight while
    block j is multiplied), K and V^T widened from the ring into the MMAs' register
    operands; float32 partials. ``_narrow_stage1`` with ``FP8``. 4 warps, 232 registers;
    94,464 bytes of shared memory: two CTAs an SM."""
    _narrow_stage1(
        q_nope_ptr,
        q_pe_ptr,
        kv_ptr,
        block_table_ptr,
        seq_lens_ptr,
        num_splits_ptr,
        kv_scale_ptr,
        buf_ptr,
        out_ptr,
        lse_ptr,
        SM_SCALE,
        NUM_HEADS,
        PAGE_SIZE,
        NUM_PAGES,
        CAPACITY,
        LORA,
        ROPE,
        stride_qn_b,
        stride_qn_h,
        stride_qp_b,
        stride_qp_h,
        QP_OFFSET,
        stride_kv_page,
        stride_kv_row,
        stride_bt_b,
        stride_buf_b,
        stride_buf_h,
        stride_buf_s,
        BLOCK_H,
        BLOCK_N,
        False,  # BF16_PARTIALS: float32 partials
        True,  # FP8
    )


@gluon.jit
def mla_decode_stage1_gluon_h16(
    q_nope_ptr,
    q_pe_ptr,
    kv_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_splits_ptr,
    kv_scale_ptr,
    buf_in_ptr,  # noqa: ARG001 (the aliased buffer as an input, never read)
    buf_ptr,
    out_ptr,
    lse_ptr,
    SM_SCALE: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    CAPACITY: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_bt_b: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
):
    """Stage 1 for a 16-bit cache at 16-head tiles, tokens on the MMAs' M (docs/kernels.md):
    two latent slots filled by ``cp.async`` (block j + 1 in flight while block j is
    multiplied), every MMA operand from shared memory; ``_narrow_stage1`` without ``FP8``.
    Its name is its first tile's: ``BLOCK_H`` is 16 or 32 heads. 4 warps, 125 registers;
    168,192 bytes of shared memory at 16 heads (188,928 at 32): one CTA an SM."""
    _narrow_stage1(
        q_nope_ptr,
        q_pe_ptr,
        kv_ptr,
        block_table_ptr,
        seq_lens_ptr,
        num_splits_ptr,
        kv_scale_ptr,
        buf_ptr,
        out_ptr,
        lse_ptr,
        SM_SCALE,
        NUM_HEADS,
        PAGE_SIZE,
        NUM_PAGES,
        CAPACITY,
        LORA,
        ROPE,
        stride_qn_b,
        stride_qn_h,
        stride_qp_b,
        stride_qp_h,
        QP_OFFSET,
        stride_kv_page,
        stride_kv_row,
        stride_bt_b,
        stride_buf_b,
        stride_buf_h,
        stride_buf_s,
        BLOCK_H,
        BLOCK_N,
        BF16_PARTIALS,
        False,  # FP8
    )
