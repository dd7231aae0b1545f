"""jax-triton calls of the stage 1 and stage 2 kernels.

Stage 1 receives the logits buffer as an input aliased to its only output
(``input_output_aliases``), so it writes in place and returns the same buffer.
Shapes are checked by the caller (``mla_jax.decode``); everything here is static
except the arrays, and the split count travels as an int32 array.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax_triton as jt

from mla_jax import kernels


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
    config: dict[str, int] | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Both stages on checked inputs.

    Args:
      q_nope: ``[B, H, >= kv_lora_rank]``; its first ``kv_lora_rank`` columns are used.
      q_pe: ``[B, H, *]``; columns ``qp_offset : qp_offset + rope_dim`` are used
        (``q_pe`` may be ``q_nope`` itself, with ``qp_offset = kv_lora_rank``).
      num_splits: int32 ``[1]``, at most ``grid_splits``.
      grid_splits: programs launched along the split axis (static).
      kv_scale: float32 ``[1]``, the cache's dequantisation scale (1 unless fp8).
      config: overrides of ``kernels.stage1_config`` (tuning sweeps only).

    Returns:
      ``out [B, H, kv_lora_rank]`` in q's dtype, ``lse`` float32 ``[B, H]``, and the
      logits buffer written in place.
    """
    batch, num_heads = q_nope.shape[:2]
    stage1, stage2 = kernels.launch_params(
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
        float32_inputs=q_nope.dtype == jnp.float32,
        config=config,
    )
    buffer = jt.triton_call(
        q_nope,
        q_pe,
        kv_cache,
        block_table,
        seq_lens,
        num_splits,
        kv_scale,
        logits_buffer,
        kernel=kernels.mla_decode_stage1,
        out_shape=jax.ShapeDtypeStruct(logits_buffer.shape, logits_buffer.dtype),
        grid=stage1["grid"],
        input_output_aliases={7: 0},  # logits_buffer -> the only output
        compute_capability=compute_capability,
        num_warps=stage1["num_warps"],
        num_stages=stage1["num_stages"],
        name="mla_decode_stage1",
        **stage1["constexprs"],
    )
    out, lse = jt.triton_call(
        buffer,
        seq_lens,
        num_splits,
        kernel=kernels.mla_decode_stage2,
        out_shape=(
            jax.ShapeDtypeStruct((batch, num_heads, kv_lora_rank), q_nope.dtype),
            jax.ShapeDtypeStruct((batch, num_heads), jnp.float32),
        ),
        grid=stage2["grid"],
        compute_capability=compute_capability,
        num_warps=stage2["num_warps"],
        num_stages=stage2["num_stages"],
        name="mla_decode_stage2",
        **stage2["constexprs"],
    )
    return out, lse, buffer
