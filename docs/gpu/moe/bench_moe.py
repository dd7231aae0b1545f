"""On the GPU: the routed experts of one DeepSeek-V2-Lite MoE layer (hidden 2048, 1408
per expert, 64 experts, top-6, bf16 random weights) by the fused Triton kernels
(``mla_jax.moe.fused_moe``) and by the model's two XLA paths (``_experts_gathered``:
each token's experts' weights gathered; ``_experts_grouped``: ``jax.lax.ragged_dot``
over the pairs sorted by expert), at N tokens in {1, 8, 64, 4096}. ``--shared S``
adds S shared experts of the same width (V2-Lite has 2): on the Triton path in the
kernels (``fused_moe(..., shared=...)``, as the model runs them up to 16 tokens), on
the XLA paths the model's SwiGLU MLP beside them.

For each N and path:
- the output against a float32 reference (the ragged path on float32 copies of the
  weights at HIGHEST precision): max |y - ref| / max |ref|;
- a jitted, unrolled chain of ``CHAIN`` calls, each call's input the last one's plus
  1e-3 of its output (so every output is consumed and no call can be hoisted):
  wall time a call (median of ``REPEATS`` chains) and device time a call (the JAX
  profiler's busy time on the GPU, ``mla_jax.tools.bench.trace_kernels``), with the
  kernels launched a call;
- the bytes floor, the weights of the experts the routing touched read once (plus x
  read and the float32 output written), and that floor over the device time.

Then a small sweep of other ``MoEConfig``s for the Triton path at each N (device time
and the same error check), best first, until ``--sweep-seconds`` are spent. The
gathered path is skipped where its copies of the weights would pass 24 GB (N=4096).

    python docs/gpu/moe/bench_moe.py --out DIR     # DIR/moe.json; the table on stdout
    python docs/gpu/moe/bench_moe.py --out DIR --dry-run  # tiny shapes, XLA paths: any machine
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax.deepseek.model import MLPParams, MoEParams, _experts_gathered, _experts_grouped, mlp
from mla_jax.moe import MoEConfig, default_config, fused_moe, shared_in_kernels
from mla_jax.tools.bench import trace_kernels

HIDDEN, INTER, EXPERTS, TOP_K = 2048, 1408, 64, 6
SHARED = 0  # shared experts (--shared)
TOKENS = (1, 8, 64, 4096)
CHAIN = 20
REPEATS = 10
GATHER_LIMIT = 24e9  # bytes of gathered weight copies a call

SWEEP = {
    "decode": [
        MoEConfig(16, 64, 128, 1, 4, 3),  # gate+up in 108 KB: two programs an SM
        MoEConfig(16, 64, 64, 1, 4, 6),
        MoEConfig(16, 64, 128, 1, 8, 4),
        MoEConfig(16, 128, 64, 1, 4, 4),
        MoEConfig(16, 32, 128, 1, 2, 4),
        MoEConfig(16, 64, 256, 1, 8, 2),
        MoEConfig(16, 16, 256, 1, 2, 4),
        MoEConfig(16, 32, 64, 1, 4, 4),
        MoEConfig(16, 32, 128, 1, 4, 4),
        MoEConfig(16, 32, 256, 1, 4, 3),
        MoEConfig(16, 64, 256, 1, 4, 3),
        MoEConfig(16, 128, 128, 1, 8, 3),
        MoEConfig(16, 64, 128, 1, 4, 5),
        MoEConfig(16, 32, 256, 1, 4, 4),
        MoEConfig(16, 64, 128, 1, 4, 6),
    ],
    "prefill": [
        MoEConfig(64, 128, 64, 8, 4, 3),
        MoEConfig(64, 64, 64, 8, 4, 4),
        MoEConfig(128, 128, 64, 8, 8, 3),
        MoEConfig(128, 128, 64, 8, 8, 4),
        MoEConfig(128, 64, 64, 8, 4, 3),
        MoEConfig(64, 128, 64, 1, 8, 3),
        MoEConfig(128, 128, 64, 16, 8, 3),
        MoEConfig(128, 128, 64, 4, 8, 3),
        MoEConfig(128, 128, 32, 8, 8, 4),
        MoEConfig(128, 128, 64, 1, 8, 3),
        MoEConfig(128, 64, 128, 8, 8, 3),
        MoEConfig(64, 256, 64, 8, 8, 3),
        MoEConfig(64, 128, 64, 8, 8, 3),
    ],
}


def weights(key: jax.Array) -> MoEParams:
    """Random bf16 experts, variance 1/fan_in, built on the device."""

    def build(key):
        kg, ku, kd, ks = jax.random.split(key, 4)
        normal = lambda k, shape, fan_in: (
            jax.random.normal(k, shape, jnp.float32) * fan_in**-0.5
        ).astype(jnp.bfloat16)
        width = SHARED * INTER
        sg, su, sd = jax.random.split(ks, 3)
        shared = MLPParams(
            normal(sg, (HIDDEN, width), HIDDEN),
            normal(su, (HIDDEN, width), HIDDEN),
            normal(sd, (width, HIDDEN), width),
        )
        return MoEParams(
            router=None,
            router_bias=None,
            gate=normal(kg, (EXPERTS, HIDDEN, INTER), HIDDEN),
            up=normal(ku, (EXPERTS, HIDDEN, INTER), HIDDEN),
            down=normal(kd, (EXPERTS, INTER, HIDDEN), INTER),
            shared=shared if SHARED else None,
        )

    return jax.jit(build)(key)


def problem(tokens: int, key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """x bf16 ``[tokens, HIDDEN]``; each token's top-6 of a random softmax (weights
    float32, experts int32)."""
    kx, ks = jax.random.split(key)
    x = jax.random.normal(kx, (tokens, HIDDEN), jnp.float32).astype(jnp.bfloat16)
    scores = jax.nn.softmax(jax.random.normal(ks, (tokens, EXPERTS), jnp.float32) * 2)
    w, e = jax.lax.top_k(scores, TOP_K)
    return x, w, e.astype(jnp.int32)


def path_fn(path: str, config: MoEConfig | None = None) -> Callable:
    """A MoE layer's experts on ``path``; the shared experts (if any) where the model
    runs them: in the Triton kernels up to 16 tokens, else an MLP beside them."""
    xla = {"xla-gather": _experts_gathered, "xla-ragged": _experts_grouped}

    def run(p, x, w, e):
        inside = path == "triton" and p.shared is not None and shared_in_kernels(tokens=len(x))
        if path == "triton":
            shared = p.shared if inside else None
            y = fused_moe(x, w, e, p.gate, p.up, p.down, shared=shared, config=config)
        else:
            y = xla[path](p, x, w, e)
        if p.shared is None or inside:
            return y
        return y + mlp(p.shared, x).astype(jnp.float32)

    return run


def chain(fn: Callable) -> Callable:
    """jit of ``CHAIN`` dependent calls, unrolled (a rolled GPU loop syncs with the host
    on every trip, ~10 us, which would swamp one token's call)."""

    def run(params, x, w, e):
        for _ in range(CHAIN):
            x = x + (fn(params, x, w, e) * 1e-3).astype(x.dtype)
        return x

    return jax.jit(run)


def reference(params: MoEParams, x, w, e) -> np.ndarray:
    """The ragged path (and the shared MLP) on float32 weights at HIGHEST precision."""
    f32 = jax.tree.map(lambda a: a.astype(jnp.float32), params)
    with jax.default_matmul_precision("highest"):
        y = jax.jit(path_fn("xla-ragged"))(f32, x.astype(jnp.float32), w, e)
    return np.asarray(y)


def measure(fn: Callable, params, x, w, e, ref: np.ndarray) -> dict:
    """Error, wall and device time a call of ``fn``."""
    y = np.asarray(jax.jit(fn)(params, x, w, e), np.float32)
    err = float(np.abs(y - ref).max() / np.abs(ref).max())
    run = chain(fn)
    jax.block_until_ready(run(params, x, w, e))  # compile, warm up
    walls = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        jax.block_until_ready(run(params, x, w, e))
        walls.append((time.perf_counter() - t) * 1e3 / CHAIN)
    traced, _ = trace_kernels(lambda: jax.block_until_ready(run(params, x, w, e)))
    per_call = traced.per_call(CHAIN)
    return {
        "rel_err": err,
        "finite": bool(np.isfinite(y).all()),
        "wall_ms": statistics.median(walls),
        "device_ms": per_call[0] if per_call else None,
        "kernels_per_call": per_call[1] if per_call else traced.error,
    }


def floor_bytes(tokens: int, experts: np.ndarray) -> int:
    """Each touched expert's three matrices read once (and the shared experts'), x
    read, the output written."""
    touched = len(np.unique(experts)) + SHARED
    return touched * 3 * HIDDEN * INTER * 2 + tokens * HIDDEN * (2 + 4)


def line(tokens: int, name: str, r: dict, floor: int) -> str:
    if "error" in r:
        return f"N={tokens:5d} {name:44s} FAILED {r['error']}"
    dev = r["device_ms"]
    rate = f"{floor / (dev * 1e-3) / 1e9:7.0f} GB/s" if dev else "      - GB/s"
    dev_text = f"{dev * 1e3:9.1f} us" if dev else "        - us"
    return (
        f"N={tokens:5d} {name:44s} device {dev_text}  wall {r['wall_ms'] * 1e3:9.1f} us  "
        f"{rate}  err {r['rel_err']:.2e}{'' if r['finite'] else ' NON-FINITE'}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    parser.add_argument("--sweep-seconds", type=float, default=100.0)
    parser.add_argument("--shared", type=int, default=0, help="shared experts (V2-Lite: 2)")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes, no Triton path")
    args = parser.parse_args(argv)
    global HIDDEN, INTER, EXPERTS, SHARED
    SHARED = args.shared
    if args.dry_run:  # checks the script itself on a machine without a GPU
        HIDDEN, INTER, EXPERTS = 64, 32, 8
    paths = ("xla-ragged", "xla-gather") if args.dry_run else ("triton", "xla-ragged", "xla-gather")
    args.out.mkdir(parents=True, exist_ok=True)
    print(jax.devices()[0].device_kind, "jax", jax.__version__, flush=True)
    params = weights(jax.random.key(0))
    results: dict = {"shape": [HIDDEN, INTER, EXPERTS, TOP_K, SHARED], "tokens": {}}
    problems = {}
    for tokens in args.tokens:
        x, w, e = problem(tokens, jax.random.key(tokens))
        ref = reference(params, x, w, e)
        floor = floor_bytes(tokens, np.asarray(e))
        problems[tokens] = (x, w, e, ref, floor)
        entry = results["tokens"][tokens] = {"floor_bytes": floor, "paths": {}}
        config = default_config(tokens=tokens, top_k=TOP_K, num_experts=EXPERTS, itemsize=2)
        print(f"N={tokens}: floor {floor / 1e6:.1f} MB; default {config}", flush=True)
        for path in paths:
            if path == "xla-gather" and tokens * TOP_K * 3 * HIDDEN * INTER * 2 > GATHER_LIMIT:
                continue
            try:
                r = measure(path_fn(path), params, x, w, e, ref)
            except Exception as exc:  # report and go on: one path's failure is a result
                r = {"error": f"{type(exc).__name__}: {exc}"[:400]}
            entry["paths"][path] = r
            print(line(tokens, path, r, floor), flush=True)
    start = time.perf_counter()
    for tokens in [] if args.dry_run else args.tokens:
        x, w, e, ref, floor = problems[tokens]
        configs = SWEEP["prefill" if tokens * TOP_K / EXPERTS > 64 else "decode"]
        swept = results["tokens"][tokens]["sweep"] = {}
        for config in configs:
            if time.perf_counter() - start > args.sweep_seconds:
                print("sweep: out of time", flush=True)
                break
            name = "triton " + ",".join(str(v) for v in vars(config).values())
            try:
                r = measure(path_fn("triton", config), params, x, w, e, ref)
            except Exception as exc:
                r = {"error": f"{type(exc).__name__}: {exc}"[:400]}
            swept[name] = r
            print(line(tokens, name, r, floor), flush=True)
    (args.out / "moe.json").write_text(json.dumps(results, indent=1, default=str))
    print("summary (device us a call; best swept config):")
    for tokens, entry in results["tokens"].items():
        runs = {**entry["paths"], **entry.get("sweep", {})}
        timed = {n: r["device_ms"] for n, r in runs.items() if r.get("device_ms")}
        best = min(timed, key=timed.get) if timed else None
        base = {p: entry["paths"].get(p, {}).get("device_ms") for p in entry["paths"]}
        text = "  ".join(f"{p} {v * 1e3:.1f}" for p, v in base.items() if v)
        print(f"N={tokens}: {text}; best {best} {timed[best] * 1e3:.1f}" if best else tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
