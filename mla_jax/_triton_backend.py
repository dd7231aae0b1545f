"""Calls of the stage 1 and stage 2 kernels (``mla_jax._launch``: through
``jax_triton.triton_call``, one jaxlib FFI call a kernel carrying its cubin).

Stage 1 receives the logits buffer as an input aliased to its only output
(``input_output_aliases``), so it writes in place and returns the same buffer. With
one split (``grid_splits == 1``) there is no stage 2: stage 1 also outputs ``out``
and ``lse`` and leaves the buffer unwritten. On
sm_90 it is a Gluon kernel (``mla_jax._gluon_kernels``: the seesaw or the 16-bit
16-head one for a 16-bit cache at 16 heads or 32 in a small step, the fp8 ones for an
fp8 cache, the fp8-MMA one where asked) where those are measured to win
(``gluon_split_divisor``: long splits; the 16-bit 16-head kernel at half the occupancy
rule's splits), else the ``tl`` kernel; all write partials in one layout, which the
one stage 2 merges (float32, or bf16 two to a slot for a bf16 q:
``kernels.bf16_partials``, narrowed to the seesaw and the 16-bit 16-head kernel among
the Gluon kernels by ``_gluon_kernels.bf16_partials``), but where the seesaw's row of
two splits is a thread-block cluster that merges them itself and outputs ``out`` and
``lse`` as with one split (``_gluon_kernels.cluster_size``).
Shapes are checked by the caller (``mla_jax.decode``); everything here is static
except the arrays, and the split count travels as an int32 array.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mla_jax import _gluon_kernels, _launch, _tiling, kernels

# The seesaw beats the tl stage 1 on the H200 from 128 tokens a split (two 64-token
# blocks) on, at the split count the tl kernel gets, both stages: on a 16-bit cache
# 1.16-1.80x at the twelve shapes of `gluon_check --crossover` (1-64 rows, 32-128
# heads), on an fp8 one 1.45-2.03x at its eight (docs/performance.md, "Gluon stage 1
# (sm_90)", "The fp8 cache"). One-block splits are unmeasured.
SEESAW_MIN_SPLIT_TOKENS = 128
# The 16-head fp8 kernel against the tl stage 1 on the same fp8 cache, both stages at
# the same split count: 1.31-1.33x at 64 tokens a split (1/16/4096, 4/16/1024),
# 1.50-1.82x at 128, 2.2-3.8x from 256 on (docs/performance.md, "The fp8 cache"); the
# tl fp8 kernel widens in registers. Splits under one 64-token block are unmeasured
# (the occupancy rule makes none).
FP8_SMALL_HEADS_MIN_SPLIT_TOKENS = 64
# The 16-bit 16-head kernel at its split count (``gluon_split_divisor``) against the
# tl stage 1 at the occupancy rule's, both stages: 4-19% faster at all 14 H=16 shapes
# measured with splits of 128 tokens or more (docs/performance.md, "A Gluon stage 1
# for a 16-bit cache at 16 heads"); at 64 tokens measured once (1/16/4096, 3%).
SIXTEEN_BIT_SMALL_HEADS_MIN_SPLIT_TOKENS = 128
# The same kernel at several tiles a row (``_gluon_kernels.small_heads``: small steps
# only; two 16-head tiles at 32 heads, two or four 32-head tiles at 64 and 128), against
# the tl stage 1 that runs there under 128 tokens a split, both stages: 1.26-1.36x at 64
# tokens a split (1/32/1024 7.2 against 9.8 µs, 4/32/1024 8.0 against 10.4, 1/32/4096
# 9.1 against 11.5; docs/performance.md, "The 16-head kernel at 32 heads"); at 64
# heads (two 32-head tiles), 4/64/1024 10.4 against 11.2 and 1/64/4096 11.0 against
# 11.9 ("32-head tiles at 64 and 128 heads"; where the tl kernel's grid holds no more
# programs than SMs, not run: ``gluon_split_divisor``).
SIXTEEN_BIT_MANY_TILES_MIN_SPLIT_TOKENS = 64
# The same kernel at one 32-head tile a row (``_gluon_kernels.small_block_h``: larger
# steps), where it replaced the seesaw: measured from 512 tokens a split; the seesaw's
# bound, so that it runs where the seesaw ran.
SIXTEEN_BIT_WIDE_TILE_MIN_SPLIT_TOKENS = SEESAW_MIN_SPLIT_TOKENS


def _strides(x: jax.Array) -> tuple[int, ...]:
    """Element strides of a row-major array (what XLA hands a custom call)."""
    strides, step = [], 1
    for size in reversed(x.shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def gluon_split_divisor(
    q_nope: jax.Array,
    kv_cache: jax.Array,
    grid_splits: int,
    max_tokens: int,
    kv_lora_rank: int,
    rope_dim: int,
    compute_capability: int,
    occupancy_sms: int | None,
    batch_tokens: int | None = None,
) -> int | None:
    """None where stage 1 runs as the tl kernel; else it runs as a Gluon kernel at
    ``grid_splits`` divided by the returned count (``_gluon_kernels.split_divisor``).

    A Gluon kernel needs an sm_90 build, a problem one supports
    (``_gluon_kernels.supports``), and splits of at least ``SEESAW_MIN_SPLIT_TOKENS``
    tokens (``FP8_SMALL_HEADS_MIN_SPLIT_TOKENS`` for the fp8 16-head kernel,
    ``SIXTEEN_BIT_SMALL_HEADS_MIN_SPLIT_TOKENS`` for the 16-bit one at 16 heads,
    ``SIXTEEN_BIT_MANY_TILES_MIN_SPLIT_TOKENS`` at several tiles a row,
    ``SIXTEEN_BIT_WIDE_TILE_MIN_SPLIT_TOKENS`` in one) when a row holds ``max_tokens``;
    ``batch_tokens`` (``decode``'s, None off the occupancy rule) picks the 16-bit one
    and its tile from 32 heads (``_gluon_kernels.small_heads``,
    ``_gluon_kernels.small_block_h``). The 16-bit 16-head kernel runs only on an
    occupancy rule's count (planned for ``occupancy_sms`` SMs; None: another rule's);
    where the rule's grid takes its programs in twice the waves it planned
    (``_gluon_kernels.split_divisor``), and they exceed one an SM, at half the count
    (``grid_splits`` at least 2: as many waves as the rule planned), else at the count
    itself (already one wave: the rule capped it). At twice the programs an SM fits, or
    under vLLM's rule, it is not the faster one. Its 32-head tiles, several a row, do
    not run where the rule planned 16-head programs two an SM but its grid holds no
    more than SMs: there the tl kernel's programs, each on an SM of its own, are faster
    (1/64/1024 and 1/128/1024: 7.5 and 7.8 µs against 8.7 and 9.0).
    """
    kv_page_stride, kv_row_stride = _strides(kv_cache)[:2]
    num_heads = q_nope.shape[1]
    kv_dtype = jnp.dtype(kv_cache.dtype).name
    divisor = _gluon_kernels.split_divisor(kv_dtype, num_heads, batch_tokens)
    small = _gluon_kernels.small_heads(kv_dtype, num_heads, batch_tokens)
    tile = _gluon_kernels.small_block_h(kv_dtype, num_heads, batch_tokens)
    if not small:
        min_tokens = SEESAW_MIN_SPLIT_TOKENS
    elif kv_dtype == _gluon_kernels.FP8:
        min_tokens = FP8_SMALL_HEADS_MIN_SPLIT_TOKENS
    elif num_heads > tile:
        min_tokens = SIXTEEN_BIT_MANY_TILES_MIN_SPLIT_TOKENS
    elif tile > _gluon_kernels.SMALL_BLOCK_H:
        min_tokens = SIXTEEN_BIT_WIDE_TILE_MIN_SPLIT_TOKENS
    else:
        min_tokens = SIXTEEN_BIT_SMALL_HEADS_MIN_SPLIT_TOKENS
    batch = q_nope.shape[0]
    if (
        small
        and num_heads > tile > _gluon_kernels.SMALL_BLOCK_H
        and _tiling.programs_per_sm(num_heads, batch_tokens) > 1
    ):
        # 32-head tiles where the rule planned 16-head programs two an SM: where its
        # grid holds no more of them than SMs (the smallest steps), each has an SM to
        # itself and the tl kernel is the faster one.
        rule_programs = batch * _tiling.head_tiles(num_heads, batch_tokens) * grid_splits
        if occupancy_sms is None or rule_programs <= occupancy_sms:
            return None
    if divisor > 1:
        if occupancy_sms is None:
            return None
        programs = batch * -(-num_heads // tile)
        if programs * grid_splits <= occupancy_sms:
            divisor = 1
        elif grid_splits < divisor:
            return None
    gluon = (
        compute_capability == 90
        and -(-max_tokens // (grid_splits // divisor)) >= min_tokens
        and _gluon_kernels.supports(
            num_heads=num_heads,
            page_size=kv_cache.shape[1],
            kv_lora_rank=kv_lora_rank,
            rope_dim=rope_dim,
            q_dtype=jnp.dtype(q_nope.dtype).name,
            kv_dtype=kv_dtype,
            kv_row_stride=kv_row_stride,
            kv_page_stride=kv_page_stride,
        )
    )
    return divisor if gluon else None


def decode(
    q_nope: jax.Array,
    q_pe: jax.Array,
    qp_offset: int,
    kv_cache: jax.Array,
    block_table: jax.Array,
    seq_lens: jax.Array,
    num_splits: jax.Array,
    grid_splits: int,
    kv_scale: jax.Array,
    logits_buffer: jax.Array,
    *,
    scale: float,
    kv_lora_rank: int,
    rope_dim: int,
    compute_capability: int | None,
    max_tokens: int | None = None,
    batch_tokens: int | None = None,
    config: dict[str, int] | None = None,
    fp8_mma: bool = False,
    cluster_merge: bool = True,
    occupancy_sms: int | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Both stages on checked inputs (stage 1 alone where ``grid_splits`` is 1).

    Args:
      q_nope: ``[B, H, >= kv_lora_rank]``; its first ``kv_lora_rank`` columns are used.
      q_pe: ``[B, H, *]``; columns ``qp_offset : qp_offset + rope_dim`` are used
        (``q_pe`` may be ``q_nope`` itself, with ``qp_offset = kv_lora_rank``).
      num_splits: int32 ``[1]``, at most ``grid_splits``.
      grid_splits: programs launched along the split axis (static).
      kv_scale: float32 ``[1]``, the cache's dequantisation scale (1 unless fp8).
      max_tokens: the most tokens a row holds, as known at trace time (a static
        ``max_seq_len``); None: the block table's capacity. It picks stage 1's kernel.
      batch_tokens: the tl stage 1's head-tile input (``kernels.launch_params``): the
        rows times ``max_tokens`` where the split count was planned with them, else None;
        on the occupancy rule's count (``occupancy_sms``) also the Gluon stage 1's
        choice at 32 heads on a 16-bit cache (``gluon_split_divisor``).
      config: overrides of ``kernels.stage1_config`` (tuning sweeps only; the tl
        stage 1 then, never the Gluon one).
      fp8_mma: where stage 1 is a Gluon kernel on an fp8 cache with at least 64 heads,
        the fp8-MMA one (``_gluon_kernels.uses_fp8_mma``: q and P rounded to e4m3).
      cluster_merge: False keeps stage 2 where a Gluon stage 1's cluster would merge
        the splits (``_gluon_kernels.cluster_size``; A/B runs only).
      occupancy_sms: where the split count is the occupancy rule's, the SM count it was
        planned for (with the tl stage 1's programs an SM), so that a Gluon stage 1
        that holds fewer may take fewer splits (``gluon_split_divisor``):
        ``grid_splits`` and ``num_splits`` divided alike, which partitions each row as
        that many splits would. None: another rule's count (or batch-invariant mode's
        one split), taken as it is.

    Returns:
      ``out [B, H, kv_lora_rank]`` in q's dtype, ``lse`` float32 ``[B, H]``, and the
      logits buffer written in place (unwritten with one split).
    """
    batch, num_heads = q_nope.shape[:2]
    cc = _launch.device_capability() if compute_capability is None else compute_capability
    capacity = block_table.shape[1] * kv_cache.shape[1]
    longest = capacity if max_tokens is None else min(max_tokens, capacity)
    # The 16-bit 16-head kernel at 32 heads (either tile) runs, as at 16, only on the
    # occupancy rule's count: its choice sees the step's tokens only there.
    gluon_tokens = None if occupancy_sms is None else batch_tokens
    divisor = None
    if config is None:
        divisor = gluon_split_divisor(
            q_nope,
            kv_cache,
            grid_splits,
            longest,
            kv_lora_rank,
            rope_dim,
            cc,
            occupancy_sms,
            gluon_tokens,
        )
    if divisor is not None and divisor > 1:
        grid_splits //= divisor
        num_splits = jnp.maximum(num_splits // divisor, 1)
    problem: dict[str, Any] = dict(
        batch=batch,
        num_heads=num_heads,
        num_pages=kv_cache.shape[0],
        page_size=kv_cache.shape[1],
        pages_per_seq=block_table.shape[1],
        kv_lora_rank=kv_lora_rank,
        rope_dim=rope_dim,
        scale=scale,
        grid_splits=grid_splits,
        q_nope_strides=_strides(q_nope),
        q_pe_strides=_strides(q_pe),
        qp_offset=qp_offset,
        kv_strides=_strides(kv_cache),
        block_table_strides=_strides(block_table),
        buffer_strides=_strides(logits_buffer),
    )
    q_dtype = jnp.dtype(q_nope.dtype).name
    stage1, stage2 = kernels.launch_params(
        **problem,
        q_dtype=q_dtype,
        batch_tokens=batch_tokens,
        config=config,
    )
    stage1_kernel = kernels.mla_decode_stage1
    if divisor is not None:
        kv_dtype = jnp.dtype(kv_cache.dtype).name
        stage1 = _gluon_kernels.launch_params(
            q_dtype=q_dtype,
            kv_dtype=kv_dtype,
            fp8_mma=fp8_mma,
            cluster_merge=cluster_merge,
            batch_tokens=gluon_tokens,
            **problem,
        )
        stage1_kernel = _gluon_kernels.kernel_for(kv_dtype, num_heads, fp8_mma, gluon_tokens)
        stage2 = _gluon_kernels.stage2_params(stage2, stage1)
    out_shapes = [
        jax.ShapeDtypeStruct((batch, num_heads, kv_lora_rank), q_nope.dtype),
        jax.ShapeDtypeStruct((batch, num_heads), jnp.float32),
    ]
    # The buffer is an aliased operand either way: with one split (no stage 2) it is not
    # written, but consecutive calls on it stay ordered (XLA would merge identical calls).
    buffer, *outputs = _launch.launch(
        stage1_kernel,
        (q_nope, q_pe, kv_cache, block_table, seq_lens, num_splits, kv_scale, logits_buffer),
        out_shapes=[jax.ShapeDtypeStruct(logits_buffer.shape, logits_buffer.dtype)]
        + (out_shapes if stage2 is None else []),
        grid=stage1["grid"],
        constexprs=stage1["constexprs"] | kernels.stage1_absent(stage2 is None),
        num_warps=stage1["num_warps"],
        num_stages=stage1["num_stages"],
        input_output_aliases={7: 0},  # logits_buffer -> the first output
        compute_capability=cc,
        name="mla_decode_stage1",
        cluster=stage1.get("cluster", 1),
    )
    if stage2 is None:
        out, lse = outputs
        return out, lse, buffer
    out, lse = _launch.launch(
        kernels.mla_decode_stage2,
        (buffer, seq_lens, num_splits),
        out_shapes=out_shapes,
        grid=stage2["grid"],
        constexprs=stage2["constexprs"],
        num_warps=stage2["num_warps"],
        num_stages=stage2["num_stages"],
        compute_capability=cc,
        name="mla_decode_stage2",
    )
    return out, lse, buffer
