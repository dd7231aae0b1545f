"""The sharded decode on 1, 2, 4, 8 GPUs (as many as there are): agreement with one
GPU, device time per step and steps/s of a jitted scan, for the triton backend.

Heads-parallel at B=128, H=128, L=16384 and batch-parallel at B=512, H=16, L=4096
(bf16, DeepSeek dims, page 64, shuffled tables). The same inputs run through
``mla_decode`` on one GPU give the ground truth. Writes one JSON record per
(scheme, GPU count) with ``--out``.
    python scripts/multi_gpu.py --out scaling.json
A CPU rehearsal on small shapes (the xla backend, simulated devices):
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python scripts/multi_gpu.py --small
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from mla_jax import mla_decode, reserve_logits_buffer
from mla_jax.cache import new_block_table
from mla_jax.sharded import partition_specs, reserve_sharded_logits_buffer, sharded_mla_decode
from mla_jax.tools import bench

CASES = {"heads": (128, 128, 16384), "batch": (512, 16, 4096)}
SMALL_CASES = {"heads": (4, 16, 256), "batch": (8, 16, 256)}
PAGE, WIDTH, SCALE, SM = 64, 576, 192**-0.5, 132
CALLS, REPEATS, SCAN_STEPS = 10, 5, 64


def problem(batch, heads, length, groups):
    """q, cache and a global block table whose rows ``[g*B/groups, (g+1)*B/groups)``
    use only pages ``[g*P/groups, (g+1)*P/groups)``: a batch-parallel layout for every
    GPU count dividing ``groups``."""
    kq, kc, *kt = jax.random.split(jax.random.key(0), 2 + groups)
    rows = batch // groups
    local = [new_block_table(rows, length, PAGE, key=k) for k in kt]
    pool = local[0].size
    table = jnp.concatenate([t + g * pool for g, t in enumerate(local)])
    cache = jax.random.normal(kc, (groups * pool, PAGE, WIDTH), jnp.bfloat16)
    q = jax.random.normal(kq, (batch, heads, WIDTH), jnp.bfloat16)
    return q, cache, table, jnp.full((batch,), length, jnp.int32)


def run_case(scheme, shape, n, data, single_out, backend):
    batch, heads, length = shape
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
    specs = partition_specs("x", scheme)
    q, kv, table, lens = data
    if scheme == "batch":  # each device's rows index its own pool: local page numbers
        rows, pool = batch // n, kv.shape[0] // n
        table = table - (jnp.arange(batch) // rows * pool)[:, None].astype(table.dtype)
    put = lambda x, k: jax.device_put(x, NamedSharding(mesh, specs[k]))
    args = (put(q, "q"), put(kv, "kv_cache"), put(table, "block_table"), put(lens, "seq_lens"))
    buf = reserve_sharded_logits_buffer(mesh, "x", scheme, batch, heads, length, sm_count=SM)

    def step(q, kv, bt, sl, buf):
        return sharded_mla_decode(
            mesh, "x", scheme, q, kv, bt, sl, buf, scale=SCALE, max_seq_len=length, backend=backend
        )

    # The bench's timing: CALLS unrolled steps in one jit threading the donated buffer.
    loop = bench.timed_chain(step, CALLS, perturb_table=False, keep_outs=False)
    times, (outs, _, buf) = bench.time_loop(
        lambda state: loop(*args, state[2]), (None, None, buf), calls=CALLS, repeats=REPEATS
    )
    out = outs[-1]
    ms = float(np.median(times))
    diff = np.abs(np.asarray(out, np.float32) - single_out)

    # A decode loop's shape: one jitted scan of steps whose lengths grow, split count
    # taken from the lengths inside the graph.
    def scan(q, kv, bt, sl, buf):
        def body(buf, t):
            lens = jnp.minimum(sl - SCAN_STEPS + t, sl)
            out, _, buf = sharded_mla_decode(
                mesh, "x", scheme, q, kv, bt, lens, buf, scale=SCALE, backend=backend
            )
            return buf, out[0, 0, 0]

        return jax.lax.scan(body, buf, jnp.arange(SCAN_STEPS))

    scan = jax.jit(scan, donate_argnums=4)
    buf, _ = jax.block_until_ready(scan(*args, buf))
    start = time.perf_counter()
    buf, _ = jax.block_until_ready(scan(*args, buf))
    steps_s = SCAN_STEPS / (time.perf_counter() - start)
    return {
        "scheme": scheme,
        "gpus": n,
        "B": batch,
        "H": heads,
        "L": length,
        "ms_per_step": ms,
        "scan_steps_per_s": steps_s,
        "max_abs_diff_vs_1gpu": float(diff.max()),
        "bitwise_equal_1gpu": bool((diff == 0).all()),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--small", action="store_true", help="small shapes, xla backend (CPU)")
    args = p.parse_args()
    cases, backend = (SMALL_CASES, "xla") if args.small else (CASES, "triton")
    gpus = len(jax.devices())
    counts = [n for n in (1, 2, 4, 8) if n <= gpus]
    print(f"{gpus} x {jax.devices()[0].device_kind}; GPU counts {counts}", flush=True)
    records = []
    for scheme, (batch, heads, length) in cases.items():
        data = problem(batch, heads, length, counts[-1])
        buf = reserve_logits_buffer(batch, heads, length, sm_count=SM)
        single, _, _ = mla_decode(*data, buf, scale=SCALE, max_seq_len=length, backend=backend)
        single = np.asarray(single, np.float32)
        for n in counts:
            rec = run_case(scheme, (batch, heads, length), n, data, single, backend)
            records.append(rec)
            print(json.dumps(rec), flush=True)
        del data, buf
    print(
        f"{'scheme':7} {'GPUs':>4} {'B':>4} {'H':>4} {'L':>6} {'ms/step':>8} {'speed-up':>8} "
        f"{'scan steps/s':>12} {'max|diff| vs 1 GPU':>18}"
    )
    for rec in records:
        base = next(r for r in records if r["scheme"] == rec["scheme"] and r["gpus"] == 1)
        print(
            f"{rec['scheme']:7} {rec['gpus']:>4} {rec['B']:>4} {rec['H']:>4} {rec['L']:>6} "
            f"{rec['ms_per_step']:>8.4f} {base['ms_per_step'] / rec['ms_per_step']:>7.2f}x "
            f"{rec['scan_steps_per_s']:>12.1f} {rec['max_abs_diff_vs_1gpu']:>18.2e}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"devices": [str(d) for d in jax.devices()], "records": records}, f, indent=1)


if __name__ == "__main__":
    main()
