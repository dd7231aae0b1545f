"""``wide.py``'s kernel as two warp-specialised partitions: each warpgroup its own 32
heads, its own Q and P^T, through a three-stage ring of fp8 blocks that both fill (a
half each: warpgroup 0 latent words 0-63, warpgroup 1 words 64-127 and the rope part)
and both read, synchronised by mbarriers (``ready``: both halves landed; ``empty``: both
warpgroups past their reads), with no CTA-wide barrier in the loop: one warpgroup's
softmax may run under the other's MMAs. The softmax takes each block's exact column max
(no vote). ``SKEW``: warpgroup 1 starts its first block once warpgroup 0's first S^T is
done (half a block behind).

Launched by ``ab_ws.py``; built on the CPU by ``build.py --ws``.
"""

from __future__ import annotations

from mla_jax._gluon_kernels import (
    _CHUNK,
    _CHUNK_WORDS_LAYOUT,
    _LN2,
    _LOG2E,
    _PV_WORDS_LAYOUT,
    _RING_PAIR_LAYOUT,
    _arrive_once_landed,
    _copy_query_f16,
    _copy_rows,
    _head_rows,
    _one_split_result,
    _opaque_zero,
    _pv_operands,
    _qk_chunk,
    _safe_page,
    _split_range,
)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

NUM_WARPS = 4  # the default partition; the worker adds 4
WORKER_REGS = gl.constexpr(256)
STAGES = gl.constexpr(3)
HEADS = gl.constexpr(32)  # a warpgroup's


@gluon.jit
def _copy_half(
    lat_a,
    lat_b,
    pe,
    kv_ptr,
    page,
    n0,
    start,
    end,
    WG: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
):
    """Warpgroup ``WG``'s half of the block at ``n0``: latent pairs 2 WG and 2 WG + 1
    (``lat_a``, ``lat_b``), and for warpgroup 1 the rope words (``pe``)."""
    lat_layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    pe_layout: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    words = kv_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    page_base = words + _safe_page(page, NUM_PAGES).to(gl.int64) * (stride_kv_page // 4)
    offs = gl.arange(0, _CHUNK, layout=gl.SliceLayout(1, lat_layout))
    rows = n0 % PAGE_SIZE + offs
    ok = (n0 + offs >= start) & (n0 + offs < end)
    _copy_rows(lat_a, page_base + 64 * WG, rows, ok, stride_kv_row // 4, 32, lat_layout)
    _copy_rows(lat_b, page_base + 64 * WG + 32, rows, ok, stride_kv_row // 4, 32, lat_layout)
    if WG == 1:
        offs = gl.arange(0, _CHUNK, layout=gl.SliceLayout(1, pe_layout))
        rows = n0 % PAGE_SIZE + offs
        ok = (n0 + offs >= start) & (n0 + offs < end)
        _copy_rows(pe, page_base + 128, rows, ok, stride_kv_row // 4, 16, pe_layout)


@gluon.jit
def _store_tile(dst_ptr, off, ok, o, norm, T: gl.constexpr, rows_layout: gl.constexpr):
    """M-tile ``T`` of O^T, normalised, into its latent dims of each head's row."""
    r = gl.arange(0, _CHUNK, layout=rows_layout)
    dims = 128 * (T // 2) + 32 * (r >> 4) + 4 * (r & 7) + 2 * (T % 2) + ((r >> 3) & 1)
    vals = (o * norm[None, :]).to(dst_ptr.dtype.element_ty)
    gl.store(dst_ptr + off[None, :] + dims[:, None], vals, mask=ok[None, :])


@gluon.jit
def _pair_rows(p):
    """``p`` ([64 tokens, 32 heads], the MMAs' layout) summed over each thread's two
    rows (tokens r and r + 8 of a warp's 16): ``[4, 8, 32]``, no data moved."""
    return gl.sum(gl.reshape(p, [4, 2, 8, p.shape[1]]), 1)


@gluon.jit
def _wg(
    WG: gl.constexpr,
    q_nope_all,
    q_pe_all,
    pt_all,
    lat0,
    lat1,
    lat2,
    lat3,
    pe,
    ready,
    empty,
    skew,
    q_nope_ptr,
    q_pe_ptr,
    kv_ptr,
    bt_row,
    kv_scale_ptr,
    buf_ptr,
    out_ptr,
    lse_ptr,
    tile,
    row,
    split,
    first,
    start,
    end,
    num_blocks,
    SM_SCALE: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
    BLOCK_N: gl.constexpr,
    SKEW: gl.constexpr,
):
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEADS, 16]
    )
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    cols_layout: gl.constexpr = gl.SliceLayout(0, mma_layout)
    rows_layout: gl.constexpr = gl.SliceLayout(1, mma_layout)
    q_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    if WG == 0:
        mine_a = lat0
        mine_b = lat1
    else:
        mine_a = lat2
        mine_b = lat3
    # The first two blocks (a half each), then this warpgroup's 32 heads of Q as fp16.
    if num_blocks > 0:
        page = gl.load(bt_row + first // PAGE_SIZE)
        _copy_half(
            mine_a.index(0),
            mine_b.index(0),
            pe.index(0),
            kv_ptr,
            page,
            first,
            start,
            end,
            WG,
            PAGE_SIZE,
            NUM_PAGES,
            stride_kv_page,
            stride_kv_row,
        )
        _arrive_once_landed(ready.index(0))
    if num_blocks > 1:
        page = gl.load(bt_row + (first + BLOCK_N) // PAGE_SIZE)
        _copy_half(
            mine_a.index(1),
            mine_b.index(1),
            pe.index(1),
            kv_ptr,
            page,
            first + BLOCK_N,
            start,
            end,
            WG,
            PAGE_SIZE,
            NUM_PAGES,
            stride_kv_page,
            stride_kv_row,
        )
        _arrive_once_landed(ready.index(1))
    logit_factor = _copy_query_f16(
        q_nope_all.index(0),
        q_pe_all.index(0),
        q_nope_ptr,
        q_pe_ptr,
        2 * tile + WG,
        row,
        NUM_HEADS,
        HEADS,
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
    gl.thread_barrier()

    kv_scale = gl.load(kv_scale_ptr)
    qk_scale = gl.convert_layout(logit_factor, cols_layout) * (SM_SCALE * _LOG2E * kv_scale)
    m_i = gl.full([HEADS], float("-inf"), gl.float32, layout=cols_layout)
    l_acc = _pair_rows(gl.zeros([BLOCK_N, HEADS], gl.float32, layout=mma_layout))
    o0 = gl.zeros([_CHUNK, HEADS], gl.float32, layout=mma_layout)
    o1 = gl.zeros([_CHUNK, HEADS], gl.float32, layout=mma_layout)
    o2 = gl.zeros([_CHUNK, HEADS], gl.float32, layout=mma_layout)
    o3 = gl.zeros([_CHUNK, HEADS], gl.float32, layout=mma_layout)
    o4 = gl.zeros([_CHUNK, HEADS], gl.float32, layout=mma_layout)
    o5 = gl.zeros([_CHUNK, HEADS], gl.float32, layout=mma_layout)
    o6 = gl.zeros([_CHUNK, HEADS], gl.float32, layout=mma_layout)
    o7 = gl.zeros([_CHUNK, HEADS], gl.float32, layout=mma_layout)
    s_rows = gl.arange(0, BLOCK_N, layout=rows_layout)
    if SKEW and WG == 1:  # noqa: SIM102 (num_blocks is a run-time value)
        if num_blocks > 0:
            mbarrier.wait(skew, 0)

    for j in range(num_blocks):
        n0 = first + j * BLOCK_N
        stage = j % STAGES
        z = _opaque_zero(j)
        q_nope_smem = q_nope_all.index(z)
        q_pe_smem = q_pe_all.index(z)
        pt = pt_all.index(z)
        # Block j + 2 into the stage block j - 1 used, once both warpgroups are past it.
        if j + 2 < num_blocks:
            nxt = (j + 2) % STAGES
            if j >= 1:
                mbarrier.wait(empty.index(nxt), ((j - 1) // STAGES) & 1)
            page = gl.load(bt_row + (n0 + 2 * BLOCK_N) // PAGE_SIZE)
            _copy_half(
                mine_a.index(nxt),
                mine_b.index(nxt),
                pe.index(nxt),
                kv_ptr,
                page,
                n0 + 2 * BLOCK_N,
                start,
                end,
                WG,
                PAGE_SIZE,
                NUM_PAGES,
                stride_kv_page,
                stride_kv_row,
            )
            _arrive_once_landed(ready.index(nxt))
        mbarrier.wait(ready.index(stage), (j // STAGES) & 1)
        k0 = lat0.index(stage)
        k1 = lat1.index(stage)
        k2 = lat2.index(stage)
        k3 = lat3.index(stage)
        kp = pe.index(stage)
        s = gl.zeros([BLOCK_N, HEADS], gl.float32, layout=mma_layout)
        w = k0.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        w_next = k0.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope_smem.slice(0, 64, 1), True, a_layout)
        w = k1.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope_smem.slice(64, 64, 1), False, a_layout)
        w_next = k1.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope_smem.slice(128, 64, 1), False, a_layout)
        w = k2.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope_smem.slice(192, 64, 1), False, a_layout)
        w_next = k2.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope_smem.slice(256, 64, 1), False, a_layout)
        w = k3.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope_smem.slice(320, 64, 1), False, a_layout)
        w_next = k3.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope_smem.slice(384, 64, 1), False, a_layout)
        w = kp.load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope_smem.slice(448, 64, 1), False, a_layout)
        s = _qk_chunk(w, s, q_pe_smem, False, a_layout)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        if SKEW and WG == 0:  # noqa: SIM102 (j is a run-time value)
            if j == 0:
                mbarrier.arrive(skew)
        tokens = n0 + s_rows
        live = (tokens >= start) & (tokens < end)
        s = gl.where(live[:, None], s * qk_scale[None, :], float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 0))
        alpha = gl.exp2(m_i - m_new)
        m_i = m_new
        p = gl.exp2(s - m_i[None, :])
        l_acc = l_acc * _pair_rows(gl.zeros_like(s) + alpha[None, :]) * 0.5 + _pair_rows(p)
        pt.store(p.to(pt.dtype))
        fence_async_shared()
        gl.thread_barrier()
        o0 = o0 * alpha[None, :]
        o1 = o1 * alpha[None, :]
        o2 = o2 * alpha[None, :]
        o3 = o3 * alpha[None, :]
        o4 = o4 * alpha[None, :]
        o5 = o5 * alpha[None, :]
        o6 = o6 * alpha[None, :]
        o7 = o7 * alpha[None, :]
        x0 = k0.load(_PV_WORDS_LAYOUT)
        a0, a1 = _pv_operands(x0, a_layout)
        o0 = warpgroup_mma(a0, pt, o0, is_async=True)
        o1 = warpgroup_mma(a1, pt, o1, is_async=True)
        x1 = k1.load(_PV_WORDS_LAYOUT)
        a2, a3 = _pv_operands(x1, a_layout)
        o2 = warpgroup_mma(a2, pt, o2, is_async=True)
        o3 = warpgroup_mma(a3, pt, o3, is_async=True)
        x2 = k2.load(_PV_WORDS_LAYOUT)
        o0, o1 = warpgroup_mma_wait(num_outstanding=2, deps=(o0, o1))
        a4, a5 = _pv_operands(x2, a_layout)
        o4 = warpgroup_mma(a4, pt, o4, is_async=True)
        o5 = warpgroup_mma(a5, pt, o5, is_async=True)
        x3 = k3.load(_PV_WORDS_LAYOUT)
        o2, o3 = warpgroup_mma_wait(num_outstanding=2, deps=(o2, o3))
        a6, a7 = _pv_operands(x3, a_layout)
        o6 = warpgroup_mma(a6, pt, o6, is_async=True)
        o7 = warpgroup_mma(a7, pt, o7, is_async=True)
        o4, o5, o6, o7 = warpgroup_mma_wait(num_outstanding=0, deps=(o4, o5, o6, o7))
        gl.thread_barrier()  # every warp past its reads of the stage and of P^T
        mbarrier.arrive(empty.index(stage))

    l_i = gl.convert_layout(gl.sum(gl.sum(l_acc, 0), 0), cols_layout)
    out_heads = (2 * tile + WG) * HEADS + gl.arange(0, HEADS, layout=cols_layout)
    out_ok = out_heads < NUM_HEADS
    out_off = _head_rows(
        out_ptr, row, out_heads, split, NUM_HEADS, LORA, stride_buf_b, stride_buf_h, stride_buf_s
    )
    nonempty = num_blocks > 0
    if out_ptr is None:
        if nonempty:
            dst_ptr = buf_ptr
            norm = kv_scale / l_i
            lse = (m_i + gl.log2(l_i)) * _LN2
            _store_tile(dst_ptr, out_off, out_ok, o0, norm, 0, rows_layout)
            _store_tile(dst_ptr, out_off, out_ok, o1, norm, 1, rows_layout)
            _store_tile(dst_ptr, out_off, out_ok, o2, norm, 2, rows_layout)
            _store_tile(dst_ptr, out_off, out_ok, o3, norm, 3, rows_layout)
            _store_tile(dst_ptr, out_off, out_ok, o4, norm, 4, rows_layout)
            _store_tile(dst_ptr, out_off, out_ok, o5, norm, 5, rows_layout)
            _store_tile(dst_ptr, out_off, out_ok, o6, norm, 6, rows_layout)
            _store_tile(dst_ptr, out_off, out_ok, o7, norm, 7, rows_layout)
            gl.store(buf_ptr + out_off + LORA, lse, mask=out_ok)
    else:
        norm, lse = _one_split_result(kv_scale / l_i, (m_i + gl.log2(l_i)) * _LN2, nonempty)
        _store_tile(out_ptr, out_off, out_ok, o0, norm, 0, rows_layout)
        _store_tile(out_ptr, out_off, out_ok, o1, norm, 1, rows_layout)
        _store_tile(out_ptr, out_off, out_ok, o2, norm, 2, rows_layout)
        _store_tile(out_ptr, out_off, out_ok, o3, norm, 3, rows_layout)
        _store_tile(out_ptr, out_off, out_ok, o4, norm, 4, rows_layout)
        _store_tile(out_ptr, out_off, out_ok, o5, norm, 5, rows_layout)
        _store_tile(out_ptr, out_off, out_ok, o6, norm, 6, rows_layout)
        _store_tile(out_ptr, out_off, out_ok, o7, norm, 7, rows_layout)
        gl.store(lse_ptr + row * NUM_HEADS + out_heads, lse, mask=out_ok)


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
    SKEW: gl.constexpr = False,
):
    gl.static_assert(PAGE_SIZE % BLOCK_N == 0, "blocks must lie inside one page")
    gl.static_assert(gl.num_warps() == 4, "the default partition; the worker adds 4")
    gl.static_assert(BLOCK_N == _CHUNK and BLOCK_H == 2 * HEADS, "64 tokens, 64 heads")
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
    first = start - start % BLOCK_N
    num_blocks = gl.where(end > start, (end - first + BLOCK_N - 1) // BLOCK_N, 0)

    q_nope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HEADS, LORA], dtype)
    q_pe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HEADS, ROPE], dtype)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEADS], dtype)
    pe_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    # [1, ...]: indexed in the loop by an opaque 0, so that the MMAs' descriptors are
    # made there, not hoisted out of it into registers (which spill).
    q0_nope = gl.allocate_shared_memory(dtype, [1, HEADS, LORA], q_nope_layout)
    q1_nope = gl.allocate_shared_memory(dtype, [1, HEADS, LORA], q_nope_layout)
    q0_pe = gl.allocate_shared_memory(dtype, [1, HEADS, ROPE], q_pe_layout)
    q1_pe = gl.allocate_shared_memory(dtype, [1, HEADS, ROPE], q_pe_layout)
    pt0 = gl.allocate_shared_memory(dtype, [1, BLOCK_N, HEADS], p_layout)
    pt1 = gl.allocate_shared_memory(dtype, [1, BLOCK_N, HEADS], p_layout)
    lat0 = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    lat1 = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    lat2 = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    lat3 = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    pe = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, 16], pe_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    skew = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout()).index(0)
    for b in gl.static_range(STAGES):
        mbarrier.init(ready.index(b), count=2)
        mbarrier.init(empty.index(b), count=2)
    mbarrier.init(skew, count=1)
    bt_row = block_table_ptr + row * stride_bt_b
    gl.warp_specialize(
        [
            (
                _wg,
                (
                    0,
                    q0_nope,
                    q0_pe,
                    pt0,
                    lat0,
                    lat1,
                    lat2,
                    lat3,
                    pe,
                    ready,
                    empty,
                    skew,
                    q_nope_ptr,
                    q_pe_ptr,
                    kv_ptr,
                    bt_row,
                    kv_scale_ptr,
                    buf_ptr,
                    out_ptr,
                    lse_ptr,
                    tile,
                    row,
                    split,
                    first,
                    start,
                    end,
                    num_blocks,
                    SM_SCALE,
                    NUM_HEADS,
                    PAGE_SIZE,
                    NUM_PAGES,
                    LORA,
                    ROPE,
                    stride_qn_b,
                    stride_qn_h,
                    stride_qp_b,
                    stride_qp_h,
                    QP_OFFSET,
                    stride_kv_page,
                    stride_kv_row,
                    stride_buf_b,
                    stride_buf_h,
                    stride_buf_s,
                    BLOCK_N,
                    SKEW,
                ),
            ),
            (
                _wg,
                (
                    1,
                    q1_nope,
                    q1_pe,
                    pt1,
                    lat0,
                    lat1,
                    lat2,
                    lat3,
                    pe,
                    ready,
                    empty,
                    skew,
                    q_nope_ptr,
                    q_pe_ptr,
                    kv_ptr,
                    bt_row,
                    kv_scale_ptr,
                    buf_ptr,
                    out_ptr,
                    lse_ptr,
                    tile,
                    row,
                    split,
                    first,
                    start,
                    end,
                    num_blocks,
                    SM_SCALE,
                    NUM_HEADS,
                    PAGE_SIZE,
                    NUM_PAGES,
                    LORA,
                    ROPE,
                    stride_qn_b,
                    stride_qn_h,
                    stride_qp_b,
                    stride_qp_h,
                    QP_OFFSET,
                    stride_kv_page,
                    stride_kv_row,
                    stride_buf_b,
                    stride_buf_h,
                    stride_buf_s,
                    BLOCK_N,
                    SKEW,
                ),
            ),
        ],
        [4],
        [WORKER_REGS],
    )
