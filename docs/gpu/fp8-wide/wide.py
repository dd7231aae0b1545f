"""An experiment for #21's exact fp8 row (128/128/16384): a 64-head fp8 stage 1 with
tokens on the MMAs' M, K and V^T widened from the ring's fp8 words straight into
wgmma's register A operands (no widened copy in shared memory), as the 16-head fp8
kernel does, at 64 heads a CTA: two warpgroups, each its own 32 heads (the MMAs'
layout ``warps_per_cta=[4, 2]``: N split between them), sharing one ``cp.async`` ring
of fp8 blocks. Each warpgroup widens the whole block into its registers. One CTA an SM
(8 warps). The output is stored straight from the accumulators (no staging): a
slower epilogue than the kernels', negligible on long rows.

Launched by ``ab_wide.py``; built on the CPU by ``build.py``.
"""

from __future__ import annotations

from mla_jax._gluon_kernels import (
    _CHUNK,
    _LN2,
    _LOG2E,
    _RING_PAIR_LAYOUT,
    _THREAD_ANY_16,
    RESCALE_THRESHOLD,
    _copy_query_f16,
    _copy_rows,
    _cta_any,
    _head_rows,
    _one_split_result,
    _opaque_zero,
    _pv_operands,
    _qk_chunk,
    _safe_page,
    _split_range,
    _write_empty_row,
)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

NUM_WARPS = 8
STAGES = 2

# _CHUNK_WORDS_LAYOUT and _PV_WORDS_LAYOUT of the 16-head kernel, the third warp bit
# (the second warpgroup) holding the same words: each warpgroup widens the whole block.
_WORDS_LAYOUT = gl.constexpr(
    gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0]],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0], [0, 0]],
        block_bases=[],
        shape=[64, 16],
    )
)
_PV_LAYOUT = gl.constexpr(
    gl.DistributedLinearLayout(
        reg_bases=[[1, 0], [8, 0], [16, 0], [32, 0]],
        lane_bases=[[2, 0], [4, 0], [0, 1], [0, 2], [0, 4]],
        warp_bases=[[0, 8], [0, 16], [0, 0]],
        block_bases=[],
        shape=[64, 32],
    )
)


@gluon.jit
def _ring_copy8(
    lat0,
    lat1,
    lat2,
    lat3,
    pe,
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
    """``_ring_copy`` by 8 warps."""
    lat_layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [8, 1], [1, 0])
    pe_layout: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [8, 1], [1, 0])
    words = kv_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    page_base = words + _safe_page(page, NUM_PAGES).to(gl.int64) * (stride_kv_page // 4)
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
def _softmax16(s, qk_scale, live, m_i, l_acc, accs, pt, i):
    """``_column_softmax`` with 16 values a thread in the vote."""
    s = gl.where(live[:, None], s * qk_scale, float("-inf"))
    p = gl.exp2(s - m_i[None, :])
    pt.store(p.to(pt.dtype))
    fence_async_shared()
    flags = (s - m_i[None, :] > RESCALE_THRESHOLD).to(gl.int32)
    if _cta_any(flags, i, _THREAD_ANY_16) != 0:
        m_new = gl.maximum(m_i, gl.max(s, 0))
        grow = m_new - m_i > RESCALE_THRESHOLD
        alpha = gl.where(grow, gl.exp2(m_i - m_new), 1.0)
        m_i = gl.where(grow, m_new, m_i)
        p = gl.exp2(s - m_i[None, :])
        alpha_rows = gl.max(gl.reshape(gl.zeros_like(s) + alpha[None, :], [4, 2, 8, 64]), 1)
        l_acc = l_acc * alpha_rows + _pair_rows(p)
        rescaled = ()
        for k in gl.static_range(len(accs)):
            rescaled = rescaled + (accs[k] * alpha[None, :],)
        accs = rescaled
        pt.store(p.to(pt.dtype))
        fence_async_shared()
        gl.thread_barrier()
    else:
        l_acc = l_acc + _pair_rows(p)
    return m_i, l_acc, accs


@gluon.jit
def _pair_rows(p):
    """``p`` ([64 tokens, 64 heads], the MMAs' layout) summed over each thread's two
    rows (tokens r and r + 8 of a warp's 16): ``[4, 8, 64]``, no data moved."""
    return gl.sum(gl.reshape(p, [4, 2, 8, 64]), 1)


@gluon.jit
def _store_tile(dst_ptr, off, ok, o, norm, T: gl.constexpr, rows_layout: gl.constexpr):
    """M-tile ``T`` (latent pair ``T // 2``, half ``T % 2``) of O^T, normalised, into its
    latent dims of each head's row at ``off`` (``_pv_operands``' dims order)."""
    r = gl.arange(0, _CHUNK, layout=rows_layout)
    dims = 128 * (T // 2) + 32 * (r >> 4) + 4 * (r & 7) + 2 * (T % 2) + ((r >> 3) & 1)
    vals = (o * norm[None, :]).to(dst_ptr.dtype.element_ty)
    gl.store(dst_ptr + off[None, :] + dims[:, None], vals, mask=ok[None, :])


@gluon.jit
def mla_decode_stage1_gluon_fp8_wide(
    q_nope_ptr,
    q_pe_ptr,
    kv_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_splits_ptr,
    kv_scale_ptr,
    buf_in_ptr,  # noqa: ARG001
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
    gl.static_assert(PAGE_SIZE % BLOCK_N == 0, "blocks must lie inside one page")
    gl.static_assert(gl.num_warps() == 8, "two warpgroups")
    gl.static_assert(BLOCK_N == _CHUNK and BLOCK_H == 64, "64 tokens, 64 heads")
    gl.static_assert(kv_ptr.dtype.element_ty == gl.float8e4nv, "a float8_e4m3fn cache")
    dtype: gl.constexpr = gl.float16

    tile = gl.program_id(0)
    row = gl.program_id(1)
    split = gl.program_id(2)
    if out_ptr is None:
        num_splits = gl.load(num_splits_ptr)
    else:
        num_splits = 1
    start, end = _split_range(seq_lens_ptr, row, num_splits, split, CAPACITY)
    if end <= start:
        if out_ptr is not None:
            _write_empty_row(out_ptr, lse_ptr, tile, row, NUM_HEADS, LORA, BLOCK_H)
        return

    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, BLOCK_H // 2, 16]
    )
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    cols_layout: gl.constexpr = gl.SliceLayout(0, mma_layout)
    rows_layout: gl.constexpr = gl.SliceLayout(1, mma_layout)
    q_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
    q_nope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, LORA], dtype)
    q_pe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, ROPE], dtype)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_H], dtype)
    pe_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    q_nope_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, LORA], q_nope_layout)
    q_pe_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, ROPE], q_pe_layout)
    pt_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_N, BLOCK_H], p_layout)
    lat0 = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    lat1 = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    lat2 = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    lat3 = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    pe = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 16], pe_layout)

    bt_row = block_table_ptr + row * stride_bt_b
    first = start - start % BLOCK_N
    page = gl.load(bt_row + first // PAGE_SIZE)
    _ring_copy8(
        lat0.index(0),
        lat1.index(0),
        lat2.index(0),
        lat3.index(0),
        pe.index(0),
        kv_ptr,
        page,
        first,
        start,
        end,
        PAGE_SIZE,
        NUM_PAGES,
        stride_kv_page,
        stride_kv_row,
    )
    async_copy.commit_group()
    page = gl.load(bt_row + (first + BLOCK_N) // PAGE_SIZE, mask=first + BLOCK_N < end, other=0)
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
    fence_async_shared()

    kv_scale = gl.load(kv_scale_ptr)
    qk_scale = gl.convert_layout(logit_factor, cols_layout) * (SM_SCALE * _LOG2E * kv_scale)
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=cols_layout)
    l_acc = _pair_rows(gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma_layout))
    o0 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o1 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o2 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o3 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o4 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o5 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o6 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o7 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    s_rows = gl.arange(0, BLOCK_N, layout=rows_layout)

    for n0 in range(first, end, BLOCK_N):
        stage = ((n0 - first) // BLOCK_N) & 1
        z = _opaque_zero(n0)
        q_nope = q_nope_smem.index(z)
        q_pe = q_pe_smem.index(z)
        pt = pt_smem.index(z)
        async_copy.wait_group(0)
        gl.thread_barrier()
        nxt = n0 + BLOCK_N
        page_after = gl.load(
            bt_row + (nxt + BLOCK_N) // PAGE_SIZE, mask=nxt + BLOCK_N < end, other=0
        )
        _ring_copy8(
            lat0.index(1 - stage),
            lat1.index(1 - stage),
            lat2.index(1 - stage),
            lat3.index(1 - stage),
            pe.index(1 - stage),
            kv_ptr,
            page,
            nxt,
            start,
            end,
            PAGE_SIZE,
            NUM_PAGES,
            stride_kv_page,
            stride_kv_row,
        )
        async_copy.commit_group()
        page = page_after
        k0 = lat0.index(stage)
        k1 = lat1.index(stage)
        k2 = lat2.index(stage)
        k3 = lat3.index(stage)
        kp = pe.index(stage)
        # S^T's accumulator made in the loop: not carried (live) through the PV MMAs.
        s = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma_layout)
        w = k0.slice(0, 16, 1).load(_WORDS_LAYOUT)
        w_next = k0.slice(16, 16, 1).load(_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope.slice(0, 64, 1), True, a_layout)
        w = k1.slice(0, 16, 1).load(_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope.slice(64, 64, 1), False, a_layout)
        w_next = k1.slice(16, 16, 1).load(_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope.slice(128, 64, 1), False, a_layout)
        w = k2.slice(0, 16, 1).load(_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope.slice(192, 64, 1), False, a_layout)
        w_next = k2.slice(16, 16, 1).load(_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope.slice(256, 64, 1), False, a_layout)
        w = k3.slice(0, 16, 1).load(_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope.slice(320, 64, 1), False, a_layout)
        w_next = k3.slice(16, 16, 1).load(_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope.slice(384, 64, 1), False, a_layout)
        w = kp.load(_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope.slice(448, 64, 1), False, a_layout)
        s = _qk_chunk(w, s, q_pe, False, a_layout)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        tokens = n0 + s_rows
        live = (tokens >= start) & (tokens < end)
        o_tiles = (o0, o1, o2, o3, o4, o5, o6, o7)
        scale = qk_scale[None, :]
        m_i, l_acc, o_tiles = _softmax16(s, scale, live, m_i, l_acc, o_tiles, pt, n0)
        o0, o1, o2, o3, o4, o5, o6, o7 = o_tiles
        x0 = k0.load(_PV_LAYOUT)
        a0, a1 = _pv_operands(x0, a_layout)
        o0 = warpgroup_mma(a0, pt, o0, is_async=True)
        o1 = warpgroup_mma(a1, pt, o1, is_async=True)
        x1 = k1.load(_PV_LAYOUT)
        a2, a3 = _pv_operands(x1, a_layout)
        o2 = warpgroup_mma(a2, pt, o2, is_async=True)
        o3 = warpgroup_mma(a3, pt, o3, is_async=True)
        x2 = k2.load(_PV_LAYOUT)
        o0, o1 = warpgroup_mma_wait(num_outstanding=2, deps=(o0, o1))
        a4, a5 = _pv_operands(x2, a_layout)
        o4 = warpgroup_mma(a4, pt, o4, is_async=True)
        o5 = warpgroup_mma(a5, pt, o5, is_async=True)
        x3 = k3.load(_PV_LAYOUT)
        o2, o3 = warpgroup_mma_wait(num_outstanding=2, deps=(o2, o3))
        a6, a7 = _pv_operands(x3, a_layout)
        o6 = warpgroup_mma(a6, pt, o6, is_async=True)
        o7 = warpgroup_mma(a7, pt, o7, is_async=True)
        o4, o5, o6, o7 = warpgroup_mma_wait(num_outstanding=0, deps=(o4, o5, o6, o7))

    async_copy.wait_group(0)
    l_i = gl.convert_layout(gl.sum(gl.sum(l_acc, 0), 0), cols_layout)
    out_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=cols_layout)
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
    _store_tile(dst_ptr, out_off, out_ok, o0, norm, 0, rows_layout)
    _store_tile(dst_ptr, out_off, out_ok, o1, norm, 1, rows_layout)
    _store_tile(dst_ptr, out_off, out_ok, o2, norm, 2, rows_layout)
    _store_tile(dst_ptr, out_off, out_ok, o3, norm, 3, rows_layout)
    _store_tile(dst_ptr, out_off, out_ok, o4, norm, 4, rows_layout)
    _store_tile(dst_ptr, out_off, out_ok, o5, norm, 5, rows_layout)
    _store_tile(dst_ptr, out_off, out_ok, o6, norm, 6, rows_layout)
    _store_tile(dst_ptr, out_off, out_ok, o7, norm, 7, rows_layout)
    if out_ptr is None:
        lse = (m_i + gl.log2(l_i)) * _LN2
        gl.store(buf_ptr + out_off + LORA, lse, mask=out_ok)
    else:
        gl.store(lse_ptr + row * NUM_HEADS + out_heads, lse, mask=out_ok)
