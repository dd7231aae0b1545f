"""A row's splits merged inside a thread-block cluster, against stage 2 (GPU).

The seesaw stage 1 at the split count the library plans, two ways through the
library's own launch route (``_triton_backend.decode``): ``cluster_merge=True`` (a
row's 2 splits are one cluster, which merges them; no stage 2) and ``False``
(the same stage 1, then stage 2). Per shape: a jit chain of CALLS calls, every call's
lse kept (the compiled HLO's custom calls counted), device time from the profiler
over RUNS runs of the chain, the two ways alternating over ROUNDS rounds (which goes
first alternates too). Outputs: the two ways' out and lse compared (bit for bit, and
the largest difference), on full rows and on ragged ones (lengths from 0 up, a
run-time split count under the grid's).

    python docs/gpu/cluster-merge/ab_cluster.py [B/H/L ...]
"""

import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax import _triton_backend, reserve_logits_buffer
from mla_jax.splits import kv_splits
from mla_jax.tools.bench import compiled_custom_calls, make_inputs, trace_kernels

SCALE = 576**-0.5
CALLS, RUNS, ROUNDS = 20, 10, 4
SM = 132
SHAPES = [
    (64, 64, 1024),
    (64, 64, 4096),
    (64, 32, 1024),
    (64, 32, 4096),
    (32, 128, 1024),
    (32, 128, 4096),
    (64, 64, 16384),
    (32, 128, 16384),
]


def one_call(q, kv, bt, sl, ns, data, grid, max_tokens, merge):
    return _triton_backend.decode(
        q,
        q,
        512,
        kv,
        bt,
        sl,
        ns,
        grid,
        jnp.ones((1,), jnp.float32),
        data,
        scale=SCALE,
        kv_lora_rank=512,
        rope_dim=64,
        compute_capability=None,
        max_tokens=max_tokens,
        batch_tokens=q.shape[0] * max_tokens,
        cluster_merge=merge,
    )


def chain(grid, max_tokens, merge):
    def run(q, kv, bt, sl, ns, data):
        lses = []
        for _ in range(CALLS):
            out, lse, data = one_call(q, kv, bt, sl, ns, data, grid, max_tokens, merge)
            lses.append(lse)
        return out, tuple(lses), data

    return jax.jit(run, donate_argnums=5)


def compare(a, b):
    (oa, la), (ob, lb) = a, b
    oa, ob = np.asarray(oa, np.float32), np.asarray(ob, np.float32)
    la, lb = np.asarray(la), np.asarray(lb)
    same = np.array_equal(oa, ob, equal_nan=True) and np.array_equal(la, lb, equal_nan=True)
    fin = np.isfinite(la) & np.isfinite(lb)
    return (
        f"bitwise={'yes' if same else 'no'} max|dout|={np.nanmax(np.abs(oa - ob)):.3g} "
        f"max|dlse|={np.max(np.abs(la - lb)[fin]) if fin.any() else 0:.3g} "
        f"nan_out={int(np.isnan(oa).sum())}/{int(np.isnan(ob).sum())}"
    )


def shape(batch, heads, seq_len):
    key = jax.random.key(batch * 7 + heads * 13 + seq_len, impl="rbg")
    q, kv, bt, sl = make_inputs(key, batch, heads, seq_len, 64)
    grid = int(
        kv_splits("occupancy", batch=batch, num_heads=heads, max_seq_len=seq_len, sm_count=SM)
    )
    ns = jnp.full((1,), grid, jnp.int32)
    buf = reserve_logits_buffer(batch, heads, seq_len, sm_count=SM)
    head = f"{batch}/{heads}/{seq_len} grid_splits={grid}"
    if grid != 2:
        print(f"{head}: no cluster at this split count, skipped", flush=True)
        return None
    outs, compiled = {}, {}
    for merge in (False, True):
        data = jnp.full(buf.data.shape, jnp.nan, jnp.float32)
        c = chain(grid, seq_len, merge).lower(q, kv, bt, sl, ns, data).compile()
        calls = compiled_custom_calls(c.as_text() or "")
        compiled[merge] = c
        out = one_call(
            q, kv, bt, sl, ns, jnp.full(buf.data.shape, jnp.nan, jnp.float32), grid, seq_len, merge
        )
        outs[merge] = (out[0], out[1])
        print(f"{head} merge={merge}: {calls} triton calls in a chain of {CALLS}", flush=True)
    print(f"{head} full rows: {compare(outs[False], outs[True])}", flush=True)
    # Ragged rows: lengths 0, 1, 63, 65 and random, a run-time split count under the grid's.
    rng = np.random.default_rng(batch + heads + seq_len)
    lens = rng.integers(0, seq_len + 1, batch)
    lens[: min(4, batch)] = [0, 1, 63, 65][: min(4, batch)]
    rl = jnp.asarray(lens, jnp.int32)
    for live in sorted({1, max(1, grid // 2), grid - 1, grid}):
        nsr = jnp.full((1,), live, jnp.int32)
        r = {
            m: one_call(
                q, kv, bt, rl, nsr, jnp.full(buf.data.shape, jnp.nan, jnp.float32), grid, seq_len, m
            )[:2]
            for m in (False, True)
        }
        print(f"{head} ragged, run-time splits {live}: {compare(r[False], r[True])}", flush=True)

    times = {False: [], True: []}
    for rnd in range(ROUNDS):
        order = (False, True) if rnd % 2 == 0 else (True, False)
        for merge in order:
            c = compiled[merge]
            state = [jnp.full(buf.data.shape, jnp.nan, jnp.float32)]

            def run(c=c, state=state):
                for _ in range(RUNS):
                    _, lses, state[0] = c(q, kv, bt, sl, ns, state[0])
                jax.block_until_ready(lses)
                return None

            run()  # warm
            traced, _ = trace_kernels(run)
            times[merge].append(traced.busy_ns / 1e3 / (RUNS * CALLS))
    a, b = statistics.median(times[False]), statistics.median(times[True])
    print(
        f"{head}: stage 2 {a:.2f} us, cluster {b:.2f} us ({(b / a - 1) * 100:+.1f}%)  "
        f"[{' '.join(f'{t:.2f}' for t in times[False])} | "
        f"{' '.join(f'{t:.2f}' for t in times[True])}]",
        flush=True,
    )
    return a, b


def main():
    shapes = [tuple(int(x) for x in s.split("/")) for s in sys.argv[1:]] or SHAPES
    print(jax.devices(), flush=True)
    for s in shapes:
        shape(*s)


if __name__ == "__main__":
    main()
