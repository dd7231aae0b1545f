"""The kernels XLA makes of a decode step on an H100 or H200, counted on the CPU.

XLA's GPU compiler runs without a GPU when the CUDA PJRT plugin is given the card to
compile for (a ``GpuTargetConfigProto``: its SMs, memory, bandwidth, compute
capability 9.0). ``scripts/dev`` installs the plugin into ``.venv/cuda-compile``, off
the tests' path. This script compiles model-bench's decode loop (``decode_loop``,
random weights) that way and reads the compiled module: each instruction of the
loop's body other than a parameter, tuple, bitcast or constant becomes one kernel
launch a step (a fusion, a cuBLAS or Triton GEMM, a jax-triton kernel, a copy).
GEMM tilings are XLA's defaults here (nothing to autotune on), the kernels the same.

    scripts/dev python scripts/step_kernels.py --batch 1 [--layers 27] [--layer]
        [--model v3-stack] [--card h200] [--memory]

Prints the launches a step, a MoE layer's (from one stage-1 launch to the next,
mid-stack) and with ``--layer`` that layer's kernels in launch order, each with its
output shape and the JAX op it came from. ``--memory``: XLA's buffer sizes for the
step (arguments, outputs, temporaries) and for drawing one layer's weights
(``init_layer``, what model-bench's ``build_params`` runs a layer at a time), against
the card's memory.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / ".venv" / "cuda-compile"


@dataclass(frozen=True)
class Target:
    """What XLA's GPU compiler reads of a card (the rest of its proto is defaults)."""

    name: str
    memory_bytes: int
    bandwidth: int  # bytes/s
    memory_clock_khz: int


TARGETS = {
    "h100": Target("NVIDIA H100 80GB HBM3", 84_942_979_072, 3_352_320_000_000, 2_619_000),
    "h200": Target("NVIDIA H200", 150_754_820_096, 4_800_000_000_000, 3_201_000),
}


def target_config(t: Target) -> str:
    """``t`` as a ``GpuTargetConfigProto`` in text format (an SXM Hopper: 132 SMs)."""
    return f"""
gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {t.bandwidth}
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: {t.memory_bytes}
  shared_memory_per_block_optin: 232448
  cuda_compute_capability {{ major: 9 minor: 0 }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 8 }}
device_description_str: "{t.name}"
"""


# Instructions of a compiled module that launch nothing.
FREE = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "after-all"}
INSTRUCTION = re.compile(r"\s*(?:ROOT )?%(\S+) = (.*?) ([a-z][a-z\-]*)\((.*)")
COMPUTATION = re.compile(r"^(?:ENTRY )?%(\S+) \(.*?\{\n(.*?)^\}", re.S | re.M)


@dataclass(frozen=True)
class Kernel:
    name: str
    op: str  # the HLO opcode: fusion, custom-call, copy...
    shape: str
    source: str  # the JAX op, from the instruction's metadata


def loop_kernels(hlo: str) -> list[Kernel]:
    """The launches of one trip of the entry computation's ``while`` (the decode
    loop's ``lax.scan``), in the order of the compiled schedule; nested control flow's
    bodies are counted once each."""
    computations = {m.group(1): m.group(2) for m in COMPUTATION.finditer(hlo)}
    entry = re.search(r"^ENTRY %(\S+) ", hlo, re.M)
    if entry is None:
        raise ValueError("no ENTRY computation in the compiled module")
    body = re.search(r"body=%([^,\s]+)", computations[entry.group(1)])
    if body is None:
        raise ValueError("the compiled step has no while loop")
    out: list[Kernel] = []

    def walk(name: str) -> None:
        for line in computations[name].splitlines():
            m = INSTRUCTION.match(line)
            if m is None or m.group(3) in FREE:
                continue
            nested = re.findall(r"(?:body|branch_computations=\{|to_apply)=%([^,\s}]+)", line)
            if m.group(3) in ("while", "conditional", "call") and nested:
                for sub in nested:
                    walk(sub)
                continue
            op = re.search(r'op_name="([^"]+)"', line)
            source = "/".join(op.group(1).split("/")[-2:]) if op else ""
            out.append(Kernel(m.group(1), m.group(3), m.group(2), source))

    walk(body.group(1))
    return out


def layer_kernels(kernels: list[Kernel], buffer: str) -> list[Kernel]:
    """A layer's launches mid-stack: from a stage-1 launch (the custom call whose
    output, or its first, is the logits buffer, of HLO shape ``buffer``) to the next:
    the attention's second half, the MLP or MoE, the next layer's first half. The
    first and last layers' neighbours compile a little differently: from 4 layers on,
    each layer more adds this many to the step."""
    stage1 = [
        i
        for i, k in enumerate(kernels)
        if k.op == "custom-call" and k.shape.lstrip("(").startswith(buffer + "{")
    ]
    if len(stage1) < 4:
        raise ValueError("fewer than four stage-1 launches: give --layers 4 or more")
    mid = len(stage1) // 2
    return kernels[stage1[mid] : stage1[mid + 1]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="v2-lite", choices=("v2-lite", "v3-stack"))
    p.add_argument("--layers", type=int, default=27)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--backend", default="triton", choices=("triton", "xla"))
    p.add_argument("--card", default="h100", choices=sorted(TARGETS))
    p.add_argument("--layer", action="store_true", help="one layer's kernels in order")
    p.add_argument("--memory", action="store_true", help="XLA's buffer sizes")
    p.add_argument("--hlo", type=Path, help="write the compiled module's text here")
    a = p.parse_args()

    if PLUGIN.is_dir():
        sys.path.insert(0, str(PLUGIN))
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    from mla_jax.deepseek.generate import decode_loop, new_decode_state
    from mla_jax.deepseek.model import init_layer, init_params
    from mla_jax.tools import model_bench as mb

    target = TARGETS[a.card]
    try:
        topology = topologies.get_topology_desc(
            platform="cuda", target_config=target_config(target), topology="1x1x1"
        )
    except (NotImplementedError, RuntimeError) as e:
        sys.exit(
            f"no CUDA PJRT plugin to compile with ({e}); scripts/dev installs it into {PLUGIN}"
        )
    on_card = SingleDeviceSharding(topology.devices[0])

    def abstract(tree):
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=on_card), tree
        )

    config = mb.config_for(a.model, a.layers, False)
    dtype = jnp.bfloat16
    params = abstract(jax.eval_shape(lambda: init_params(config, mb.model_key(), dtype)))
    state = abstract(
        jax.eval_shape(
            lambda: new_decode_state(
                config,
                a.batch,
                a.context + a.steps,
                page_size=mb.PAGE_SIZE,
                dtype=dtype,
                sm_count=132,
            )
        )
    )
    logits = jax.ShapeDtypeStruct((a.batch, config.vocab_size), jnp.float32, sharding=on_card)
    key = abstract(jax.eval_shape(lambda: jax.random.key(0)))
    compiled = (
        decode_loop.trace(
            params,
            config,
            logits,
            state,
            key,
            num_steps=a.steps,
            temperature=0.0,
            top_k=None,
            eos_id=None,
            backend=a.backend,
            return_logits=False,
            compute_capability=90,
        )
        .lower(lowering_platforms=("cuda",))
        .compile()
    )
    hlo = compiled.as_text()
    if a.hlo:
        a.hlo.write_text(hlo)
    kernels = loop_kernels(hlo)
    print(
        f"{a.model} B={a.batch} context={a.context} layers={a.layers} backend={a.backend}"
        f" for {target.name}"
    )
    held = compiled.memory_analysis().argument_size_in_bytes
    if held > target.memory_bytes:
        # XLA's scheduler then recomputes values (a GEMM twice, `.remat` kernels) to
        # save memory the step could never have: counts unlike the card's.
        print(f"warning: the step's arguments ({held / 2**30:.1f} GiB) do not fit the card")
    print(f"kernel launches a step: {len(kernels)}")
    if a.layers >= 4:
        data = state.logits_buffer.data
        layer = layer_kernels(kernels, f"f32[{','.join(map(str, data.shape))}]")
        print(f"a MoE layer (stage 1 to stage 1): {len(layer)}")
        if a.layer:
            for k in layer:
                print(f"  {k.op:11s} {k.name[:36]:36s} {k.shape[:40]:40s} {k.source}")
    if a.memory:
        gib = 2.0**-30

        def sizes(what: str, c) -> None:
            m = c.memory_analysis()
            print(
                f"{what}: arguments {m.argument_size_in_bytes * gib:.2f} GiB, outputs"
                f" {m.output_size_in_bytes * gib:.2f} (aliased {m.alias_size_in_bytes * gib:.2f}),"
                f" temporaries {m.temp_size_in_bytes * gib:.2f} GiB;"
                f" the card has {target.memory_bytes * gib:.1f} GiB"
            )

        sizes("decode step", compiled)
        draw = jax.jit(init_layer, static_argnums=(0, 2), static_argnames="moe")
        moe = config.is_moe_layer(config.num_hidden_layers - 1)
        sizes(
            "drawing a layer",
            draw.trace(config, abstract(jax.eval_shape(mb.model_key)), dtype, moe=moe)
            .lower(lowering_platforms=("cuda",))
            .compile(),
        )


if __name__ == "__main__":
    main()
