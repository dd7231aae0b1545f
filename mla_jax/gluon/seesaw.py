"""The 64-head Gluon stage 1 kernel, ``mla_decode_stage1_gluon_seesaw``: FlashMLA's
"seesaw" schedule on two warpgroups (a default partition and one worker), each holding
half of the 64 x 512 accumulator, the latent blocks double-buffered in shared memory
by TMA (or ``cp.async`` at a page's edge; fp8 blocks widened into fp16 slots). A row of
two splits may run as a cluster of two CTAs that merge their partials themselves.
Design and measurements: docs/kernels.md."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from mla_jax.gluon.common import (
    _LOG2E,
    _WG0_SCALE0_ANY,
    _WG0_SCALE1_ANY,
    _WG1_SCALE0_ANY,
    _WG1_SCALE1_ANY,
    RESCALE_THRESHOLD,
    _copy_block_rows,
    _copy_query,
    _copy_rows,
    _finish_split,
    _live_splits,
    _opaque_zero,
    _rescale_rows,
    _safe_page,
    _split_bounds,
)
from mla_jax.gluon.widen import _f16_head_scale, _finite_amax

# The seesaw worker's registers: 256, as the default partition (8 warps x 256 = the
# whole register file).
SEESAW_WORKER_REGS = gl.constexpr(256)


@gluon.jit
def _seesaw_copy_block(
    kv_c_dst,
    k_pe_dst,
    c8_dst,
    pe8_dst,
    kv_c_desc,
    k_pe_desc,
    kv_ptr,
    page,
    n0,
    start,
    end,
    ready,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    BLOCK_N: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
):
    """The block at token ``n0`` (raw page index ``page``) into a slot, signalling
    ``ready`` (count 1) when it has landed. A block wholly inside ``[start, end)``
    comes by TMA (the latent columns in eight 64-column boxes, the rope ones in one,
    each issued by one thread of a warp; the barrier expects their bytes). A block
    with rows outside it (a split's first or last block, or the phantom second block
    of an odd count, all outside) comes by ``cp.async`` from the warpgroup's 128
    threads, those rows zero-filled so that no value outside the row's tokens reaches
    an MMA (``_arrive_once_landed``).

    An fp8 block always comes by ``cp.async``, into the slot's fp8 views (``c8_dst``:
    ``[8 * BLOCK_N, 64]``, 64-column latent chunk ``c`` in rows ``64 c`` to
    ``64 c + 63``; ``pe8_dst``: the rope columns), which ``_widen_slot`` widens in
    place."""
    if kv_ptr.dtype.element_ty == gl.float8e4nv:
        layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
        j = gl.arange(0, 8 * BLOCK_N, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, 64, layout=gl.SliceLayout(0, layout))
        page_base = kv_ptr + _safe_page(page, NUM_PAGES).to(gl.int64) * stride_kv_page
        r = j % BLOCK_N
        ok = (n0 + r >= start) & (n0 + r < end)
        ptrs = page_base + ((n0 % PAGE_SIZE + r) * stride_kv_row + (j // BLOCK_N) * 64)[:, None]
        async_copy.async_copy_global_to_shared(c8_dst, ptrs + cols[None, :], mask=ok[:, None])
        r = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
        ok = (n0 + r >= start) & (n0 + r < end)
        _copy_rows(pe8_dst, page_base + LORA, n0 % PAGE_SIZE + r, ok, stride_kv_row, ROPE, layout)
        _arrive_once_landed(ready)
    elif (n0 >= start) & (n0 + BLOCK_N <= end):
        row0 = _safe_page(page, NUM_PAGES) * PAGE_SIZE + n0 % PAGE_SIZE
        mbarrier.expect(ready, BLOCK_N * (LORA + ROPE) * kv_c_dst.dtype.primitive_bitwidth // 8)
        tma.async_copy_global_to_shared(kv_c_desc, [row0, 0], ready, kv_c_dst)
        tma.async_copy_global_to_shared(k_pe_desc, [row0, 0], ready, k_pe_dst)
    else:
        _copy_block_rows(
            kv_c_dst,
            k_pe_dst,
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
        _arrive_once_landed(ready)


@gluon.jit
def _arrive_once_landed(ready):
    """Completes ``ready`` (count 1) once this warpgroup's ``cp.async`` copies so far
    have landed: each thread's ``cp.async.mbarrier.arrive`` adds a pending arrival that
    its copies complete, then, after a warpgroup barrier, one plain arrival."""
    async_copy.mbarrier_arrive(ready, increment_count=True)
    gl.thread_barrier()
    mbarrier.arrive(ready)


@gluon.jit
def _widen_slot(kv_c, k_pe, c8, pe8):
    """Widens a slot's fp8 block in place into fp16 (one warpgroup; e4m3 widens to fp16
    exactly, ``cvt.rn.f16x2.e4m3x2``). ``c8`` (``[8 * 64, 64]`` fp8, latent chunk ``c``
    in rows ``64 c``...) lies on the front half of ``kv_c`` (``[64, 512]`` fp16, whose
    64-column chunk ``c`` is its bytes ``[8c, 8c + 8)`` KB); ``pe8`` is the slot's own
    rope staging. Chunk ``c`` is read from ``4c`` KB and written to ``8c`` KB, from 7
    down: chunks 7-4 land in the back half, above every fp8 byte; 3 and 2 over 4-7's,
    so after a barrier; 1 and 0 over 0-3's, so after a second one, all four read by
    then. Ends with the slot published to this warpgroup's MMAs (fence + barrier)."""
    # 8 bytes a thread, 8 threads a row: a half-warp's loads read 128 contiguous fp8
    # bytes, a quarter-warp's 16-byte stores one row's eight swizzled 16-byte units.
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    dtype: gl.constexpr = kv_c.dtype
    for c in gl.static_range(4):
        x = c8.slice(64 * (7 - c), 64).load(layout)
        kv_c.slice(64 * (7 - c), 64, dim=1).store(x.to(dtype))
    pe = pe8.load(layout)
    k_pe.store(pe.to(dtype))
    x3 = c8.slice(192, 64).load(layout)
    x2 = c8.slice(128, 64).load(layout)
    gl.thread_barrier()
    kv_c.slice(192, 64, dim=1).store(x3.to(dtype))
    kv_c.slice(128, 64, dim=1).store(x2.to(dtype))
    x1 = c8.slice(64, 64).load(layout)
    x0 = c8.slice(0, 64).load(layout)
    gl.thread_barrier()
    kv_c.slice(64, 64, dim=1).store(x1.to(dtype))
    kv_c.slice(0, 64, dim=1).store(x0.to(dtype))
    fence_async_shared()  # generic-proxy stores, read by wgmma through the async one
    gl.thread_barrier()


@gluon.jit
def _seesaw_qk(q_nope, q_pe, kv_c, k_pe, s_init):
    """S = Q K^T of a slot's block (its ready barrier waited; from an fp8 cache,
    widened by ``_widen_slot``), issued async (the caller waits)."""
    fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads async
    s = warpgroup_mma(q_nope, kv_c.permute((1, 0)), s_init, use_acc=False, is_async=True)
    return warpgroup_mma(q_pe, k_pe.permute((1, 0)), s, is_async=True)


@gluon.jit
def _seesaw_q_f16(q_nope16, q_pe16, q_nope, q_pe, LORA: gl.constexpr):
    """The landed bf16 query tile (``q_nope16``/``q_pe16``, bf16 views) rewritten in
    place as fp16 (``q_nope``/``q_pe``, fp16 views of the same bytes), each head scaled
    by the power of two that puts its largest finite magnitude in ``[2^14, 2^15)``
    (``_copy_query_f16``'s rule). Returns each head's logit factor, the inverse (one
    warpgroup; a thread rewrites only what it read)."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    amax = _finite_amax(q_pe16.load(layout).to(gl.float32))
    for c in gl.static_range(LORA // 64):
        x = q_nope16.slice(64 * c, 64, dim=1).load(layout).to(gl.float32)
        amax = gl.maximum(amax, _finite_amax(x))
    scale, logit_factor = _f16_head_scale(amax)
    x = q_pe16.load(layout).to(gl.float32)
    q_pe.store((x * scale[:, None]).to(gl.float16))
    for c in gl.static_range(LORA // 64):
        x = q_nope16.slice(64 * c, 64, dim=1).load(layout).to(gl.float32)
        q_nope.slice(64 * c, 64, dim=1).store((x * scale[:, None]).to(gl.float16))
    return logit_factor


@gluon.jit
def _seesaw_bars(bars):
    """The barriers both warpgroups name: ready0/1, p0/p1, free0/1, l0/l1 (``bars`` 0-7;
    the kernel's comment says what each counts)."""
    return (
        bars.index(0),
        bars.index(1),
        bars.index(2),
        bars.index(3),
        bars.index(4),
        bars.index(5),
        bars.index(6),
        bars.index(7),
    )


@gluon.jit
def _seesaw_state(
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HALF: gl.constexpr,
    s_layout: gl.constexpr,
    o_layout: gl.constexpr,
):
    """A warpgroup's starting m_i, l_i, O half, the zero S its QK^T starts from, and a
    block's column indices."""
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=s_rows)
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=s_rows)
    acc = gl.zeros([BLOCK_H, HALF], gl.float32, layout=o_layout)
    s_init = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    s_cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    return m_i, l_i, acc, s_init, s_cols


@gluon.jit
def _seesaw_pair_views(i, q_nope_smem, q_pe_smem, kv_c_smem, k_pe_smem):
    """Pair ``i``'s views: Q, the two slots' latent blocks and their k_pe (P of each goes
    over its block's k_pe once QK^T is done with it). Indexed by an opaque 0 so that
    their wgmma descriptors are rebuilt each pair: hoisted out of the loop, Q's 36 alone
    would pin 72 registers (and spill)."""
    z = _opaque_zero(i)
    q_nope = q_nope_smem.index(z)
    q_pe = q_pe_smem.index(z)
    kv_c0 = kv_c_smem.index(z)
    kv_c1 = kv_c_smem.index(z + 1)
    p0_smem = k_pe_smem.index(z)
    p1_smem = k_pe_smem.index(z + 1)
    return z, q_nope, q_pe, kv_c0, kv_c1, p0_smem, p1_smem


@gluon.jit
def _seesaw_scores(
    q_nope, q_pe, kv_c, k_pe, s_init, s_cols, n, start, end, qk_scale, qk_rows, F16Q: gl.constexpr
):
    """S of the block at token ``n`` (its slot landed and, from fp8, widened), scaled to
    log2 units (per head by ``qk_rows`` where q was rewritten as fp16, else by
    ``qk_scale``), -inf outside ``[start, end)``."""
    s = _seesaw_qk(q_nope, q_pe, kv_c, k_pe, s_init)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    tokens = n + s_cols
    live = (tokens >= start) & (tokens < end)
    if F16Q:
        s = gl.where(live[None, :], s * qk_rows[:, None], float("-inf"))
    else:
        s = gl.where(live[None, :], s * qk_scale, float("-inf"))
    return s


@gluon.jit
def _seesaw_softmax(m_prev, s):
    """A block's softmax against the running max ``m_prev`` (lazy rescaling): the new
    max, the factor from ``m_prev`` to it, and P."""
    m_blk = gl.maximum(m_prev, gl.max(s, 1))
    m_new = gl.where(m_blk - m_prev > RESCALE_THRESHOLD, m_blk, m_prev)
    scale = gl.exp2(m_prev - m_new)
    p = gl.exp2(s - m_new[:, None])
    return m_new, scale, p


@gluon.jit
def _seesaw_publish(m_slot, m, p_smem, pb, bar):
    """Publishes a block's max and P (over its k_pe) to the other warpgroup."""
    m_slot.store(m)
    p_smem.store(pb)
    fence_async_shared()  # P is read by the other warpgroup's wgmma (async proxy)
    mbarrier.arrive(bar)


@gluon.jit
def _seesaw_pv_regs(
    acc, scale, i, pb, v, o_rows: gl.constexpr, p_op_layout: gl.constexpr, ASM: gl.constexpr
):
    """O = O * scale + P V, P from registers, issued async (the caller waits)."""
    acc = _rescale_rows(acc, scale, i, o_rows, ASM)
    return warpgroup_mma(gl.convert_layout(pb, p_op_layout), v, acc, is_async=True)


@gluon.jit
def _seesaw_pv_smem(acc, scale, i, p_smem, v, o_rows: gl.constexpr, ASM: gl.constexpr):
    """O = O * scale + P V, P from shared memory, issued async (the caller waits)."""
    acc = _rescale_rows(acc, scale, i, o_rows, ASM)
    return warpgroup_mma(p_smem, v, acc, is_async=True)


@gluon.jit
def _seesaw_row_sum(l_i, l_smem, ME: gl.constexpr, mine, other, s_rows: gl.constexpr):
    """The row sum: this warpgroup's blocks' plus the other's, through ``l_smem``."""
    l_smem.index(ME).store(l_i)
    mbarrier.arrive(mine)
    mbarrier.wait(other, 0)
    return l_i + l_smem.index(1 - ME).load(s_rows)


@gluon.jit
def _seesaw_wg0(
    q_nope_smem,
    q_pe_smem,
    q16_nope_smem,
    q16_pe_smem,
    f_smem,
    kv_c_smem,
    k_pe_smem,
    c8_smem,
    pe8_smem,
    m_smem,
    l_smem,
    bars,
    buf_ptr,
    out_ptr,
    lse_ptr,
    kv_scale,
    qk_scale,
    tile,
    row,
    split,
    valid,
    first,
    start,
    end,
    num_pairs,
    live_splits,
    kv_ptr,
    bt_row,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    CLUSTER: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """Warpgroup 0 (the default partition): S and P of the even blocks (slot 0), and
    O_L (output columns 0-255) over every block. See "Seesaw schedule"."""
    dtype: gl.constexpr = kv_c_smem.dtype
    HALF: gl.constexpr = LORA // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 16]
    )
    p_op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    ready0, ready1, p0_bar, p1_bar, free0, free1, l0_bar, l1_bar = _seesaw_bars(bars)
    m_i, l_i, acc, s_init, s_cols = _seesaw_state(BLOCK_H, BLOCK_N, HALF, s_layout, o_layout)
    F16Q: gl.constexpr = q_nope_smem.dtype != q16_nope_smem.dtype
    FP8: gl.constexpr = c8_smem.dtype == gl.float8e4nv
    if F16Q:
        # bf16 q, fp16 MMAs: this warpgroup rewrites Q as fp16 once it has landed.
        qk_rows = gl.full([BLOCK_H], 0.0, gl.float32, layout=s_rows)
        if num_pairs > 0:
            mbarrier.wait(ready0, 0)
            factor = _seesaw_q_f16(
                q16_nope_smem.index(0),
                q16_pe_smem.index(0),
                q_nope_smem.index(0),
                q_pe_smem.index(0),
                LORA,
            )
            f_smem.store(factor)
            fence_async_shared()  # generic stores, read by wgmma through the async proxy
            mbarrier.arrive(bars.index(8))
            qk_rows = gl.convert_layout(factor, s_rows) * qk_scale
    else:
        qk_rows = qk_scale  # unused: S is scaled by qk_scale
    if FP8 and num_pairs > 0:
        # On an fp8 cache this warpgroup widens each even block as soon as it has
        # landed: the first here, the others under the pair before's P1 V1_L.
        mbarrier.wait(ready0, 0)
        _widen_slot(kv_c_smem.index(0), k_pe_smem.index(0), c8_smem.index(0), pe8_smem.index(0))

    for i in range(num_pairs):
        ph = i & 1
        n0 = first + 2 * i * BLOCK_N
        # Slot 0 holds the even block, slot 1 the odd one.
        z, q_nope, q_pe, kv_c0, kv_c1, p0_smem, p1_smem = _seesaw_pair_views(
            i, q_nope_smem, q_pe_smem, kv_c_smem, k_pe_smem
        )
        if FP8:
            # On an fp8 cache this warpgroup refills slot 0: the next pair's even
            # block's page index, a pair ahead of its copy.
            more = i + 1 < num_pairs
            nxt0 = n0 + 2 * BLOCK_N
            page0 = gl.load(bt_row + nxt0 // PAGE_SIZE, mask=more & (nxt0 < end), other=0)
        # (1) S0 = Q K0^T, the whole 64 x 64, once the even block has landed (from
        # an fp8 cache it has been waited and widened already, under the pair
        # before's P1 V1_L or before the loop).
        if not FP8:
            mbarrier.wait(ready0, ph)
        s = _seesaw_scores(
            q_nope, q_pe, kv_c0, p0_smem, s_init, s_cols, n0, start, end, qk_scale, qk_rows, F16Q
        )
        # (2) softmax of the even block against the running max m_i (lazy rescaling).
        m0, scale0, p = _seesaw_softmax(m_i, s)
        l_i = l_i * scale0 + gl.sum(p, 1)
        pb = p.to(dtype)
        # (3) publish m0 and P0 (into the even block's k_pe: QK^T no longer reads it).
        _seesaw_publish(m_smem.index(ph), m0, p0_smem, pb, p0_bar)
        # (4) O_L = O_L * scale0 + P0 V0_L, P0 from registers; async: runs while
        # warpgroup 1 does its softmax.
        acc = _seesaw_pv_regs(
            acc, scale0, i, pb, kv_c0.slice(0, HALF, dim=1), o_rows, p_op_layout, _WG0_SCALE0_ANY
        )
        if FP8:
            # While warpgroup 1 does its softmax: once P0 V0_L is done, the next even
            # block into slot 0's front half (free: this warpgroup's S0 and P0 V0_L
            # were its only readers) and rope staging.
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            if more:
                _seesaw_copy_block(
                    kv_c0,
                    p0_smem,
                    c8_smem.index(2 * z),
                    pe8_smem.index(z),
                    kv_ptr,
                    kv_ptr,
                    kv_ptr,
                    page0,
                    nxt0,
                    start,
                    end,
                    ready0,
                    PAGE_SIZE,
                    NUM_PAGES,
                    LORA,
                    ROPE,
                    BLOCK_N,
                    stride_kv_page,
                    stride_kv_row,
                )
        # (5) warpgroup 1's m1 and P1 (the odd block, over its k_pe).
        mbarrier.wait(p1_bar, ph)
        m1 = m_smem.index(2 + ph).load(s_rows)
        scale1 = gl.exp2(m0 - m1)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        if not FP8:
            mbarrier.arrive(free0)  # done with slot 0 (warpgroup 1 refills it)
        mbarrier.wait(ready1, ph)  # (completed: warpgroup 1 waited it before P1)
        fence_async_shared()
        # (6) O_L = O_L * scale1 + P1 V1_L, P1 from shared memory.
        acc = _seesaw_pv_smem(
            acc, scale1, i, p1_smem, kv_c1.slice(0, HALF, dim=1), o_rows, _WG0_SCALE1_ANY
        )
        if FP8 and more:
            # While P1 V1_L runs: the next even block, once it has landed and warpgroup
            # 1's P0 V0_R is done with slot 0's back half and P0 (vfree0), widened.
            mbarrier.wait(ready0, ph ^ 1)
            mbarrier.wait(bars.index(9), ph)
            _widen_slot(kv_c0, p0_smem, c8_smem.index(2 * z), pe8_smem.index(z))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(free1)  # done with slot 1
        l_i = l_i * scale1
        m_i = m1

    # The row sum: this warpgroup's (even blocks) plus warpgroup 1's (odd blocks).
    l_i = _seesaw_row_sum(l_i, l_smem, 0, l0_bar, l1_bar, s_rows)
    _finish_split(
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
        valid,
        q_nope_smem.index(0),  # dead: warpgroup 1's last S came before its last P
        live_splits,
        0,
        True,
        CLUSTER,
        BF16_PARTIALS,
        NUM_HEADS,
        LORA,
        BLOCK_H,
        stride_buf_b,
        stride_buf_h,
        stride_buf_s,
    )


@gluon.jit
def _seesaw_wg1(
    q_nope_smem,
    q_pe_smem,
    q16_nope_smem,
    f_smem,
    kv_c_smem,
    k_pe_smem,
    c8_smem,
    pe8_smem,
    m_smem,
    l_smem,
    bars,
    kv_c_desc,
    k_pe_desc,
    kv_ptr,
    bt_row,
    buf_ptr,
    out_ptr,
    lse_ptr,
    kv_scale,
    qk_scale,
    tile,
    row,
    split,
    valid,
    first,
    start,
    end,
    num_pairs,
    live_splits,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    CLUSTER: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """Warpgroup 1 (the worker partition): S and P of the odd blocks (slot 1), O_R
    (output columns 256-511) over every block, and every latent copy after the first
    two. See "Seesaw schedule"."""
    dtype: gl.constexpr = kv_c_smem.dtype
    HALF: gl.constexpr = LORA // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 16]
    )
    p_op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    ready0, ready1, p0_bar, p1_bar, free0, free1, l0_bar, l1_bar = _seesaw_bars(bars)
    m_i, l_i, acc, s_init, s_cols = _seesaw_state(BLOCK_H, BLOCK_N, HALF, s_layout, o_layout)
    F16Q: gl.constexpr = q_nope_smem.dtype != q16_nope_smem.dtype
    FP8: gl.constexpr = c8_smem.dtype == gl.float8e4nv
    if F16Q:
        qk_rows = gl.full([BLOCK_H], 0.0, gl.float32, layout=s_rows)
        if num_pairs > 0:
            mbarrier.wait(bars.index(8), 0)  # warpgroup 0 rewrote Q as fp16
            qk_rows = f_smem.load(s_rows) * qk_scale
    else:
        qk_rows = qk_scale  # unused: S is scaled by qk_scale

    for i in range(num_pairs):
        ph = i & 1
        n1 = first + (2 * i + 1) * BLOCK_N
        # Slot 0 holds the even block, slot 1 the odd one.
        z, q_nope, q_pe, kv_c0, kv_c1, p0_smem, p1_smem = _seesaw_pair_views(
            i, q_nope_smem, q_pe_smem, kv_c_smem, k_pe_smem
        )
        more = i + 1 < num_pairs
        # The next pair's page indices, a pair ahead of their copies (raw: checked
        # where used; blocks past the end read nothing). On an fp8 cache warpgroup 0
        # refills slot 0 and loads its page index itself.
        nxt0 = n1 + BLOCK_N
        nxt1 = nxt0 + BLOCK_N
        if not FP8:
            page0 = gl.load(bt_row + nxt0 // PAGE_SIZE, mask=more & (nxt0 < end), other=0)
        page1 = gl.load(bt_row + nxt1 // PAGE_SIZE, mask=more & (nxt1 < end), other=0)
        # (1) S1 = Q K1^T, concurrently with warpgroup 0's S0.
        mbarrier.wait(ready1, ph)
        if FP8:
            _widen_slot(kv_c1, p1_smem, c8_smem.index(2 * z + 2), pe8_smem.index(z + 1))
        s = _seesaw_scores(
            q_nope, q_pe, kv_c1, p1_smem, s_init, s_cols, n1, start, end, qk_scale, qk_rows, F16Q
        )
        # (2) m0 and P0 from warpgroup 0, then O_R = O_R * scale0 + P0 V0_R (P0 from
        # shared memory) issued at once: it runs under this warpgroup's softmax.
        mbarrier.wait(p0_bar, ph)
        m0 = m_smem.index(ph).load(s_rows)
        scale0 = gl.exp2(m_i - m0)
        if not FP8:
            # (completed: warpgroup 0 waited it before P0). On an fp8 cache the block
            # is the one warpgroup 0 widened and published with P0, and ready0 may
            # have completed again already (warpgroup 0's refill under this softmax).
            mbarrier.wait(ready0, ph)
        fence_async_shared()
        acc = _seesaw_pv_smem(
            acc, scale0, i, p0_smem, kv_c0.slice(HALF, HALF, dim=1), o_rows, _WG1_SCALE0_ANY
        )
        # (3) the odd block's softmax against m0, while warpgroup 0's P0 V0_L and this
        # warpgroup's P0 V0_R are on the tensor cores; publish m1 and P1 (over the odd
        # block's k_pe).
        m1, scale1, p = _seesaw_softmax(m0, s)
        l_i = l_i * (scale0 * scale1) + gl.sum(p, 1)
        pb = p.to(dtype)
        _seesaw_publish(m_smem.index(2 + ph), m1, p1_smem, pb, p1_bar)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        if FP8:
            mbarrier.arrive(bars.index(9))  # vfree0: slot 0's back half and P0 read
        # (5) O_R = O_R * scale1 + P1 V1_R, P1 from registers.
        acc = _seesaw_pv_regs(
            acc, scale1, i, pb, kv_c1.slice(HALF, HALF, dim=1), o_rows, p_op_layout, _WG1_SCALE1_ANY
        )
        # (6) while P1 V1_R runs: slot 0 is free once warpgroup 0's P0 V0_L is done
        # too; refill it with the next pair's even block.
        if (not FP8) and more:
            mbarrier.wait(free0, ph)
            _seesaw_copy_block(
                kv_c0,
                p0_smem,
                c8_smem.index(2 * z),
                pe8_smem.index(z),
                kv_c_desc,
                k_pe_desc,
                kv_ptr,
                page0,
                nxt0,
                start,
                end,
                ready0,
                PAGE_SIZE,
                NUM_PAGES,
                LORA,
                ROPE,
                BLOCK_N,
                stride_kv_page,
                stride_kv_row,
            )
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        # (7) slot 1, once warpgroup 0's P1 V1_L is done too: the next odd block.
        if more:
            mbarrier.wait(free1, ph)
            _seesaw_copy_block(
                kv_c1,
                p1_smem,
                c8_smem.index(2 * z + 2),
                pe8_smem.index(z + 1),
                kv_c_desc,
                k_pe_desc,
                kv_ptr,
                page1,
                nxt1,
                start,
                end,
                ready1,
                PAGE_SIZE,
                NUM_PAGES,
                LORA,
                ROPE,
                BLOCK_N,
                stride_kv_page,
                stride_kv_row,
            )
        m_i = m1

    l_i = _seesaw_row_sum(l_i, l_smem, 1, l1_bar, l0_bar, s_rows)
    _finish_split(
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
        valid,
        kv_c_smem.index(0),  # warpgroup 0 arrived l0 after its last MMA
        live_splits,
        LORA // 2,
        False,
        CLUSTER,
        BF16_PARTIALS,
        NUM_HEADS,
        LORA,
        BLOCK_H,
        stride_buf_b,
        stride_buf_h,
        stride_buf_s,
    )


@gluon.jit
def mla_decode_stage1_gluon_seesaw(
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
    CLUSTER: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
):
    """Stage 1 at 64-head tiles (heads on the MMAs' M) on a 16-bit or fp8 cache: the
    seesaw schedule, two warpgroups each owning half of the 64 x 512 accumulator
    (``_seesaw_wg0``, ``_seesaw_wg1``), latent blocks double-buffered by TMA. 4 warps
    launched plus the worker's 4, 256 registers each (``setmaxnreg``); 222,996 bytes
    of shared memory on a 16-bit cache (232,276 on fp8): one CTA an SM. With
    ``CLUSTER == 2`` a row's two splits merge in the cluster and write the output."""
    gl.static_assert(PAGE_SIZE % BLOCK_N == 0, "blocks must lie inside one page")
    gl.static_assert(gl.num_warps() == 4, "one warpgroup here, the worker adds the other")
    FP8: gl.constexpr = kv_ptr.dtype.element_ty == gl.float8e4nv
    q_dtype: gl.constexpr = q_nope_ptr.dtype.element_ty
    # The MMAs' dtype: q's for a 16-bit cache, fp16 for an fp8 one (a block widens to
    # fp16 in one conversion for two values; bf16 q is rewritten as fp16, its heads
    # scaled, _seesaw_q_f16).
    dtype: gl.constexpr = gl.float16 if FP8 else q_dtype

    if CLUSTER > 1:
        # A row's splits are one cluster, its CTAs consecutive along the grid's x.
        tile = gl.program_id(0) // CLUSTER
        split = gl.program_id(0) % CLUSTER
    else:
        tile = gl.program_id(0)
        split = gl.program_id(2)
    row = gl.program_id(1)
    # No early return (the worker warpgroup must still be started and stopped, and in a
    # cluster every thread must reach the merge's barrier): an empty or surplus split
    # runs no pair and stores no partial (with one split, an empty row's output and
    # lse, _write_partials).
    num_splits, start, end = _split_bounds(
        seq_lens_ptr, num_splits_ptr, row, split, CLUSTER == 1 and out_ptr is not None, CAPACITY
    )
    if CLUSTER > 1:
        live_splits = _live_splits(seq_lens_ptr, row, num_splits, CAPACITY)
    else:
        live_splits = 0  # unused
    valid = (split < num_splits) & (end > start)
    first = start - start % BLOCK_N
    num_blocks = gl.where(valid, (end - first + BLOCK_N - 1) // BLOCK_N, 0)
    num_pairs = (num_blocks + 1) // 2

    nope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, LORA], dtype)
    rope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, ROPE], dtype)
    vec_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_nope_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, LORA], nope_layout)
    q_pe_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, ROPE], rope_layout)
    kv_c_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, LORA], nope_layout)
    k_pe_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, ROPE], rope_layout)
    # m exchange: [0, 1] m0 of even/odd pairs (warpgroup 0 -> 1), [2, 3] m1 (1 -> 0).
    m_smem = gl.allocate_shared_memory(gl.float32, [4, BLOCK_H], vec_layout)
    l_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_H], vec_layout)
    # ready0/1 (a block landed, _seesaw_copy_block), p0/p1 (P and m published),
    # free0/1 (warpgroup 0 done with a slot), l0/l1 (row sums published),
    # for fp16 MMAs on bf16 q qready (warpgroup 0 rewrote Q as fp16), and on an fp8
    # cache vfree0 (warpgroup 1's P0 V0_R done: slot 0's back half and P0 read).
    NUM_BARS: gl.constexpr = 10 if FP8 else 8 if dtype == q_dtype else 9
    bars = gl.allocate_shared_memory(gl.int64, [NUM_BARS, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(NUM_BARS):
        mbarrier.init(bars.index(b), count=1)
    if dtype != q_dtype:
        f_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_H], vec_layout)
        q16_nope_smem = q_nope_smem._reinterpret(q_dtype, [1, BLOCK_H, LORA], nope_layout)
        q16_pe_smem = q_pe_smem._reinterpret(q_dtype, [1, BLOCK_H, ROPE], rope_layout)
    else:
        f_smem = l_smem  # unused
        q16_nope_smem = q_nope_smem
        q16_pe_smem = q_pe_smem
    if FP8:
        # An fp8 block's latent part lands in the front half of its slot's bytes
        # (``_widen_slot``), by 64-column chunks, chunk-major: slot s's is view 2 s
        # ([8 * BLOCK_N, 64]); its rope part in the slot's own staging.
        kv_dtype: gl.constexpr = kv_ptr.dtype.element_ty
        stage_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        c8_smem = kv_c_smem._reinterpret(kv_dtype, [4, 8 * BLOCK_N, 64], stage_layout)
        pe8_smem = gl.allocate_shared_memory(kv_dtype, [2, BLOCK_N, ROPE], stage_layout)
        c8_first = c8_smem.index(0)
        pe8_first = pe8_smem.index(0)
        c8_second = c8_smem.index(2)
        pe8_second = pe8_smem.index(1)
        kv_c_desc = kv_ptr  # no TMA: unused (warp_specialize takes no None)
        k_pe_desc = kv_c_desc
    else:
        c8_smem = kv_c_smem
        pe8_smem = k_pe_smem
        c8_first = kv_c_smem.index(0)
        pe8_first = k_pe_smem.index(0)
        c8_second = kv_c_smem.index(1)
        pe8_second = k_pe_smem.index(1)
        # TMA descriptors of the cache as rows of tokens (pages back to back), made
        # here in the program's global scratch: the latent and the rope columns.
        gl.static_assert(stride_kv_page == PAGE_SIZE * stride_kv_row, "pages back to back")
        tokens: gl.constexpr = NUM_PAGES * PAGE_SIZE
        kv_c_desc = tma.make_tensor_descriptor(
            kv_ptr, [tokens, LORA], [stride_kv_row, 1], [BLOCK_N, LORA], nope_layout
        )
        k_pe_desc = tma.make_tensor_descriptor(
            kv_ptr + LORA, [tokens, ROPE], [stride_kv_row, 1], [BLOCK_N, ROPE], rope_layout
        )

    bt_row = block_table_ptr + row * stride_bt_b
    if num_pairs > 0:
        # The first two blocks' page indices are read before Q's copies are issued:
        # behind Q's 72 KB a read waits for them, and the blocks' copies for it.
        page0 = gl.load(bt_row + first // PAGE_SIZE)
        page1 = gl.load(
            bt_row + (first + BLOCK_N) // PAGE_SIZE, mask=first + BLOCK_N < end, other=0
        )
        # Q, then the first two blocks (the second may be past the end: zeros), each
        # block signalling its slot's ready barrier. Both barriers wait for Q too: each
        # thread's cp.async.mbarrier.arrive on them adds a pending arrival that its Q
        # copies complete, all before the blocks' own arrivals (the warpgroup barrier).
        copy_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        _copy_query(
            q16_nope_smem.index(0),
            q16_pe_smem.index(0),
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
            copy_layout,
        )
        async_copy.mbarrier_arrive(bars.index(0), increment_count=True)
        async_copy.mbarrier_arrive(bars.index(1), increment_count=True)
        gl.thread_barrier()
        _seesaw_copy_block(
            kv_c_smem.index(0),
            k_pe_smem.index(0),
            c8_first,
            pe8_first,
            kv_c_desc,
            k_pe_desc,
            kv_ptr,
            page0,
            first,
            start,
            end,
            bars.index(0),
            PAGE_SIZE,
            NUM_PAGES,
            LORA,
            ROPE,
            BLOCK_N,
            stride_kv_page,
            stride_kv_row,
        )
        _seesaw_copy_block(
            kv_c_smem.index(1),
            k_pe_smem.index(1),
            c8_second,
            pe8_second,
            kv_c_desc,
            k_pe_desc,
            kv_ptr,
            page1,
            first + BLOCK_N,
            start,
            end,
            bars.index(1),
            PAGE_SIZE,
            NUM_PAGES,
            LORA,
            ROPE,
            BLOCK_N,
            stride_kv_page,
            stride_kv_row,
        )

    kv_scale = gl.load(kv_scale_ptr)
    qk_scale = SM_SCALE * _LOG2E * kv_scale
    gl.warp_specialize(
        [
            (
                _seesaw_wg0,
                (
                    q_nope_smem,
                    q_pe_smem,
                    q16_nope_smem,
                    q16_pe_smem,
                    f_smem,
                    kv_c_smem,
                    k_pe_smem,
                    c8_smem,
                    pe8_smem,
                    m_smem,
                    l_smem,
                    bars,
                    buf_ptr,
                    out_ptr,
                    lse_ptr,
                    kv_scale,
                    qk_scale,
                    tile,
                    row,
                    split,
                    valid,
                    first,
                    start,
                    end,
                    num_pairs,
                    live_splits,
                    kv_ptr,
                    bt_row,
                    NUM_HEADS,
                    PAGE_SIZE,
                    NUM_PAGES,
                    LORA,
                    ROPE,
                    BLOCK_H,
                    BLOCK_N,
                    CLUSTER,
                    BF16_PARTIALS,
                    stride_kv_page,
                    stride_kv_row,
                    stride_buf_b,
                    stride_buf_h,
                    stride_buf_s,
                ),
            ),
            (
                _seesaw_wg1,
                (
                    q_nope_smem,
                    q_pe_smem,
                    q16_nope_smem,
                    f_smem,
                    kv_c_smem,
                    k_pe_smem,
                    c8_smem,
                    pe8_smem,
                    m_smem,
                    l_smem,
                    bars,
                    kv_c_desc,
                    k_pe_desc,
                    kv_ptr,
                    bt_row,
                    buf_ptr,
                    out_ptr,
                    lse_ptr,
                    kv_scale,
                    qk_scale,
                    tile,
                    row,
                    split,
                    valid,
                    first,
                    start,
                    end,
                    num_pairs,
                    live_splits,
                    NUM_HEADS,
                    PAGE_SIZE,
                    NUM_PAGES,
                    LORA,
                    ROPE,
                    BLOCK_H,
                    BLOCK_N,
                    CLUSTER,
                    BF16_PARTIALS,
                    stride_kv_page,
                    stride_kv_row,
                    stride_buf_b,
                    stride_buf_h,
                    stride_buf_s,
                ),
            ),
        ],
        [4],
        [SEESAW_WORKER_REGS],
    )
