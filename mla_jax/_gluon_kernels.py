"""A Hopper (sm_90) Gluon version of stage 1 for 64-head tiles.

Same contract as ``kernels.mla_decode_stage1`` (same pointer arguments, grid, split
partition, clamps and output: the normalised partial ``acc / l * kv_scale`` in
columns ``[0, LORA)`` of the float32 buffer and the natural-log lse in column
``LORA``; empty splits write nothing), so ``kernels.mla_decode_stage2`` merges its
partials unchanged. What it supports is ``supports``: 16-bit q and cache of the same
dtype, ``LORA = 512``, ``ROPE = 64``, pages of a multiple of 64 tokens, at least 64
heads; everything else stays with the tl kernel.

Design (one CTA per (head tile, row, split), as the tl kernel):

* 8 warps, two warpgroups, ``BLOCK_H = 64`` heads, ``BLOCK_N = 64`` tokens a block.
  A warpgroup MMA has M = 64 rows per warpgroup, so 64 heads is its natural tile;
  128 heads would need a 128 x 512 float32 accumulator, 256 registers a thread at
  8 warps, more than a thread may hold.
* Every MMA is split across the two warpgroups by columns (``warps_per_cta = [4, 2]``):
  the output accumulator ``O`` (64 x 512 float32) is 64 x 256 a warpgroup, 128
  registers a thread; ``S = Q K^T`` (64 x 64) is 64 x 32 a warpgroup. Splitting S by
  tokens, not computing it twice, halves its tensor-core work (the 576-deep QK^T is
  more than half of all the FLOPs); the price is a cross-warpgroup row max (the
  compiler's reduction through shared memory) once a block.
* Q (64 x 512 + 64 x 64) stays in shared memory for the whole split; the latent
  block (64 x 512 + 64 x 64) is double-buffered in shared memory, filled by
  ``cp.async`` (no TMA descriptor: JAX passes plain pointers, and no global scratch).
  The next block's copy is issued at the top of an iteration, right after the
  barrier that proves every warp is done with the slot it overwrites, so a whole
  iteration of MMAs hides its latency.
* The latent block serves as K (all 576 columns, a transposed shared-memory view)
  and V (its first 512 columns) without a second copy.
* Online softmax in base 2 with the tl kernel's lazy per-row rescaling; P is stored
  to shared memory (bf16/fp16) for ``O += P V``. The row sum of P is kept as a
  64 x 64 per-thread partial (``l_acc``) and reduced once at the end: a row sum per
  block would be a second cross-warpgroup reduction, with its barrier.
* Shared memory: 72 KB Q + 2 x 72 KB latent + 8 KB P = 224 KB of the 227 KB an
  sm_90 block may have (229888 bytes with the row-max scratch), so one CTA per SM.
  The sm_90 build: 246 registers, no spills, 40 HGMMA, no serialised wgmma
  (``tests/test_gluon_build.py``).
* Synchronisation, per block: ``cp.async.wait_group`` + a CTA barrier + a proxy
  fence (cp.async writes through the generic proxy, wgmma reads through the async
  one) before the MMAs read a block; a fence + barrier between the P stores and
  the PV MMA; each MMA waited for before its inputs or output are reused.
* Not done (and why): overlapping block j's PV MMA with block j+1's QK^T. With two
  latent slots the next copy can then only start once PV is done, so it has about
  a softmax of time to land instead of a whole iteration; and ptxas (C7515)
  serialised every wgmma of that version. A warp-specialised "seesaw" (FlashMLA:
  each warpgroup computes the full S of alternate blocks, so one's softmax overlaps
  the other's MMAs) is the next step. fp8 caches are not supported yet: the tile
  would have to be widened to 16 bits in shared memory (or an fp8 wgmma used).
"""

from __future__ import annotations

from typing import Any

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from mla_jax import kernels

BLOCK_H = 64
BLOCK_N = 64
NUM_WARPS = 8
LORA = 512
ROPE = 64
# The tl kernels' constants, one definition (gl.constexpr is tl.constexpr).
_LOG2E = kernels._LOG2E
_LN2 = kernels._LN2
RESCALE_THRESHOLD = kernels.RESCALE_THRESHOLD
# The tl stage 1's constexprs that are its own tiling, not the problem's.
_TL_TILING = ("BLOCK_H", "BLOCK_N", "DOT_PRECISION", "PAGED_LOADS", "LORA_CHUNKS")


def supports(
    *,
    num_heads: int,
    page_size: int,
    kv_lora_rank: int,
    rope_dim: int,
    q_dtype: str,
    kv_dtype: str,
    kv_row_stride: int,
    kv_page_stride: int,
) -> bool:
    """Whether this kernel handles the problem (else use the tl kernel).

    ``q_dtype``/``kv_dtype`` are names (``"bfloat16"``, ``"float16"``, ...): both
    16-bit and equal (fp8 caches are not supported yet). Pages must hold whole
    64-token blocks, and each latent row must start 16-byte aligned (``cp.async``
    moves 16 bytes); the last dimension is assumed contiguous.
    """
    sixteen_bit = ("bfloat16", "float16")
    return (
        num_heads >= BLOCK_H
        and page_size % BLOCK_N == 0
        and kv_lora_rank == LORA
        and rope_dim == ROPE
        and q_dtype in sixteen_bit
        and kv_dtype == q_dtype
        and kv_row_stride % 8 == 0
        and kv_page_stride % 8 == 0
    )


def launch_params(**problem: Any) -> dict:
    """Grid, options and constexprs of ``mla_decode_stage1_gluon``: ``problem`` is
    ``kernels.launch_params``' keywords but ``float32_inputs`` and ``config``. The
    problem's constexprs are the tl stage 1's (one definition), less its tiling; the
    buffer is the tl kernel's, so stage 2 is launched from ``kernels.launch_params``."""
    tl_stage1, _ = kernels.launch_params(**problem, float32_inputs=False)
    constexprs = {k: v for k, v in tl_stage1["constexprs"].items() if k not in _TL_TILING} | {
        "BLOCK_H": BLOCK_H,
        "BLOCK_N": BLOCK_N,
    }
    return {
        "grid": (
            triton.cdiv(problem["num_heads"], BLOCK_H),
            problem["batch"],
            problem["grid_splits"],
        ),
        "num_warps": NUM_WARPS,
        "num_stages": 1,
        "constexprs": constexprs,
    }


@gluon.jit
def _safe_page(page, NUM_PAGES: gl.constexpr):
    """A page index inside the cache, whatever the block table holds: one outside
    ``[0, NUM_PAGES)`` reads page 0, as in ``kernels._safe_page``."""
    return gl.where(page.to(gl.uint32) < NUM_PAGES, page, 0)


@gluon.jit
def _copy_rows(smem, base, rows, row_mask, stride_row, COLS: gl.constexpr, layout: gl.constexpr):
    """``cp.async`` of ``len(rows)`` rows of ``COLS`` contiguous elements at
    ``base + rows * stride_row`` into ``smem``; masked rows are zero-filled."""
    cols = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    ptrs = base + rows[:, None] * stride_row + cols[None, :]
    async_copy.async_copy_global_to_shared(smem, ptrs, mask=row_mask[:, None])


@gluon.jit
def _copy_next_block(
    kv_c_dst,
    k_pe_dst,
    kv_ptr,
    bt_row,
    page,
    nxt,
    end,
    offs,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    BLOCK_N: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    copy_layout: gl.constexpr,
):
    """Issues (one commit group) the copy of the block at token ``nxt`` (raw page index
    ``page``) if it starts before ``end``; returns the raw page index of the block after
    it, loaded a block ahead. Checked against the pool where used, not where loaded,
    so nothing waits for that load before the next block."""
    if nxt < end:
        block = (
            kv_ptr
            + _safe_page(page, NUM_PAGES).to(gl.int64) * stride_kv_page
            + (nxt % PAGE_SIZE) * stride_kv_row
        )
        ok = nxt + offs < end
        _copy_rows(kv_c_dst, block, offs, ok, stride_kv_row, LORA, copy_layout)
        _copy_rows(k_pe_dst, block + LORA, offs, ok, stride_kv_row, ROPE, copy_layout)
        async_copy.commit_group()
    after = nxt + BLOCK_N
    return gl.load(bt_row + after // PAGE_SIZE, mask=after < end, other=0)


@gluon.jit
def mla_decode_stage1_gluon(
    q_nope_ptr,
    q_pe_ptr,
    kv_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_splits_ptr,
    kv_scale_ptr,
    buf_in_ptr,  # noqa: ARG001 (the aliased buffer as an input, never read)
    buf_ptr,
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
    dtype: gl.constexpr = kv_ptr.dtype.element_ty

    tile = gl.program_id(0)
    row = gl.program_id(1)
    split = gl.program_id(2)
    num_splits = gl.load(num_splits_ptr)
    if split >= num_splits:
        return
    seq_len = gl.minimum(gl.maximum(gl.load(seq_lens_ptr + row), 0), CAPACITY)
    # kernels._split_range: vLLM's cdiv partition.
    per_split = (seq_len + num_splits - 1) // num_splits
    start = per_split * split
    end = gl.minimum(start + per_split, seq_len)
    if end <= start:
        return  # stage 2 skips empty splits; nothing to write.

    # Register layouts. Copies: 16 bytes (8 elements) a thread, 8 threads a 64-wide
    # row chunk (one 128-byte line). MMAs: warpgroup MMA, the two warpgroups side by
    # side along N (see the module docstring).
    copy_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, BLOCK_N // 2, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, LORA // 2, 16]
    )
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    copy_rows: gl.constexpr = gl.SliceLayout(1, copy_layout)

    # Shared memory, in the swizzled layouts warpgroup MMA reads.
    nope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, LORA], dtype)
    rope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, ROPE], dtype)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_N], dtype)
    q_nope_smem = gl.allocate_shared_memory(dtype, [BLOCK_H, LORA], nope_layout)
    q_pe_smem = gl.allocate_shared_memory(dtype, [BLOCK_H, ROPE], rope_layout)
    kv_c_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, LORA], nope_layout)
    k_pe_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, ROPE], rope_layout)
    p_smem = gl.allocate_shared_memory(dtype, [BLOCK_H, BLOCK_N], p_layout)

    # Q, then the first latent block, in the first copy group. Heads past NUM_HEADS
    # are zero-filled (their rows are never stored).
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=copy_rows)
    head_ok = heads < NUM_HEADS
    _copy_rows(
        q_nope_smem, q_nope_ptr + row * stride_qn_b, heads, head_ok, stride_qn_h, LORA, copy_layout
    )
    _copy_rows(
        q_pe_smem,
        q_pe_ptr + row * stride_qp_b + QP_OFFSET,
        heads,
        head_ok,
        stride_qp_h,
        ROPE,
        copy_layout,
    )
    bt_row = block_table_ptr + row * stride_bt_b
    offs = gl.arange(0, BLOCK_N, layout=copy_rows)
    # Blocks are aligned to BLOCK_N, so each lies in one page: one page index per
    # block and BLOCK_N contiguous rows. Rows outside [start, end) are zero-filled, so
    # nothing past the sequence (perhaps NaN garbage) reaches P V.
    first = start - start % BLOCK_N
    page = _safe_page(gl.load(bt_row + first // PAGE_SIZE), NUM_PAGES)
    block = kv_ptr + page.to(gl.int64) * stride_kv_page + (first % PAGE_SIZE) * stride_kv_row
    tok_ok = (first + offs >= start) & (first + offs < end)
    _copy_rows(kv_c_smem.index(0), block, offs, tok_ok, stride_kv_row, LORA, copy_layout)
    _copy_rows(k_pe_smem.index(0), block + LORA, offs, tok_ok, stride_kv_row, ROPE, copy_layout)
    async_copy.commit_group()
    # The next block's page index (raw: checked where used, see _copy_next_block).
    next_page = gl.load(
        bt_row + (first + BLOCK_N) // PAGE_SIZE, mask=first + BLOCK_N < end, other=0
    )

    # An fp8 cache's scale would fold in here as in the tl kernel (kv_scale is 1 for
    # 16-bit caches, but it is applied all the same).
    kv_scale = gl.load(kv_scale_ptr)
    qk_scale = SM_SCALE * _LOG2E * kv_scale
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=s_rows)
    l_acc = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    acc = gl.zeros([BLOCK_H, LORA], gl.float32, layout=o_layout)
    s_init = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    s_cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))

    for n0 in range(first, end, BLOCK_N):
        slot = ((n0 - first) // BLOCK_N) % 2
        kv_c = kv_c_smem.index(slot)
        k_pe = k_pe_smem.index(slot)
        # This block's copies are done (each thread waits for its own; the barrier
        # for everyone's). The barrier also proves every warpgroup finished the last
        # iteration's MMAs, which read the other slot and P: the next block may go
        # there now, a whole iteration ahead of its use.
        async_copy.wait_group(0)
        gl.thread_barrier()
        fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads async
        next_page = _copy_next_block(
            kv_c_smem.index(1 - slot),
            k_pe_smem.index(1 - slot),
            kv_ptr,
            bt_row,
            next_page,
            n0 + BLOCK_N,
            end,
            offs,
            PAGE_SIZE,
            NUM_PAGES,
            LORA,
            ROPE,
            BLOCK_N,
            stride_kv_page,
            stride_kv_row,
            copy_layout,
        )

        # S = Q K^T over the 512 latent and 64 rope dims: the latent block seen
        # transposed ([576, 64]); each warpgroup computes 32 of the 64 tokens.
        s = warpgroup_mma(q_nope_smem, kv_c.permute((1, 0)), s_init, use_acc=False, is_async=True)
        s = warpgroup_mma(q_pe_smem, k_pe.permute((1, 0)), s, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))

        tokens = n0 + s_cols
        live = (tokens >= start) & (tokens < end)
        s = gl.where(live[None, :], s * qk_scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1))
        # Lazy rescaling (kernels._attend): a row's max moves only when it grew by
        # more than 2^RESCALE_THRESHOLD; until then p <= 2^8, harmless in 16 bits.
        grow = m_new - m_i > RESCALE_THRESHOLD
        alpha = gl.where(grow, gl.exp2(m_i - m_new), 1.0)
        m_i = gl.where(grow, m_new, m_i)
        p = gl.exp2(s - m_i[:, None])
        l_acc = l_acc * alpha[:, None] + p
        # P to shared memory for the second MMA (its A operand needs all 64 tokens,
        # computed half by each warpgroup).
        p_smem.store(p.to(dtype))
        fence_async_shared()
        gl.thread_barrier()
        acc = acc * gl.convert_layout(alpha, o_rows)[:, None]
        # O += P V: V is the block's first LORA columns; each warpgroup owns 256.
        acc = warpgroup_mma(p_smem, kv_c, acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))

    l_i = gl.sum(l_acc, 1)
    out_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=o_rows)
    out_off = (
        row.to(gl.int64) * stride_buf_b
        + out_heads.to(gl.int64) * stride_buf_h
        + split * stride_buf_s
    )
    out_ok = out_heads < NUM_HEADS
    inv = kv_scale / gl.convert_layout(l_i, o_rows)
    d_lora = gl.arange(0, LORA, layout=gl.SliceLayout(0, o_layout))
    gl.store(
        buf_ptr + out_off[:, None] + d_lora[None, :],
        acc * inv[:, None],
        mask=out_ok[:, None],
    )
    lse = (m_i + gl.log2(l_i)) * _LN2
    lse_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=s_rows)
    lse_off = (
        row.to(gl.int64) * stride_buf_b
        + lse_heads.to(gl.int64) * stride_buf_h
        + split * stride_buf_s
        + LORA
    )
    gl.store(buf_ptr + lse_off, lse, mask=lse_heads < NUM_HEADS)
