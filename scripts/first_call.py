"""Seconds to the first ``mla_decode`` result in a fresh process (GPU).

Run it several times with one ``TRITON_CACHE_DIR``: the first run compiles both kernels
and fills the cache, later runs should find them there (``mla_jax._launch``).

    TRITON_CACHE_DIR=/tmp/tc python scripts/first_call.py --heads 128   # x3

``--phases`` splits the first call: importing the Triton backend, then tracing,
lowering, compiling and running a jitted step that calls ``mla_decode``
(``jax.jit(...).trace(...).lower().compile()``), each timed on its own.
"""

import argparse
import time

START = time.perf_counter()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from mla_jax import mla_decode, reserve_logits_buffer  # noqa: E402
from mla_jax.tools.problem import softmax_scale  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument(
        "--jax-cache",
        metavar="DIR",
        help="JAX's persistent compilation cache there, every executable kept (XLA's "
        "compile then comes from disk in a warm process too)",
    )
    p.add_argument(
        "--phases",
        action="store_true",
        help="time the backend's import, trace, lower, compile and run apart",
    )
    args = p.parse_args()
    if args.jax_cache:
        jax.config.update("jax_compilation_cache_dir", args.jax_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    imported = time.perf_counter()
    page, width = 64, 576
    pages_per_seq = args.max_len // page
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((args.batch, args.heads, width)), jnp.bfloat16)
    kv = jnp.asarray(rng.standard_normal((args.batch * pages_per_seq, page, width)), jnp.bfloat16)
    table = jnp.arange(args.batch * pages_per_seq, dtype=jnp.int32).reshape(args.batch, -1)
    lens = jnp.full((args.batch,), args.max_len, jnp.int32)
    buf = reserve_logits_buffer(args.batch, args.heads, args.max_len)
    ready = time.perf_counter()
    if args.phases:
        phases(q, kv, table, lens, buf, ready)
        return
    out, lse, _ = decode(q, kv, table, lens, buf)
    jax.block_until_ready((out, lse))
    done = time.perf_counter()
    print(
        f"B={args.batch} H={args.heads} L={args.max_len} "
        f"device={jax.devices()[0].device_kind}: imports "
        f"{imported - START:.2f} s, inputs {ready - imported:.2f} s, "
        f"first mla_decode {done - ready:.2f} s, process total {done - START:.2f} s"
    )


def decode(q, kv, table, lens, buf):
    return mla_decode(q, kv, table, lens, buf, scale=softmax_scale(), backend="triton")


def phases(q, kv, table, lens, buf, start: float) -> None:
    """Prints where a first call's time goes, step by step."""
    import mla_jax._triton_backend  # noqa: F401

    marks = [("backend import", time.perf_counter())]

    traced = jax.jit(decode, donate_argnums=4).trace(q, kv, table, lens, buf)
    marks.append(("trace", time.perf_counter()))
    lowered = traced.lower()
    marks.append(("lower", time.perf_counter()))
    compiled = lowered.compile()
    marks.append(("compile", time.perf_counter()))
    out, lse, _ = compiled(q, kv, table, lens, buf)
    jax.block_until_ready((out, lse))
    marks.append(("run", time.perf_counter()))
    spans, last = [], start
    for name, t in marks:
        spans.append(f"{name} {t - last:.3f}")
        last = t
    print("phases (s): " + ", ".join(spans) + f"; total {last - start:.3f}")


if __name__ == "__main__":
    main()
