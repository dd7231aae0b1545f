"""Stage-1 tile configurations x split counts at the issue's target shapes (H200).

For each shape, times the whole triton decode (both stages) per call: K calls in
one jitted fori_loop threading the buffer, median of repeats. Prints one line per
variant and the best per shape; `--out FILE` writes JSON.
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax import triton_backend
from mla_jax.cache import new_paged_cache
from mla_jax.splits import num_kv_splits, occupancy_kv_splits

K, REPEATS, PAGE, SM = 10, 3, 64, 132
SHAPES = [(128, 16, 16384), (64, 16, 4096), (1, 16, 4096), (128, 128, 16384),
          (128, 128, 4096), (16, 128, 4096), (1, 128, 4096)]
# Since the block table is prefetched by hand (kernels.py), num_stages 3 double-buffers
# the latent tiles; these are the candidates that fit in shared memory (scripts/inspect_kernel.py).
CONFIGS = {
    16: [dict(BLOCK_N=32, num_warps=4, num_stages=2), dict(BLOCK_N=32, num_warps=4, num_stages=3),
         dict(BLOCK_N=32, num_warps=4, num_stages=4), dict(BLOCK_N=16, num_warps=4, num_stages=4),
         dict(BLOCK_N=64, num_warps=8, num_stages=3)],
    128: [dict(BLOCK_H=64, BLOCK_N=64, num_warps=8, num_stages=2),
          dict(BLOCK_H=64, BLOCK_N=32, num_warps=8, num_stages=3),
          dict(BLOCK_H=64, BLOCK_N=32, num_warps=8, num_stages=4),
          dict(BLOCK_H=64, BLOCK_N=16, num_warps=8, num_stages=5)],
}


def timed(batch, heads, length, splits, config, data):
    q, kv, bt, sl = data
    buf = jnp.zeros((batch, heads, splits, 513), jnp.float32)

    @jax.jit
    def loop(q, kv, bt, sl, buf):
        def body(_, carry):
            out, buf = carry
            qi = q + (out[..., :1] * 0).astype(q.dtype)  # a data dependency between calls
            o, _, buf = triton_backend.decode(
                qi, qi, 512, kv, bt, sl, jnp.full((1,), splits, jnp.int32), splits,
                jnp.ones((1,), jnp.float32), buf,
                scale=0.0625, kv_lora_rank=512, rope_dim=64, compute_capability=None,
                config=config)
            return o, buf
        return jax.lax.fori_loop(0, K, body, (jnp.zeros((batch, heads, 512), q.dtype), buf),
                                 unroll=True)

    out, buf = jax.block_until_ready(loop(q, kv, bt, sl, buf))
    first = out
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        out, buf = jax.block_until_ready(loop(q, kv, bt, sl, buf))
        times.append((time.perf_counter() - t) / K)
    return float(np.median(times)) * 1e3, first


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    args = parser.parse_args()
    results = []
    for batch, heads, length in SHAPES:
        kv, bt = new_paged_cache(batch, length, PAGE, 576, jnp.bfloat16, key=jax.random.key(0))
        q = jax.random.normal(jax.random.key(1), (batch, heads, 576), jnp.bfloat16)
        data = (q, kv, bt, jnp.full((batch,), length, jnp.int32))
        occ = occupancy_kv_splits(batch, heads, length, SM)
        split_choices = sorted({num_kv_splits(length, SM), occ})
        best, baseline = None, None
        for config in CONFIGS[16 if heads <= 16 else 128]:
            for splits in split_choices:
                try:
                    ms, out = timed(batch, heads, length, splits, config, data)
                except Exception as e:  # a config that does not compile or fit: record why
                    print(f"B={batch} H={heads} L={length} {config} splits={splits}: {e!r}"[:300])
                    continue
                tbs = batch * length * 576 * 2 / ms / 1e9
                # Every variant must agree with the first one timed at this shape.
                baseline = out if baseline is None else baseline
                diff = float(jnp.max(jnp.abs(out.astype(jnp.float32) - baseline.astype(jnp.float32))))
                row = dict(batch=batch, heads=heads, length=length, splits=splits, config=config,
                           ms=ms, tb_s=tbs, max_diff=diff)
                results.append(row)
                print(f"B={batch:4d} H={heads:4d} L={length:6d} splits={splits:3d} {config} "
                      f"{ms:8.4f} ms {tbs:5.2f} TB/s diff {diff:.1e}", flush=True)
                if best is None or ms < best["ms"]:
                    best = row
        del data, kv, q
        print(f"BEST B={batch} H={heads} L={length}: {best}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
