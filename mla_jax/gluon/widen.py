"""fp8 (e4m3) widening for the Gluon kernels that multiply in fp16: the cache's fp8
words loaded as int32 and widened by ``cvt.rn.f16x2.e4m3x2`` straight into the
layouts of the warpgroup MMA's register A operand (K chunks for QK^T, V^T for PV),
and q scaled per head into fp16 (``_copy_query_f16``)."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

# S^T's K is read from the ring in 64-column chunks of int32 words (4 values each): a
# thread holds 16 consecutive bytes of rows r and r + 8, a warp's lanes
# 4 pieces x 8 rows, the warps 16 rows apart, which is where wgmma's register A operand
# puts them (``_qk_operand``).
_CHUNK = gl.constexpr(64)


_CHUNK_WORDS_LAYOUT = gl.constexpr(
    gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0]],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0]],
        block_bases=[],
        shape=[64, 16],
    )
)


# e4m3 -> fp16 by the e4m3 cvt, 4 values (one 32-bit word) at a time: two
# cvt.rn.f16x2.e4m3x2 (exact: every e4m3 value is an fp16 value).
_E4M3_TO_F16_CVT_ASM = gl.constexpr("""{
.reg .b16 lo, hi;
mov.b32 {lo, hi}, $2;
cvt.rn.f16x2.e4m3x2 $0, lo;
cvt.rn.f16x2.e4m3x2 $1, hi;
}""")


# One 32-bit register's two 16-bit halves as two fp16 elements.
_HALVES_ASM = gl.constexpr("mov.b32 {$0, $1}, $2;")


@gluon.jit
def _f16_halves(pairs):
    """``pairs`` (int32, each two fp16 values) as two fp16 tensors: low, high halves."""
    return gl.inline_asm_elementwise(
        _HALVES_ASM, "=h,=h,r", [pairs], dtype=(gl.float16, gl.float16), is_pure=True, pack=1
    )


@gluon.jit
def _widen_f16(words):
    """``words`` (``[R, C]`` int32, each 4 e4m3 values of consecutive columns) as
    ``[R, 4C]`` fp16 values in column order: two cvt a word, then register moves."""
    lo, hi = gl.inline_asm_elementwise(
        _E4M3_TO_F16_CVT_ASM, "=r,=r,r", [words], dtype=(gl.int32, gl.int32), is_pure=True, pack=1
    )
    v0, v1 = _f16_halves(lo)
    v2, v3 = _f16_halves(hi)
    wide = gl.join(gl.join(v0, v2), gl.join(v1, v3))  # [R, C, j, i]: value 2j + i
    return gl.reshape(wide, [words.shape[0], 4 * words.shape[1]])


@gluon.jit
def _qk_operand(chunk, layout: gl.constexpr):
    """A widened chunk (``[64, 64]``, from ``_CHUNK_WORDS_LAYOUT``) as wgmma's register A
    operand (``layout``) with its columns permuted: column ``16c + 4t + 2h + e`` goes to
    ``16t + 8h + 2c + e`` (c, t < 4; h, e < 2). The operand layout gives lane c of a
    quad columns ``2c, 2c + 1, 2c + 8, 2c + 9`` of each 16-column k-step; the loads give
    it 16 consecutive columns; the permutation maps one onto the other inside each
    thread, so the conversion moves no data (asserted at compile time). The sum over
    columns does not care about their order as long as Q's are permuted alike
    (``_permuted_cols``)."""
    x = gl.reshape(chunk, [_CHUNK, 4, 4, 2, 2])  # r, c, t, h, e
    x = gl.permute(x, [0, 2, 3, 1, 4])  # r, t, h, c, e
    return gl.convert_layout(gl.reshape(x, [_CHUNK, _CHUNK]), layout, assert_trivial=True)


@gluon.jit
def _permuted_cols(COLS: gl.constexpr, layout: gl.constexpr):
    """For each column ``k`` of ``COLS`` columns in ``_qk_operand``'s order, the column
    it came from: inside each 64, ``16c + 4t + 2h + e`` for ``k = 16t + 8h + 2c + e``."""
    k = gl.arange(0, COLS, layout=layout)
    t = (k >> 4) & 3
    h = (k >> 3) & 1
    c = (k >> 1) & 3
    return (k & ~63) + 16 * c + 4 * t + 2 * h + (k & 1)


@gluon.jit
def _finite_amax(x):
    """The largest finite magnitude of each row of ``x`` (float32; NaN fails the
    comparison), 0 for a row with none."""
    return gl.max(gl.where(gl.abs(x) < float("inf"), gl.abs(x), 0.0), 1)


@gluon.jit
def _f16_head_scale(amax):
    """For a head whose largest finite magnitude is ``amax``: the power of two that
    takes it into ``[2^14, 2^15)`` and its inverse (the head's logit factor). amax <
    2^(e - 126) for its biased exponent e, so 2^(141 - e) does; the clamp keeps both
    powers normal float32s (a zero head: any scale)."""
    e = (amax.to(gl.int32, bitcast=True) >> 23) & 0xFF
    k = gl.minimum(gl.maximum(141 - e, -120), 120)
    return ((k + 127) << 23).to(gl.float32, bitcast=True), ((127 - k) << 23).to(
        gl.float32, bitcast=True
    )


@gluon.jit
def _copy_query_f16(
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
    """The row's query tile (heads past ``NUM_HEADS`` zero) into shared memory as fp16,
    its columns in ``_qk_operand``'s order, through registers. Returns the factor each
    head's logits then need (``[BLOCK_H]`` in ``layout``'s rows): 1 for fp16 q. Each
    head of a bf16 tile is scaled by the power of two that puts its largest finite
    magnitude in ``[2^14, 2^15)``, and its factor is the inverse; every element within a
    factor 2^29 of that largest is then an fp16 normal, hence exact (bf16's 8
    significant bits fit in fp16's 11), smaller ones round to fp16's spacing there,
    2^-39 of the largest. A head's scale depends on its own values alone, so NaN or inf
    in one head leaves the others as they are."""
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    head_ok = heads < NUM_HEADS
    cols = _permuted_cols(LORA, gl.SliceLayout(0, layout))
    q_nope = gl.load(
        q_nope_ptr + row * stride_qn_b + heads[:, None] * stride_qn_h + cols[None, :],
        mask=head_ok[:, None],
        other=0.0,
    ).to(gl.float32)
    cols = _permuted_cols(ROPE, gl.SliceLayout(0, layout))
    q_pe = gl.load(
        q_pe_ptr + row * stride_qp_b + QP_OFFSET + heads[:, None] * stride_qp_h + cols[None, :],
        mask=head_ok[:, None],
        other=0.0,
    ).to(gl.float32)
    if q_nope_ptr.dtype.element_ty == gl.bfloat16:
        amax = gl.maximum(_finite_amax(q_nope), _finite_amax(q_pe))
        scale, logit_factor = _f16_head_scale(amax)
    else:
        scale = gl.full([BLOCK_H], 1.0, gl.float32, layout=gl.SliceLayout(1, layout))
        logit_factor = scale
    q_nope_dst.store((q_nope * scale[:, None]).to(gl.float16))
    q_pe_dst.store((q_pe * scale[:, None]).to(gl.float16))
    return logit_factor


# V^T's words of a latent pair, [64 tokens, 32 words]: a thread holds word 8w + q
# (w its warp, q = lane / 4) of tokens 2c + {0, 1, 8, 9} + 16k (c = lane % 4, k < 4),
# the tokens and rows of wgmma's register A operand, so that the widening below puts
# every value where the operand layout wants it.
_PV_WORDS_LAYOUT = gl.constexpr(
    gl.DistributedLinearLayout(
        reg_bases=[[1, 0], [8, 0], [16, 0], [32, 0]],
        lane_bases=[[2, 0], [4, 0], [0, 1], [0, 2], [0, 4]],
        warp_bases=[[0, 8], [0, 16]],
        block_bases=[],
        shape=[64, 32],
    )
)


def _pv_cvt_asm(half: int) -> str:
    """PTX widening byte ``2 * half`` and ``2 * half + 1`` of an even token's word ($2)
    and the odd token's ($3): two fp16 pairs (even token low, odd token high), one a
    byte (a latent dim)."""
    j = 2 * half
    sel = j | (4 + j) << 4 | (j + 1) << 8 | (5 + j) << 12
    return (
        "{\n.reg .b32 t;\n.reg .b16 lo, hi;\n"
        f"prmt.b32 t, $2, $3, {sel:#x};\n"
        "mov.b32 {lo, hi}, t;\n"
        "cvt.rn.f16x2.e4m3x2 $0, lo;\ncvt.rn.f16x2.e4m3x2 $1, hi;\n}"
    )


_PV_CVT_ASM = gl.constexpr((_pv_cvt_asm(0), _pv_cvt_asm(1)))


@gluon.jit
def _pv_operand(even, odd, HALF: gl.constexpr, a_layout: gl.constexpr):
    """M-tile ``HALF`` of a latent pair's V^T (``_pv_operands``) from its even and odd
    tokens' words: bytes ``2 HALF`` and ``2 HALF + 1`` of each word, widened."""
    h0, h1 = gl.inline_asm_elementwise(
        _PV_CVT_ASM[HALF],
        "=r,=r,r,r",
        [even, odd],
        dtype=(gl.int32, gl.int32),
        is_pure=True,
        pack=1,
    )
    e0, o0 = _f16_halves(h0)
    e1, o1 = _f16_halves(h1)
    # (join adds a last axis: the inner pairs are h, the outer e.)
    t = gl.join(gl.join(e0, e1), gl.join(o0, o1))  # [token pair, word, h, e]
    t = gl.permute(gl.reshape(t, [32, 4, 8, 2, 2]), [1, 3, 2, 0, 4])  # w, h, q, tp, e
    return gl.convert_layout(gl.reshape(t, [64, 64]), a_layout, assert_trivial=True)


@gluon.jit
def _pv_operands(x, a_layout: gl.constexpr):
    """V^T of one latent pair from its words ``x`` (``[64 tokens, 32 words]`` of its ring
    stage in ``_PV_WORDS_LAYOUT``) as the register A operands of its two M-tiles: M-tile
    ``b`` row ``r`` is latent dim ``32 (r >> 4) + 4 (r & 7) + 2 b + ((r >> 3) & 1)`` of
    the pair (``_pair_out``), the tokens in order."""
    even, odd = gl.split(gl.permute(gl.reshape(x, [32, 2, 32]), [0, 2, 1]))
    return _pv_operand(even, odd, 0, a_layout), _pv_operand(even, odd, 1, a_layout)
