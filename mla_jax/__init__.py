"""mla-jax: functional MLA (multi-head latent attention) decode for JAX.

Reserve the split-KV logits buffer once, thread it through every decode step::

    buf = mla_jax.reserve_logits_buffer(max_num_seqs, num_heads, max_model_len, sm_count=132)
    out, lse, buf = mla_jax.mla_decode(q, kv_cache, block_table, seq_lens, buf, scale=scale)

The split count is computed at run time from ``seq_lens`` (one executable for every
length); the buffer carries the split policy and SM count it was reserved with.
"""

from mla_jax import cache, reference, sharded
from mla_jax._target import KERNEL_CALL_TARGET
from mla_jax.buffers import LogitsBuffer, reserve_logits_buffer
from mla_jax.decode import Backend, mla_decode
from mla_jax.merge import merge_attention_states
from mla_jax.multi_token import mla_decode_tokens
from mla_jax.splits import DEFAULT_POLICY, Policy, kv_splits, num_kv_splits
from mla_jax.validate import validate_inputs

__all__ = [
    "DEFAULT_POLICY",
    "KERNEL_CALL_TARGET",
    "Backend",
    "LogitsBuffer",
    "Policy",
    "cache",
    "kv_splits",
    "merge_attention_states",
    "mla_decode",
    "mla_decode_tokens",
    "num_kv_splits",
    "reference",
    "reserve_logits_buffer",
    "sharded",
    "validate_inputs",
]
