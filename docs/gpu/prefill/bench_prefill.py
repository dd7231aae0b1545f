"""On the GPU: MLA prefill attention (non-absorbed: q 192 wide = 128 nope + 64 rope, the
rope keys shared by the heads, v 128 wide; bf16, random inputs) at DeepSeek-V2-Lite's
16 heads (T=4096, B=1 and 4) and V3's 128 heads (T=4096, B=1), by:

- ``triton``: ``mla_jax.prefill.flash_prefill`` on ``(q, (k_nope, k_pe), v)``;
- ``xla-dense``: today's dense path, ``mla_prefill_layer``'s math on the same inputs
  (logits and softmax in float32 over the whole ``T x T``, masked; k_nope and v in
  float32, as the layer decompresses them);
- ``cudnn``: ``jax.nn.dot_product_attention(..., is_causal=True,
  implementation="cudnn")`` on ``k = k_nope ++ k_pe`` broadcast to every head (it
  takes no shared rope keys); where it refuses the shapes the refusal is reported
  (jax 0.10.2 refuses a v narrower than q at trace time); ``cudnn-vpad``: the same
  with v zero-padded to 192 wide and the output cut back to 128;
- ``layer-dense`` / ``layer-triton``: the layer's attention from the latent rows
  (``_dense_attention``, or ``_flash_inputs`` + ``flash_prefill``): what
  ``backend="triton"`` swaps, the decompression of keys and values included.

For each shape and path: the device time a call (the JAX profiler's busy time on the
GPU over ``CALLS`` calls, ``mla_jax.tools.bench.trace_kernels``), the wall time a
call (median), TFLOP/s against the causal attention's flops (``2 * (192 + 128)`` a
query-key pair, ``T (T + 1) / 2`` pairs a sequence and head: the work a causal kernel
must do, whatever it does besides), that over a bf16 matmul's measured rate here and
over the device's spec dense bf16 peak where the device is known; and the outputs
checked against each other (max |a - b| / max |b|, against xla-dense). Then a ragged
batch (lengths 4096, 2500, 1, 0) by triton against xla-dense (rows past a length:
triton's zeros), and a small sweep of ``PrefillConfig``s for the triton path until
``--sweep-seconds`` are spent.

    python docs/gpu/prefill/bench_prefill.py --out DIR  # DIR/prefill.json; the table on stdout
    python docs/gpu/prefill/bench_prefill.py --out DIR --dry-run  # tiny, XLA only: any machine
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax.layer import PRESETS, MLAConfig, MLAParams, _dense_attention, _flash_inputs
from mla_jax.prefill import PrefillConfig, default_config, flash_prefill
from mla_jax.tools.bench import trace_kernels

NOPE, ROPE, DV, LORA = 128, 64, 128, 512
SHAPES = [("v2-lite", 16, 4096, 1), ("v2-lite", 16, 4096, 4), ("v3", 128, 4096, 1)]
CALLS = 10
REPEATS = 10
# Dense bf16 tensor-core peak (no sparsity), NVIDIA's spec sheets; matched on the
# device kind JAX reports. Anything else: no spec column.
SPEC_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.4), ("H200", 989.4))
SWEEP = [
    PrefillConfig(128, 64, 8, 3),
    PrefillConfig(128, 64, 8, 4),
    PrefillConfig(128, 32, 8, 3),
    PrefillConfig(128, 32, 8, 4),
    PrefillConfig(64, 64, 4, 3),
    PrefillConfig(128, 128, 8, 2),
]


def causal_flops(lengths, heads: int) -> float:
    """The causal attention's multiply-adds, times two: ``L (L + 1) / 2`` query-key
    pairs a sequence and head, ``2 * (192 + 128)`` flops a pair (q . k, then p v)."""
    return sum(n * (n + 1) / 2 for n in lengths) * heads * 2 * (NOPE + ROPE + DV)


def inputs(batch: int, heads: int, tokens: int, key: jax.Array) -> dict:
    """Random bf16 ``q``, ``k_nope``, ``k_pe``, ``v``, the latent rows and the
    decompression weights (variance 1/fan_in, so logits are O(1)), built on the device."""

    def build(key):
        ks = jax.random.split(key, 7)
        n = lambda k, shape, scale=1.0: (jax.random.normal(k, shape, jnp.float32) * scale).astype(
            jnp.bfloat16
        )
        return {
            "q": n(ks[0], (batch, tokens, heads, NOPE + ROPE)),
            "k_nope": n(ks[1], (batch, tokens, heads, NOPE)),
            "k_pe": n(ks[2], (batch, tokens, ROPE)),
            "v": n(ks[3], (batch, tokens, heads, DV)),
            "rows": n(ks[4], (batch, tokens, LORA + ROPE)),
            "w_uk": n(ks[5], (LORA, heads, NOPE), LORA**-0.5),
            "w_uv": n(ks[6], (LORA, heads, DV), LORA**-0.5),
        }

    return jax.jit(build)(key)


def dense(q, k_nope, k_pe, v, lengths, scale):
    """``mla_prefill_layer``'s dense attention on given keys and values: ``k_nope``
    and ``v`` float32 (the layer's decompression gives float32), logits, mask and
    softmax in float32 over ``T x T``; returns float32 ``[B, T, H, DV]``."""
    f32 = jnp.float32
    tokens = q.shape[1]
    logits = jnp.einsum("bshn,bthn->bhst", q[..., :NOPE].astype(f32), k_nope.astype(f32))
    logits += jnp.einsum("bshr,btr->bhst", q[..., NOPE:].astype(f32), k_pe.astype(f32))
    t = jnp.arange(tokens)
    live = (t[None, None, :] <= t[None, :, None]) & (t[None, None, :] < lengths[:, None, None])
    logits = jnp.where(live[:, None], logits * scale, -jnp.inf)
    weights = jax.nn.softmax(logits, axis=-1)
    weights = jnp.where(live[:, None].any(-1, keepdims=True), weights, 0.0)
    return jnp.einsum("bhst,bthv->bshv", weights, v.astype(f32))


def layer_parts(x: dict) -> tuple[MLAParams, MLAConfig]:
    """The layer's weights and sizes for ``x``: only ``w_uk``/``w_uv`` are read; no
    YaRN, so ``softmax_scale`` is ``192 ** -0.5``, the other paths' scale."""
    heads = x["q"].shape[2]
    config = dataclasses.replace(PRESETS["deepseek-v2-lite"], num_heads=heads, rope_scaling=None)
    none = jnp.zeros(0)
    return MLAParams(None, None, none, none, none, x["w_uk"], x["w_uv"], none), config


def path_fn(path: str, scale: float, config: PrefillConfig | None = None) -> Callable:
    """``fn(x, lengths)`` for a path, on the dict ``inputs`` builds."""
    if path == "triton":
        return lambda x, n: flash_prefill(
            x["q"], (x["k_nope"], x["k_pe"]), x["v"], n, scale=scale, config=config
        )
    if path == "xla-dense":
        f32 = jnp.float32
        return lambda x, n: dense(
            x["q"], x["k_nope"].astype(f32), x["k_pe"], x["v"].astype(f32), n, scale
        )
    if path in ("cudnn", "cudnn-vpad"):

        def cudnn(x, n):
            del n  # full lengths in the timed shapes: is_causal alone is the same mask
            k_pe = jnp.broadcast_to(x["k_pe"][:, :, None], (*x["k_nope"].shape[:3], ROPE))
            k = jnp.concatenate([x["k_nope"], k_pe], axis=-1)
            v = x["v"]
            if path == "cudnn-vpad":  # v zero-padded to q's width, the output cut back
                v = jnp.pad(v, ((0, 0), (0, 0), (0, 0), (0, NOPE + ROPE - DV)))
            out = jax.nn.dot_product_attention(
                x["q"], k, v, scale=scale, is_causal=True, implementation="cudnn"
            )
            return out[..., :DV]

        return cudnn
    # The layer's attention from the latent rows, the decompression included.
    if path == "layer-triton":

        def layer_triton(x, n):
            params, mla = layer_parts(x)
            q, k, v = _flash_inputs(params, mla, x["q"], x["q"][..., NOPE:], x["rows"])
            return flash_prefill(q, k, v, n, scale=mla.softmax_scale, config=config)

        return layer_triton
    if path == "layer-dense":

        def layer_dense(x, n):
            params, mla = layer_parts(x)
            t = jnp.arange(x["q"].shape[1])
            live = (t[None, None, :] <= t[None, :, None]) & (t[None, None, :] < n[:, None, None])
            q_nope, q_pe = x["q"][..., :NOPE], x["q"][..., NOPE:]
            return _dense_attention(params, mla, q_nope, q_pe, x["rows"], live)

        return layer_dense
    raise ValueError(path)


def measure(fn: Callable, x: dict, lengths: jax.Array) -> tuple[dict, np.ndarray]:
    """Device and wall time a call of ``fn``, and its output (float32 numpy)."""
    run = jax.jit(fn)
    y = jax.block_until_ready(run(x, lengths))  # compile, warm up
    walls = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        jax.block_until_ready(run(x, lengths))
        walls.append((time.perf_counter() - t) * 1e3)

    def calls():
        out = None
        for _ in range(CALLS):
            out = run(x, lengths)
        return jax.block_until_ready(out)

    traced, _ = trace_kernels(calls)
    per_call = traced.per_call(CALLS)
    result = {
        "wall_ms": statistics.median(walls),
        "device_ms": per_call[0] if per_call else None,
        "kernels_per_call": per_call[1] if per_call else traced.error,
    }
    return result, np.asarray(y, np.float32)


def matmul_tflops() -> float | None:
    """A bf16 8192^3 matmul's rate here (device time), the practical ceiling."""
    n = 8192
    a = jax.random.normal(jax.random.key(1), (n, n), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(2), (n, n), jnp.bfloat16)
    r, _ = measure(lambda x, _: x["a"] @ x["b"], {"a": a, "b": b}, jnp.zeros(1))
    return 2 * n**3 / (r["device_ms"] * 1e-3) / 1e12 if r["device_ms"] else None


def spec_tflops(kind: str) -> float | None:
    return next((v for k, v in SPEC_TFLOPS if k in kind), None)


def line(name: str, r: dict, flops: float, peaks: dict) -> str:
    if "error" in r:
        return f"  {name:34s} FAILED {r['error']}"
    dev = r.get("device_ms")
    text = f"  {name:34s} device {dev:8.3f} ms" if dev else f"  {name:34s} device        - ms"
    text += f"  wall {r['wall_ms']:8.3f} ms"
    if dev:
        tflops = flops / (dev * 1e-3) / 1e12
        r["tflops"] = tflops
        text += f"  {tflops:6.1f} TFLOP/s"
        for label, peak in peaks.items():
            if peak:
                text += f"  {100 * tflops / peak:5.1f}% of {label}"
    if "rel_err" in r:
        text += f"  err {r['rel_err']:.2e}"
    return text


def compare(y: np.ndarray, ref: np.ndarray, lengths: np.ndarray) -> dict:
    """max |y - ref| / max |ref| over rows inside each length; rows past a length
    must be finite (triton: zeros)."""
    err, scale, finite = 0.0, 0.0, bool(np.isfinite(y).all())
    for b, n in enumerate(lengths):
        err = max(err, float(np.abs(y[b, :n] - ref[b, :n]).max(initial=0)))
        scale = max(scale, float(np.abs(ref[b, :n]).max(initial=0)))
    return {"rel_err": err / scale if scale else err, "finite": finite}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sweep-seconds", type=float, default=60.0)
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes, XLA paths only")
    args = parser.parse_args(argv)
    global SHAPES
    paths = ["xla-dense", "triton", "cudnn", "cudnn-vpad", "layer-dense", "layer-triton"]
    if args.dry_run:  # checks the script itself on a machine without a GPU
        SHAPES = [("tiny", 2, 64, 1), ("tiny", 2, 64, 2)]
        paths = ["xla-dense", "layer-dense"]
    args.out.mkdir(parents=True, exist_ok=True)
    kind = jax.devices()[0].device_kind
    print(kind, "jax", jax.__version__, flush=True)
    peaks = {"spec": spec_tflops(kind)}
    if not args.dry_run:
        peaks["matmul"] = matmul_tflops()
    print("peaks (TFLOP/s):", {k: None if v is None else round(v, 1) for k, v in peaks.items()})
    results: dict = {"device": kind, "peaks_tflops": peaks, "shapes": {}}
    scale = 192**-0.5
    problems = {}
    for model, heads, tokens, batch in SHAPES:
        name = f"{model} H={heads} T={tokens} B={batch}"
        x = inputs(batch, heads, tokens, jax.random.key(heads + batch))
        lengths = jnp.full((batch,), tokens, jnp.int32)
        flops = causal_flops([tokens] * batch, heads)
        config = default_config(tokens=tokens, dim_nope=NOPE, dim_rope=ROPE, dim_v=DV, itemsize=2)
        print(f"{name}: {flops / 1e9:.1f} GFLOP causal; default {config}", flush=True)
        entry = results["shapes"][name] = {"flops": flops, "paths": {}}
        outputs: dict = {}
        for path in paths:
            try:
                r, y = measure(path_fn(path, scale), x, lengths)
                outputs[path] = y
            except Exception as exc:  # one path's failure is a result: report it, go on
                r = {"error": f"{type(exc).__name__}: {exc}"[:400]}
            ref = outputs.get("layer-dense" if path.startswith("layer") else "xla-dense")
            if path in outputs and ref is not None and path not in ("xla-dense", "layer-dense"):
                r.update(compare(outputs[path], ref, np.asarray(lengths)))
            entry["paths"][path] = r
            print(line(path, r, flops, peaks), flush=True)
        problems[name] = (x, lengths, flops)
        del outputs
    if not args.dry_run:
        # Ragged lengths, triton against xla-dense (correctness only).
        x = inputs(4, 16, 4096, jax.random.key(7))
        lengths = jnp.array([4096, 2500, 1, 0], jnp.int32)
        try:
            y = np.asarray(jax.jit(path_fn("triton", scale))(x, lengths), np.float32)
            ref = np.asarray(jax.jit(path_fn("xla-dense", scale))(x, lengths), np.float32)
            r = compare(y, ref, np.asarray(lengths))
            r["zeros_past_lengths"] = all(
                bool((y[b, n:] == 0).all()) for b, n in enumerate(np.asarray(lengths))
            )
        except Exception as exc:
            r = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        results["ragged"] = r
        print("ragged v2-lite B=4 lengths 4096,2500,1,0 (triton vs xla-dense):", r, flush=True)
    start = time.perf_counter()
    for name, (x, lengths, flops) in [] if args.dry_run else problems.items():
        swept = results["shapes"][name]["sweep"] = {}
        for config in SWEEP:
            if time.perf_counter() - start > args.sweep_seconds:
                print("sweep: out of time", flush=True)
                break
            label = "triton " + ",".join(str(v) for v in vars(config).values())
            try:
                r, _ = measure(path_fn("triton", scale, config), x, lengths)
            except Exception as exc:
                r = {"error": f"{type(exc).__name__}: {exc}"[:400]}
            swept[label] = r
            print(f"{name}:" + line(label, r, flops, peaks), flush=True)
    (args.out / "prefill.json").write_text(json.dumps(results, indent=1, default=str))
    print("summary (device ms a call, TFLOP/s against the causal flops):")
    for name, entry in results["shapes"].items():
        runs = {**entry["paths"], **entry.get("sweep", {})}
        text = "  ".join(
            f"{p} {r['device_ms']:.3f} ms {r.get('tflops', 0):.0f} TF"
            for p, r in runs.items()
            if r.get("device_ms")
        )
        print(f"{name}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
