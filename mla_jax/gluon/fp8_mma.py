"""The fp8-MMA Gluon stage 1 kernel, ``mla_decode_stage1_gluon_fp8_mma`` (only where
asked: ``mla_decode(..., fp8_mma=True)``): q and P rounded to e4m3 and multiplied on
the fp8 tensor cores, the cache's blocks through a ``cp.async`` ring as they are.
Design and measurements: docs/kernels.md."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from mla_jax.gluon.common import (
    _LN2,
    _LOG2E,
    _THREAD_ANY_16,
    RESCALE_THRESHOLD,
    _copy_rows,
    _cta_any,
    _head_rows,
    _one_split_result,
    _opaque_zero,
    _safe_page,
    _split_bounds,
    _write_empty_row,
)

FP8_MMA_STAGES = gl.constexpr(5)  # the ring's stages
_E4M3_MAX = gl.constexpr(448.0)  # mla_jax.cache.FP8_MAX


# V's words of a block, fp8 [64 tokens, 512 dims]: a thread holds dims 4u to 4u + 3 of
# u in {16w + 2q, 16w + 2q + 1} (8 consecutive bytes: w its warp, q = lane / 4) for
# tokens 4c + e + 16j + 32k (c = lane % 4; e < 4; j, k < 2), which is where the O^T
# tiles' register A operand wants them (``_vt_operands``).
_VT_WORDS_LAYOUT = gl.constexpr(
    gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [0, 4], [1, 0], [2, 0], [16, 0], [32, 0]],
        lane_bases=[[4, 0], [8, 0], [0, 8], [0, 16], [0, 32]],
        warp_bases=[[0, 64], [0, 128], [0, 256]],
        block_bases=[],
        shape=[64, 512],
    )
)


@gluon.jit
def _vt_operands(x, a_layout: gl.constexpr):
    """The four O^T tiles' register A operands (``[128, 64]`` e4m3: V^T, latent dims by
    tokens) from a block's words (``_VT_WORDS_LAYOUT``). Tile ``t`` row ``r`` is latent
    dim ``4 u + t`` for ``u = 16 (r >> 4) + 2 (r & 7) + ((r >> 3) & 1)``: the operand
    gives a thread rows ``q`` and ``q + 8`` of its warp's 16 and four consecutive tokens
    a register; the words give it four consecutive dims of one token, one for each tile,
    so the change of layout regroups bytes inside each thread and moves nothing between
    threads (asserted at compile time)."""
    x = gl.reshape(x, [64, 8, 8, 2, 4])  # token, w, q, i, t
    x = gl.permute(x, [1, 3, 2, 0, 4])  # w, i, q, token, t
    x = gl.reshape(x, [128, 64, 2, 2])  # r, token, t >> 1, t & 1
    even, odd = gl.split(x)
    a0, a2 = gl.split(even)
    a1, a3 = gl.split(odd)
    return (
        gl.convert_layout(a0, a_layout, assert_trivial=True),
        gl.convert_layout(a1, a_layout, assert_trivial=True),
        gl.convert_layout(a2, a_layout, assert_trivial=True),
        gl.convert_layout(a3, a_layout, assert_trivial=True),
    )


@gluon.jit
def _fp8_mma_copy_block(
    kv8,
    pe8,
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
    """``cp.async`` of the block at token ``n0`` (raw page index ``page``) into a ring
    stage as it is: its latent bytes (a warp copies one token's 512) and its rope
    bytes; rows outside ``[start, end)`` zero-filled. Commits no group."""
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [1, 32], [gl.num_warps(), 1], [1, 0])
    pe_layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [gl.num_warps(), 1], [1, 0])
    base = kv_ptr + _safe_page(page, NUM_PAGES).to(gl.int64) * stride_kv_page
    r = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    ok = (n0 + r >= start) & (n0 + r < end)
    _copy_rows(kv8, base, n0 % PAGE_SIZE + r, ok, stride_kv_row, LORA, layout)
    r = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, pe_layout))
    ok = (n0 + r >= start) & (n0 + r < end)
    _copy_rows(pe8, base + LORA, n0 % PAGE_SIZE + r, ok, stride_kv_row, ROPE, pe_layout)


@gluon.jit
def _copy_query_e4m3(
    q8_nope,
    q8_pe,
    q_nope_ptr,
    q_pe_ptr,
    tile,
    row,
    NUM_HEADS: gl.constexpr,
    BLOCK_H: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
):
    """The row's query tile (heads past ``NUM_HEADS`` zero) into shared memory as e4m3,
    each head times ``448 / amax`` (amax: its largest magnitude; 1 for a zero head),
    rounded to nearest. Returns ``amax / 448`` a head (its logits' factor). A NaN in a
    head is not its amax (``max`` skips it) and stays NaN; an infinite amax makes the
    head's scale 0 and its infinities NaN: either way that head's logits are NaN and
    the other heads' untouched. Read twice from global memory (the amax, then the
    values), 128 columns at a time."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    ok = (heads < NUM_HEADS)[:, None]
    cols = gl.arange(0, 128, layout=gl.SliceLayout(0, layout))
    rope_cols = gl.arange(0, ROPE, layout=gl.SliceLayout(0, layout))
    q_nope = q_nope_ptr + row * stride_qn_b + heads[:, None] * stride_qn_h
    q_pe = q_pe_ptr + row * stride_qp_b + QP_OFFSET + heads[:, None] * stride_qp_h
    q_pe += rope_cols[None, :]
    amax = gl.max(gl.abs(gl.load(q_pe, mask=ok, other=0.0).to(gl.float32)), 1)
    for c in gl.static_range(LORA // 128):
        x = gl.load(q_nope + 128 * c + cols[None, :], mask=ok, other=0.0).to(gl.float32)
        amax = gl.maximum(amax, gl.max(gl.abs(x), 1))
    amax = gl.where(amax > 0.0, amax, _E4M3_MAX)
    scale = _E4M3_MAX / amax
    x = gl.load(q_pe, mask=ok, other=0.0).to(gl.float32)
    q8_pe.store((x * scale[:, None]).to(gl.float8e4nv))
    for c in gl.static_range(LORA // 128):
        x = gl.load(q_nope + 128 * c + cols[None, :], mask=ok, other=0.0).to(gl.float32)
        q8_nope.slice(128 * c, 128, dim=1).store((x * scale[:, None]).to(gl.float8e4nv))
    return amax / _E4M3_MAX


@gluon.jit
def mla_decode_stage1_gluon_fp8_mma(
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
    """Stage 1 for an fp8 cache with e4m3 MMAs, q and P rounded to e4m3 (docs/kernels.md):
    64-head tiles, two warpgroups, the blocks through a ``cp.async`` ring of
    ``FP8_MMA_STAGES`` stages as they are in the cache. 8 warps, no specialisation; 225,792
    bytes of shared memory (Q 36 KB, the ring 180 KB, P 4 KB), 247 registers: one CTA an
    SM."""
    gl.static_assert(PAGE_SIZE % BLOCK_N == 0, "blocks must lie inside one page")
    gl.static_assert(gl.num_warps() == 8, "two warpgroups (FP8_MMA_NUM_WARPS)")
    gl.static_assert(BLOCK_H == 64 and BLOCK_N == 64, "64 heads by 64 tokens")
    gl.static_assert(LORA == 512 and ROPE == 64, "DeepSeek's 512 + 64 columns")
    gl.static_assert(kv_ptr.dtype.element_ty == gl.float8e4nv, "a float8_e4m3fn cache")
    f8: gl.constexpr = gl.float8e4nv

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

    # S [64 heads, 64 tokens]: the warpgroups take 32 tokens each. O^T [512, 64] as four
    # [128, 64] tiles: the warpgroups take 64 rows (dims) each.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, 32, 32]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, 64, 32]
    )
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4)
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_cols: gl.constexpr = gl.SliceLayout(0, o_layout)
    nope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, LORA], f8)
    rope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, ROPE], f8)
    q8_nope_smem = gl.allocate_shared_memory(f8, [1, BLOCK_H, LORA], nope_layout)
    q8_pe_smem = gl.allocate_shared_memory(f8, [1, BLOCK_H, ROPE], rope_layout)
    kv8_smem = gl.allocate_shared_memory(f8, [FP8_MMA_STAGES, BLOCK_N, LORA], nope_layout)
    pe8_smem = gl.allocate_shared_memory(f8, [FP8_MMA_STAGES, BLOCK_N, ROPE], rope_layout)
    p_smem = gl.allocate_shared_memory(f8, [1, BLOCK_H, BLOCK_N], rope_layout)

    bt_row = block_table_ptr + row * stride_bt_b
    first = start - start % BLOCK_N
    for k in gl.static_range(FP8_MMA_STAGES - 1):
        n = first + k * BLOCK_N
        page = gl.load(bt_row + n // PAGE_SIZE, mask=n < end, other=0)
        _fp8_mma_copy_block(
            kv8_smem.index(k),
            pe8_smem.index(k),
            kv_ptr,
            page,
            n,
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
    factor = _copy_query_e4m3(
        q8_nope_smem.index(0),
        q8_pe_smem.index(0),
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
    )
    kv_scale = gl.load(kv_scale_ptr)
    qk_scale = gl.convert_layout(factor, s_rows) * (SM_SCALE * _LOG2E * kv_scale)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=s_rows)
    l_acc = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    s_init = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    o0 = gl.zeros([128, BLOCK_H], gl.float32, layout=o_layout)
    o1 = gl.zeros([128, BLOCK_H], gl.float32, layout=o_layout)
    o2 = gl.zeros([128, BLOCK_H], gl.float32, layout=o_layout)
    o3 = gl.zeros([128, BLOCK_H], gl.float32, layout=o_layout)
    s_cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))

    for n0 in range(first, end, BLOCK_N):
        b = (n0 - first) // BLOCK_N
        z = _opaque_zero(n0)
        # This block has landed (this thread's copies, then, past the barrier, every
        # thread's); every warp is past the last block's reads of its stage and of P,
        # so the block FP8_MMA_STAGES - 1 ahead may be copied there.
        async_copy.wait_group(FP8_MMA_STAGES - 2)
        gl.thread_barrier()
        ahead = n0 + (FP8_MMA_STAGES - 1) * BLOCK_N
        page = gl.load(bt_row + ahead // PAGE_SIZE, mask=ahead < end, other=0)
        refill = (b + FP8_MMA_STAGES - 1) % FP8_MMA_STAGES
        _fp8_mma_copy_block(
            kv8_smem.index(refill),
            pe8_smem.index(refill),
            kv_ptr,
            page,
            ahead,
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
        fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads async
        kv8 = kv8_smem.index(b % FP8_MMA_STAGES)
        s = warpgroup_mma(
            q8_nope_smem.index(z), kv8.permute((1, 0)), s_init, use_acc=False, is_async=True
        )
        s = warpgroup_mma(
            q8_pe_smem.index(z),
            pe8_smem.index(b % FP8_MMA_STAGES).permute((1, 0)),
            s,
            is_async=True,
        )
        x = kv8.load(_VT_WORDS_LAYOUT)  # V's words, under the S MMAs
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        # The row softmax; the exact max and P again only where the vote says a row
        # grew past the running max by more than the threshold. The row sum is of the
        # rounded P, the values the MMA multiplies.
        tokens = n0 + s_cols
        live = (tokens >= start) & (tokens < end)
        s = gl.where(live[None, :], s * qk_scale[:, None], float("-inf"))
        pt = p_smem.index(z)
        p = gl.exp2(s - m_i[:, None]).to(f8)
        pt.store(p)
        fence_async_shared()
        flags = (s - m_i[:, None] > RESCALE_THRESHOLD).to(gl.int32)
        if _cta_any(flags, n0, _THREAD_ANY_16) != 0:
            m_new = gl.maximum(m_i, gl.max(s, 1))
            grow = m_new - m_i > RESCALE_THRESHOLD
            alpha = gl.where(grow, gl.exp2(m_i - m_new), 1.0)
            m_i = gl.where(grow, m_new, m_i)
            p = gl.exp2(s - m_i[:, None]).to(f8)
            l_acc = l_acc * alpha[:, None] + p.to(gl.float32)
            alpha_o = gl.convert_layout(alpha, o_cols)[None, :]
            o0 = o0 * alpha_o
            o1 = o1 * alpha_o
            o2 = o2 * alpha_o
            o3 = o3 * alpha_o
            pt.store(p)
            fence_async_shared()
            gl.thread_barrier()
        else:
            l_acc = l_acc + p.to(gl.float32)
        # O^T += V^T P^T, V^T from registers, P^T the stored P seen K-major.
        a0, a1, a2, a3 = _vt_operands(x, a_layout)
        pt_t = pt.permute((1, 0))
        o0 = warpgroup_mma(a0, pt_t, o0, is_async=True)
        o1 = warpgroup_mma(a1, pt_t, o1, is_async=True)
        o2 = warpgroup_mma(a2, pt_t, o2, is_async=True)
        o3 = warpgroup_mma(a3, pt_t, o3, is_async=True)
        o0, o1, o2, o3 = warpgroup_mma_wait(num_outstanding=0, deps=(o0, o1, o2, o3))

    async_copy.wait_group(0)  # the phantom copies past the last block
    l_i = gl.sum(l_acc, 1)
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=s_rows)
    if out_ptr is None:
        dst_ptr = buf_ptr
        norm = kv_scale / l_i
        lse = (m_i + gl.log2(l_i)) * _LN2
        lse_off = (
            _head_rows(
                out_ptr,
                row,
                heads,
                split,
                NUM_HEADS,
                LORA,
                stride_buf_b,
                stride_buf_h,
                stride_buf_s,
            )
            + LORA
        )
        gl.store(buf_ptr + lse_off, lse, mask=heads < NUM_HEADS)
    else:
        dst_ptr = out_ptr
        norm, lse = _one_split_result(kv_scale / l_i, (m_i + gl.log2(l_i)) * _LN2, True)
        gl.store(lse_ptr + row * NUM_HEADS + heads, lse, mask=heads < NUM_HEADS)
    # O^T through the dead ring in the dims' order ([heads, dims]; a relabelling of the
    # tiles' registers), read back by rows: a warp's store then writes 32 consecutive
    # dims of a head (from the accumulators it would touch 8 dims of 4 heads).
    norm = gl.convert_layout(norm, o_cols)[None, :]
    x = gl.join(gl.join(o0 * norm, o1 * norm), gl.join(o2 * norm, o3 * norm))  # r, h, t
    x = gl.reshape(x, [8, 2, 8, BLOCK_H, 2, 2])  # w, i, q, h, t & 1, t >> 1
    x = gl.reshape(gl.permute(x, [3, 0, 2, 1, 5, 4]), [BLOCK_H, LORA])
    gl.thread_barrier()  # every warp past its last reads of the ring
    staged = kv8_smem._reinterpret(
        gl.float32, [BLOCK_H, LORA], gl.SwizzledSharedLayout(4, 1, 8, [1, 0])
    )
    staged.store(x)
    gl.thread_barrier()
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [gl.num_warps(), 1], [1, 0])
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, rows_layout))
    dims = gl.arange(0, LORA, layout=gl.SliceLayout(0, rows_layout))
    off = _head_rows(
        out_ptr, row, heads, split, NUM_HEADS, LORA, stride_buf_b, stride_buf_h, stride_buf_s
    )
    vals = staged.load(rows_layout).to(dst_ptr.dtype.element_ty)
    gl.store(dst_ptr + off[:, None] + dims[None, :], vals, mask=(heads < NUM_HEADS)[:, None])
