"""What the Gluon stage-1 kernels share: the problem's constants, the split's bounds,
loads of pages and queries, the partials' and the one-split output's stores, a
cluster's pair merge, and the inline-PTX votes that let a CTA skip rescaling where no
running max moved (``_cta_any``, ``_warp_any``, ``_rescale_rows``).

The kernels' contract, and how each one is built, is in docs/kernels.md.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

from mla_jax import kernels

# The tl kernels' constants, one definition (gl.constexpr is tl.constexpr).
_LOG2E = kernels._LOG2E
_LN2 = kernels._LN2
RESCALE_THRESHOLD = kernels.RESCALE_THRESHOLD


@gluon.jit
def _safe_page(page, NUM_PAGES: gl.constexpr):
    """A page index inside the cache, whatever the block table holds: one outside
    ``[0, NUM_PAGES)`` reads page 0, as in ``kernels._safe_page``."""
    return gl.where(page.to(gl.uint32) < NUM_PAGES, page, 0)


@gluon.jit
def _split_range(seq_lens_ptr, row, num_splits, split, CAPACITY: gl.constexpr):
    """``[start, end)`` of the split: the row's length clamped to the table's capacity,
    then vLLM's cdiv partition (``kernels._split_range``)."""
    seq_len = gl.minimum(gl.maximum(gl.load(seq_lens_ptr + row), 0), CAPACITY)
    per_split = (seq_len + num_splits - 1) // num_splits
    start = per_split * split
    end = gl.minimum(start + per_split, seq_len)
    return start, end


@gluon.jit
def _split_bounds(
    seq_lens_ptr, num_splits_ptr, row, split, ONE_SPLIT: gl.constexpr, CAPACITY: gl.constexpr
):
    """The program's split count and ``[start, end)`` (``_split_range``): the run-time
    count, or with ``ONE_SPLIT`` (a build that writes the output itself) one split, the
    whole row. Callers branch once after both loads (one memory round trip before the
    bounds are known): a split past the run-time count is empty."""
    if ONE_SPLIT:
        num_splits = 1
    else:
        num_splits = gl.load(num_splits_ptr)
    start, end = _split_range(seq_lens_ptr, row, num_splits, split, CAPACITY)
    return num_splits, start, end


@gluon.jit
def _copy_rows(smem, base, rows, row_mask, stride_row, COLS: gl.constexpr, layout: gl.constexpr):
    """``cp.async`` of ``len(rows)`` rows of ``COLS`` contiguous elements at
    ``base + rows * stride_row`` into ``smem``; masked rows are zero-filled."""
    cols = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    ptrs = base + rows[:, None] * stride_row + cols[None, :]
    async_copy.async_copy_global_to_shared(smem, ptrs, mask=row_mask[:, None])


@gluon.jit
def _copy_query(
    q_nope_dst,
    q_pe_dst,
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
    layout: gl.constexpr,
):
    """Issues the ``cp.async`` copies of the row's query tile (its nope and rope parts,
    heads past ``NUM_HEADS`` masked) into shared memory; commits no group."""
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    head_ok = heads < NUM_HEADS
    _copy_rows(
        q_nope_dst, q_nope_ptr + row * stride_qn_b, heads, head_ok, stride_qn_h, LORA, layout
    )
    q_pe_row = q_pe_ptr + row * stride_qp_b + QP_OFFSET
    _copy_rows(q_pe_dst, q_pe_row, heads, head_ok, stride_qp_h, ROPE, layout)


@gluon.jit
def _head_rows(
    out_ptr,
    row,
    heads,
    split,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """Where each of ``heads``' rows starts (element offsets): in the buffer, the
    split's slot (its partial; the lse at ``+ LORA``), or with one split (``out_ptr``
    given) in the output."""
    if out_ptr is None:
        return (
            row.to(gl.int64) * stride_buf_b
            + heads.to(gl.int64) * stride_buf_h
            + split * stride_buf_s
        )
    return (row * NUM_HEADS + heads).to(gl.int64) * LORA


@gluon.jit
def _store_partial_lse(
    buf_ptr,
    l_i,
    m_i,
    tile,
    row,
    split,
    valid,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    BLOCK_H: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """The split's natural-log lse into its buffer slot (column ``LORA``), nothing for
    heads past ``NUM_HEADS`` or where ``valid`` is false (an empty split)."""
    lse_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=l_i.type.layout)
    lse_off = (
        _head_rows(
            None,
            row,
            lse_heads,
            split,
            NUM_HEADS,
            LORA,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
        + LORA
    )
    lse = (m_i + gl.log2(l_i)) * _LN2
    gl.store(buf_ptr + lse_off, lse, mask=(lse_heads < NUM_HEADS) & valid)


@gluon.jit
def _write_partials(
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
    stage,
    COL0: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    BLOCK_H: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """The split's normalised partial ``acc / l * kv_scale`` in the columns from
    ``COL0`` on (those ``acc`` holds), and its natural-log lse if
    ``WRITE_LSE``, into the buffer; nothing for heads past ``NUM_HEADS`` or where
    ``valid`` is false (an empty split); ``BF16_PARTIALS``: the partial in bf16, two
    to a float32 slot from the slot's start (``bf16_partials``). With one split
    (``out_ptr`` given) those columns of the output and the lse instead, as stage 2
    would write them (``_one_split_result``), an empty row's too. The columns go
    through ``stage`` (``_store_tile``)."""
    o_layout: gl.constexpr = acc.type.layout
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    out_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=o_rows)
    if out_ptr is None:
        out_off = _head_rows(
            out_ptr,
            row,
            out_heads,
            split,
            NUM_HEADS,
            LORA,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
        out_ok = (out_heads < NUM_HEADS) & valid
        part = acc * (kv_scale / gl.convert_layout(l_i, o_rows))[:, None]
        if BF16_PARTIALS:
            half_ptr = buf_ptr.to(gl.pointer_type(gl.bfloat16))
            _store_tile(half_ptr, 2 * out_off, out_ok, part.to(gl.bfloat16), stage, COL0)
        else:
            _store_tile(buf_ptr, out_off, out_ok, part, stage, COL0)
        if WRITE_LSE:
            _store_partial_lse(
                buf_ptr,
                l_i,
                m_i,
                tile,
                row,
                split,
                valid,
                NUM_HEADS,
                LORA,
                BLOCK_H,
                stride_buf_b,
                stride_buf_h,
                stride_buf_s,
            )
    else:
        norm, lse = _one_split_result(kv_scale / l_i, (m_i + gl.log2(l_i)) * _LN2, valid)
        out_off = _head_rows(
            out_ptr,
            row,
            out_heads,
            split,
            NUM_HEADS,
            LORA,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
        out = acc * gl.convert_layout(norm, o_rows)[:, None]
        out_ok = out_heads < NUM_HEADS
        _store_tile(out_ptr, out_off, out_ok, out.to(out_ptr.dtype.element_ty), None, COL0)
        if WRITE_LSE:
            lse_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=l_i.type.layout)
            gl.store(lse_ptr + row * NUM_HEADS + lse_heads, lse, mask=lse_heads < NUM_HEADS)


@gluon.jit
def _store_tile(dst_ptr, row_off, row_ok, vals, stage, COL0: gl.constexpr):
    """``vals`` (``[rows, COLS]``, an MMA accumulator's layout) at ``dst_ptr +
    row_off[r] + COL0 + c`` where ``row_ok[r]`` (both in the layout's row slice).

    With ``stage`` None they are stored from the registers they are in: a thread holds
    two adjacent columns in every eight, so a warp's store reaches eight rows, eight
    cache lines an instruction. ``stage`` (shared memory the calling warpgroup alone
    uses now, at least ``vals``' bytes) turns them into rows first: a warp's store
    then covers one row's consecutive bytes, an element a thread (a split's float32
    partial rows, LORA + 1 apart, are only 4-byte aligned). The swizzle (8-element
    vectors XORed with the row) keeps both sides free of bank conflicts."""
    layout: gl.constexpr = vals.type.layout
    COLS: gl.constexpr = vals.shape[1]
    if stage is None:
        d = COL0 + gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
        gl.store(dst_ptr + row_off[:, None] + d[None, :], vals, mask=row_ok[:, None])
    else:
        swizzle: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 8, [1, 0])
        # Two 16-bit values a thread (a 4-byte store, 128 bytes a warp), one 32-bit one.
        VEC: gl.constexpr = 2 if vals.dtype.primitive_bitwidth == 16 else 1
        rows_layout: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [gl.num_warps(), 1], [1, 0])
        staged = stage._reinterpret(vals.dtype, vals.shape, swizzle)
        staged.store(vals)
        gl.thread_barrier()
        r_rows: gl.constexpr = gl.SliceLayout(1, rows_layout)
        d = COL0 + gl.arange(0, COLS, layout=gl.SliceLayout(0, rows_layout))
        ptrs = dst_ptr + gl.convert_layout(row_off, r_rows)[:, None] + d[None, :]
        ok = gl.convert_layout(row_ok, r_rows)
        gl.store(ptrs, staged.load(rows_layout), mask=ok[:, None])


@gluon.jit
def _one_split_result(norm, lse, nonempty):
    """``kernels._one_split_result``: what stage 2 makes of a row's one partial, as
    ``(norm, lse)`` per head: those where the lse is finite, NaN for both where it is
    not, ``0, -inf`` where the row has no tokens."""
    finite = gl.abs(lse) < float("inf")
    norm = gl.where(nonempty, gl.where(finite, norm, float("nan")), 0.0)
    lse = gl.where(nonempty, gl.where(finite, lse, float("nan")), float("-inf"))
    return norm, lse


@gluon.jit
def _write_empty_row(
    out_ptr, lse_ptr, tile, row, NUM_HEADS: gl.constexpr, LORA: gl.constexpr, BLOCK_H: gl.constexpr
):
    """With one split, a row without tokens: its heads' output 0 and lse -inf, as stage
    2 writes them."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    d = gl.arange(0, LORA, layout=gl.SliceLayout(0, layout))
    ok = heads < NUM_HEADS
    out_off = (row * NUM_HEADS + heads).to(gl.int64) * LORA
    zeros = gl.zeros([BLOCK_H, LORA], out_ptr.dtype.element_ty, layout)
    gl.store(out_ptr + out_off[:, None] + d[None, :], zeros, mask=ok[:, None])
    empty = gl.full([BLOCK_H], float("-inf"), gl.float32, gl.SliceLayout(1, layout))
    gl.store(lse_ptr + row * NUM_HEADS + heads, empty, mask=ok)


# A cluster-wide barrier (every thread of every CTA of the cluster arrives, then waits),
# release/acquire at cluster scope: the partials each CTA stored before it are
# visible to all of them after it.
_CLUSTER_SYNC_ASM = gl.constexpr(
    "barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\nmov.u32 $0, 0;"
)


@gluon.jit
def _live_splits(seq_lens_ptr, row, num_splits, CAPACITY: gl.constexpr):
    """How many of the row's splits hold tokens (``kernels.mla_decode_stage2``'s
    ``live``: splits ``[0, live)`` are exactly the non-empty ones; 0 for an empty row)."""
    seq_len = gl.minimum(gl.maximum(gl.load(seq_lens_ptr + row), 0), CAPACITY)
    per_split = gl.maximum((seq_len + num_splits - 1) // num_splits, 1)
    return (seq_len + per_split - 1) // per_split


@gluon.jit
def _cluster_sync(i):
    """``_CLUSTER_SYNC_ASM`` (``i``: any scalar, the asm's required operand)."""
    gl.inline_asm_elementwise(_CLUSTER_SYNC_ASM, "=r,r", [i], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _pair_merge(
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
    stage,
    live,
    COL0: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    BLOCK_H: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """Stage 2 for this warpgroup's columns of a row of two splits, in the CTA whose
    split is the warpgroup's half (split 0's warpgroup 0, split 1's warpgroup 1): its
    own normalised partial (``_write_partials``' values) staged in ``stage``, the
    other split's columns and both lses read from the buffer after the cluster
    barrier (from L2: the other CTA's warpgroup just stored them), merged with
    ``kernels.mla_decode_stage2``'s arithmetic into those columns of the output; split
    0's warpgroup 0 writes the lse. The partial's lse goes to the buffer first
    (warpgroup 0's, ``WRITE_LSE``), for the other CTA."""
    o_layout: gl.constexpr = acc.type.layout
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    COLS: gl.constexpr = acc.shape[1]
    if WRITE_LSE:
        _store_partial_lse(
            buf_ptr,
            l_i,
            m_i,
            tile,
            row,
            split,
            valid,
            NUM_HEADS,
            LORA,
            BLOCK_H,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
    swizzle: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 8, [1, 0])
    staged = stage._reinterpret(gl.float32, [BLOCK_H, COLS], swizzle)
    staged.store(acc * (kv_scale / gl.convert_layout(l_i, o_rows))[:, None])
    _cluster_sync(split)  # also publishes the staged rows to the warpgroup

    # A loop of 8-head chunks, not unrolled (the trip count starts at an opaque 0): the
    # merge runs once a CTA, and straight-line code that long waits on instruction
    # fetches. The chunks are 8-row views of the staged rows with the same swizzle
    # (its phase is the row mod 8).
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [gl.num_warps(), 1], [1, 0])
    CHUNK: gl.constexpr = 8
    chunks = stage._reinterpret(gl.float32, [BLOCK_H // CHUNK, CHUNK, COLS], swizzle)
    d = COL0 + gl.arange(0, COLS, layout=gl.SliceLayout(0, rows_layout))
    other = 1 - split
    for c in range(_opaque_zero(split), BLOCK_H // CHUNK):
        heads = (
            tile * BLOCK_H + c * CHUNK + gl.arange(0, CHUNK, layout=gl.SliceLayout(1, rows_layout))
        )
        head_ok = heads < NUM_HEADS
        base = _head_rows(
            None, row, heads, 0, NUM_HEADS, LORA, stride_buf_b, stride_buf_h, stride_buf_s
        )  # split 0's slot
        lse0 = gl.load(
            buf_ptr + base + LORA,
            mask=head_ok & (live > 0),
            other=float("-inf"),
            cache_modifier=".cg",
        )
        lse1 = gl.load(
            buf_ptr + base + stride_buf_s + LORA,
            mask=head_ok & (live > 1),
            other=float("-inf"),
            cache_modifier=".cg",
        )
        theirs = gl.load(
            buf_ptr + (base + other * stride_buf_s)[:, None] + d[None, :],
            mask=(head_ok & (other < live))[:, None],
            other=0.0,
            cache_modifier=".cg",
        )
        # A dead split's slot, or its staged partial (0 / 0), may hold NaN: selected away.
        mine = gl.where((head_ok & (split < live))[:, None], chunks.index(c).load(rows_layout), 0.0)
        p0 = gl.where(split == 0, mine, theirs)
        p1 = gl.where(split == 0, theirs, mine)
        m = gl.maximum(lse0, lse1)
        w0 = gl.exp(lse0 - m)
        w1 = gl.exp(lse1 - m)
        total = w0 + w1
        merged = w0[:, None] * p0 + w1[:, None] * p1
        out = gl.where(live > 0, merged / gl.maximum(total, 1e-30)[:, None], 0.0)
        out_off = (row * NUM_HEADS + heads).to(gl.int64) * LORA
        gl.store(
            out_ptr + out_off[:, None] + d[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=head_ok[:, None],
        )
        if WRITE_LSE:
            lse_out = gl.where(live > 0, m + gl.log(total), float("-inf"))
            gl.store(lse_ptr + row * NUM_HEADS + heads, lse_out, mask=head_ok)


@gluon.jit
def _finish_split(
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
    stage,
    live,
    COL0: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    CLUSTER: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    BLOCK_H: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """A seesaw warpgroup's end of its split: its columns of the partial (or with one
    split of the output), ``_write_partials``; in a cluster (``CLUSTER`` 2: a row's two
    splits) either its columns of the row's output (``_pair_merge``) or its partial
    for the other CTA to merge."""
    # Outside a cluster a constexpr False, so the merge is not even built.
    merges: gl.constexpr = False
    out_dst = out_ptr
    lse_dst = lse_ptr
    if CLUSTER > 1:
        # Split s's warpgroup s merges the row's columns it holds; the other one
        # stores its columns for the other CTA. One cluster barrier each.
        merges = split == (0 if COL0 == 0 else 1)
        out_dst = None  # its partial, for the other CTA
        lse_dst = None
    if merges:
        _pair_merge(
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
            stage,
            live,
            COL0,
            WRITE_LSE,
            NUM_HEADS,
            LORA,
            BLOCK_H,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
    else:
        _write_partials(
            buf_ptr,
            out_dst,
            lse_dst,
            acc,
            l_i,
            m_i,
            kv_scale,
            tile,
            row,
            split,
            valid,
            stage,
            COL0,
            WRITE_LSE,
            BF16_PARTIALS,
            NUM_HEADS,
            LORA,
            BLOCK_H,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
        if CLUSTER > 1:
            _cluster_sync(split)


@gluon.jit
def _copy_block_rows(
    kv_c_dst,
    k_pe_dst,
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
    """Issues the ``cp.async`` copies of the 16-bit block at token ``n0`` (raw page index
    ``page``) into a slot (``kv_c_dst``: its latent columns, ``k_pe_dst``: its rope
    ones), by one warpgroup's 128 threads; rows outside ``[start, end)`` are
    zero-filled, so no value outside the split reaches an MMA. Commits no group."""
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


@gluon.jit
def _opaque_zero(i):
    """0, which the compiler cannot see through (it depends on ``i``)."""
    return gl.inline_asm_elementwise(
        "and.b32 $0, $1, 0;", "=r,r", [i], dtype=gl.int32, is_pure=True, pack=1
    )


def _thread_any_asm(n: int) -> str:
    """PTX setting the predicate %mla_any to "one of this thread's ``n`` values is
    nonzero", for an ``inline_asm_elementwise`` of ``pack=n`` (one invocation holds all
    of a thread's values; its outputs are unused). %mla_any is declared outside the
    braces, at the kernel's scope, so that ``_CTA_OR_ASM`` can read it: Gluon has no op
    that takes a scalar out of a tensor without a cross-warp reduction, the cost the
    vote avoids. So a kernel may contain one ``_cta_any`` (ptxas rejects a second
    declaration; CI builds every kernel)."""
    ors = "\n".join(f"or.b32 t, t, ${n + k};" for k in range(1, n))
    zeros = " ".join(f"mov.b32 ${k}, 0;" for k in range(n))
    return (
        f".reg .pred %mla_any;\n{{\n.reg .b32 t;\nmov.b32 t, ${n};\n{ors}\n"
        f"setp.ne.b32 %mla_any, t, 0;\n{zeros}\n}}"
    )


def _thread_any(n: int) -> tuple[str, str, int]:
    """``_cta_any``'s first half for ``n`` values a thread: the PTX, its constraints,
    ``n`` (the ``pack``)."""
    return _thread_any_asm(n), ",".join(["=r"] * n + ["r"] * n), n


_THREAD_ANY_8 = gl.constexpr(_thread_any(8))


_THREAD_ANY_16 = gl.constexpr(_thread_any(16))


# A CTA barrier that also ORs %mla_any over the CTA (bar.red): a scalar, 1 or 0.
_CTA_OR_ASM = gl.constexpr("""{
.reg .pred p;
bar.red.or.pred p, 0, %mla_any;
selp.b32 $0, 1, 0, p;
}""")


@gluon.jit
def _cta_any(flags, i, ANY: gl.constexpr):
    """1 if any element of ``flags`` (int32, ``ANY[2]`` a thread; ``ANY``: a
    ``_thread_any`` triple) is nonzero anywhere in the CTA, else 0: a scalar, the same
    in every thread (``i``: any scalar, the asm's required operand). It is a CTA
    barrier (``bar.red.or``): the softmax's vote on whether a running max must move
    (see its callers)."""
    gl.inline_asm_elementwise(ANY[0], ANY[1], [flags], dtype=gl.int32, is_pure=False, pack=ANY[2])
    return gl.inline_asm_elementwise(
        _CTA_OR_ASM, "=r,r", [i], dtype=gl.int32, is_pure=False, pack=1
    )


def _warp_any_asm(name: str) -> tuple[str, str]:
    """The PTX pair of ``_warp_any`` for 2 values a thread, the predicate named
    ``name`` (one name a call site: ptxas rejects a second declaration, see
    ``_thread_any_asm``): the first sets it to "one of the warp's values is nonzero"
    (``vote.sync.any``), the second reads it as a scalar."""
    set_asm = (
        f".reg .pred {name};\n{{\n.reg .b32 t;\n.reg .pred q;\nor.b32 t, $2, $3;\n"
        f"setp.ne.b32 q, t, 0;\nvote.sync.any.pred {name}, q, 0xffffffff;\n"
        "mov.b32 $0, 0; mov.b32 $1, 0;\n}"
    )
    return set_asm, f"selp.b32 $0, 1, 0, {name};"


_WG0_SCALE0_ANY = gl.constexpr(_warp_any_asm("%mla_wg0_scale0"))


_WG0_SCALE1_ANY = gl.constexpr(_warp_any_asm("%mla_wg0_scale1"))


_WG1_SCALE0_ANY = gl.constexpr(_warp_any_asm("%mla_wg1_scale0"))


_WG1_SCALE1_ANY = gl.constexpr(_warp_any_asm("%mla_wg1_scale1"))


@gluon.jit
def _warp_any(flags, i, ASM: gl.constexpr):
    """1 if any element of ``flags`` (int32, 2 a thread) is nonzero in this thread's
    warp, else 0: a scalar, the same in every thread of the warp (``i``: any scalar,
    the asm's required operand; ``ASM``: a ``_warp_any_asm`` pair of its own)."""
    gl.inline_asm_elementwise(ASM[0], "=r,=r,r,r", [flags], dtype=gl.int32, is_pure=False, pack=2)
    return gl.inline_asm_elementwise(ASM[1], "=r,r", [i], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _rescale_rows(acc, scale, i, rows_layout: gl.constexpr, ASM: gl.constexpr):
    """``acc * scale`` by rows, skipped in a warp whose rows all have ``scale == 1``
    (most blocks, with lazy rescaling: the multiply would change nothing, not even a
    NaN or an inf, so the result is the same bit for bit; NaN scales differ from 1)."""
    if _warp_any((scale != 1.0).to(gl.int32), i, ASM) != 0:
        acc = acc * gl.convert_layout(scale, rows_layout)[:, None]
    return acc
