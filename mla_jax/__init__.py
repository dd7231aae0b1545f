"""mla-jax: functional MLA (multi-head latent attention) decode for JAX.

Reserve the split-KV logits buffer once, thread it through every decode step:

    buf = mla_jax.reserve_logits_buffer(max_num_seqs, num_heads, max_model_len, sm_count=132)
    out, lse, buf = mla_jax.mla_decode(q, kv_cache, block_table, seq_lens, buf,
                                       scale=scale, max_seq_len=int(seq_lens.max()), sm_count=132)
"""

from mla_jax import reference, sharded
from mla_jax.buffers import reserve_logits_buffer
from mla_jax.decode import mla_decode
from mla_jax.merge import merge_attention_states
from mla_jax.splits import num_kv_splits
from mla_jax.validate import validate_inputs

__all__ = ["merge_attention_states", "mla_decode", "num_kv_splits", "reference",
           "reserve_logits_buffer", "sharded", "validate_inputs"]
