"""Device time of one decode step for a few shapes: the kernel iteration loop's probe.

K steps run inside one jitted fori_loop threading the buffer; the per-step time is
the median over repeats divided by K. `python scripts/time_decode.py B,H,L ...`
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import mla_jax
from mla_jax.cache import new_paged_cache

K, REPEATS, PAGE = 20, 5, 64


def time_shape(batch, heads, length, backend="triton"):
    key = jax.random.key(0)
    kv, bt = new_paged_cache(batch, length, PAGE, 576, jnp.bfloat16, key=key)
    q = jax.random.normal(jax.random.key(1), (batch, heads, 576), jnp.bfloat16)
    sl = jnp.full((batch,), length, jnp.int32)
    buf = mla_jax.reserve_logits_buffer(batch, heads, length)

    @jax.jit
    def loop(buf):
        def body(_, carry):
            out, buf = carry
            o, _, buf = mla_jax.mla_decode(q + out[..., :1].astype(q.dtype) * 0, kv, bt, sl, buf,
                                           scale=0.1, max_seq_len=length, backend=backend)
            return o, buf
        return jax.lax.fori_loop(0, K, body, (jnp.zeros((batch, heads, 512), q.dtype), buf))

    out, buf = jax.block_until_ready(loop(buf))
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        out, buf = jax.block_until_ready(loop(buf))
        times.append((time.perf_counter() - t) / K)
    ms = float(np.median(times)) * 1e3
    kv_bytes = batch * length * 576 * 2
    print(f"B={batch:4d} H={heads:4d} L={length:6d} splits={mla_jax.num_kv_splits(length, 132):3d} "
          f"{ms:8.3f} ms  {kv_bytes / ms / 1e9:6.2f} TB/s", flush=True)


if __name__ == "__main__":
    for shape in sys.argv[1:]:
        time_shape(*map(int, shape.split(",")))
