"""``python -m mla_jax model-bench``: a whole DeepSeek model's decode and prefill on a
GPU, against the card's floors and against transformers.

A DeepSeek-V2-Lite-shaped model (``--model v2-lite``: 27 layers, ``--layers`` to
shrink it) or a stack of DeepSeek-V3's MoE layers (``--model v3-stack``: as many as
fit ``--memory-gib``; decode only) with random bf16 weights, built on the device a
layer at a time. For each context (``--contexts``) and batch (``--batch``), in the
order given:

- **decode**: tokens/s of the one-executable decode loop (``decode_loop``: a jitted
  ``lax.scan`` of ``--steps`` greedy steps, state donated) from caches filled with
  random latents to the context; wall time from dispatch until the tokens, the next
  logits and the state are ready, the tokens read to the host; the first call
  (compile and run) apart, then the median of ``--repeats`` calls;
- **floor**: the step's bytes (the weights it touches and the latent cache) over the
  card's HBM bandwidth, or its flops over the bf16 peak (``model_floors``), and our
  fraction of it;
- **split** (``--split``): the attention layers, the ``mla_decode`` op alone, the MoE
  layers, the dense MLP and the rest (embedding, final norm, lm_head, argmax), each
  jitted alone at the step's shapes and timed the same way;
- **transformers** (unless ``--no-torch``): the same weights in
  ``DeepseekV2ForCausalLM``, greedy ``generate`` after a random prompt of the context
  length, decode steps timed apart from the prefill.

Then one ``--prefill-len`` prompt's prefill and its fraction of the compute roofline,
and the parity of greedy tokens and logits with transformers on tiny models.

Each phase runs in its own process, one after the other (JAX, then torch), so each
has the whole GPU. Writes ``results.json``, ``model-bench.md`` and
``model-bench.log`` into ``--out``. ``--dry-run`` runs it all at toy sizes on the CPU
(xla backend), to check the tool.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mla_jax.buffers import DEFAULT_SM_COUNT, gpu_sm_count
from mla_jax.decode import Backend, mla_decode
from mla_jax.deepseek import DeepseekConfig, DeepseekParams, new_decode_state
from mla_jax.deepseek.config import ModelType
from mla_jax.deepseek.generate import _prefill, decode_loop
from mla_jax.deepseek.model import _ffn, _logits, init_embeddings, init_layer, layer_keys
from mla_jax.layer import mla_decode_layer, rms_norm
from mla_jax.tools import model_floors as floors
from mla_jax.tools.cli import (
    Parser,
    fail,
    positive_float,
    positive_int,
    positive_ints,
    unwritable_folder,
)

COMMAND = "model-bench"
BATCHES = (1, 64, 8)  # the order they run in: the ends of the range first
CONTEXTS = (4096, 1024)
DRY = {"batches": (1, 2), "contexts": (32,), "steps": 4, "repeats": 2, "prefill_len": 32}
DRY_LAYERS = 2
DEFAULT_OUT, DRY_RUN_OUT = Path("build/model-bench"), Path("build/model-bench-dry-run")
PAGE_SIZE = 64
SEED = 0
# The share of --time-budget the JAX phase may use when the torch phase follows.
JAX_SHARE = 0.65
# The device memory share --model v3-stack fills by default.
STACK_MEMORY_SHARE = 0.8
# The dry run's floors: an H100 SXM's numbers, as no card was asked.
DRY_RUN_CARD = floors.CARDS[1]
MARKDOWN, LOG, RESULTS = "model-bench.md", "model-bench.log", "results.json"

METHOD = {
    "decode": (
        "decode_loop: one jitted lax.scan of `steps` greedy steps (state donated) from "
        "paged caches (page size 64) filled with random latents to the context; wall time "
        "from dispatch until the tokens, the next logits and the state are ready, then "
        "the tokens read to the host; the first call (compile + run) apart, median of "
        "`repeats` calls"
    ),
    "split": (
        "each part jitted alone at the step's shapes, over all its layers, in a "
        "lax.fori_loop of `steps` steps, timed like the decode: attention layer = input "
        "RMSNorm, MLA projections, cache append, mla_decode, output projection, "
        "residual; mla_decode alone = the op over each layer's cache; MoE layer = "
        "post-attention RMSNorm, router, routed and shared experts, residual; dense MLP "
        "= the same for the dense layers; other = embedding lookup, final norm, lm_head, "
        "argmax. Unattributed = step - the parts (fusion and overlap across parts)"
    ),
    "floor": (
        "max(bytes / HBM bandwidth, flops / bf16 peak). Bytes = the weights a step "
        "touches (every attention, dense, shared-expert and router weight, per MoE layer "
        "the E(1-(1-k/E)^B) distinct routed experts B uniformly routed tokens expect, an "
        "embedding row a token, the final norm, lm_head) + the latent cache "
        "B x context x 576 x 2 bytes x layers. Flops = 2 B x the weights a token is "
        "multiplied through + the absorbed attention 2 B H context (576 + 512) a layer"
    ),
    "prefill": (
        "one prompt through _prefill (jitted, caches donated), median of `repeats` "
        "after the first call; roofline = (2 x active params x tokens + lm_head at the "
        "last token + causal attention 2 H T(T+1)/2 (192 + 128) a layer) / bf16 peak"
    ),
    "transformers": (
        "DeepseekV2ForCausalLM (transformers' defaults: sdpa attention, its default "
        "experts implementation), the same weights and dtype, greedy model.generate("
        "max_new_tokens=steps+1) after a random prompt of the context length; prefill = "
        "the call's start to the first logits, decode = first logits to last over `steps` "
        "steps (a logits processor notes the time after a CUDA sync); one call a case "
        "after a short warm-up call at that batch"
    ),
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a phase needs: the flags, resolved."""

    model: str
    layers: int | None  # None: the model's default (v3-stack: as many as fit)
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    steps: int
    repeats: int
    prefill_len: int
    torch: bool
    split: bool
    dry_run: bool
    memory_gib: float | None

    def cases(self) -> list[tuple[int, int]]:
        """``(batch, context)`` in the order they run: contexts outer, as given."""
        return [(b, c) for c in self.contexts for b in self.batches]


def config_for(model: str, layers: int, dry_run: bool) -> DeepseekConfig:
    if dry_run:
        return floors.tiny(model, layers)
    return floors.v2_lite(layers) if model == "v2-lite" else floors.v3_stack(layers)


# --- The JAX phase: building, decode, split, prefill -------------------------------


def model_key(seed: int = SEED) -> jax.Array:
    """The weights' key: XLA's RNG-bit-generator (``impl="rbg"``), which compiles in a
    fraction of threefry's time (one jitted layer of V2-Lite's MoE draws 13 arrays)."""
    return jax.random.key(seed, impl="rbg")


def build_params(config: DeepseekConfig, dtype: jnp.dtype, seed: int = SEED) -> DeepseekParams:
    """``init_params(config, model_key(seed), dtype)``'s draws, a layer at a time on the
    device: one compilation per layer shape (dense, MoE) and one for the embeddings."""
    layer_fn = jax.jit(init_layer, static_argnums=(0, 2), static_argnames="moe")
    k_embed, k_head, k_layers = layer_keys(config, model_key(seed))
    layers = tuple(
        layer_fn(config, k, dtype, moe=config.is_moe_layer(i)) for i, k in enumerate(k_layers)
    )
    embed, head = jax.jit(init_embeddings, static_argnums=(0, 3))(config, k_embed, k_head, dtype)
    params = DeepseekParams(embed, layers, jnp.ones(config.hidden_size, dtype), head)
    return jax.block_until_ready(params)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _random_rows(key, shape, dtype):
    return jax.random.normal(key, shape, dtype)


def filled_state(config, batch, context, steps, dtype, sm_count, seed=SEED):
    """A decode state whose caches hold ``context`` random latent rows a sequence (room
    for ``steps`` more), positions at ``context``. The zero caches are replaced one at
    a time, so at most one layer's cache is held twice."""
    state = new_decode_state(
        config, batch, context + steps, page_size=PAGE_SIZE, dtype=dtype, sm_count=sm_count
    )
    caches = list(state.kv_caches)
    state = state._replace(kv_caches=())
    keys = jax.random.split(model_key(seed + 1), len(caches))
    for i in range(len(caches)):
        caches[i] = _random_rows(keys[i], caches[i].shape, jnp.dtype(dtype))
    return state._replace(kv_caches=tuple(caches))


def _positions(batch: int, context: int) -> jax.Array:
    return jax.block_until_ready(jnp.full(batch, context, jnp.int32))


def _median_ms(times: list[float], steps: int) -> float:
    return statistics.median(times) / steps * 1e3


def _timed(call: Callable[[], float], repeats: int) -> tuple[float, list[float]]:
    """``call`` (which times itself) once to compile, then ``repeats`` times."""
    first = call()
    return first, [call() for _ in range(repeats)]


def measure_decode(params, config, batch, context, s: Settings, env: dict) -> dict:
    state = filled_state(config, batch, context, s.steps, env["dtype"], env["sm_count"])
    logits = jax.random.normal(jax.random.key(7), (batch, config.vocab_size), jnp.float32)
    key = jax.random.key(0)
    box = [state]
    tokens_read = [0]

    def call() -> float:
        # The positions go back to the context each call (the state is donated, its
        # positions with it): every call decodes the same steps.
        state = box[0]._replace(positions=_positions(batch, context))
        start = time.perf_counter()
        out = decode_loop(
            params,
            config,
            logits,
            state,
            key,
            num_steps=s.steps,
            temperature=0.0,
            top_k=None,
            eos_id=None,
            backend=env["backend"],
            return_logits=False,
        )
        jax.block_until_ready((out.tokens, out.next_logits, out.state))
        tokens = np.asarray(out.tokens)
        elapsed = time.perf_counter() - start
        if (
            tokens.shape != (batch, s.steps)
            or tokens.min() < 0
            or tokens.max() >= config.vocab_size
        ):
            raise RuntimeError(f"decode_loop returned tokens {tokens.shape} out of range")
        tokens_read[0] += tokens.size
        box[0] = out.state
        return elapsed

    first, times = _timed(call, s.repeats)
    step_ms = _median_ms(times, s.steps)
    return {
        "step_ms": step_ms,
        "tokens_per_s": batch / step_ms * 1e3,
        "step_ms_runs": [t / s.steps * 1e3 for t in times],
        "first_call_s": first,
        "tokens_read": tokens_read[0],
    }


@functools.partial(
    jax.jit,
    static_argnames=("config", "steps", "backend"),
    donate_argnames=("caches", "buffer"),
)
def _attention_steps(params, config, h, caches, block_table, positions, buffer, *, steps, backend):
    def body(i, carry):
        h, caches, buffer = carry
        new = []
        for layer, cache in zip(params.layers, caches):
            x = rms_norm(h, layer.input_norm, config.rms_norm_eps)
            y, cache, buffer = mla_decode_layer(
                layer.attn,
                config.attention,
                x,
                cache,
                block_table,
                positions + i,
                buffer,
                backend=backend,
            )
            h = h + y
            new.append(cache)
        return h, tuple(new), buffer

    return lax.fori_loop(0, steps, body, (h, caches, buffer))


@functools.partial(
    jax.jit, static_argnames=("steps", "scale", "backend"), donate_argnames=("buffer",)
)
def _op_steps(q, caches, block_table, seq_lens, buffer, *, steps, scale, backend):
    def body(_, carry):
        total, buffer = carry
        for cache in caches:
            out, _, buffer = mla_decode(
                q, cache, block_table, seq_lens, buffer, scale=scale, backend=backend
            )
            total = total + out[..., 0].astype(jnp.float32)  # every call's output used
        return total, buffer

    total = jnp.zeros(q.shape[:2], jnp.float32)
    return lax.fori_loop(0, steps, body, (total, buffer))


@functools.partial(jax.jit, static_argnames=("config", "steps", "moe", "backend"))
def _ffn_steps(params, config, h, *, steps, moe, backend):
    def body(_, h):
        for index, layer in enumerate(params.layers):
            if config.is_moe_layer(index) == moe:
                h = _ffn(layer, config, h, backend, None)
        return h

    return lax.fori_loop(0, steps, body, h)


@functools.partial(jax.jit, static_argnames=("config", "steps"))
def _other_steps(params, config, tokens, *, steps):
    def body(_, tokens):
        logits = _logits(params, config, params.embed[tokens])
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)

    return lax.fori_loop(0, steps, body, tokens)


def _hidden(config, batch, dtype, seed):
    return jax.random.normal(jax.random.key(seed), (batch, config.hidden_size), dtype)


def measure_attention(params, config, batch, context, s: Settings, env: dict) -> dict:
    """The attention layers alone, and the ``mla_decode`` op alone, per step."""
    a = config.attention
    state = filled_state(config, batch, context, s.steps, env["dtype"], env["sm_count"])
    h = _hidden(config, batch, env["dtype"], 11)
    box = [state.kv_caches, state.logits_buffer]

    def layer_call() -> float:
        positions = _positions(batch, context)
        start = time.perf_counter()
        out, box[0], box[1] = _attention_steps(
            params,
            config,
            h,
            box[0],
            state.block_table,
            positions,
            box[1],
            steps=s.steps,
            backend=env["backend"],
        )
        jax.block_until_ready((out, box[0], box[1]))
        np.asarray(out)
        return time.perf_counter() - start

    _, layer_times = _timed(layer_call, s.repeats)
    q = jax.random.normal(jax.random.key(3), (batch, a.num_heads, a.latent_dim), env["dtype"])
    seq_lens = _positions(batch, context + 1)

    def op_call() -> float:
        start = time.perf_counter()
        total, box[1] = _op_steps(
            q,
            box[0],
            state.block_table,
            seq_lens,
            box[1],
            steps=s.steps,
            scale=a.softmax_scale,
            backend=env["backend"],
        )
        jax.block_until_ready((total, box[1]))
        np.asarray(total)
        return time.perf_counter() - start

    _, op_times = _timed(op_call, s.repeats)
    return {
        "attention_ms": _median_ms(layer_times, s.steps),
        "mla_decode_ms": _median_ms(op_times, s.steps),
    }


def measure_batch_parts(params, config, batch, s: Settings, env: dict) -> dict:
    """The parts that do not read the cache, per step at ``batch``: MoE layers, dense
    MLPs, and the rest (embedding, final norm, lm_head, argmax)."""
    h = _hidden(config, batch, env["dtype"], 12)
    result = {}
    dense, moe = floors.layer_counts(config)
    for name, is_moe, count in (("moe_ms", True, moe), ("dense_mlp_ms", False, dense)):
        if not count:
            result[name] = 0.0
            continue

        def ffn_call(is_moe=is_moe) -> float:
            start = time.perf_counter()
            out = _ffn_steps(params, config, h, steps=s.steps, moe=is_moe, backend=env["backend"])
            np.asarray(jax.block_until_ready(out))
            return time.perf_counter() - start

        result[name] = _median_ms(_timed(ffn_call, s.repeats)[1], s.steps)
    tokens = jnp.arange(batch, dtype=jnp.int32) % config.vocab_size

    def other_call() -> float:
        start = time.perf_counter()
        out = _other_steps(params, config, tokens, steps=s.steps)
        np.asarray(jax.block_until_ready(out))
        return time.perf_counter() - start

    result["other_ms"] = _median_ms(_timed(other_call, s.repeats)[1], s.steps)
    return result


def prefill_call(params, config, length: int, env: dict) -> Callable[[], None]:
    """One random ``length``-token prompt's prefill through ``_prefill`` (its caches
    donated from call to call), run until its caches are ready and its logits read."""
    state = new_decode_state(
        config, 1, length, page_size=PAGE_SIZE, dtype=env["dtype"], sm_count=env["sm_count"]
    )
    prompts = jax.random.randint(jax.random.key(5), (1, length), 0, config.vocab_size)
    lengths = jnp.full(1, length, jnp.int32)
    box = [state.kv_caches]

    def call() -> None:
        logits, box[0] = _prefill(
            params, config, prompts, lengths, box[0], state.block_table, backend=env["backend"]
        )
        jax.block_until_ready((logits, box[0]))
        np.asarray(logits)

    return call


def measure_prefill(params, config, length, s: Settings, env: dict) -> dict:
    run = prefill_call(params, config, length, env)

    def call() -> float:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    first, times = _timed(call, s.repeats)
    ms = statistics.median(times) * 1e3
    return {"tokens": length, "ms": ms, "tokens_per_s": length / ms * 1e3, "first_call_s": first}


def _device_memory_bytes() -> int:
    stats = jax.devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class Phase:
    """A phase's record: written to its part file after every measurement, so what
    was measured survives a phase that is stopped."""

    def __init__(self, name: str, path: Path, deadline: float | None):
        self.path, self.deadline = path, deadline
        self.data: dict[str, Any] = {"phase": name, "log": [], "skipped": [], "errors": []}

    def log(self, text: str) -> None:
        print(text, flush=True)
        self.data["log"].append(text)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)

    def run(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or None where the deadline has passed (recorded as skipped) or
        it raised (recorded, the phase goes on)."""
        if self.deadline is not None and time.time() > self.deadline:
            self.data["skipped"].append(what)
            self.log(f"{what}: SKIPPED (time budget spent)")
            return None
        try:
            return fn(*args)
        except Exception as e:  # recorded; the other measurements go on
            message = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            self.data["errors"].append({"what": what, "error": message})
            self.log(f"{what}: FAILED ({message[:300]})")
            return None


def jax_phase(s: Settings, phase: Phase) -> None:
    device = jax.devices()[0]
    gpu = device.platform == "gpu"
    env = {
        "dtype": jnp.float32 if s.dry_run else jnp.bfloat16,
        "backend": "xla" if s.dry_run else "triton",
        "sm_count": gpu_sm_count() if gpu else DEFAULT_SM_COUNT,
    }
    memory = _device_memory_bytes()
    layers = s.layers
    if layers is None and s.model == "v3-stack" and not s.dry_run:
        budget = s.memory_gib * 2**30 if s.memory_gib else STACK_MEMORY_SHARE * memory
        layers = floors.stack_layers(
            floors.v3_stack(1),
            budget,
            batch=max(s.batches),
            context=max(s.contexts) + s.steps,
        )
    if layers is None:
        layers = DRY_LAYERS if s.dry_run else floors.V2_LITE_LAYERS
    config = config_for(s.model, layers, s.dry_run)
    dtype_name = jnp.dtype(env["dtype"]).name
    phase.data.update(
        device=device.device_kind,
        platform=device.platform,
        device_memory_bytes=memory,
        sm_count=env["sm_count"],
        backend=env["backend"],
        dtype=dtype_name,
        layers=layers,
        jax_version=jax.__version__,
        cases=[],
        split={},
    )
    phase.log(
        f"jax {jax.__version__}, {device.device_kind} ({memory / 2**30:.1f} GiB for JAX), "
        f"{env['sm_count']} SMs; backend {env['backend']}"
    )
    start = time.perf_counter()
    params = phase.run("build", build_params, config, env["dtype"])
    if params is None:
        return
    build_s = time.perf_counter() - start
    n = floors.param_count(config)
    phase.data["model"] = {"params": n, "build_s": build_s}
    phase.log(
        f"model: {s.model}, {layers} layers, {n / 1e9:.2f}B params {dtype_name}, random "
        f"weights built on the device in {build_s:.1f} s"
    )
    for batch, context in s.cases():
        what = f"decode B={batch} context={context}"
        r = phase.run(what, measure_decode, params, config, batch, context, s, env)
        if r is None:
            continue
        phase.data["cases"].append({"batch": batch, "context": context, **r})
        phase.log(
            f"{what}: {r['step_ms']:.3f} ms/step, {r['tokens_per_s']:.0f} tokens/s "
            f"(runs {', '.join(f'{t:.3f}' for t in r['step_ms_runs'])} ms/step; first "
            f"call {r['first_call_s']:.1f} s)"
        )
    if s.model == "v2-lite":
        what = f"prefill {s.prefill_len} tokens"
        r = phase.run(what, measure_prefill, params, config, s.prefill_len, s, env)
        if r is not None:
            phase.data["prefill"] = r
            phase.log(
                f"{what}: {r['ms']:.1f} ms ({r['tokens_per_s']:.0f} tokens/s; first call "
                f"{r['first_call_s']:.1f} s)"
            )
    if not s.split:
        return
    batch_parts: dict[int, dict] = {}
    for batch, context in s.cases():
        if batch not in batch_parts:
            what = f"split B={batch}: MoE, dense MLP, other"
            parts = phase.run(what, measure_batch_parts, params, config, batch, s, env)
            if parts is None:
                continue
            batch_parts[batch] = parts
            phase.data["split"][str(batch)] = parts
            phase.log(
                f"{what}: {parts['moe_ms']:.3f}, {parts['dense_mlp_ms']:.3f}, "
                f"{parts['other_ms']:.3f} ms/step"
            )
        what = f"split B={batch} context={context}: attention"
        r = phase.run(what, measure_attention, params, config, batch, context, s, env)
        if r is None:
            continue
        case = next(
            (c for c in phase.data["cases"] if (c["batch"], c["context"]) == (batch, context)),
            None,
        )
        if case is not None:
            case["split"] = r
        phase.log(
            f"{what}: layers {r['attention_ms']:.3f} ms/step, of which mla_decode alone "
            f"{r['mla_decode_ms']:.3f}"
        )


def torch_phase(s: Settings, phase: Phase, layers: int) -> None:
    import torch
    import transformers

    from mla_jax.tools import hf_baseline

    gpu = jax.default_backend() == "gpu"
    sm = gpu_sm_count() if gpu else DEFAULT_SM_COUNT
    phase.data.update(
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
        cases=[],
    )
    phase.log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    backend: Backend = "xla" if s.dry_run else "triton"
    # The dry run checks one model (the V2 without q LoRA, the benched structure).
    kinds: tuple[ModelType, ...] = ("deepseek_v2",) if s.dry_run else ("deepseek_v3", "deepseek_v2")
    parity = phase.run("parity", hf_baseline.parity, backend, sm, phase.log, kinds)
    if parity is not None:
        phase.data["parity"] = parity
    if s.model != "v2-lite":
        return
    config = config_for(s.model, layers, s.dry_run)
    dtype = jnp.float32 if s.dry_run else jnp.bfloat16
    device = "cuda" if torch.cuda.is_available() and not s.dry_run else "cpu"
    start = time.perf_counter()
    model = phase.run(
        "transformers model",
        hf_baseline.build_hf_model,
        config,
        model_key(),
        dtype,
        device,
    )
    if model is None:
        return
    attn = getattr(model.config, "_attn_implementation", None)
    experts = getattr(model.config, "_experts_implementation", None)
    phase.data.update(
        model_class=type(model).__name__,
        attn_implementation=attn,
        experts_implementation=experts,
        build_s=time.perf_counter() - start,
    )
    phase.log(
        f"transformers: {type(model).__name__} on {device}, attention {attn}, experts "
        f"{experts}; built with the same weights in {phase.data['build_s']:.1f} s"
    )
    cuda = device == "cuda"
    warm: set[int] = set()

    def case(batch: int, context: int, steps: int) -> dict:
        if batch not in warm:  # the first call at a batch: cuBLAS plans, allocator
            hf_baseline.time_generate(model, batch, 16, 2)
            warm.add(batch)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            r = hf_baseline.time_generate(model, batch, context, steps)
        except torch.cuda.OutOfMemoryError as e:
            r = {"error": f"out of memory: {str(e).splitlines()[0]}"}
        if cuda:
            r["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
            torch.cuda.empty_cache()
        return r

    cases = s.cases()
    for batch, context in cases:
        what = f"transformers B={batch} context={context}"
        r = phase.run(what, case, batch, context, s.steps)
        if r is None:
            continue
        phase.data["cases"].append({"batch": batch, "context": context, **r})
        if "error" in r:
            phase.log(f"{what}: {r['error'][:200]}")
        else:
            phase.log(
                f"{what}: decode {r['step_ms']:.2f} ms/step, {r['tokens_per_s']:.1f} "
                f"tokens/s; prefill {r['prefill_ms']:.0f} ms"
                + (f"; peak {r['peak_gib']:.1f} GiB" if "peak_gib" in r else "")
            )
    if (1, s.prefill_len) not in cases:
        what = f"transformers prefill {s.prefill_len} tokens"
        r = phase.run(what, case, 1, s.prefill_len, 1)
        if r is not None:
            phase.data["prefill"] = r
            if "prefill_ms" in r:
                phase.log(f"{what}: {r['prefill_ms']:.0f} ms")


def run_worker(job_path: str) -> int:
    """Runs a phase in this process. ``job_path``: a JSON file of the settings, the
    phase's name, its part file, its deadline (``time.time()``; None: none) and, for
    the torch phase, the layers the JAX phase built."""
    job = json.loads(Path(job_path).read_text())
    settings = dict(job["settings"])
    settings.update(batches=tuple(settings["batches"]), contexts=tuple(settings["contexts"]))
    s = Settings(**settings)
    phase = Phase(job["phase"], Path(job["part"]), job["deadline"])
    if job["phase"] == "jax":
        jax_phase(s, phase)
    else:
        torch_phase(s, phase, job["layers"])
    phase.save()
    return 0


# --- The command: phases in their own processes, then the report -------------------


def resolve_card(
    device_kind: str, hbm_tbps: float | None, tflops: float | None, dry_run: bool
) -> tuple[floors.Card | None, str]:
    """The card the floors use, and where its numbers come from."""
    known = floors.card_for(device_kind)
    base = known or (DRY_RUN_CARD if dry_run else None)
    if base is None and (hbm_tbps is None or tflops is None):
        names = ", ".join(c.name for c in floors.CARDS)
        return None, (
            f"no floors: {device_kind!r} is not in the card table ({names}); pass "
            "--hbm-tbps and --tflops"
        )
    name = base.name if base is not None else device_kind
    hbm = hbm_tbps * 1e12 if hbm_tbps else base.hbm_bytes_per_s  # type: ignore[union-attr]
    peak = tflops * 1e12 if tflops else base.bf16_flops  # type: ignore[union-attr]
    if known is None and base is not None:
        source = f"{base.name}'s data sheet, assumed for the dry run"
    else:
        source = "data sheet" if base is not None else "given"
    if hbm_tbps or tflops:
        given = [f for f, v in (("--hbm-tbps", hbm_tbps), ("--tflops", tflops)) if v]
        source += f"; {' and '.join(given)} given"
    return floors.Card(name, hbm, peak), source


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else math.nan


def assemble(s: Settings, parts: dict[str, dict], args: argparse.Namespace) -> dict:
    """``results.json``'s content from the phases' parts (whatever they measured)."""
    jx, tx = parts.get("jax") or {}, parts.get("torch") or {}
    layers = jx.get("layers")
    config = config_for(s.model, layers, s.dry_run) if layers else None
    card, card_source = resolve_card(jx.get("device", "?"), args.hbm_tbps, args.tflops, s.dry_run)
    dtype_bytes = 4 if jx.get("dtype") == "float32" else 2
    theirs = {(c["batch"], c["context"]): c for c in tx.get("cases", [])}
    decode = []
    for c in jx.get("cases", []):
        batch, context = c["batch"], c["context"]
        row: dict[str, Any] = {
            "batch": batch,
            "context": context,
            "ours": {k: v for k, v in c.items() if k not in ("batch", "context", "split")},
        }
        step = c["step_ms"]
        if card is not None and config is not None:
            floor = floors.decode_floor(
                config, batch, context, card, dtype_bytes=dtype_bytes, cache_bytes=dtype_bytes
            )
            row["floor"] = floor
            row["fraction_of_floor"] = floor["floor_ms"] / step
        shared = jx.get("split", {}).get(str(batch))
        if "split" in c and shared:
            split = {**c["split"], **shared}
            parts_ms = (
                split["attention_ms"] + split["moe_ms"] + split["dense_mlp_ms"] + split["other_ms"]
            )
            split["unattributed_ms"] = step - parts_ms
            row["split"] = split
        t = theirs.get((batch, context))
        if t is not None:
            row["transformers"] = {k: v for k, v in t.items() if k not in ("batch", "context")}
            if "tokens_per_s" in t:
                row["speedup_vs_transformers"] = c["tokens_per_s"] / t["tokens_per_s"]
        decode.append(row)
    prefill: dict[str, Any] = {}
    if "prefill" in jx:
        ours = jx["prefill"]
        prefill = {"tokens": ours["tokens"], "ours": ours}
        if card is not None and config is not None:
            roof = floors.prefill_roofline(config, 1, ours["tokens"], card)
            prefill.update(roofline=roof, fraction_of_roofline=roof["roofline_ms"] / ours["ms"])
        t = theirs.get((1, ours["tokens"])) or tx.get("prefill")
        if t is not None and "prefill_ms" in t:
            prefill["transformers_ms"] = t["prefill_ms"]
    parity = tx.get("parity")
    return {
        "what": "model-bench",
        "machine": {
            "device": jx.get("device"),
            "platform": jx.get("platform"),
            "device_memory_gib": (jx.get("device_memory_bytes") or 0) / 2**30,
            "sm_count": jx.get("sm_count"),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "python": platform.python_version(),
            "jax": jx.get("jax_version"),
            "torch": tx.get("torch_version"),
            "transformers": tx.get("transformers_version"),
        },
        "config": {
            **dataclasses.asdict(s),
            "layers": layers,
            "backend": jx.get("backend"),
            "dtype": jx.get("dtype"),
            "time_budget_s": args.time_budget,
        },
        "model": {
            "name": s.model,
            "layers": layers,
            "params": jx.get("model", {}).get("params"),
            "weight_bytes": floors.weight_bytes(config, dtype_bytes) if config else None,
            "build_s": jx.get("model", {}).get("build_s"),
        },
        "card": None if card is None else card._asdict() | {"source": card_source},
        "card_note": card_source,
        "decode": decode,
        "prefill": prefill,
        "transformers": {
            k: tx[k]
            for k in ("model_class", "attn_implementation", "experts_implementation", "build_s")
            if k in tx
        },
        "parity": parity if parity is not None else ({} if s.torch else {"skipped": "--no-torch"}),
        "skipped": jx.get("skipped", []) + tx.get("skipped", []),
        "errors": jx.get("errors", []) + tx.get("errors", []),
        "method": METHOD,
    }


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _rate(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def decode_table(results: dict) -> str:
    lines = [
        "| B | context | ms/step | tokens/s | floor ms/step | floor tokens/s | % of floor "
        "| transformers tokens/s | ours ÷ transformers |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(results["decode"], key=lambda r: (r["context"], r["batch"])):
        floor = r.get("floor") or {}
        t = r.get("transformers") or {}
        theirs = _rate(t.get("tokens_per_s")) if "tokens_per_s" in t else t.get("error", "–")
        if len(theirs) > 40:
            theirs = theirs[:40] + "…"
        speedup = r.get("speedup_vs_transformers")
        lines.append(
            f"| {r['batch']} | {r['context']} | {_f(r['ours']['step_ms'])} "
            f"| {_rate(r['ours']['tokens_per_s'])} | {_f(floor.get('floor_ms'))} "
            f"| {_rate(floor.get('floor_tokens_per_s'))} "
            f"| {_f(100 * r['fraction_of_floor'], 0) if 'fraction_of_floor' in r else '–'} "
            f"| {theirs} | {_f(speedup, 1) + '×' if speedup else '–'} |"
        )
    return "\n".join(lines)


def split_table(results: dict) -> str:
    lines = [
        "| B | context | step ms | attention layers | mla_decode alone | MoE layers "
        "| dense MLP | other | unattributed |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(results["decode"], key=lambda r: (r["context"], r["batch"])):
        if "split" not in r:
            continue
        step, sp = r["ours"]["step_ms"], r["split"]
        cells = [
            f"{_f(sp[k])} ({_pct(sp[k], step):.0f}%)"
            for k in (
                "attention_ms",
                "mla_decode_ms",
                "moe_ms",
                "dense_mlp_ms",
                "other_ms",
                "unattributed_ms",
            )
        ]
        lines.append(f"| {r['batch']} | {r['context']} | {_f(step)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_markdown(results: dict) -> str:
    m, c, model = results["machine"], results["config"], results["model"]
    card = results["card"]
    params = model.get("params")
    head = [
        f"# Model benchmark: {model['name']}, {model['layers']} layers"
        + (f", {params / 1e9:.2f}B params" if params else ""),
        "",
        f"{m['device']} ({m['platform']}), {m['date']}; jax {m['jax']}, backend "
        f"{c['backend']}, {c['dtype']}; {c['steps']} decode steps a call, median of "
        f"{c['repeats']} calls."
        + (f" transformers {m['transformers']}, torch {m['torch']}." if m.get("torch") else ""),
        "",
        (
            f"Floors: {card['name']}, {card['hbm_bytes_per_s'] / 1e12:.2f} TB/s HBM, "
            f"{card['bf16_flops'] / 1e12:.0f} TFLOP/s bf16 ({card['source']})."
            if card
            else f"Floors: {results['card_note']}."
        ),
    ]
    if c["dry_run"]:
        head += ["", "**Dry run**: toy shapes on the CPU; the times mean nothing."]
    out = head + ["", "## Decode", "", decode_table(results)]
    if any("split" in r for r in results["decode"]):
        out += ["", "## Where a decode step's time goes (ms per step, % of the step)", ""]
        out += [split_table(results)]
    p = results["prefill"]
    if p:
        roof = p.get("roofline") or {}
        frac = p.get("fraction_of_roofline")
        out += [
            "",
            "## Prefill (one prompt)",
            "",
            "| tokens | ms | tokens/s | roofline ms | % of roofline | transformers ms |",
            "|---:|---:|---:|---:|---:|---:|",
            f"| {p['tokens']} | {_f(p['ours']['ms'], 1)} | {_rate(p['ours']['tokens_per_s'])} "
            f"| {_f(roof.get('roofline_ms'), 2)} | {_f(100 * frac, 1) if frac else '–'} "
            f"| {_f(p.get('transformers_ms'), 1)} |",
        ]
    out += ["", "## Parity with transformers", ""]
    parity = results["parity"]
    if not parity or "skipped" in parity or "error" in parity:
        out.append(f"- not run ({parity.get('skipped', 'no result') if parity else 'no result'})")
    for kind, r in parity.items():
        if isinstance(r, dict):
            out.append(
                f"- {kind}: 20 greedy tokens x 3 ragged prompts identical: "
                f"{r['tokens_identical']}; step logits max rel err "
                f"{r['logits_max_rel_err']:.2e}: {'PASS' if r['pass'] else 'FAIL'}"
            )
    t = results["transformers"]
    if t:
        out += [
            "",
            f"transformers' model: {t.get('model_class')}, attention "
            f"{t.get('attn_implementation')}, experts {t.get('experts_implementation')}.",
        ]
    out += ["", "## Method", ""]
    out += [f"- **{k}**: {v}." for k, v in results["method"].items()]
    if results["skipped"] or results["errors"]:
        out += ["", "## Not measured", ""]
        out += [f"- {w}: skipped (time budget)" for w in results["skipped"]]
        out += [f"- {e['what']}: {e['error']}" for e in results["errors"]]
    return "\n".join(out) + "\n"


def write_outputs(results: dict, logs: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULTS).write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / MARKDOWN).write_text(render_markdown(results))
    (out / LOG).write_text("\n".join(logs) + "\n")


def unwritable(out: Path) -> str | None:
    """Why ``--out`` cannot be written (under a file, or not writable), or None."""
    return unwritable_folder("--out", out)


class _Stopped(Exception):
    """SIGTERM: stop the phases, write what was measured."""


def _spawn(name: str, job: dict, folder: Path, *, dry_run: bool) -> dict:
    """Runs phase ``name`` in a new Python process; its part (what it measured)."""
    part, job_file = folder / f"{name}.json", folder / f"{name}-job.json"
    job_file.write_text(json.dumps({**job, "phase": name, "part": str(part)}))
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    # Each phase takes GPU memory as it needs it; the torch phase's JAX (weights drawn
    # a layer at a time, the tiny parity models) gives it back at once.
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if name == "torch":
        env["XLA_PYTHON_CLIENT_ALLOCATOR"] = "platform"
    if dry_run:  # on the CPU, as said, on a GPU machine too; its compilations shared
        env["JAX_PLATFORMS"] = "cpu"
        env["JAX_COMPILATION_CACHE_DIR"] = str(folder / "jax-cache")
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    code = (
        "import sys; from mla_jax.tools.model_bench import run_worker; "
        "sys.exit(run_worker(sys.argv[1]))"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(job_file)], env=env)
    data: dict[str, Any] = {"phase": name, "log": []}
    if part.exists():
        data = json.loads(part.read_text())
    if proc.returncode:
        data.setdefault("errors", []).append(
            {"what": f"{name} phase", "error": f"its process exited with status {proc.returncode}"}
        )
    return data


def _parser() -> Parser:
    p = Parser(COMMAND, description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument(
        "--model",
        choices=floors.MODELS,
        default="v2-lite",
        help="v2-lite: DeepSeek-V2-Lite's shapes; v3-stack: DeepSeek-V3's MoE layers, as "
        "many as fit --memory-gib, decode only (default v2-lite)",
    )
    p.add_argument(
        "--layers",
        type=positive_int,
        help=f"layers (default: {floors.V2_LITE_LAYERS} for v2-lite, as many as fit for "
        f"v3-stack; {DRY_LAYERS} in a dry run)",
    )
    p.add_argument(
        "--batch",
        type=positive_ints,
        help=f"batch sizes, run in this order (default {','.join(map(str, BATCHES))})",
    )
    p.add_argument(
        "--contexts",
        type=positive_ints,
        help="tokens in the cache, run in this order, each with every batch "
        f"(default {','.join(map(str, CONTEXTS))})",
    )
    p.add_argument("--steps", type=positive_int, help="decode steps a timed call (default 32)")
    p.add_argument("--repeats", type=positive_int, help="timed calls a measurement (default 3)")
    p.add_argument(
        "--prefill-len", type=positive_int, help="the prefilled prompt's tokens (default 4096)"
    )
    p.add_argument(
        "--torch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run transformers' model too, and the parity check (default on; --no-torch "
        "skips both)",
    )
    p.add_argument(
        "--split",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the step's parts alone (default on)",
    )
    p.add_argument(
        "--hbm-tbps", type=positive_float, help="HBM TB/s for the floors (default: the card's)"
    )
    p.add_argument(
        "--tflops",
        type=positive_float,
        help="dense bf16 TFLOP/s for the floors (default: the card's)",
    )
    p.add_argument(
        "--memory-gib",
        type=positive_float,
        help=f"v3-stack: the GiB its weights and caches may fill (default "
        f"{STACK_MEMORY_SHARE:.0%}% of the device's)",
    )
    p.add_argument(
        "--out",
        type=Path,
        help=f"folder for {RESULTS}, {MARKDOWN} and {LOG} (default {DEFAULT_OUT}; with "
        f"--dry-run, {DRY_RUN_OUT})",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="toy shapes on the CPU, xla backend: checks the tool on any machine",
    )
    p.add_argument(
        "--time-budget",
        type=positive_float,
        help="seconds; measurements after it are skipped and listed (default: none). "
        f"The JAX phase gets {JAX_SHARE:.0%}% of it when the torch phase follows",
    )
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    out = args.out or (DRY_RUN_OUT if args.dry_run else DEFAULT_OUT)
    if args.memory_gib is not None and args.model != "v3-stack":
        return fail(
            COMMAND, f"--memory-gib: got {args.memory_gib:g}, needed --model v3-stack with it"
        )
    problem = unwritable(out)
    if problem:
        return fail(COMMAND, problem)
    # Before JAX starts its GPU client here: this process only starts the phases.
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if not args.dry_run and jax.default_backend() != "gpu":
        return fail(COMMAND, f"no GPU visible to JAX ({jax.devices()}); use --dry-run on a CPU")
    preset: dict[str, Any] = DRY if args.dry_run else {}
    s = Settings(
        model=args.model,
        layers=args.layers,
        batches=args.batch or preset.get("batches", BATCHES),
        contexts=args.contexts or preset.get("contexts", CONTEXTS),
        steps=args.steps or preset.get("steps", 32),
        repeats=args.repeats or preset.get("repeats", 3),
        prefill_len=args.prefill_len or preset.get("prefill_len", 4096),
        torch=args.torch,
        split=args.split,
        dry_run=args.dry_run,
        memory_gib=args.memory_gib,
    )
    start = time.time()
    budget = args.time_budget
    logs = [f"python -m mla_jax {COMMAND} {' '.join(argv)}"]
    parts: dict[str, dict] = {}
    previous = signal.getsignal(signal.SIGTERM)

    def stop(*_):
        raise _Stopped

    signal.signal(signal.SIGTERM, stop)
    try:
        with tempfile.TemporaryDirectory(prefix="model-bench-") as tmp:
            job: dict[str, Any] = {"settings": dataclasses.asdict(s)}
            share = JAX_SHARE if s.torch else 1.0
            deadline = None if budget is None else start + budget * share
            try:
                parts["jax"] = _spawn(
                    "jax", {**job, "deadline": deadline}, Path(tmp), dry_run=s.dry_run
                )
                # Written now too: the JAX phase's numbers outlive a torch phase killed.
                with contextlib.suppress(OSError):  # reported by the last write
                    write_outputs(assemble(s, parts, args), logs + parts["jax"]["log"], out)
                layers = parts["jax"].get("layers")
                if s.torch and layers:
                    deadline = None if budget is None else start + budget
                    job.update(deadline=deadline, layers=layers)
                    parts["torch"] = _spawn("torch", job, Path(tmp), dry_run=s.dry_run)
            except _Stopped:
                logs.append("stopped (SIGTERM): the results hold what was measured")
                for name in ("jax", "torch"):
                    part = Path(tmp) / f"{name}.json"
                    if name not in parts and part.exists():
                        parts[name] = json.loads(part.read_text())
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    results = assemble(s, parts, args)
    for name in ("jax", "torch"):
        logs += parts.get(name, {}).get("log", [])
    table = decode_table(results)
    logs += ["", table, f"elapsed {time.time() - start:.0f} s"]
    try:
        write_outputs(results, logs, out)
    except OSError as e:
        return fail(COMMAND, f"--out: cannot write the outputs to {str(out)!r}: {e}")
    print(table)
    print(f"wrote {out / RESULTS}, {out / MARKDOWN}, {out / LOG} in {time.time() - start:.0f} s")
    failed = results["errors"] or any(
        isinstance(r, dict) and not r.get("pass", True) for r in results["parity"].values()
    )
    return 1 if failed else 0
