"""One call of the seesaw stage 1 as clusters that merge a row's two splits (the
tree's ``_triton_backend.decode`` with ``cluster_merge=True``), then one without,
for Nsight Compute: ``python one_call.py B/H/L``."""

import sys

import jax
import jax.numpy as jnp
from ab_cluster import SM, one_call

from mla_jax import reserve_logits_buffer
from mla_jax.splits import kv_splits
from mla_jax.tools.bench import make_inputs

batch, heads, seq_len = (int(x) for x in sys.argv[1].split("/"))
q, kv, bt, sl = make_inputs(jax.random.key(0, impl="rbg"), batch, heads, seq_len, 64)
grid = int(kv_splits("occupancy", batch=batch, num_heads=heads, max_seq_len=seq_len, sm_count=SM))
ns = jnp.full((1,), grid, jnp.int32)
buf = reserve_logits_buffer(batch, heads, seq_len, sm_count=SM)
for merge in (True, False):
    out = one_call(q, kv, bt, sl, ns, buf.data, grid, seq_len, merge)
    jax.block_until_ready(out)
