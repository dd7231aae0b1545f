"""Where a V2-Lite decode step's time goes at small B, kernel by kernel (device call 8).

    python step_profile.py --batch 1 --context 1024 [--layers 27] [--steps 16]
        [--no-moe] [--einsum] [--layer] [--prefill N]

Builds model-bench's random V2-Lite model (bf16, the triton backend), then for the
whole step (``decode_loop``) and for the MoE layers alone (``_ffn_steps``): the wall
time a step (median of 3 calls), and from one more call under the JAX profiler the
kernels a step launches, the time some kernel was running (busy), and the costliest
kernels with their launches a step and mean time (``--layer``: then one layer's
kernels in launch order, each with the idle time before it). Wall minus busy is the
time the GPU sat idle between kernels. ``--no-moe`` profiles the step only;
``--einsum`` runs the projections as plain ``jnp.einsum`` instead of
``mla_jax.layer.project`` (device call 13: against
XLA_FLAGS=--xla_gpu_enable_dot_strength_reduction=false). ``--prefill N`` profiles one
N-token prompt's prefill (model-bench's) instead of the decode step, its 60 costliest
kernels and its 12 longest gaps between kernels.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax.buffers import gpu_sm_count
from mla_jax.deepseek.generate import decode_loop
from mla_jax.tools import model_bench as mb
from mla_jax.tools.bench import GPU_PLANE_PREFIX, STREAM_LINE_PREFIX


def kernels(run) -> tuple[int, dict[str, list[int]], list[tuple[int, str, str]], list]:
    """(busy ns, {kernel: [durations ns]}, gaps, spans) of ``run()`` under the
    profiler; gaps: ``(ns, kernel before, kernel after)`` for each stretch between
    kernels, the longest first; spans: ``(start ns, end ns, kernel)`` in launch order."""
    from jax.profiler import ProfileData

    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder)
        try:
            run()
        finally:
            jax.profiler.stop_trace()
        planes = ProfileData.from_file(str(sorted(Path(folder).rglob("*.xplane.pb"))[-1])).planes
        spans, each = [], collections.defaultdict(list)
        for plane in planes:
            if not plane.name.startswith(GPU_PLANE_PREFIX):
                continue
            for line in plane.lines:
                if line.name.startswith(STREAM_LINE_PREFIX):
                    for e in line.events:
                        spans.append((e.start_ns, e.end_ns, e.name))
                        each[e.name].append(e.end_ns - e.start_ns)
    busy, reach, last, gaps = 0, None, "", []
    for start, end, name in sorted(spans):
        if reach is not None and start > reach:
            gaps.append((start - reach, last, name))
        if reach is None or start > reach:
            busy, reach, last = busy + end - start, end, name
        elif end > reach:
            busy, reach, last = busy + end - reach, end, name
    return busy, each, sorted(gaps, reverse=True), sorted(spans)


def one_layer(spans: list, marker: str = "mla_decode_stage1") -> None:
    """The kernels from one ``marker`` launch to the next, mid-run, in launch order:
    a layer's cycle (its attention's second half, its MLP or MoE, the next layer's
    first half), each with its start, its time and the idle time before it. The
    cycle after the run's middle launch: with an even step count and 27 layers the
    middle launch is a step's first layer (V2-Lite's dense one), the next a MoE's."""
    marks = [i for i, (_, _, name) in enumerate(spans) if marker in name]
    if len(marks) < 4:
        print(f"  one layer: fewer than 4 launches of {marker}")
        return
    first, last = marks[len(marks) // 2 + 1], marks[len(marks) // 2 + 2]
    t0, busy, idle = spans[first][0], 0, 0
    print(f"  one layer in launch order ({last - first} launches; us from the first):")
    for i in range(first, last):
        start, end, name = spans[i]
        gap = start - spans[i - 1][1]
        busy, idle = busy + end - start, idle + max(gap, 0)
        print(
            f"  {(start - t0) / 1e3:8.2f} {(end - start) / 1e3:7.2f} us "
            f"(idle before {max(gap, 0) / 1e3:5.2f})  {name[:90]}"
        )
    print(f"  one layer: {busy / 1e3:.1f} us of kernels, {idle / 1e3:.1f} us idle between them")


def report(
    name: str, call, steps: int, top: int = 25, gap_rows: int = 0, layer: bool = False
) -> None:
    call()  # compile
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        call()
        walls.append(time.perf_counter() - start)
    wall = statistics.median(walls) / steps * 1e3
    busy, each, gaps, spans = kernels(call)
    launches = sum(len(d) for d in each.values()) / steps
    between = sum(g for g, _, _ in gaps) / 1e6 / steps
    print(
        f"{name}: wall {wall:.3f} ms/step, kernels busy {busy / 1e6 / steps:.3f} ms/step, "
        f"{launches:.0f} kernel launches/step, idle {wall - busy / 1e6 / steps:.3f} ms/step "
        f"({between:.3f} between kernels, the rest before the first and after the last)"
    )
    for g, before, after in gaps[:gap_rows]:
        print(f"  gap {g / 1e3:8.1f} us  after {before[:50]}  before {after[:50]}")
    rows = sorted(each.items(), key=lambda kv: -sum(kv[1]))
    for k, d in rows[:top]:
        print(
            f"  {sum(d) / 1e6 / steps:8.4f} ms/step {len(d) / steps:6.1f}/step "
            f"{np.mean(d) / 1e3:8.2f} us  {k[:110]}"
        )
    if layer:
        one_layer(spans)


def prefill(params, config, length: int, backend: str) -> None:
    env = {"dtype": jnp.bfloat16, "sm_count": gpu_sm_count(), "backend": backend}
    call = mb.prefill_call(params, config, length, env)
    print(f"prefill {length} tokens, layers={config.num_hidden_layers}")
    report("prefill", call, 1, top=60, gap_rows=12)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--layers", type=int, default=27)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--backend", default="triton", help="xla: to check the script on a CPU")
    p.add_argument("--moe", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--einsum", action="store_true", help="projections as plain jnp.einsum")
    p.add_argument("--prefill", type=int, default=0, help="profile an N-token prefill")
    p.add_argument("--layer", action="store_true", help="one layer's kernels in order")
    a = p.parse_args()
    if a.einsum:
        import mla_jax.deepseek.model
        import mla_jax.layer

        def einsum(spec, x, w, **kw):
            return jnp.einsum(spec, x, w, **kw)

        mla_jax.layer.project = mla_jax.deepseek.model.project = einsum
    config = mb.config_for("v2-lite", a.layers, False)
    params = mb.build_params(config, jnp.bfloat16)
    if a.prefill:
        prefill(params, config, a.prefill, a.backend)
        return
    state = mb.filled_state(config, a.batch, a.context, a.steps, jnp.bfloat16, gpu_sm_count())
    logits = jax.random.normal(jax.random.key(7), (a.batch, config.vocab_size), jnp.float32)
    box = [state]

    def decode():
        s = box[0]._replace(positions=jnp.full(a.batch, a.context, jnp.int32))
        out = decode_loop(
            params,
            config,
            logits,
            s,
            jax.random.key(0),
            num_steps=a.steps,
            temperature=0.0,
            top_k=None,
            eos_id=None,
            backend=a.backend,
            return_logits=False,
        )
        np.asarray(out.tokens)
        box[0] = jax.block_until_ready(out.state)

    h = mb._hidden(config, a.batch, jnp.bfloat16, 12)

    def moe():
        np.asarray(mb._ffn_steps(params, config, h, steps=a.steps, moe=True, backend=a.backend))

    print(f"B={a.batch} context={a.context} layers={a.layers} steps={a.steps}")
    report("decode step", decode, a.steps, layer=a.layer)
    if a.moe:
        report("MoE layers", moe, a.steps)


if __name__ == "__main__":
    main()
