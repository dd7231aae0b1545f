"""Calls of the stage 1 and stage 2 kernels (``mla_jax._launch``: through
``jax_triton.triton_call``, one jaxlib FFI call a kernel carrying its cubin).

Stage 1 receives the logits buffer as an input aliased to its only output
(``input_output_aliases``), so it writes in place and returns the same buffer. With
one split (``grid_splits == 1``) there is no stage 2: stage 1 also outputs ``out``
and ``lse`` and leaves the buffer unwritten. Which kernels run, at how many splits
and with which launch, is ``mla_jax.plan``'s choice; this module launches its plan.
Shapes are checked by the caller (``mla_jax.decode``); everything here is static
except the arrays, and the split count travels as an int32 array.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mla_jax import _launch, kernels, plan


def _strides(x: jax.Array) -> tuple[int, ...]:
    """Element strides of a row-major array (what XLA hands a custom call)."""
    strides, step = [], 1
    for size in reversed(x.shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


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
        ``max_seq_len``); None: the block table's capacity. It picks stage 1's kernel
        (``mla_jax.plan``).
      batch_tokens: the tl stage 1's head-tile input (``kernels.launch_params``): the
        rows times ``max_tokens`` where the split count was planned with them, else None;
        on the occupancy rule's count (``occupancy_sms``) also the Gluon stage 1's
        choice at 32 heads on a 16-bit cache (``plan.gluon_split_divisor``).
      config: overrides of ``kernels.stage1_config`` (tuning sweeps only; the tl
        stage 1 then, never the Gluon one).
      fp8_mma: where stage 1 is a Gluon kernel on an fp8 cache with at least 64 heads,
        the fp8-MMA one (``plan.gluon_kernel``: q and P rounded to e4m3).
      cluster_merge: False keeps stage 2 where a Gluon stage 1's cluster would merge
        the splits (``plan.cluster_size``; A/B runs only).
      occupancy_sms: where the split count is the occupancy rule's, the SM count it was
        planned for (with the tl stage 1's programs an SM), so that a Gluon stage 1
        that holds fewer may take fewer splits (``plan.gluon_split_divisor``):
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
    step = plan.plan(
        plan.Problem(
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
            q_dtype=jnp.dtype(q_nope.dtype).name,
            kv_dtype=jnp.dtype(kv_cache.dtype).name,
            compute_capability=cc,
            max_tokens=capacity if max_tokens is None else min(max_tokens, capacity),
            batch_tokens=batch_tokens,
            occupancy_sms=occupancy_sms,
            fp8_mma=fp8_mma,
            cluster_merge=cluster_merge,
            config=None if config is None else tuple(sorted(config.items())),
        )
    )
    if step.split_divisor > 1:
        num_splits = jnp.maximum(num_splits // step.split_divisor, 1)
    stage1, stage2 = step.stage1, step.stage2
    out_shapes = [
        jax.ShapeDtypeStruct((batch, num_heads, kv_lora_rank), q_nope.dtype),
        jax.ShapeDtypeStruct((batch, num_heads), jnp.float32),
    ]
    # The buffer is an aliased operand either way: with one split (no stage 2) it is not
    # written, but consecutive calls on it stay ordered (XLA would merge identical calls).
    buffer, *outputs = _launch.launch(
        stage1.kernel,
        (q_nope, q_pe, kv_cache, block_table, seq_lens, num_splits, kv_scale, logits_buffer),
        out_shapes=[jax.ShapeDtypeStruct(logits_buffer.shape, logits_buffer.dtype)]
        + (out_shapes if stage2 is None else []),
        grid=stage1.grid,
        constexprs=dict(stage1.constexprs) | kernels.stage1_absent(stage2 is None),
        num_warps=stage1.num_warps,
        num_stages=stage1.num_stages,
        input_output_aliases={7: 0},  # logits_buffer -> the first output
        compute_capability=cc,
        name="mla_decode_stage1",
        cluster=stage1.cluster,
    )
    if stage2 is None:
        out, lse = outputs
        return out, lse, buffer
    out, lse = _launch.launch(
        stage2.kernel,
        (buffer, seq_lens, num_splits),
        out_shapes=out_shapes,
        grid=stage2.grid,
        constexprs=dict(stage2.constexprs),
        num_warps=stage2.num_warps,
        num_stages=stage2.num_stages,
        compute_capability=cc,
        name="mla_decode_stage2",
    )
    return out, lse, buffer
