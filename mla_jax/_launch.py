"""Launching Triton and Gluon kernels from JAX: ``jax_triton.triton_call``, lowered to
jaxlib's ``triton_kernel_call_ffi`` with the kernel's cubin in the call.

``launch`` is the one place a kernel of this package is called. It checks the call,
then calls ``jax_triton.triton_call``, which binds jax-triton's primitive: its
abstract evaluation, its refusal of ``grad`` and ``vmap``, and its lowering rule for
every ``triton_call`` but ours are jax-triton's own.

Two things jax-triton 0.3.1 does not do, so ``launch`` marks its calls (it asks for
``KERNEL_CALL_TARGET`` with ``LAUNCH_METADATA``) and this module registers, on CUDA, a
lowering rule that takes those calls and passes every other ``triton_call`` in the
process to jax-triton's rule unchanged:

- It compiles ``@triton.jit`` kernels in memory only, and no ``@gluon.jit`` kernel:
  a Gluon kernel needs ``GluonASTSource`` and its own passes. Here a build comes from
  ``triton.compile`` on the kernel's kind of source, through Triton's disk cache and
  an index beside it (below), so a new process compiles nothing it built before.
- It emits jaxlib's legacy ``triton_kernel_call``, which carries PTX that jaxlib
  compiles with ptxas in every new process (about 1 s for the largest kernel).
  Here the call is jaxlib's typed FFI ``triton_kernel_call_ffi`` (command-buffer
  compatible), whose serialized ``TritonKernelCall`` carries the PTX and, as its
  kernel's ``module_image``, the cubin: jaxlib >= 0.11.2 loads the cubin and runs no
  ptxas; an older jaxlib ignores the field and compiles the PTX. jaxlib's Python
  binding cannot set that field, so it is added to the serialized message (plain
  protobuf) here.

The rule checks what jax-triton binds: the module refuses a jax-triton other than
``JAX_TRITON_VERSION`` and a lowering rule whose parameters are not the ones it reads,
naming the version to install. Both go once a jax-triton release compiles Gluon
kernels with Gluon's passes, emits the FFI call with a cubin and runs on this
package's jax and triton.

The call holds the array operands in order, each row-major, then the results, then
two null pointers, which Triton's kernels take as their global and profiling scratch
memory. A kernel that needs global scratch (device-side TMA descriptors) gets it as
one more result, a byte array of ``global_scratch_size`` a program, unseen by the
caller: its pointer follows the kernel's own arguments, where the kernel reads its
global scratch (the first null then fills the profiling slot, the second goes
unread). Profiling scratch (Proton instrumentation) is refused.

The compile cache
-----------------
Where: Triton's cache folder, ``triton.knobs.cache.dir``: ``$TRITON_CACHE_DIR`` when
set, else ``$TRITON_HOME/.triton/cache`` (``~/.triton/cache``). One sub-folder per
kernel build holds its IRs, PTX, cubin and metadata. ``import jax_triton`` sets
``TRITON_CACHE_DIR=""``; this module puts back the value the process had before it
imported jax-triton, and where the setting is empty (jax-triton was imported first)
a build goes to Triton's default folder (the setting is swapped in for the compile
and put back).

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
that of every ``@jit`` function it calls), the signature, constexprs and options
(ptxas's among them), the backend's hash for the target (which holds ptxas's
version) and the environment variables Triton says change a build. A build the
index names is read from its files without ``triton.compile``; one it does not (or
whose files are gone) goes through ``triton.compile`` as before and is indexed.
Constexprs other than ``bool``, ``int``, ``float``, ``str`` and ``None`` skip the
index.

How to clear it: delete the folder (``rm -rf ~/.triton/cache``, or the one
``TRITON_CACHE_DIR`` names); one build is the sub-folder holding its
``<kernel name>.json`` (``Build.folder``). ``TRITON_ALWAYS_COMPILE=1`` compiles
anew whatever is there. A lowered module carries the cubin itself, so an executable
(in JAX's persistent compilation cache, or exported) runs without the folder.

Within a process, builds are also memoised (``_build``, keyed by the kernel, its
constexprs, signature, options and capability), since lowering runs at every trace.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import operator
import os
import tempfile
import threading
import types
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import triton
from jax.extend.mlir import ir
from jax.interpreters import mlir
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

from mla_jax._target import KERNEL_CALL_TARGET


def _import_jax_triton() -> types.ModuleType:
    """``jax_triton``, with ``TRITON_CACHE_DIR`` as it was before the import (which
    sets it to ""): Triton's disk cache is where builds are kept here."""
    setting = os.environ.get("TRITON_CACHE_DIR")
    import jax_triton

    if setting is None:
        os.environ.pop("TRITON_CACHE_DIR", None)
    else:
        os.environ["TRITON_CACHE_DIR"] = setting
    return jax_triton


jt = _import_jax_triton()
_jt = jt.triton_lib

JAX_TRITON_VERSION = "0.3.1"
"""The jax-triton release whose lowering rule ``_lowering`` stands beside."""

LAUNCH_METADATA = b"mla_jax"
"""The ``serialized_metadata`` that marks ``launch``'s calls, whose lowering is
``_lowering``'s; jaxlib keeps it in the serialized call, unread."""

# The parameters of jax-triton's lowering rule, as 0.3.1 binds them; ``_lowering``
# reads them by these names, and a release that changes them is refused.
_JAX_TRITON_RULE_PARAMETERS = (
    "backend_init_func",
    "ctx",
    "array_args",
    "fn",
    "scalar_args",
    "name",
    "custom_call_target_name",
    "out_shapes",
    "grid",
    "num_warps",
    "num_stages",
    "num_ctas",
    "compute_capability",
    "enable_fp_fusion",
    "input_output_aliases",
    "zeroed_outputs",
    "debug",
    "serialized_metadata",
    "metaparams",
)


def _jax_triton_rule() -> Callable[..., Sequence[Any]]:
    """jax-triton's CUDA lowering rule, once the installed release is checked to be
    the one ``_lowering`` is written for."""
    parameters = tuple(inspect.signature(_jt.triton_kernel_call_lowering).parameters)
    if jt.__version__ != JAX_TRITON_VERSION or parameters != _JAX_TRITON_RULE_PARAMETERS:
        found = jt.__version__
        if jt.__version__ == JAX_TRITON_VERSION:
            found += " with other lowering parameters"
        raise ImportError(
            f"mla_jax's Triton backend needs jax-triton {JAX_TRITON_VERSION}, found {found}"
            f": pip install jax-triton=={JAX_TRITON_VERSION}"
        )
    return functools.partial(_jt.triton_kernel_call_lowering, _jt.get_cuda_backend)


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
    ptx: str  # what a jaxlib before 0.11.2 compiles
    cubin: bytes  # what jaxlib loads from 0.11.2 on
    folder: str  # the build's sub-folder of Triton's cache dir
    global_scratch_size: int  # bytes a program (0: none)
    global_scratch_align: int

    @functools.cached_property
    def cubin_sha256(self) -> str:
        """Hashed once a build: every lowering of a call to it names the hash."""
        return hashlib.sha256(self.cubin).hexdigest()

    @property
    def scratch_align(self) -> int:
        """The alignment the global scratch needs (at least every array's)."""
        return max(POINTER_ALIGNMENT, self.global_scratch_align)

    def scratch_bytes(self, grid: tuple[int, int, int]) -> int:
        """The global scratch of a launch on ``grid``, as Triton's launcher sizes it."""
        return self.global_scratch_size * grid[0] * grid[1] * grid[2] * self.num_ctas


def pointer_type(dtype: Any) -> str:
    """Triton's type of a pointer to an array of ``dtype`` (``*bf16``...), as jax-triton
    spells it."""
    try:
        return _jt.get_triton_type(jax.core.ShapedArray((), jnp.dtype(dtype)))
    except KeyError:
        raise TypeError(f"no Triton type for arrays of {jnp.dtype(dtype).name}") from None


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
            ptxas_options(),
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
    options = {
        "num_warps": spec.num_warps,
        "num_stages": spec.num_stages,
        "num_ctas": 1,
        "ptx_options": ptxas_options(),
    }
    if knobs.cache.dir:
        return triton.compile(_source(spec), target=target, options=options)
    # TRITON_CACHE_DIR="" (``import jax_triton`` sets it) leaves Triton nowhere to
    # write: use its default folder for this compile and put the setting back.
    with _CACHE_DIR_LOCK, knobs.cache.scope():
        knobs.cache.dir = _cache_dir()
        return triton.compile(_source(spec), target=target, options=options)


def ptxas_options() -> str:
    """ptxas's options for a build: ``PTXAS_OPTIONS`` (Triton's setting), then
    ``-suppress-debug-info``. Triton passes ``-lineinfo``, so a cubin would carry its
    line table, three quarters of its bytes; jaxlib copies and hashes the whole
    serialized call, cubin included, at every launch. Without the table ptxas emits
    the same instructions and the call is a quarter the size; a profiler then maps
    instructions to no source line (the build's PTX in its cache folder still has
    them)."""
    return " ".join(filter(None, [knobs.nvidia.ptxas_options, "-suppress-debug-info"]))


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


def device_capability() -> int:
    """The CUDA compute capability of device 0 (e.g. 90), what a build targets when
    no ``compute_capability`` is given."""
    return int(_jt.triton_kernel_call_lib.get_compute_capability(0))


# ---------------------------------------------------------------- the kernel call


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        value, shift, i = value | (byte & 0x7F) << shift, shift + 7, i + 1
        if byte < 0x80:
            return value, i


def _field(number: int, value: int | bytes) -> bytes:
    """One protobuf field: a varint, or length-delimited bytes."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _edit_field(message: bytes, number: int, edit: Callable[[bytes], bytes]) -> bytes:
    """``message`` with its length-delimited field ``number`` replaced by ``edit`` of
    it, every other field as it was."""
    out, i = bytearray(), 0
    while i < len(message):
        start = i
        key, i = _read_varint(message, i)
        wire = key & 7
        if wire == 0:
            _, i = _read_varint(message, i)
        elif wire == 2:
            size, i = _read_varint(message, i)
            i += size
            if key >> 3 == number:
                out += _field(number, edit(message[i - size : i]))
                continue
        elif wire in (1, 5):  # fixed 64 / 32 bits
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"protobuf wire type {wire} in a Triton kernel call")
        out += message[start:i]
    return bytes(out)


def _jaxlib_loads_module_image() -> bool:
    """Whether the installed jaxlib launches a kernel's ``module_image`` (0.11.2 on)."""
    from jaxlib.version import __version_info__

    return tuple(__version_info__[:3]) >= (0, 11, 2)


JAXLIB_LOADS_MODULE_IMAGE = _jaxlib_loads_module_image()


def call_ptx(build: Build) -> str:
    """The PTX field of ``build``'s call: the PTX itself for a jaxlib that compiles it;
    for one that loads the cubin (``JAXLIB_LOADS_MODULE_IMAGE``), a one-line comment
    naming the cubin's hash. jaxlib copies and hashes the whole serialized call at
    every launch to find it in its cache, and the PTX, which such a jaxlib never reads,
    was half of it. The field stays unique to the build: jaxlib keys the modules it
    loaded by kernel name, shared memory, PTX and capability."""
    if not JAXLIB_LOADS_MODULE_IMAGE:
        return build.ptx
    return f"// {build.name}: cubin sha256 {build.cubin_sha256}\n"


def with_module_image(call: bytes, build: Build) -> bytes:
    """jaxlib's serialized ``TritonAnyKernelCall`` with ``build``'s cubin as its
    kernel's ``module_image`` (jaxlib/gpu/triton.proto: ``TritonAnyKernelCall`` field 1
    the ``TritonKernelCall``, its field 1 the ``TritonKernel``, whose field 11 is a
    ``ModuleImageProto{object_file = 1, kernel_name = 2, shared_mem_bytes = 3}``)."""
    image = _field(1, build.cubin) + _field(2, build.name.encode()) + _field(3, build.shared_bytes)
    add_image = lambda kernel: kernel + _field(11, image)
    return _edit_field(call, 1, lambda kernel_call: _edit_field(kernel_call, 1, add_image))


def _lowering(
    ctx: mlir.LoweringRuleContext,
    *array_args: Any,
    fn: Any,
    scalar_args: tuple[Any, ...],
    name: str,
    custom_call_target_name: str,
    out_shapes: tuple[jax.ShapeDtypeStruct, ...],
    grid: Any,
    num_warps: int | None,
    num_stages: int | None,
    num_ctas: int,
    compute_capability: int | None,
    enable_fp_fusion: bool,
    input_output_aliases: tuple[tuple[int, int], ...],
    zeroed_outputs: Any,
    debug: bool,
    serialized_metadata: bytes,
    **metaparams: Any,
) -> Sequence[Any]:
    """The CUDA lowering of jax-triton's primitive: ``launch``'s calls as jaxlib's FFI
    call of the cached build with its cubin; every other ``triton_call`` by
    jax-triton's own rule."""
    if serialized_metadata != LAUNCH_METADATA or custom_call_target_name != KERNEL_CALL_TARGET:
        return _JAX_TRITON_RULE(
            ctx,
            *array_args,
            fn=fn,
            scalar_args=scalar_args,
            name=name,
            custom_call_target_name=custom_call_target_name,
            out_shapes=out_shapes,
            grid=grid,
            num_warps=num_warps,
            num_stages=num_stages,
            num_ctas=num_ctas,
            compute_capability=compute_capability,
            enable_fp_fusion=enable_fp_fusion,
            input_output_aliases=input_output_aliases,
            zeroed_outputs=zeroed_outputs,
            debug=debug,
            serialized_metadata=serialized_metadata,
            **metaparams,
        )
    # ``launch`` passes arrays only, at jax-triton's defaults for the rest.
    assert not scalar_args and not zeroed_outputs and enable_fp_fusion and not debug
    assert num_warps is not None and num_stages is not None
    cc = device_capability() if compute_capability is None else compute_capability
    arg_types = [_jt.get_triton_type(a) for a in (*ctx.avals_in, *ctx.avals_out)]
    spec = kernel_spec(fn, arg_types, metaparams, num_warps=num_warps, num_stages=num_stages)
    build = _build(spec, cc)
    clusters = _jt.normalize_grid(grid, metaparams)
    scratch = build.scratch_bytes((clusters[0] * num_ctas, *clusters[1:]))
    if scratch:
        ctx = ctx.replace(avals_out=[*ctx.avals_out, jax.core.ShapedArray((scratch,), jnp.uint8)])
    lib = _jt.triton_kernel_call_lib
    # jaxlib launches ``num_ctas`` CTAs a cluster along x, ``grid_0`` clusters
    # (cuLaunchKernelEx); the build itself is one CTA's program. It checks each
    # buffer aligned as Triton was promised; the scratch result is last.
    kernel = lib.TritonKernel(
        build.name,
        build.num_warps,
        build.num_ctas * num_ctas,
        build.shared_bytes,
        call_ptx(build),
        "",
        cc,
    )
    aligns = [POINTER_ALIGNMENT] * len(arg_types) + ([build.scratch_align] if scratch else [])
    parameters = [lib.create_array_parameter(0, a) for a in aligns]
    call = lib.TritonKernelCall(kernel, *clusters, parameters)
    opaque = zlib.compress(with_module_image(call.to_proto(name, serialized_metadata), build))
    rule = jax.ffi.ffi_lowering(
        KERNEL_CALL_TARGET,
        backend_config=dict(name=ir.StringAttr.get(name), opaque=ir.StringAttr.get(opaque)),
        operand_output_aliases=dict(input_output_aliases),
    )
    return rule(ctx, *array_args)[: len(out_shapes)]


_JAX_TRITON_RULE = _jax_triton_rule()
mlir.register_lowering(_jt.triton_kernel_call_p, _lowering, platform="cuda")


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
    """Calls a ``@triton.jit`` or ``@gluon.jit`` kernel on JAX arrays through
    ``jax_triton.triton_call``.

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
    arg_types = [pointer_type(x.dtype) for x in arrays]
    arg_types += [pointer_type(s.dtype) for s in out_shapes]
    constexprs = dict(constexprs or {})
    kernel_spec(kernel, arg_types, constexprs, num_warps=num_warps, num_stages=num_stages)
    aliases = {}
    for i, o in sorted((input_output_aliases or {}).items()):
        if not 0 <= i < len(arrays) or not 0 <= o < len(out_shapes):
            raise ValueError(f"alias {i} -> {o}: no such input or output")
        x, out = arrays[i], out_shapes[o]
        if (x.shape, x.dtype) != (out.shape, out.dtype):
            raise ValueError(f"alias {i} -> {o}: input {x.shape} {x.dtype} is not {out}")
        aliases[i] = o
    if len(set(aliases.values())) != len(aliases):
        raise ValueError(f"two inputs alias one output: {dict(input_output_aliases or {})}")
    return tuple(
        jt.triton_call(
            *arrays,
            kernel=kernel,
            out_shape=out_shapes,
            grid=(grid3[0] // cluster, *grid3[1:]),  # in clusters, as jaxlib launches it
            name=name or kernel.__name__,
            custom_call_target_name=KERNEL_CALL_TARGET,
            num_warps=num_warps,
            num_stages=num_stages,
            num_ctas=cluster,
            compute_capability=compute_capability,
            input_output_aliases=aliases,
            serialized_metadata=LAUNCH_METADATA,
            **constexprs,
        )
    )
