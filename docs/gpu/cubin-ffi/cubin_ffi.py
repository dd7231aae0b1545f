"""Prototype: mla_jax's kernels launched from the cubin in Triton's cache folder
through an XLA FFI handler (``cubin_launch.cc``), instead of jaxlib's
``triton_kernel_call``, which takes the PTX and runs ptxas on it in every process.

``install(library)`` registers the handler for CUDA and replaces the CUDA lowering of
``mla_jax._launch``'s primitive; calls lowered after it use the FFI route. Not part of
the library: an experiment for the first call in a new process (see README.md).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.interpreters import mlir

from mla_jax import _launch

TARGET = "mla_jax_cubin_launch"
HERE = Path(__file__).parent


def build(out: Path) -> Path:
    """Compiles ``cubin_launch.cc`` into ``out`` (a shared library) with g++."""
    import triton

    cuda_include = Path(triton.__file__).parent / "backends" / "nvidia" / "include"
    cmd = [
        "g++", "-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility=hidden",
        "-Wno-return-type", f"-I{jax.ffi.include_dir()}", f"-I{cuda_include}",
        str(HERE / "cubin_launch.cc"), "-o", str(out), "-ldl",
    ]  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(cmd, check=True)
    return out


def _lowering(
    ctx: mlir.LoweringRuleContext,
    *operands: Any,
    spec: _launch.KernelSpec,
    out_shapes: tuple[jax.ShapeDtypeStruct, ...],
    grid: tuple[int, int, int],
    scalars: tuple[tuple[int, str, Any], ...],
    aliases: tuple[tuple[int, int], ...],
    compute_capability: int | None,
    name: str,  # noqa: ARG001 (jaxlib's call names itself; the FFI call needs no name)
    cluster: int,
) -> Any:
    if scalars:
        raise NotImplementedError("the cubin prototype passes arrays only")
    cc = _launch.device_capability() if compute_capability is None else compute_capability
    build_ = _launch._build(spec, cc)
    cubin = os.path.join(build_.folder, f"{build_.name}.cubin")
    if not os.path.exists(cubin):
        raise RuntimeError(f"no cubin at {cubin}")
    scratch = build_.scratch_bytes(grid)
    if scratch:
        ctx = ctx.replace(avals_out=[*ctx.avals_out, jax.core.ShapedArray((scratch,), jnp.uint8)])
    rule = jax.ffi.ffi_lowering(TARGET, operand_output_aliases=dict(aliases))
    results = rule(
        ctx,
        *operands,
        cubin=cubin,
        kernel=build_.name,
        grid_x=grid[0],
        grid_y=grid[1],
        grid_z=grid[2],
        num_warps=build_.num_warps,
        shared=build_.shared_bytes,
        cluster=cluster,
    )
    return results[: len(out_shapes)]


def install(library: Path) -> None:
    """Registers the handler in ``library`` and lowers ``_launch``'s calls to it."""
    lib = ctypes.cdll.LoadLibrary(str(library))
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.MlaJaxCubinLaunch), platform="CUDA")
    mlir.register_lowering(_launch._call_p, _lowering, platform="cuda")


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))
