"""Launching Triton and Gluon kernels from JAX, through Triton's on-disk cache.

``launch`` binds a primitive whose CUDA lowering compiles the kernel with Triton's
own ``triton.compile`` for an explicit ``GPUTarget("cuda", cc, 32)`` and emits one
custom call that launches it with the array operands in order, each row-major, then
the results, then two null pointers, which Triton's kernels take as their global and
profiling scratch memory. A kernel that needs global scratch (device-side TMA
descriptors) gets it as one more result of the custom call, a byte array of
``global_scratch_size`` a program, unseen by the caller: its pointer follows the
kernel's own arguments, where the kernel reads its global scratch (the first null
then fills the profiling slot, the second goes unread). Profiling scratch (Proton
instrumentation) is refused.

The custom call is one of two, by what the machine has:

- ``mla_jax_cubin_launch`` (``FFI_TARGET``): an XLA FFI handler,
  ``_cubin_launch.cc``, that loads the build's cubin (which the call carries, base64)
  once a process and launches it with ``cuLaunchKernelEx``. The handler is built
  with the machine's C++ compiler (``$CXX``, else ``g++``, ``c++`` or ``clang++``) by
  the first process on the machine that lowers a kernel, into Triton's cache folder
  (``mla_jax_ffi/``), and reused by every later process.
- ``triton_kernel_call`` (``JAXLIB_TARGET``), jaxlib's, the one jax-triton emits, where
  no C++ compiler is found or the build fails (with a warning): a serialized
  ``TritonKernelCall`` with the kernel's PTX. jaxlib runs ptxas on it in every new
  process (about 1 s for the largest Gluon kernel on the H200), which the cubin route
  does not.

Why not jax-triton: it compiles in memory only, so every new process paid the
whole Triton pipeline (5-7 s for the two decode kernels on the H200) while lowering,
before JAX's persistent compilation cache could help; and it launches ``tl`` kernels
only, where Gluon kernels (``triton.experimental.gluon``) need ``GluonASTSource``.
Here the source kind follows the kernel: ``@gluon.jit`` functions compile from a
``GluonASTSource``, ``@triton.jit`` ones from an ``ASTSource``.

The compile cache
-----------------
Where: Triton's cache folder, ``triton.knobs.cache.dir``: ``$TRITON_CACHE_DIR`` when
set, else ``$TRITON_HOME/.triton/cache`` (``~/.triton/cache``). One sub-folder per
kernel build holds its IRs, PTX, cubin and metadata. ``import jax_triton`` sets
``TRITON_CACHE_DIR=""`` for its process; a build then goes to Triton's default
folder instead (the setting is swapped in for the compile and put back).

What keys it: Triton's own cache key, the hash of the Triton version (and the
source of its compiler), the kernel's source and that of every ``@jit`` function it
calls, the constexpr values, the argument types and alignment hints, the compile
options (``num_warps``, ``num_stages``...), the target (``cc``, ptxas version) and
the environment variables Triton says change a build. A change in any of them is a
new build; nothing stale is reused.

Finding a build through Triton's key costs about 0.3 s a process (the key hashes
all of libtriton), so an index beside the builds (``mla_jax_index/`` in the same
folder) names each build's sub-folder, one small file a build. Its key holds the same
things, cheaper: the Triton version, its Python files, libtriton's size and
modification time, the kernel's source key as Triton computes it (its source and
that of every ``@jit`` function it calls), the signature, constexprs and options,
the backend's hash for the target (which holds ptxas's version) and the environment
variables Triton says change a build. A build the index names is read from its
files without ``triton.compile``; one it does not (or whose files are gone) goes
through ``triton.compile`` as before and is indexed. Constexprs other than
``bool``, ``int``, ``float``, ``str`` and ``None`` skip the index.

How to clear it: delete the folder (``rm -rf ~/.triton/cache``, or the one
``TRITON_CACHE_DIR`` names); one build is the sub-folder holding its
``<kernel name>.json`` (``Build.folder``). ``TRITON_ALWAYS_COMPILE=1`` compiles
anew whatever is there. A lowered module carries the cubin itself, so an executable
(in JAX's persistent compilation cache, or exported) runs without the folder.

Within a process, builds are also memoised (``_build``, keyed by the kernel, its
constexprs, signature, options and capability), since lowering runs at every trace.
"""

from __future__ import annotations

import base64
import ctypes
import dataclasses
import functools
import hashlib
import json
import operator
import os
import shutil
import subprocess
import tempfile
import threading
import types
import warnings
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import triton
from jax.extend import core as jex_core
from jax.interpreters import mlir, xla
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

from mla_jax.decode import KERNEL_CALL_TARGETS

# The custom call that launches a build's cubin (``_cubin_launch.cc``), and jaxlib's
# (``jaxlib/gpu_triton.py`` registers it for CUDA), which takes PTX.
FFI_TARGET, JAXLIB_TARGET = KERNEL_CALL_TARGETS

POINTER_ALIGNMENT = 16
"""Every array operand is promised 16-byte aligned (XLA's buffers are): Triton needs
the hint to vectorise and pipeline loads, and jaxlib checks it at each launch."""

# Largest shared memory one block may opt in to, by compute capability (CUDA C++
# Programming Guide, "Technical Specifications per Compute Capability"). A build
# over it lowers fine and fails only at launch, so it is refused here.
MAX_SHARED_BYTES = {
    70: 98304,
    75: 65536,
    80: 166912,
    86: 101376,
    87: 166912,
    89: 101376,
    90: 232448,
    100: 232448,
    103: 232448,
    120: 101376,
}
MAX_TMEM_COLUMNS = 512  # Blackwell tensor memory; more makes Triton emit a trap

_GRID_LIMITS = (2**31 - 1, 65535, 65535)  # CUDA's grid dimensions x, y, z

_TRITON_TYPES = {
    "bool": "i1",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float64": "fp64",
    "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5",
    "float8_e4m3fnuz": "fp8e4b8",
    "float8_e5m2fnuz": "fp8e5b16",
}


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """Everything that decides a build apart from the target.

    ``signature`` holds the kernel's parameters in order, as Triton types: ``*bf16``
    for a pointer, ``i32`` for a scalar, ``constexpr`` for a compile-time value.
    ``constexprs`` holds ``(name, type name, value)``, the type name keeping ``True``,
    ``1`` and ``1.0`` apart in the in-process memo (they compare equal in Python).
    """

    kernel: JITFunction
    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[str, str, Any], ...]
    num_warps: int
    num_stages: int

    @property
    def pointer_indices(self) -> tuple[int, ...]:
        return tuple(i for i, (_, t) in enumerate(self.signature) if t.startswith("*"))


@dataclasses.dataclass(frozen=True)
class Build:
    """What a launch needs from one compiled kernel."""

    name: str
    num_warps: int
    num_ctas: int
    shared_bytes: int
    ptx: str  # what jaxlib's call takes
    cubin: bytes  # what the FFI handler loads
    folder: str  # the build's sub-folder of Triton's cache dir
    global_scratch_size: int  # bytes a program (0: none)
    global_scratch_align: int

    @functools.cached_property
    def cubin_base64(self) -> str:
        return base64.b64encode(self.cubin).decode()

    @functools.cached_property
    def cubin_hash(self) -> str:
        return hashlib.sha256(self.cubin).hexdigest()

    @property
    def scratch_align(self) -> int:
        """The alignment the global scratch needs (at least every array's)."""
        return max(POINTER_ALIGNMENT, self.global_scratch_align)

    def scratch_bytes(self, grid: tuple[int, int, int]) -> int:
        """The global scratch of a launch on ``grid``, as Triton's launcher sizes it."""
        return self.global_scratch_size * grid[0] * grid[1] * grid[2] * self.num_ctas


def triton_type(dtype: Any) -> str:
    """Triton's name for an array element type (``*`` + this is a pointer)."""
    name = jnp.dtype(dtype).name
    if name not in _TRITON_TYPES:
        raise TypeError(f"no Triton type for arrays of {name}")
    return _TRITON_TYPES[name]


def kernel_spec(
    kernel: JITFunction,
    runtime_types: Sequence[str],
    constexprs: Mapping[str, Any],
    *,
    num_warps: int,
    num_stages: int,
) -> KernelSpec:
    """The build of ``kernel`` whose non-constexpr parameters, in order, have
    ``runtime_types`` (``*fp32``, ``i32``...) and the others ``constexprs``."""
    if not isinstance(kernel, JITFunction):
        raise TypeError(
            f"kernel must be a @triton.jit or @gluon.jit function, not {type(kernel).__name__}"
            " (autotuners and heuristics are not supported: pass the chosen config)"
        )
    names = list(kernel.arg_names)
    unknown = sorted(set(constexprs) - set(names))
    if unknown:
        raise ValueError(f"{kernel.__name__} has no parameters {unknown}")
    annotated = {names[i] for i in kernel.constexprs}
    missing = [n for n in names if n in annotated and n not in constexprs]
    if missing:
        raise ValueError(f"{kernel.__name__}: no value for the constexpr parameters {missing}")
    runtime = [n for n in names if n not in constexprs]
    if len(runtime) != len(runtime_types):
        raise ValueError(
            f"{kernel.__name__} takes {len(runtime)} run-time arguments {runtime} "
            f"(inputs, then outputs), got {len(runtime_types)}"
        )
    types = dict(zip(runtime, runtime_types))
    return KernelSpec(
        kernel=kernel,
        signature=tuple((n, types.get(n, "constexpr")) for n in names),
        constexprs=tuple(
            (n, type(constexprs[n]).__name__, constexprs[n]) for n in names if n in constexprs
        ),
        num_warps=num_warps,
        num_stages=num_stages,
    )


def _source(spec: KernelSpec) -> ASTSource:
    """Triton's compile source: a ``GluonASTSource`` for a Gluon kernel."""
    source_cls: type[ASTSource] = ASTSource
    if spec.kernel.is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource

        source_cls = GluonASTSource
    aligned = [["tt.divisibility", POINTER_ALIGNMENT]]
    return source_cls(
        fn=spec.kernel,
        signature=dict(spec.signature),
        constexprs={n: v for n, _, v in spec.constexprs},
        attrs={(i,): aligned for i in spec.pointer_indices},
    )


_CACHE_DIR_LOCK = threading.Lock()
_INDEXABLE = (bool, int, float, str, type(None))


def _cache_dir() -> str:
    """Triton's cache folder, or its default one where the setting is empty."""
    return knobs.cache.dir or knobs.cache.get_triton_dir("cache")


@functools.lru_cache(maxsize=8)
def _environment_key(compute_capability: int) -> str:
    """What decides every build for ``compute_capability`` besides its spec (see the
    module docstring), once a process."""
    from triton.compiler.compiler import get_cache_invalidating_env_vars, make_backend

    digest = hashlib.sha256(triton.__version__.encode())
    root = Path(triton.__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    for lib in sorted((root / "_C").glob("libtriton*")):
        stat = lib.stat()
        digest.update(f"{lib.name} {stat.st_size} {stat.st_mtime_ns}".encode())
    digest.update(make_backend(GPUTarget("cuda", compute_capability, 32)).hash().encode())
    digest.update(repr(sorted(get_cache_invalidating_env_vars().items())).encode())
    return digest.hexdigest()


def _index_file(spec: KernelSpec, compute_capability: int) -> Path | None:
    """The index entry of ``spec``'s build, or None where the index does not apply."""
    if knobs.compilation.always_compile or not all(
        isinstance(v, _INDEXABLE) for _, _, v in spec.constexprs
    ):
        return None
    key = repr(
        (
            _environment_key(compute_capability),
            spec.kernel.cache_key,  # its source and every @jit function's it calls
            POINTER_ALIGNMENT,
            spec.signature,
            spec.constexprs,
            spec.num_warps,
            spec.num_stages,
            compute_capability,
        )
    )
    name = hashlib.sha256(key.encode()).hexdigest()
    return Path(_cache_dir()) / "mla_jax_index" / f"{name}.json"


def _indexed(index: Path) -> tuple[Any, str, bytes, str] | None:
    """The metadata, PTX, cubin and folder of the build ``index`` names, if all are
    there."""
    try:
        entry = json.loads(index.read_text())
        folder = Path(entry["folder"])
        metadata = json.loads((folder / f"{entry['name']}.json").read_text())
        ptx = (folder / f"{entry['name']}.ptx").read_text()
        cubin = (folder / f"{entry['name']}.cubin").read_bytes()
    except (OSError, ValueError, KeyError):
        return None
    return types.SimpleNamespace(**metadata), ptx, cubin, str(folder)


def _write_index(index: Path, name: str, folder: str) -> None:
    """Writes the entry whole or not at all (a concurrent reader sees either)."""
    index.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=index.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump({"name": name, "folder": folder}, f)
    os.replace(tmp, index)


def compile_kernel(spec: KernelSpec, compute_capability: int) -> Any:
    """``triton.compile`` of ``spec`` for CUDA ``compute_capability``: Triton's
    ``CompiledKernel`` (``.asm``, ``.metadata``, ``.metadata_group``: its files), from
    the disk cache when built before. Not memoised (``_build`` is)."""
    target = GPUTarget("cuda", compute_capability, 32)
    options = {"num_warps": spec.num_warps, "num_stages": spec.num_stages, "num_ctas": 1}
    if knobs.cache.dir:
        return triton.compile(_source(spec), target=target, options=options)
    # TRITON_CACHE_DIR="" (``import jax_triton`` sets it) leaves Triton nowhere to
    # write: use its default folder for this compile and put the setting back.
    with _CACHE_DIR_LOCK, knobs.cache.scope():
        knobs.cache.dir = _cache_dir()
        return triton.compile(_source(spec), target=target, options=options)


def check_resources(metadata: Any, compute_capability: int, name: str) -> None:
    """Refuses a build this route cannot run: one that needs profiling scratch memory
    (jaxlib passes a null pointer there), and shared or tensor memory past the
    device's limit, which would fail only at launch."""
    size = getattr(metadata, "profile_scratch_size", 0) or 0
    if size:
        raise ValueError(
            f"{name} needs {size} bytes of profile scratch memory (Proton instrumentation);"
            " the launch provides none: build it without"
        )
    shared = metadata.shared or 0
    limit = MAX_SHARED_BYTES.get(compute_capability)
    if limit is not None and shared > limit:
        raise ValueError(
            f"{name} needs {shared} bytes of shared memory; sm_{compute_capability} "
            f"allows {limit} a block (use smaller tiles or fewer stages)"
        )
    tmem = getattr(metadata, "tmem_size", 0) or 0
    if tmem > MAX_TMEM_COLUMNS:
        raise ValueError(f"{name} needs {tmem} tensor memory columns (at most {MAX_TMEM_COLUMNS})")


@functools.lru_cache(maxsize=256)
def _build(spec: KernelSpec, compute_capability: int) -> Build:
    """The checked build of ``spec``, once per process (lowering runs per trace):
    from the index when it names one, else from ``triton.compile``, then indexed."""
    index = _index_file(spec, compute_capability)
    found = _indexed(index) if index is not None else None
    if found is not None:
        meta, ptx, cubin, folder = found
    else:
        compiled = compile_kernel(spec, compute_capability)
        meta = compiled.metadata
        if "ptx" not in compiled.asm:
            raise RuntimeError(
                f"Triton's cache holds no PTX for {spec.kernel.__name__} "
                "(TRITON_STORE_BINARY_ONLY is set?): unset it, the launch needs both"
            )
        ptx, cubin = compiled.asm["ptx"], compiled.asm["cubin"]
        folder = os.path.dirname(
            next(p for f, p in compiled.metadata_group.items() if f.endswith(".json"))
        )
    check_resources(meta, compute_capability, spec.kernel.__name__)
    if index is not None and found is None:
        _write_index(index, meta.name, folder)
    return Build(
        name=meta.name,
        num_warps=meta.num_warps,
        num_ctas=meta.num_ctas,
        shared_bytes=meta.shared,
        ptx=ptx,
        cubin=cubin,
        folder=folder,
        global_scratch_size=getattr(meta, "global_scratch_size", 0) or 0,
        global_scratch_align=getattr(meta, "global_scratch_align", 1) or 1,
    )


def _gpu_triton() -> Any:
    """jaxlib's Triton call classes; they come with the CUDA plugin (jax-cuda12-plugin),
    which also lowers for CUDA on a machine without a GPU."""
    from jax._src.lib import gpu_triton

    if not hasattr(gpu_triton, "TritonKernelCall"):
        raise RuntimeError(
            "lowering Triton kernels for CUDA needs jaxlib's CUDA plugin: install "
            "jax[cuda12], or jax-cuda12-plugin at the jaxlib version to lower without a GPU"
        )
    return gpu_triton


def device_capability() -> int:
    """The CUDA compute capability of device 0 (e.g. 90), what a build targets when
    no ``compute_capability`` is given."""
    return int(_gpu_triton().get_compute_capability(0))


_HANDLER_SOURCE = Path(__file__).with_name("_cubin_launch.cc")
_HANDLER_FLAGS = ("-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility=hidden")


def find_cxx() -> str | None:
    """The C++ compiler the handler builds with: ``$CXX``, else the first of ``g++``,
    ``c++`` and ``clang++`` on the ``PATH``."""
    if os.environ.get("CXX"):
        return os.environ["CXX"]
    return next((p for c in ("g++", "c++", "clang++") if (p := shutil.which(c))), None)


def build_handler(cxx: str, folder: Path) -> Path:
    """The FFI handler (``_cubin_launch.cc``) built with ``cxx`` as a shared library in
    a sub-folder of ``folder`` keyed by its source, the compiler and the JAX, jaxlib
    and Triton versions; built only where that library is not there yet."""
    from importlib.metadata import version

    cuda_include = Path(triton.__file__).parent / "backends" / "nvidia" / "include"
    source = _HANDLER_SOURCE.read_bytes()
    versions = (cxx, _HANDLER_FLAGS, jax.__version__, version("jaxlib"), triton.__version__)
    key = hashlib.sha256(source + repr(versions).encode()).hexdigest()[:32]
    library = folder / key / "libmla_jax_cubin_launch.so"
    if library.exists():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=library.parent, suffix=".so.tmp")
    os.close(fd)
    # -Wno-return-type: XLA's FFI headers end some switch-covered functions without one.
    command = [cxx, *_HANDLER_FLAGS, "-Wno-return-type", f"-I{jax.ffi.include_dir()}",
               f"-I{cuda_include}", str(_HANDLER_SOURCE), "-o", tmp, "-ldl"]  # fmt: skip
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
        os.replace(tmp, library)  # whole or not at all: another process may be loading it
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return library


@functools.lru_cache(maxsize=1)
def kernel_call_target() -> str:
    """The custom call this process's launches lower to: ``FFI_TARGET`` once its
    handler is built (or found) and registered for CUDA, else ``JAXLIB_TARGET``, with a
    warning that says why and what it costs."""
    cxx = find_cxx()
    if cxx is None:
        reason = "no C++ compiler was found: install g++, or name one in CXX"
    else:
        try:
            library = build_handler(cxx, Path(_cache_dir()) / "mla_jax_ffi")
        except subprocess.CalledProcessError as e:
            reason = f"building its handler with {cxx} failed:\n{e.stderr[-2000:]}"
        except OSError as e:
            reason = f"building its handler with {cxx} failed: {e}"
        else:
            handler = ctypes.cdll.LoadLibrary(str(library)).MlaJaxCubinLaunch
            jax.ffi.register_ffi_target(FFI_TARGET, jax.ffi.pycapsule(handler), platform="CUDA")
            return FFI_TARGET
    warnings.warn(
        f"mla_jax launches its kernels through jaxlib's {JAXLIB_TARGET}, which runs ptxas "
        "on each kernel in every new process (about 1 s for the largest), because " + reason,
        RuntimeWarning,
        stacklevel=2,
    )
    return JAXLIB_TARGET


_call_p = jex_core.Primitive("mla_jax_triton_call")
_call_p.multiple_results = True
_call_p.def_impl(functools.partial(xla.apply_primitive, _call_p))


@_call_p.def_abstract_eval
def _abstract_eval(*_, out_shapes, **__):
    return [jax.core.ShapedArray(s.shape, s.dtype) for s in out_shapes]


def _jaxlib_call(
    build: Build, grid: tuple[int, int, int], cluster: int, params: int, cc: int, name: str
) -> dict[str, Any]:
    """The ``ffi_lowering`` keywords of jaxlib's ``triton_kernel_call`` of ``build``:
    its API version and its serialized call."""
    lib = _gpu_triton()
    # jaxlib launches a kernel of num_ctas > 1 as clusters of that many CTAs along x,
    # grid[0] clusters (cuLaunchKernelEx); the build itself is one CTA's program.
    kernel = lib.TritonKernel(
        build.name, build.num_warps, build.num_ctas * cluster, build.shared_bytes, build.ptx, "", cc
    )
    # jaxlib refuses a launch whose buffer is not aligned as Triton asks (XLA aligns
    # its buffers to at least 16 bytes, usually more); the scratch result is last.
    aligns = [POINTER_ALIGNMENT] * params
    if build.global_scratch_size:
        aligns[-1] = build.scratch_align
    arrays = [lib.create_array_parameter(0, a) for a in aligns]
    call = lib.TritonKernelCall(kernel, grid[0] // cluster, grid[1], grid[2], arrays)
    # Version 2 takes the opaque bytes as they are (jax annotates only str).
    return dict(api_version=2, backend_config=zlib.compress(call.to_proto(name, b"")))


def _lowering(
    ctx: mlir.LoweringRuleContext,
    *operands: Any,
    spec: KernelSpec,
    out_shapes: tuple[jax.ShapeDtypeStruct, ...],
    grid: tuple[int, int, int],
    aliases: tuple[tuple[int, int], ...],
    compute_capability: int | None,
    name: str,
    cluster: int,
) -> Sequence[Any]:
    cc = device_capability() if compute_capability is None else compute_capability
    build = _build(spec, cc)
    scratch = build.scratch_bytes(grid)
    if scratch:
        ctx = ctx.replace(avals_out=[*ctx.avals_out, jax.core.ShapedArray((scratch,), jnp.uint8)])
    target = kernel_call_target()
    if target == FFI_TARGET:
        rule = jax.ffi.ffi_lowering(FFI_TARGET, operand_output_aliases=dict(aliases))
        results = rule(
            ctx,
            *operands,
            cubin=build.cubin_base64,
            cubin_hash=build.cubin_hash,
            kernel=build.name,
            grid_x=grid[0],
            grid_y=grid[1],
            grid_z=grid[2],
            num_warps=build.num_warps,
            shared=build.shared_bytes,
            cluster=cluster,
            scratch_align=build.scratch_align if scratch else 0,
        )
    else:
        params = len(operands) + len(out_shapes) + (1 if scratch else 0)
        call = _jaxlib_call(build, grid, cluster, params, cc, name)
        rule = jax.ffi.ffi_lowering(target, operand_output_aliases=dict(aliases), **call)
        results = rule(ctx, *operands)
    return results[: len(out_shapes)]


mlir.register_lowering(_call_p, _lowering, platform="cuda")


def launch(
    kernel: JITFunction,
    inputs: Sequence[jax.Array],
    *,
    out_shapes: Sequence[jax.ShapeDtypeStruct],
    grid: Sequence[int],
    constexprs: Mapping[str, Any] | None = None,
    num_warps: int = 4,
    num_stages: int = 3,
    input_output_aliases: Mapping[int, int] | None = None,
    compute_capability: int | None = None,
    name: str | None = None,
    cluster: int = 1,
) -> tuple[jax.Array, ...]:
    """Calls a ``@triton.jit`` or ``@gluon.jit`` kernel on JAX arrays.

    The kernel's parameters that are not in ``constexprs`` receive, in order, the
    ``inputs`` (pointers to their row-major data) and then a pointer to each output.
    The kernel is compiled when the call is lowered for CUDA, from Triton's disk
    cache when it was built before (see the module docstring).

    Args:
      kernel: the JIT function; a Gluon one compiles as Gluon.
      inputs: the arrays (a run-time scalar is a one-element array).
      out_shapes: the outputs' shapes and dtypes.
      grid: up to three program counts (x, y, z).
      constexprs: values of the compile-time parameters (all ``tl.constexpr`` ones).
      num_warps, num_stages: Triton's compile options.
      input_output_aliases: ``{input index: output index}``; the output is the input's
        buffer, written in place (donate the input to avoid a copy).
      compute_capability: CUDA capability to build for, e.g. 90; None asks device 0
        at lowering.
      name: the call's name in jaxlib's call (default: the kernel's).
      cluster: CTAs of one thread-block cluster (sm_90 on): consecutive programs
        along x, ``grid[0]`` a multiple of it, run as one cluster (launched together,
        on one GPC, able to sync with ``barrier.cluster``). 1: no clusters.

    Returns:
      The outputs, one array per entry of ``out_shapes``.
    """
    out_shapes = tuple(jax.ShapeDtypeStruct(s.shape, s.dtype) for s in out_shapes)
    grid3 = tuple(operator.index(g) for g in grid) + (1,) * (3 - len(grid))
    if not 1 <= len(grid) <= 3 or any(not 0 <= g <= n for g, n in zip(grid3, _GRID_LIMITS)):
        raise ValueError(f"grid {tuple(grid)}: one to three ints within CUDA's {_GRID_LIMITS}")
    if cluster not in (1, 2, 4, 8) or grid3[0] % cluster:
        raise ValueError(
            f"cluster {cluster} with grid {tuple(grid)}: a cluster is 1, 2, 4 or 8 CTAs "
            "and grid[0] a multiple of it"
        )
    arrays = list(inputs)
    for i, x in enumerate(arrays):
        if not hasattr(x, "dtype") or not hasattr(x, "shape"):
            raise TypeError(f"input {i} is a {type(x).__name__}, not an array")
    types = ["*" + triton_type(x.dtype) for x in arrays]
    types += ["*" + triton_type(s.dtype) for s in out_shapes]
    spec = kernel_spec(
        kernel, types, dict(constexprs or {}), num_warps=num_warps, num_stages=num_stages
    )
    aliases = []
    for i, o in sorted((input_output_aliases or {}).items()):
        if not 0 <= i < len(arrays) or not 0 <= o < len(out_shapes):
            raise ValueError(f"alias {i} -> {o}: no such input or output")
        x, out = arrays[i], out_shapes[o]
        if (x.shape, x.dtype) != (out.shape, out.dtype):
            raise ValueError(f"alias {i} -> {o}: input {x.shape} {x.dtype} is not {out}")
        aliases.append((i, o))
    if len({o for _, o in aliases}) != len(aliases):
        raise ValueError(f"two inputs alias one output: {dict(input_output_aliases or {})}")
    return tuple(
        _call_p.bind(
            *arrays,
            spec=spec,
            out_shapes=out_shapes,
            grid=grid3,
            aliases=tuple(aliases),
            compute_capability=compute_capability,
            name=name or kernel.__name__,
            cluster=cluster,
        )
    )
