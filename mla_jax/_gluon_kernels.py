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
  the other's MMAs) is ``mla_decode_stage1_gluon_seesaw`` below. fp8 caches are not
  supported yet: the tile would have to be widened to 16 bits in shared memory (or an
  fp8 wgmma used).

Seesaw schedule (``mla_decode_stage1_gluon_seesaw``; same arguments, grid, contract
and output; launched with ``seesaw_launch_params``: ``num_warps = 4``, the build adds
a 4-warp worker, 8 warps in all). FlashMLA's "seesaw" (its 2025-04 deep dive) as far
as Gluon on triton 3.6 goes:

* ``gl.warp_specialize`` gives each warpgroup its own code: warpgroup 0 is the
  default partition, warpgroup 1 the worker (256 registers each, ``setmaxnreg``).
  Blocks go by pairs: the even block in latent slot 0, the odd one in slot 1.
  Warpgroup 0 computes the whole S = Q K^T (64 x 64, N = 64 wgmmas: Q and K each read
  once from shared memory a block, where the split S read Q twice) of the even
  block and owns O_L (output columns 0-255); warpgroup 1 the odd block's S and O_R.
* Per pair, with m the running max (lazy rescaling as the tl kernel's):
  WG0: S0 (waits ready0) -> m0 = max(m, rowmax S0), scale0 = 2^(m - m0),
  P0 = 2^(S0 - m0) -> publishes m0 and P0 (p0 barrier) -> O_L = O_L scale0 + P0 V0_L
  (P0 from registers, async) -> waits m1 and P1 (p1 barrier) while that MMA runs ->
  O_L = O_L 2^(m0 - m1) + P1 V1_L (P1 from shared memory).
  WG1: S1 (waits ready1; runs with WG0's S0) -> waits m0/P0 -> m1 = max(m0, rowmax S1),
  scale1 = 2^(m0 - m1), P1 = 2^(S1 - m1) (this softmax runs while WG0's P0 V0_L is on
  the tensor cores) -> publishes m1 and P1 -> O_R = O_R scale0 + P0 V0_R (P0 from
  shared memory) -> O_R = O_R scale1 + P1 V1_R (P1 from registers; the refill of slot 0
  is issued while it runs) -> refills slot 1.
  Both warpgroups apply every block in order, so each O half is always relative to
  the same m; the row sum is kept per warpgroup (its own blocks' P, rescaled the
  same way) and the two are added once at the end (one more exchange).
  Unlike FlashMLA's order, P0 needs no scale1 (WG1 rescales O_R between its two
  MMAs instead), so WG0 publishes P0 before WG1's softmax, not after.
* P of each block goes over that block's k_pe (64 x 64, the same shape and layout),
  dead once its QK^T is done: no P buffers. Shared memory: 72 KB Q + 2 x 72 KB
  latent + 1.5 KB m/l exchange + mbarriers = 222980 bytes.
* Handshakes (mbarriers; an arrive is a 128-thread named barrier then one thread's
  arrive, so everything the warpgroup did before it is released): ready0/1 (count
  128: each thread's ``cp.async.mbarrier.arrive.noinc`` fires when its copies have
  landed), p0 (WG0 -> WG1: m0 and P0), p1 (WG1 -> WG0: m1 and P1), free0/1 (WG0 ->
  WG1: WG0's MMAs on that slot are done; WG1, the slot's last user, then refills
  it), l0/l1 (row sums). Every barrier completes once a pair, so pair i waits parity
  i & 1; none can complete twice before its waiter looks (each next completion needs
  something the waiter itself does after its wait, e.g. p0's next needs slot 0's
  refill, issued by WG1 after it waited p0). The m
  exchange is double-buffered by pair parity. Every reader of a generic-proxy write
  (cp.async, P stores) through wgmma runs ``fence_async_shared`` after its wait (and
  the P writer before its arrive).
* No CTA-wide barrier inside the loop (5 a block in ``mla_decode_stage1_gluon``):
  each warpgroup syncs itself (named 128-thread barriers) and the other through
  mbarriers. The sm_90 build: 255 registers, no spills, 88 HGMMA; every
  ``wgmma.wait_group`` is 0, the overlap being across warpgroups and, in each,
  across an mbarrier wait (WG0) or the refill's cp.async issue (WG1).
* The views of Q and the slots are indexed by an opaque 0 (``_opaque_zero``) inside
  the loop: with fixed views every wgmma descriptor is loop-invariant, LLVM hoists
  them all (Q's 36 alone are 72 registers) and ptxas spilled 920 bytes.
* Not done (and why): FlashMLA's finer pipelining. (1) With two 64-token slots the
  next pair's loads start only as each slot's last MMA ends: WG0's next S waits for
  slot 0's refill, issued after WG1's P0 V0_R, about two 64 x 256 MMAs ahead of use;
  WG1's next S waits for slot 1's, issued at the very end of its pair (FlashMLA eases
  this with 9 per-64-column TMA barriers a block, so S starts on the first column
  tile; with cp.async that would be 9 commit groups and 18 mbarriers, not tried).
  (2) No TMA (no global scratch for descriptors). (3) No wgmma kept in flight past a
  ``wgmma.wait_group N > 0``: each warpgroup's accumulator must be rescaled between
  its two PV MMAs (the other order, FlashMLA's, would make WG0 wait for scale1
  before publishing P0) and at 255 registers there is no room for a second
  accumulator or for P0 in registers.
"""

from __future__ import annotations

from typing import Any

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
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


# --------------------------------------------------------------------------------------
# The seesaw version (see the module docstring, "Seesaw schedule").

SEESAW_NUM_WARPS = 4  # the default partition (warpgroup 0); the worker adds 4 more
# The worker's registers: 256, as the default partition (8 warps x 256 = the whole file).
SEESAW_WORKER_REGS = gl.constexpr(256)


def seesaw_launch_params(**problem: Any) -> dict:
    """``launch_params`` for ``mla_decode_stage1_gluon_seesaw``: the same grid and
    constexprs; ``num_warps`` is the default partition's 4 (the build adds the worker
    warpgroup: its metadata says 8)."""
    return launch_params(**problem) | {"num_warps": SEESAW_NUM_WARPS}


@gluon.jit
def _seesaw_copy_block(
    kv_c_dst,
    k_pe_dst,
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
    """``cp.async`` of the block at token ``n0`` (raw page index ``page``) by the 128
    threads of one warpgroup; rows outside ``[start, end)`` are zero-filled (a block
    wholly past ``end``, the phantom second block of an odd count, is all zeros). Each
    thread then arrives on ``ready`` (``cp.async.mbarrier.arrive.noinc``) once its own
    copies have landed, so ``ready`` (count 128) completes when the block has."""
    copy_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    offs = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, copy_layout))
    page_base = kv_ptr + _safe_page(page, NUM_PAGES).to(gl.int64) * stride_kv_page
    # The rows as rows of the page (not of the block from a block base): element
    # offsets that change block to block are not hoisted out of the loop, where 36
    # 64-bit offsets a thread would spill.
    rows = n0 % PAGE_SIZE + offs
    ok = (n0 + offs >= start) & (n0 + offs < end)
    _copy_rows(kv_c_dst, page_base, rows, ok, stride_kv_row, LORA, copy_layout)
    _copy_rows(k_pe_dst, page_base + LORA, rows, ok, stride_kv_row, ROPE, copy_layout)
    async_copy.mbarrier_arrive(ready, increment_count=False)


@gluon.jit
def _opaque_zero(i):
    """0, which the compiler cannot see through (it depends on ``i``)."""
    return gl.inline_asm_elementwise(
        "and.b32 $0, $1, 0;", "=r,r", [i], dtype=gl.int32, is_pure=True, pack=1
    )


@gluon.jit
def _seesaw_store(
    buf_ptr,
    acc,
    l_i,
    m_i,
    kv_scale,
    tile,
    row,
    split,
    valid,
    COL0: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    BLOCK_H: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """One warpgroup's half of the partial (columns ``[COL0, COL0 + 256)``), and the lse
    if ``WRITE_LSE``; nothing where ``valid`` is false (an empty split)."""
    o_layout: gl.constexpr = acc.type.layout
    s_rows: gl.constexpr = l_i.type.layout
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    out_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=o_rows)
    out_off = (
        row.to(gl.int64) * stride_buf_b
        + out_heads.to(gl.int64) * stride_buf_h
        + split * stride_buf_s
    )
    out_ok = (out_heads < NUM_HEADS) & valid
    inv = kv_scale / gl.convert_layout(l_i, o_rows)
    d = COL0 + gl.arange(0, LORA // 2, layout=gl.SliceLayout(0, o_layout))
    gl.store(buf_ptr + out_off[:, None] + d[None, :], acc * inv[:, None], mask=out_ok[:, None])
    if WRITE_LSE:
        lse = (m_i + gl.log2(l_i)) * _LN2
        lse_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=s_rows)
        lse_off = (
            row.to(gl.int64) * stride_buf_b
            + lse_heads.to(gl.int64) * stride_buf_h
            + split * stride_buf_s
            + LORA
        )
        gl.store(buf_ptr + lse_off, lse, mask=(lse_heads < NUM_HEADS) & valid)


@gluon.jit
def _seesaw_wg0(
    q_nope_smem,
    q_pe_smem,
    kv_c_smem,
    k_pe_smem,
    m_smem,
    l_smem,
    bars,
    buf_ptr,
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
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
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
    ready0 = bars.index(0)
    ready1 = bars.index(1)
    p0_bar = bars.index(2)
    p1_bar = bars.index(3)
    free0 = bars.index(4)
    free1 = bars.index(5)
    l0_bar = bars.index(6)
    l1_bar = bars.index(7)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=s_rows)
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=s_rows)
    acc = gl.zeros([BLOCK_H, HALF], gl.float32, layout=o_layout)
    s_init = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    s_cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))

    for i in range(num_pairs):
        ph = i & 1
        n0 = first + 2 * i * BLOCK_N
        # Slot 0 holds the even block, slot 1 the odd one; P of each goes over its
        # block's k_pe once QK^T is done with it. The views are indexed by an opaque
        # 0 so that their wgmma descriptors are rebuilt each pair: hoisted out of
        # the loop, Q's 36 alone would pin 72 registers (and spill).
        z = _opaque_zero(i)
        q_nope = q_nope_smem.index(z)
        q_pe = q_pe_smem.index(z)
        kv_c0 = kv_c_smem.index(z)
        kv_c1 = kv_c_smem.index(z + 1)
        p0_smem = k_pe_smem.index(z)
        p1_smem = k_pe_smem.index(z + 1)
        # (1) S0 = Q K0^T, the whole 64 x 64, once the even block has landed.
        mbarrier.wait(ready0, ph)
        fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads async
        s = warpgroup_mma(q_nope, kv_c0.permute((1, 0)), s_init, use_acc=False, is_async=True)
        s = warpgroup_mma(q_pe, p0_smem.permute((1, 0)), s, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        # (2) softmax of the even block against the running max m_i (lazy rescaling).
        tokens = n0 + s_cols
        live = (tokens >= start) & (tokens < end)
        s = gl.where(live[None, :], s * qk_scale, float("-inf"))
        m_blk = gl.maximum(m_i, gl.max(s, 1))
        m0 = gl.where(m_blk - m_i > RESCALE_THRESHOLD, m_blk, m_i)
        scale0 = gl.exp2(m_i - m0)
        p = gl.exp2(s - m0[:, None])
        l_i = l_i * scale0 + gl.sum(p, 1)
        pb = p.to(dtype)
        # (3) publish m0 and P0 (into the even block's k_pe: QK^T no longer reads it).
        m_smem.index(ph).store(m0)
        p0_smem.store(pb)
        fence_async_shared()  # P0 is read by warpgroup 1's wgmma (async proxy)
        mbarrier.arrive(p0_bar)
        # (4) O_L = O_L * scale0 + P0 V0_L, P0 from registers; async: runs while
        # warpgroup 1 does its softmax.
        acc = acc * gl.convert_layout(scale0, o_rows)[:, None]
        acc = warpgroup_mma(
            gl.convert_layout(pb, p_op_layout), kv_c0.slice(0, HALF, dim=1), acc, is_async=True
        )
        # (5) warpgroup 1's m1 and P1 (the odd block, over its k_pe).
        mbarrier.wait(p1_bar, ph)
        m1 = m_smem.index(2 + ph).load(s_rows)
        scale1 = gl.exp2(m0 - m1)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(free0)  # done with slot 0 (warpgroup 1 refills it)
        mbarrier.wait(ready1, ph)  # (completed: warpgroup 1 waited it before P1)
        fence_async_shared()
        # (6) O_L = O_L * scale1 + P1 V1_L, P1 from shared memory.
        acc = acc * gl.convert_layout(scale1, o_rows)[:, None]
        acc = warpgroup_mma(p1_smem, kv_c1.slice(0, HALF, dim=1), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(free1)  # done with slot 1
        l_i = l_i * scale1
        m_i = m1

    # The row sum: this warpgroup's (even blocks) plus warpgroup 1's (odd blocks).
    l_smem.index(0).store(l_i)
    mbarrier.arrive(l0_bar)
    mbarrier.wait(l1_bar, 0)
    l_i = l_i + l_smem.index(1).load(s_rows)
    _seesaw_store(
        buf_ptr,
        acc,
        l_i,
        m_i,
        kv_scale,
        tile,
        row,
        split,
        valid,
        0,
        True,
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
    kv_c_smem,
    k_pe_smem,
    m_smem,
    l_smem,
    bars,
    kv_ptr,
    bt_row,
    buf_ptr,
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
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
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
    ready0 = bars.index(0)
    ready1 = bars.index(1)
    p0_bar = bars.index(2)
    p1_bar = bars.index(3)
    free0 = bars.index(4)
    free1 = bars.index(5)
    l0_bar = bars.index(6)
    l1_bar = bars.index(7)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=s_rows)
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=s_rows)
    acc = gl.zeros([BLOCK_H, HALF], gl.float32, layout=o_layout)
    s_init = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    s_cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))

    for i in range(num_pairs):
        ph = i & 1
        n1 = first + (2 * i + 1) * BLOCK_N
        # Slot 0 holds the even block, slot 1 the odd one; P of each goes over its
        # block's k_pe once QK^T is done with it. The views are indexed by an opaque
        # 0 so that their wgmma descriptors are rebuilt each pair: hoisted out of
        # the loop, Q's 36 alone would pin 72 registers (and spill).
        z = _opaque_zero(i)
        q_nope = q_nope_smem.index(z)
        q_pe = q_pe_smem.index(z)
        kv_c0 = kv_c_smem.index(z)
        kv_c1 = kv_c_smem.index(z + 1)
        p0_smem = k_pe_smem.index(z)
        p1_smem = k_pe_smem.index(z + 1)
        more = i + 1 < num_pairs
        # The next pair's page indices, a pair ahead of their copies (raw: checked
        # where used; blocks past the end read nothing).
        nxt0 = n1 + BLOCK_N
        nxt1 = nxt0 + BLOCK_N
        page0 = gl.load(bt_row + nxt0 // PAGE_SIZE, mask=more & (nxt0 < end), other=0)
        page1 = gl.load(bt_row + nxt1 // PAGE_SIZE, mask=more & (nxt1 < end), other=0)
        # (1) S1 = Q K1^T, concurrently with warpgroup 0's S0.
        mbarrier.wait(ready1, ph)
        fence_async_shared()
        s = warpgroup_mma(q_nope, kv_c1.permute((1, 0)), s_init, use_acc=False, is_async=True)
        s = warpgroup_mma(q_pe, p1_smem.permute((1, 0)), s, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        tokens = n1 + s_cols
        live = (tokens >= start) & (tokens < end)
        s = gl.where(live[None, :], s * qk_scale, float("-inf"))
        # (2) m0 from warpgroup 0, then the odd block's softmax against it: this runs
        # while warpgroup 0's P0 V0_L is on the tensor cores.
        mbarrier.wait(p0_bar, ph)
        m0 = m_smem.index(ph).load(s_rows)
        scale0 = gl.exp2(m_i - m0)
        m_blk = gl.maximum(m0, gl.max(s, 1))
        m1 = gl.where(m_blk - m0 > RESCALE_THRESHOLD, m_blk, m0)
        scale1 = gl.exp2(m0 - m1)
        p = gl.exp2(s - m1[:, None])
        l_i = l_i * (scale0 * scale1) + gl.sum(p, 1)
        pb = p.to(dtype)
        # (3) publish m1 and P1 (over the odd block's k_pe).
        m_smem.index(2 + ph).store(m1)
        p1_smem.store(pb)
        fence_async_shared()
        mbarrier.arrive(p1_bar)
        # (4) O_R = O_R * scale0 + P0 V0_R, P0 from shared memory.
        mbarrier.wait(ready0, ph)  # (completed: warpgroup 0 waited it before P0)
        fence_async_shared()
        acc = acc * gl.convert_layout(scale0, o_rows)[:, None]
        acc = warpgroup_mma(p0_smem, kv_c0.slice(HALF, HALF, dim=1), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        # (5) O_R = O_R * scale1 + P1 V1_R, P1 from registers.
        acc = acc * gl.convert_layout(scale1, o_rows)[:, None]
        acc = warpgroup_mma(
            gl.convert_layout(pb, p_op_layout), kv_c1.slice(HALF, HALF, dim=1), acc, is_async=True
        )
        # (6) while P1 V1_R runs: slot 0 is free once warpgroup 0's P0 V0_L is done
        # too; refill it with the next pair's even block.
        if more:
            mbarrier.wait(free0, ph)
            _seesaw_copy_block(
                kv_c0,
                p0_smem,
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

    l_smem.index(1).store(l_i)
    mbarrier.arrive(l1_bar)
    mbarrier.wait(l0_bar, 0)
    l_i = l_i + l_smem.index(0).load(s_rows)
    _seesaw_store(
        buf_ptr,
        acc,
        l_i,
        m_i,
        kv_scale,
        tile,
        row,
        split,
        valid,
        LORA // 2,
        False,
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
    gl.static_assert(gl.num_warps() == 4, "one warpgroup here, the worker adds the other")
    dtype: gl.constexpr = kv_ptr.dtype.element_ty

    tile = gl.program_id(0)
    row = gl.program_id(1)
    split = gl.program_id(2)
    # No early return (the worker warpgroup must still be started and stopped): an
    # empty or surplus split runs no pair and stores nothing.
    num_splits = gl.load(num_splits_ptr)
    seq_len = gl.minimum(gl.maximum(gl.load(seq_lens_ptr + row), 0), CAPACITY)
    per_split = (seq_len + num_splits - 1) // num_splits
    start = per_split * split
    end = gl.minimum(start + per_split, seq_len)
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
    # ready0/1 (cp.async landed, 128 arrivals), p0/p1 (P and m published), free0/1
    # (warpgroup 0 done with a slot), l0/l1 (row sums published).
    bars = gl.allocate_shared_memory(gl.int64, [8, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=128)
    mbarrier.init(bars.index(1), count=128)
    for b in gl.static_range(2, 8):
        mbarrier.init(bars.index(b), count=1)

    bt_row = block_table_ptr + row * stride_bt_b
    if num_pairs > 0:
        # Q, then the first two blocks (the second may be past the end: zeros), each
        # block signalling its slot's ready barrier; Q lands before either arrives.
        copy_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, copy_layout))
        head_ok = heads < NUM_HEADS
        _copy_rows(
            q_nope_smem.index(0),
            q_nope_ptr + row * stride_qn_b,
            heads,
            head_ok,
            stride_qn_h,
            LORA,
            copy_layout,
        )
        _copy_rows(
            q_pe_smem.index(0),
            q_pe_ptr + row * stride_qp_b + QP_OFFSET,
            heads,
            head_ok,
            stride_qp_h,
            ROPE,
            copy_layout,
        )
        page0 = gl.load(bt_row + first // PAGE_SIZE)
        page1 = gl.load(
            bt_row + (first + BLOCK_N) // PAGE_SIZE, mask=first + BLOCK_N < end, other=0
        )
        _seesaw_copy_block(
            kv_c_smem.index(0),
            k_pe_smem.index(0),
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
                    kv_c_smem,
                    k_pe_smem,
                    m_smem,
                    l_smem,
                    bars,
                    buf_ptr,
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
                    NUM_HEADS,
                    LORA,
                    BLOCK_H,
                    BLOCK_N,
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
                    kv_c_smem,
                    k_pe_smem,
                    m_smem,
                    l_smem,
                    bars,
                    kv_ptr,
                    bt_row,
                    buf_ptr,
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
                    NUM_HEADS,
                    PAGE_SIZE,
                    NUM_PAGES,
                    LORA,
                    ROPE,
                    BLOCK_H,
                    BLOCK_N,
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
