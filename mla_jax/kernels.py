"""Triton kernels of the two-stage split-KV MLA decode.

No JAX here: the Triton interpreter loads this module alone (tests drive it with
torch CPU tensors), and ``mla_jax._triton_backend`` calls the same kernels from JAX
(``mla_jax._launch``). Both drivers take the launch parameters from ``launch_params``.

Stage 1, one program per (row, head tile, split): an online softmax over the
split's slice of the row's paged latent cache. Each 576-wide latent row is read
once per head tile: its first ``LORA`` columns serve as the key's ``kv_c`` part
and again as the value, the last ``ROPE`` columns as the rope key. It writes the
normalised partial output and its log-sum-exp into the logits buffer.

Stage 2, one program per (row, block of heads, block of output columns): merges the
row's non-empty splits into the output and the log-sum-exp; a row with no tokens gets
``out = 0, lse = -inf``. The partials are bf16, packed two to a float32 slot, for a
bf16 q, float32 otherwise (``bf16_partials``; both stages' ``BF16_PARTIALS``).

With one split (``grid_splits == 1``) there is nothing to merge: stage 1 writes the
output and the log-sum-exp itself, as stage 2 would from that one partial (the same
values wherever the lse is finite; NaN in both where it is not, so a live row never
reads as empty; ``0, -inf`` for a row with no tokens), and stage 2 is not launched.
Its launch passes ``out_ptr`` and ``lse_ptr`` too; the buffer still passes through it
(aliased, unwritten), so consecutive calls on one buffer stay ordered and distinct,
as with two stages. A split launch passes None for those two (``stage1_pointers``).

The split count arrives as a one-element int32 array so it can change per step
without a recompilation; programs whose split index is at or past it exit at once.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from mla_jax._tiling import head_tile

_LOG2E = tl.constexpr(1.4426950408889634)
_LN2 = tl.constexpr(0.6931471805599453)
RESCALE_THRESHOLD = tl.constexpr(8.0)
# Stage 2's tile (``stage2_tiling``): up to MAX_SPLIT_BLOCK splits per iteration, at
# least MIN_COL_BLOCK output columns per program, STAGE2_TILE values in all, and
# STAGE2_PROGRAMS programs (about two an SM) wherever the batch allows.
MAX_SPLIT_BLOCK = 32
MIN_COL_BLOCK = 128
STAGE2_TILE = 4096
STAGE2_PROGRAMS = 256
MIN_DOT = 16  # tl.dot's smallest dimension


@triton.jit
def _split_range(seq_len, num_splits, split):
    """[start, end) of ``split``: vLLM's cdiv partition of the row's tokens."""
    per_split = (seq_len + num_splits - 1) // num_splits
    start = per_split * split
    end = tl.minimum(start + per_split, seq_len)
    return start, end


@triton.jit
def _safe_page(page, NUM_PAGES: tl.constexpr):
    """A page index inside the cache, whatever the block table holds: one outside
    ``[0, NUM_PAGES)`` reads page 0. (A select, not a min/max clamp: ptxas keeps the
    select and the block's base address in uniform registers, where a clamp moved the
    address arithmetic to every thread, 1-3% at 16-head tiles.)"""
    return tl.where(page.to(tl.uint32) < NUM_PAGES, page, 0)


@triton.jit
def _one_split_result(norm, lse, nonempty):
    """What stage 2 makes of a row's one partial, as ``(norm, lse)`` per head (the
    output is ``acc * norm``): ``norm`` (``kv_scale / l``) and ``lse`` where the lse is
    finite; NaN for both where it is not (a live row's infinite lse is NaN after stage
    2's merge, never the empty row's -inf); ``0, -inf`` where the row has no tokens."""
    finite = tl.abs(lse) < float("inf")
    norm = tl.where(nonempty, tl.where(finite, norm, float("nan")), 0.0)
    lse = tl.where(nonempty, tl.where(finite, lse, float("nan")), float("-inf"))
    return norm, lse


@triton.jit
def _load_chunks(ptrs, mask, CHUNK: tl.constexpr, NUM_CHUNKS: tl.constexpr, dtype):
    """The tile at ``ptrs`` (its first ``CHUNK`` columns) and the ``NUM_CHUNKS - 1``
    column chunks after it, as a tuple of ``[rows, CHUNK]`` tiles in ``dtype``."""
    chunks = ()
    for i in tl.static_range(NUM_CHUNKS):
        chunks = chunks + (tl.load(ptrs + i * CHUNK, mask=mask, other=0.0).to(dtype),)
    return chunks


@triton.jit
def _attend(
    q_nope,
    q_pe,
    kv_c,
    k_pe,
    tok_mask,
    m_i,
    l_i,
    acc,
    qk_scale,
    DOT_PRECISION: tl.constexpr,
    NUM_CHUNKS: tl.constexpr,
):
    """One KV block of the online softmax: returns the updated ``(m_i, l_i, acc)``.

    ``q_nope``, ``kv_c`` and ``acc`` are tuples of ``NUM_CHUNKS`` column chunks of the
    latent dims; ``tok_mask`` marks the block's tokens inside the split.
    """
    # One dot per chunk (the rope part accumulated onto the first), each scaled before
    # the sum: independent MMA chains, where the whole 576-deep dot is one chain of 36
    # dependent mma.sync per warp at 16-head tiles. (An add of unscaled dot results
    # would be folded back into one accumulate chain by Triton.)
    qk = tl.dot(q_nope[0], tl.trans(kv_c[0]), input_precision=DOT_PRECISION)
    qk = tl.dot(q_pe, tl.trans(k_pe), acc=qk, input_precision=DOT_PRECISION) * qk_scale
    for i in tl.static_range(1, NUM_CHUNKS):
        qk += tl.dot(q_nope[i], tl.trans(kv_c[i]), input_precision=DOT_PRECISION) * qk_scale
    qk = tl.where(tok_mask[None, :], qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    # Lazy rescaling, decided per head row: a row's running max moves only when its
    # max grew by more than 2^RESCALE_THRESHOLD (until then p <= 2^RESCALE_THRESHOLD,
    # harmless in bf16 and fp32). Per row, not one vote over the tile: that vote
    # was a CTA-wide reduction and a barrier per block (12% of the time at H=128).
    grow = m_new - m_i > RESCALE_THRESHOLD
    alpha = tl.where(grow, tl.exp2(m_i - m_new), 1.0)
    m_i = tl.where(grow, m_new, m_i)
    p = tl.exp2(qk - m_i[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    p = p.to(kv_c[0].dtype)
    new_acc = ()
    for i in tl.static_range(NUM_CHUNKS):
        new_acc = new_acc + (
            tl.dot(p, kv_c[i], acc=acc[i] * alpha[:, None], input_precision=DOT_PRECISION),
        )
    return m_i, l_i, new_acc


@triton.jit
def mla_decode_stage1(
    q_nope_ptr,
    q_pe_ptr,
    kv_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_splits_ptr,
    kv_scale_ptr,
    buf_in_ptr,
    buf_ptr,
    out_ptr,
    lse_ptr,
    SM_SCALE: tl.constexpr,
    NUM_HEADS: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    NUM_PAGES: tl.constexpr,
    CAPACITY: tl.constexpr,
    LORA: tl.constexpr,
    ROPE: tl.constexpr,
    stride_qn_b: tl.constexpr,
    stride_qn_h: tl.constexpr,
    stride_qp_b: tl.constexpr,
    stride_qp_h: tl.constexpr,
    QP_OFFSET: tl.constexpr,
    stride_kv_page: tl.constexpr,
    stride_kv_row: tl.constexpr,
    stride_bt_b: tl.constexpr,
    stride_buf_b: tl.constexpr,
    stride_buf_h: tl.constexpr,
    stride_buf_s: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    PAGED_LOADS: tl.constexpr,
    LORA_CHUNKS: tl.constexpr,
    BF16_PARTIALS: tl.constexpr,
):
    # Head tiles vary fastest: the tiles of one (row, split) run side by side and
    # read the same latent rows, so all but the first find them in L2.
    tile = tl.program_id(0)
    row = tl.program_id(1)
    split = tl.program_id(2)
    if out_ptr is None:
        num_splits = tl.load(num_splits_ptr)
    else:
        num_splits = 1  # the one split: the whole row
    # Clamped to the block table's row, so no split reads past it.
    seq_len = tl.minimum(tl.maximum(tl.load(seq_lens_ptr + row), 0), CAPACITY)
    start, end = _split_range(seq_len, num_splits, split)
    # One branch after both loads (one memory round trip before the bounds are known):
    # a split past the run-time count is empty (its start is at least seq_len).
    if out_ptr is None and end <= start:
        return  # stage 2 skips empty splits; nothing to write.

    heads = tile * BLOCK_H + tl.arange(0, BLOCK_H)
    head_mask = heads < NUM_HEADS
    # The latent dims in LORA_CHUNKS column chunks of CHUNK (see _attend).
    CHUNK: tl.constexpr = LORA // LORA_CHUNKS
    d_lora = tl.arange(0, CHUNK)
    d_rope = tl.arange(0, ROPE)
    q_nope = _load_chunks(
        q_nope_ptr + row * stride_qn_b + heads[:, None] * stride_qn_h + d_lora[None, :],
        head_mask[:, None],
        CHUNK,
        LORA_CHUNKS,
        q_nope_ptr.dtype.element_ty,
    )
    q_pe = tl.load(
        q_pe_ptr + row * stride_qp_b + heads[:, None] * stride_qp_h + QP_OFFSET + d_rope[None, :],
        mask=head_mask[:, None],
        other=0.0,
    )

    # An fp8 cache is dequantised by one scale for keys and values (as vLLM's
    # k_scale): it folds into the softmax scale and the output, and the latent
    # tile itself is only widened to q's dtype (exact for e4m3 -> bf16/fp16).
    kv_scale = tl.load(kv_scale_ptr)
    # Base-2 softmax: fold log2(e) into the scale once.
    qk_scale = SM_SCALE * _LOG2E * kv_scale
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = ()
    for i in tl.static_range(LORA_CHUNKS):
        acc = acc + (tl.zeros([BLOCK_H, CHUNK], tl.float32),)
    bt_row = block_table_ptr + row * stride_bt_b
    offs = tl.arange(0, BLOCK_N)
    # The next block's page index is loaded one iteration ahead, by hand: a latent load
    # whose address comes from a load of the same iteration is an indirect load, which
    # Triton's pipeliner buffers one stage shallower (no overlap at 2 stages). It is
    # checked against the pool where it is used, not where it is loaded, so nothing
    # waits for the load before the next block.
    if PAGED_LOADS:
        # Blocks aligned to BLOCK_N lie inside one page: one page index per block, and
        # the tile is BLOCK_N contiguous rows at a scalar base, so the per-row address
        # arithmetic is loop-invariant. Every block is masked: unmasked interior blocks
        # with the split's edge blocks peeled out of the loop ran fewer instructions
        # but 5-25% slower on the H200, the peeled code costing registers
        # (docs/performance.md, "Latent loads").
        first = start - start % BLOCK_N
        page = tl.load(bt_row + first // PAGE_SIZE)
        for n0 in range(first, end, BLOCK_N):
            tokens = n0 + offs
            tok_mask = (tokens >= start) & (tokens < end)
            block = (
                kv_ptr
                + _safe_page(page, NUM_PAGES).to(tl.int64) * stride_kv_page
                + (n0 % PAGE_SIZE) * stride_kv_row
            )
            kv_c = _load_chunks(
                block + offs[:, None] * stride_kv_row + d_lora[None, :],
                tok_mask[:, None],
                CHUNK,
                LORA_CHUNKS,
                q_nope[0].dtype,
            )
            k_pe = tl.load(
                block + offs[:, None] * stride_kv_row + LORA + d_rope[None, :],
                mask=tok_mask[:, None],
                other=0.0,
            ).to(q_nope[0].dtype)
            page = tl.load(bt_row + (n0 + BLOCK_N) // PAGE_SIZE, mask=n0 + BLOCK_N < end, other=0)
            m_i, l_i, acc = _attend(
                q_nope,
                q_pe,
                kv_c,
                k_pe,
                tok_mask,
                m_i,
                l_i,
                acc,
                qk_scale,
                DOT_PRECISION,
                LORA_CHUNKS,
            )
    else:
        # Pages shorter than a block: a page index per token.
        tokens = start + offs
        pages = tl.load(bt_row + tokens // PAGE_SIZE, mask=tokens < end, other=0)
        for n0 in range(start, end, BLOCK_N):
            tokens = n0 + offs
            tok_mask = tokens < end
            row_off = (
                _safe_page(pages, NUM_PAGES).to(tl.int64) * stride_kv_page
                + (tokens % PAGE_SIZE) * stride_kv_row
            )
            kv_c = _load_chunks(
                kv_ptr + row_off[:, None] + d_lora[None, :],
                tok_mask[:, None],
                CHUNK,
                LORA_CHUNKS,
                q_nope[0].dtype,
            )
            k_pe = tl.load(
                kv_ptr + row_off[:, None] + LORA + d_rope[None, :],
                mask=tok_mask[:, None],
                other=0.0,
            ).to(q_nope[0].dtype)
            next_tokens = tokens + BLOCK_N
            pages = tl.load(bt_row + next_tokens // PAGE_SIZE, mask=next_tokens < end, other=0)
            m_i, l_i, acc = _attend(
                q_nope,
                q_pe,
                kv_c,
                k_pe,
                tok_mask,
                m_i,
                l_i,
                acc,
                qk_scale,
                DOT_PRECISION,
                LORA_CHUNKS,
            )

    if out_ptr is None:
        out_off = (
            row.to(tl.int64) * stride_buf_b
            + heads[:, None].to(tl.int64) * stride_buf_h
            + split * stride_buf_s
        )
        for i in tl.static_range(LORA_CHUNKS):
            part = acc[i] * (kv_scale / l_i[:, None])
            if BF16_PARTIALS:
                # Two to a float32 slot from the slot's start (``_load_partials``).
                tl.store(
                    buf_ptr.to(tl.pointer_type(tl.bfloat16))
                    + 2 * out_off
                    + i * CHUNK
                    + d_lora[None, :],
                    part.to(tl.bfloat16),
                    mask=head_mask[:, None],
                )
            else:
                tl.store(
                    buf_ptr + out_off + i * CHUNK + d_lora[None, :],
                    part,
                    mask=head_mask[:, None],
                )
        # The lse after the partial's stores, in each branch: computed once before the
        # branch, it changed the split build's SASS (see docs/performance.md, "Current
        # results"); this order keeps the build the sweeps measured.
        lse = (m_i + tl.log2(l_i)) * _LN2
        tl.store(buf_ptr + out_off + LORA, lse[:, None], mask=head_mask[:, None])
    else:
        lse = (m_i + tl.log2(l_i)) * _LN2
        norm, lse = _one_split_result(kv_scale / l_i, lse, end > start)
        out_off = (row * NUM_HEADS + heads[:, None]).to(tl.int64) * LORA
        for i in tl.static_range(LORA_CHUNKS):
            tl.store(
                out_ptr + out_off + i * CHUNK + d_lora[None, :],
                (acc[i] * norm[:, None]).to(out_ptr.dtype.element_ty),
                mask=head_mask[:, None],
            )
        tl.store(lse_ptr + row * NUM_HEADS + heads, lse, mask=head_mask)


@triton.jit
def _load_partials(buf_ptr, off, cols, mask, BF16_PARTIALS: tl.constexpr):
    """Columns ``cols`` of the partials at slot offsets ``off`` (``[heads, splits]``,
    float32 elements) where ``mask``, as float32 ``[heads, splits, cols]`` (0 elsewhere).
    ``BF16_PARTIALS``: the partial is bf16, two to a float32 slot from the slot's start
    (``bf16_partials``), its lse in slot ``LORA`` as always."""
    if BF16_PARTIALS:
        vals = tl.load(
            buf_ptr.to(tl.pointer_type(tl.bfloat16)) + 2 * off[:, :, None] + cols[None, None, :],
            mask=mask[:, :, None],
            other=0.0,
        ).to(tl.float32)
    else:
        vals = tl.load(
            buf_ptr + off[:, :, None] + cols[None, None, :], mask=mask[:, :, None], other=0.0
        )
    return vals


@triton.jit
def mla_decode_stage2(
    buf_ptr,
    seq_lens_ptr,
    num_splits_ptr,
    out_ptr,
    lse_ptr,
    NUM_HEADS: tl.constexpr,
    LORA: tl.constexpr,
    CAPACITY: tl.constexpr,
    stride_buf_b: tl.constexpr,
    stride_buf_h: tl.constexpr,
    stride_buf_s: tl.constexpr,
    GRID_SPLITS: tl.constexpr,
    HEAD_BLOCK: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr,
    COL_BLOCK: tl.constexpr,
    BF16_PARTIALS: tl.constexpr,
):
    row = tl.program_id(0)
    heads = tl.program_id(1) * HEAD_BLOCK + tl.arange(0, HEAD_BLOCK)
    col_block = tl.program_id(2)
    head_ok = heads < NUM_HEADS
    cols = col_block * COL_BLOCK + tl.arange(0, COL_BLOCK)
    head_off = row.to(tl.int64) * stride_buf_b + heads.to(tl.int64) * stride_buf_h
    # The first SPLIT_BLOCK slots of the grid's splits are loaded before the row's
    # length and the split count are known (masked by the static grid only, dead
    # splits' values discarded below), so the program's first partials do not wait a
    # memory round trip for the length.
    splits = tl.arange(0, SPLIT_BLOCK)
    in_grid = head_ok[:, None] & (splits < GRID_SPLITS)[None, :]
    off = head_off[:, None] + splits[None, :] * stride_buf_s
    first_lse = tl.load(buf_ptr + off + LORA, mask=in_grid, other=float("-inf"))
    first = _load_partials(buf_ptr, off, cols, in_grid, BF16_PARTIALS)
    num_splits = tl.load(num_splits_ptr)
    seq_len = tl.minimum(tl.maximum(tl.load(seq_lens_ptr + row), 0), CAPACITY)  # as stage 1
    # Splits [0, cdiv(seq_len, per_split)) are exactly the non-empty ones.
    per_split = tl.maximum((seq_len + num_splits - 1) // num_splits, 1)
    live = (seq_len + per_split - 1) // per_split

    # A [HEAD_BLOCK, SPLIT_BLOCK, COL_BLOCK] tile of partials per iteration, its loads
    # issued together (one split at a time made the merge a chain of `live` dependent
    # memory round trips). Few splits: whole rows of columns and several heads a
    # program, so there are few programs, each moving many bytes; many splits
    # (small batches): the columns spread over programs, so there are still many.
    # A dead split's slot may hold anything (NaN): selected away, never multiplied.
    ok = in_grid & (splits < live)[None, :]
    part_lse = tl.where(ok, first_lse, float("-inf"))
    part = tl.where(ok[:, :, None], first, 0.0)
    m = tl.max(part_lse, 1)
    w = tl.exp(part_lse - m[:, None])
    acc = tl.sum(w[:, :, None] * part, 1)
    l = tl.sum(w, 1)
    for s0 in range(SPLIT_BLOCK, live, SPLIT_BLOCK):
        splits = s0 + tl.arange(0, SPLIT_BLOCK)
        ok = head_ok[:, None] & (splits < live)[None, :]
        off = head_off[:, None] + splits[None, :] * stride_buf_s
        part_lse = tl.load(buf_ptr + off + LORA, mask=ok, other=float("-inf"))
        part = _load_partials(buf_ptr, off, cols, ok, BF16_PARTIALS)
        m_new = tl.maximum(m, tl.max(part_lse, 1))
        alpha = tl.exp(m - m_new)
        w = tl.exp(part_lse - m_new[:, None])
        acc = acc * alpha[:, None] + tl.sum(w[:, :, None] * part, 1)
        l = l * alpha + tl.sum(w, 1)
        m = m_new

    nonempty = seq_len > 0
    out = tl.where(nonempty, acc / tl.maximum(l, 1e-30)[:, None], 0.0)
    out_off = (row * NUM_HEADS + heads[:, None]) * LORA + cols[None, :]
    tl.store(out_ptr + out_off, out.to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
    if col_block == 0:
        tl.store(
            lse_ptr + row * NUM_HEADS + heads,
            tl.where(nonempty, m + tl.log(l), float("-inf")),
            mask=head_ok,
        )


def stage2_tiling(
    grid_splits: int, num_heads: int, kv_lora_rank: int, batch: int
) -> dict[str, int]:
    """Stage 2's ``HEAD_BLOCK``, ``SPLIT_BLOCK`` and ``COL_BLOCK``.

    Columns first: the widest block that still leaves ``STAGE2_PROGRAMS`` programs over
    the batch's (row, head) pairs (at least ``MIN_COL_BLOCK``); then up to
    ``MAX_SPLIT_BLOCK`` splits fill the tile of ``STAGE2_TILE`` partial values (32
    registers a thread at 4 warps); then heads, while the programs stay that many.
    Why these blocks: one program per (row, head, 128 columns) made tens of thousands
    of tiny programs at large batch, and the measured sweep of the blocks is in
    docs/performance.md's decision log.
    """

    def programs(head_block, col_block):
        return batch * triton.cdiv(num_heads, head_block) * (kv_lora_rank // col_block)

    col_block = kv_lora_rank
    while col_block > MIN_COL_BLOCK and programs(1, col_block) < STAGE2_PROGRAMS:
        col_block //= 2
    split_block = min(
        MAX_SPLIT_BLOCK, triton.next_power_of_2(grid_splits), max(1, STAGE2_TILE // col_block)
    )
    head_block = 1
    while (
        2 * head_block <= triton.next_power_of_2(num_heads)
        and 2 * head_block * split_block * col_block <= STAGE2_TILE
        and programs(2 * head_block, col_block) >= STAGE2_PROGRAMS
    ):
        head_block *= 2
    return {"HEAD_BLOCK": head_block, "SPLIT_BLOCK": split_block, "COL_BLOCK": col_block}


def stage1_config(
    num_heads: int, float32: bool = False, batch_tokens: int | None = None
) -> dict[str, int]:
    """Tile sizes and launch options of stage 1 for ``num_heads`` query heads.

    Heads are grouped (``_tiling.head_tile``) so each latent tile loaded serves many
    heads; 64-head tiles reach Hopper's warpgroup MMA. ``batch_tokens``: the step's
    rows times its longest row, when known at trace time (None: only at run time); a
    small one takes 16-head tiles at any head count. Measured on the H200
    (docs/performance.md, "Head tiles and stage-1 configurations"): 16-head tiles
    take 32-token blocks, 4 warps and 3 stages (the latent tiles double-buffered);
    wider tiles need 8 warps for their 64 x 512 accumulator and take 64-token blocks
    at 2 stages, at every batch.
    ``LORA_CHUNKS``: 16-head tiles split the latent dims in 4 (independent mma.sync
    chains, ``_attend``); the warpgroup MMA of wider tiles does not need it, and its
    sm_90 build spills more with it.
    """
    block_h = head_tile(num_heads, batch_tokens)
    if block_h <= 16:
        return {
            "BLOCK_H": block_h,
            "BLOCK_N": 32,
            "num_warps": 4,
            "num_stages": 3,
            "LORA_CHUNKS": 4,
        }
    if float32:
        # float32 tiles take twice the shared memory: wider head tiles fit sm_90's
        # 227 KB only with 16-token blocks in one stage (217 KB at 64 heads; 64-token
        # blocks in two stages would ask for 432 KB).
        return {
            "BLOCK_H": block_h,
            "BLOCK_N": 16,
            "num_warps": 8,
            "num_stages": 1,
            "LORA_CHUNKS": 1,
        }
    return {"BLOCK_H": block_h, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "LORA_CHUNKS": 1}


def bf16_partials(q_dtype: str, grid_splits: int) -> bool:
    """Whether stage 1 stores its partials in bf16, two to a float32 slot of the
    buffer, and stage 2 reads them so (both stages' ``BF16_PARTIALS``): for a q of
    dtype ``q_dtype`` (a numpy name) ``"bfloat16"`` where stage 2 runs (more than one
    split), the output's own precision. Half the bytes written and read back: on the
    H200 both stages of the tl kernels 1-4% faster at H=16, the Gluon seesaw's 7-13%
    at the 8-split rows of 64 heads, the output's error against float64 2.0-2.8e-3 ->
    2.4-4.6e-3 there (docs/performance.md, "bf16 partials"). float32 for an fp16 q,
    whose output has three more mantissa bits, and a float32 one. A Gluon stage 1
    may narrow this (``mla_jax.plan.gluon_bf16_partials``)."""
    return q_dtype == "bfloat16" and grid_splits > 1


def launch_params(
    *,
    batch: int,
    num_heads: int,
    num_pages: int,
    page_size: int,
    pages_per_seq: int,
    kv_lora_rank: int,
    rope_dim: int,
    scale: float,
    grid_splits: int,
    q_nope_strides: tuple[int, ...],
    q_pe_strides: tuple[int, ...],
    qp_offset: int,
    kv_strides: tuple[int, ...],
    block_table_strides: tuple[int, ...],
    buffer_strides: tuple[int, ...],
    q_dtype: str,
    batch_tokens: int | None = None,
    config: dict[str, int] | None = None,
) -> tuple[dict, dict | None]:
    """Grids, options and constexpr arguments of both stages (element strides).

    Returns ``(stage1, stage2)``, each ``{"grid", "num_warps", "num_stages",
    "constexprs"}``; with one split (``grid_splits == 1``) stage 1 writes the output
    itself and ``stage2`` is None (stage 1's pointers: ``stage1_pointers``). The JAX
    backend and the interpreter tests both launch from these, so they cannot disagree.
    ``q_dtype``: q's dtype as a numpy name (``"bfloat16"``, ``"float16"``,
    ``"float32"``): a float32 q keeps its dots exact (no TF32), a bf16 one takes bf16
    partials (``bf16_partials``); ``batch_tokens``: ``batch``
    times the longest row's length when known at trace time, else None (it picks the
    head tile, ``stage1_config``; pass what the split count was planned with,
    ``splits.occupancy_kv_splits``); ``config`` overrides entries of ``stage1_config``
    (for tuning).
    """
    float32 = q_dtype == "float32"
    half = bf16_partials(q_dtype, grid_splits)
    cfg = stage1_config(num_heads, float32, batch_tokens) | (config or {})
    buf = {
        "stride_buf_b": buffer_strides[0],
        "stride_buf_h": buffer_strides[1],
        "stride_buf_s": buffer_strides[2],
    }
    stage1 = {
        "grid": (triton.cdiv(num_heads, cfg["BLOCK_H"]), batch, grid_splits),
        "num_warps": cfg["num_warps"],
        "num_stages": cfg["num_stages"],
        "constexprs": dict(
            SM_SCALE=float(scale),
            NUM_HEADS=num_heads,
            PAGE_SIZE=page_size,
            NUM_PAGES=num_pages,
            CAPACITY=pages_per_seq * page_size,
            LORA=kv_lora_rank,
            ROPE=rope_dim,
            stride_qn_b=q_nope_strides[0],
            stride_qn_h=q_nope_strides[1],
            stride_qp_b=q_pe_strides[0],
            stride_qp_h=q_pe_strides[1],
            QP_OFFSET=qp_offset,
            stride_kv_page=kv_strides[0],
            stride_kv_row=kv_strides[1],
            stride_bt_b=block_table_strides[0],
            **buf,
            BLOCK_H=cfg["BLOCK_H"],
            BLOCK_N=cfg["BLOCK_N"],
            # Page by page where blocks fit in pages: 7-15% faster on the H200
            # (docs/performance.md, "Latent loads").
            PAGED_LOADS=page_size % cfg["BLOCK_N"] == 0,
            # A chunk is a dot's depth (QK) and width (PV): at least MIN_DOT.
            LORA_CHUNKS=min(cfg["LORA_CHUNKS"], max(1, kv_lora_rank // MIN_DOT)),
            DOT_PRECISION="ieee" if float32 else "tf32",
            BF16_PARTIALS=half,
        ),
    }
    if grid_splits == 1:
        return stage1, None
    tiles = stage2_tiling(grid_splits, num_heads, kv_lora_rank, batch)
    stage2 = {
        "grid": (
            batch,
            triton.cdiv(num_heads, tiles["HEAD_BLOCK"]),
            kv_lora_rank // tiles["COL_BLOCK"],
        ),
        "num_warps": 4,
        "num_stages": 1,
        "constexprs": dict(
            NUM_HEADS=num_heads,
            LORA=kv_lora_rank,
            CAPACITY=pages_per_seq * page_size,
            **buf,
            GRID_SPLITS=grid_splits,
            **tiles,
            BF16_PARTIALS=half,
        ),
    }
    return stage1, stage2


def stage1_absent(one_split: bool) -> dict[str, None]:
    """Stage 1's pointer parameters a launch does not pass, each None (Triton compiles a
    None as a constexpr and leaves out the code that would use it): the output and lse
    where stage 2 runs; none with ``one_split`` (``launch_params`` gave no stage 2)."""
    return {} if one_split else {"out_ptr": None, "lse_ptr": None}


def stage1_pointers(one_split: bool, buffer: Any, out: Any, lse: Any) -> dict[str, Any]:
    """Stage 1's pointer arguments after its inputs, by name, for a launch by Triton's
    own launcher (or its interpreter): the logits buffer as the aliased input and the
    output, and with ``one_split`` ``out`` and ``lse`` (the buffer then passes through
    unwritten); the others None (``stage1_absent``)."""
    pointers = {"buf_in_ptr": buffer, "buf_ptr": buffer, "out_ptr": out, "lse_ptr": lse}
    return pointers | stage1_absent(one_split)
