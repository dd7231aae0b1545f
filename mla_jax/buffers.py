"""Reserving the split-KV logits buffer once, at the worst case.

The buffer is stage 1's scratch: per (sequence, head, split) a partial output of
``kv_lora_rank`` floats followed by its log-sum-exp. It is reserved once for
``max_num_seqs`` sequences of up to ``max_model_len`` tokens and threaded through
every decode step; a step with fewer sequences or splits uses a corner of it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mla_jax.checks import check_positive
from mla_jax.splits import DEFAULT_POLICY, Policy, reserved_splits

LOGITS_DTYPE = jnp.float32


def gpu_sm_count(device: jax.Device | None = None) -> int:
    """The multiprocessor count of ``device`` (default: the first GPU).

    Raises a ValueError naming the fix when there is no GPU to ask.
    """
    if device is None:
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        device = gpus[0] if gpus else None
    count = getattr(device, "core_count", None) if device is not None else None
    if not count:
        raise ValueError(
            "sm_count=None reads the GPU's multiprocessor count, but no GPU is "
            f"visible to JAX (devices: {jax.devices()}). Pass sm_count explicitly "
            "(132 for an H200/H100 SXM) to plan for that GPU on this machine."
        )
    return int(count)


def logits_buffer_shape(
    max_num_seqs: int, num_heads: int, max_splits: int, kv_lora_rank: int
) -> tuple[int, int, int, int]:
    """``[rows, heads, splits, kv_lora_rank + 1]``: partial output, then its LSE."""
    return (max_num_seqs, num_heads, max_splits, kv_lora_rank + 1)


def reserve_logits_buffer(
    max_num_seqs: int,
    num_heads: int,
    max_model_len: int,
    *,
    kv_lora_rank: int = 512,
    sm_count: int | None = None,
    device: jax.Device | jax.sharding.Sharding | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> jax.Array:
    """Reserves the float32 logits buffer for the worst case, once.

    Returns:
      float32 ``[max_num_seqs, num_heads, max_splits, kv_lora_rank + 1]`` where
      ``max_splits`` is the most splits ``policy`` asks for at any batch and length
      in range (for ``"vllm"``: ``num_kv_splits(max_model_len, sm_count)``). Its
      contents are scratch: every decode step overwrites the part it reads. Thread
      the buffer that ``mla_decode`` returns into the next step (use the same
      ``policy`` and ``sm_count`` there); the one passed in is donated.
    """
    check_positive(max_num_seqs=max_num_seqs, num_heads=num_heads, max_model_len=max_model_len,
                   kv_lora_rank=kv_lora_rank)
    if sm_count is None:
        sm_count = gpu_sm_count(device if isinstance(device, jax.Device) else None)
    splits = reserved_splits(policy, num_heads=num_heads, max_model_len=max_model_len,
                             sm_count=sm_count)
    shape = logits_buffer_shape(max_num_seqs, num_heads, splits, kv_lora_rank)
    # NaN, not zeros: a read of a slot no kernel wrote shows up at once.
    return jnp.full(shape, jnp.nan, LOGITS_DTYPE, device=device)
