"""The kernel launch (``mla_jax._launch``), lowered for CUDA on a machine without a
GPU: ``jax_triton.triton_call`` lowered to jaxlib's ``triton_kernel_call_ffi`` carrying
the cubin, with the buffer aliased and donated; the same call jax-triton's own rule
makes for a tl kernel; other ``triton_call``s left to jax-triton; Triton's disk cache
reused by a new process through the index beside it; Gluon kernels; and the errors it
raises early.

No timing: whether a build came from the cache is what Triton's compilation
listener (``triton.knobs.compilation.listener``) reports for each ``triton.compile``,
and a build the index names calls none.
"""

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import triton
import triton.language as tl
from triton import knobs
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from mla_jax import _launch
from tests.kernel_calls import (
    kernel_call_fields,
    kernel_calls,
    nvidia_tool,
    proto_fields,
    proto_items,
    sass,
)

ROOT = Path(__file__).resolve().parents[2]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


S = jax.ShapeDtypeStruct


@triton.jit
def add_c(x_ptr, c_ptr, y_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(c_ptr), mask=mask)


@triton.jit
def tma_add_one(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, BM: tl.constexpr):
    """y = x + 1, one [BM, N] tile a program, through TMA descriptors made on the
    device: each takes 128 bytes of the program's global scratch."""
    src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, N])
    dst = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, N])
    row = tl.program_id(0) * BM
    dst.store([row, 0], src.load([row, 0]) + 1.0)


@gluon.jit
def gluon_tma_add_one(x_ptr, y_ptr, M: gl.constexpr, N: gl.constexpr, BM: gl.constexpr):
    """``tma_add_one`` in Gluon: the tile copied by TMA into shared memory (one
    device-made descriptor, 128 bytes of scratch a program), stored from registers."""
    smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, N], gl.float32)
    src = tma.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [BM, N], smem_layout)
    tile = gl.allocate_shared_memory(gl.float32, [BM, N], smem_layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    row = gl.program_id(0) * BM
    mbarrier.expect(bar, BM * N * 4)
    tma.async_copy_global_to_shared(src, [row, 0], bar, tile)
    mbarrier.wait(bar, 0)
    mbarrier.invalidate(bar)
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0])
    rows = row + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, layout))
    gl.store(y_ptr + rows[:, None] * N + cols[None, :], tile.load(layout) + 1.0)


def tma_add_one_call(
    x: jax.Array, kernel=tma_add_one, *, compute_capability: int | None = 90
) -> jax.Array:
    """``kernel`` (``tma_add_one`` or its Gluon twin) on a [4 * 64, 64] float32 array,
    four programs."""
    (y,) = _launch.launch(
        kernel,
        [x],
        out_shapes=[S(x.shape, x.dtype)],
        grid=(4,),
        constexprs=dict(M=256, N=64, BM=64),
        num_warps=4,
        num_stages=1,
        compute_capability=compute_capability,
    )
    return y


def lower(fn, *args) -> str:
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def decode_step(q, kv, bt, sl, buf):
    import mla_jax

    # 1024 tokens: two splits under vLLM's rule, so both stages run.
    return mla_jax.mla_decode(
        q, kv, bt, sl, buf, scale=0.1, max_seq_len=1024, backend="triton", compute_capability=90
    )


def decode_args():
    from tests.cases import buffer_spec

    return (
        S((2, 16, 576), jnp.bfloat16),
        S((32, 64, 576), jnp.bfloat16),
        S((2, 16), jnp.int32),
        S((2,), jnp.int32),
        buffer_spec(2, 16, 2),
    )


def lower_decode() -> str:
    text = jax.jit(decode_step, donate_argnums=4).trace(*decode_args())
    return text.lower(lowering_platforms=("cuda",)).as_text()


def check_decode_calls(calls) -> None:
    """Stage 1: eight operands, the eighth (index 7) the logits buffer, its only
    result; stage 2's outputs fresh."""
    stage1, stage2 = calls
    assert len(stage1.operands) == 8 and stage1.aliases == [7]
    assert len(stage2.operands) == 3 and "output_operand_aliases" not in stage2.line
    assert [c.kernel_name for c in calls] == ["mla_decode_stage1", "mla_decode_stage2"]


def test_decode_lowers_to_two_jaxlib_ffi_calls_carrying_their_cubins(monkeypatch, tmp_path):
    """Both stages through ``jax_triton.triton_call``, each lowered to jaxlib's typed
    FFI call whose kernel carries the cubin (sm_90a, as Triton built it) beside the
    PTX; no other custom call; the buffer donated and aliased to stage 1's result."""
    import jax_triton  # after _launch, which keeps TRITON_CACHE_DIR as it was

    through = []
    real = jax_triton.triton_call
    monkeypatch.setattr(
        jax_triton, "triton_call", lambda *a, **k: through.append(k["kernel"]) or real(*a, **k)
    )
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # the builds read back below
    _launch._build.cache_clear()
    jax.clear_caches()
    text = lower_decode()
    assert [k.__name__ for k in through] == ["mla_decode_stage1", "mla_decode_stage2"]
    assert "jax_triton" in sys.modules and _launch.jt is jax_triton
    calls = kernel_calls(text)
    assert [c.target for c in calls] == ["triton_kernel_call_ffi"] * 2
    assert len(re.findall(r"custom_call @", text)) == 2  # no target of mla_jax's own
    check_decode_calls(calls)
    assert "tf.aliasing_output = 2" in text  # the donated buffer is stage 1's output
    for c in calls:
        assert "mhlo.backend_config = {name = " in c.line  # XLA's typed FFI: attributes
        assert c.attributes["metadata"] == _launch.LAUNCH_METADATA
        assert c.cubin.startswith(b"\x7fELF")
        assert c.attributes["image_kernel"] == c.kernel_name
        assert c.attributes["image_shared"] == c.attributes["shared"]
        assert c.attributes["cc"] == 90 and c.attributes["ttir"] == b""
        assert set(c.attributes["alignments"]) == {16}
        build = Path(_index(tmp_path)[c.kernel_name], c.kernel_name)
        assert build.with_suffix(".cubin").read_bytes() == c.cubin
        if _launch.JAXLIB_LOADS_MODULE_IMAGE:  # the PTX's place holds the cubin's hash
            assert c.ptx.decode() == f"// {c.kernel_name}: cubin sha256 {sha256(c.cubin)}\n"
        else:
            assert build.with_suffix(".ptx").read_bytes() == c.ptx
            assert b".target sm_90a" in c.ptx
    assert calls[0].grid == (1, 2, 2) and calls[0].num_warps == 4 and calls[0].cluster == 1
    assert calls[0].attributes["shared"] > 48 * 1024


def _instructions(cubin: bytes) -> list[str]:
    """The instructions of ``cubin`` (cuobjdump), without their encodings."""
    return [
        line.split(";")[0].strip()
        for line in sass(cubin).splitlines()
        if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)
    ]


def _sections(cubin: bytes) -> set[str]:
    """The ELF section names of ``cubin`` (a 64-bit little-endian ELF)."""
    shoff = int.from_bytes(cubin[0x28:0x30], "little")
    size, count, names = (int.from_bytes(cubin[o : o + 2], "little") for o in (0x3A, 0x3C, 0x3E))
    header = lambda i: cubin[shoff + i * size : shoff + (i + 1) * size]
    strtab = int.from_bytes(header(names)[0x18:0x20], "little")
    out = set()
    for i in range(count):
        start = strtab + int.from_bytes(header(i)[0:4], "little")
        out.add(cubin[start : cubin.index(b"\0", start)].decode())
    return out


def test_the_cubin_carries_no_line_table_and_the_same_instructions(monkeypatch, tmp_path):
    """jaxlib copies and hashes a call's cubin at every launch, so the builds leave out
    ptxas's line table (``_launch.ptxas_options``): both stages' cubins have no debug
    line section, and ptxas run on the same PTX as Triton runs it by default (with
    ``-lineinfo``) emits the same instructions in a cubin over twice the size."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    _launch._build.cache_clear()
    jax.clear_caches()
    calls = kernel_calls(lower_decode())
    assert len(calls) == 2
    for c in calls:
        build = Path(_index(tmp_path)[c.kernel_name], c.kernel_name)
        sections = _sections(c.cubin)
        assert ".nv.info" in sections and not any("debug_line" in s for s in sections)
        lined = tmp_path / "lined.cubin"
        subprocess.run(
            [
                nvidia_tool("ptxas"),
                "-lineinfo",
                "--gpu-name=sm_90a",
                str(build.with_suffix(".ptx")),
                "-o",
                str(lined),
            ],
            check=True,
        )
        assert any("debug_line" in s for s in _sections(lined.read_bytes()))
        assert _instructions(c.cubin) == _instructions(lined.read_bytes())
        assert len(lined.read_bytes()) > 2 * len(c.cubin)


def test_a_tl_kernel_lowers_as_jax_triton_lowers_it(ptx_in_calls, monkeypatch, tmp_path):
    """The same kernel through ``launch`` and through a plain ``triton_call`` (lowered
    by jax-triton's own rule, untouched by ``_launch``): the same PTX, kernel, grid,
    warps, shared memory and parameters; ours is jaxlib's FFI call with the cubin,
    jax-triton's its legacy ``triton_kernel_call``. Both are built here: a build from
    Triton's cache would carry the path of the checkout that first built it in its
    debug line info, which Triton's key leaves out."""
    import jax_triton  # after _launch, which keeps TRITON_CACHE_DIR as it was

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    _launch._build.cache_clear()
    x, c = S((256,), jnp.float32), S((1,), jnp.float32)

    def theirs(x, c):
        return jax_triton.triton_call(
            x, c, kernel=add_c, out_shape=x, grid=(2,), N=256, BLOCK=128, compute_capability=90
        )

    text = lower(theirs, x, c)
    assert "custom_call @triton_kernel_call(" in text and "triton_kernel_call_ffi" not in text
    line = next(t for t in text.splitlines() if "custom_call @triton_kernel_call(" in t)
    legacy = kernel_call_fields(line)
    (ours,) = kernel_calls(lower(add, x, c))
    same = ("ptx", "kernel_name", "clusters", "num_warps", "num_ctas", "shared", "cc")
    assert {k: ours.attributes[k] for k in same} == {k: legacy[k] for k in same}
    assert ours.attributes["alignments"] == legacy["alignments"] == [16, 16, 16]
    assert legacy["cubin"] == b"" and ours.cubin.startswith(b"\x7fELF")


def test_jax_triton_is_the_supported_release():
    """The lowering rule stands beside jax-triton 0.3.1's: another release is refused
    at import with the version to install (checked here on the installed one)."""
    import jax_triton  # after _launch, which keeps TRITON_CACHE_DIR as it was

    assert jax_triton.__version__ == _launch.JAX_TRITON_VERSION
    assert _launch._jax_triton_rule().func is jax_triton.triton_lib.triton_kernel_call_lowering
    with pytest.MonkeyPatch.context() as m:
        m.setattr(jax_triton, "__version__", "0.4.1")
        with pytest.raises(
            ImportError, match=r"needs jax-triton 0\.3\.1, found 0\.4\.1: pip install"
        ):
            _launch._jax_triton_rule()
        m.setattr(jax_triton, "__version__", _launch.JAX_TRITON_VERSION)
        m.setattr(jax_triton.triton_lib, "triton_kernel_call_lowering", lambda *_: None)
        with pytest.raises(ImportError, match="other lowering parameters"):
            _launch._jax_triton_rule()


def test_a_jaxlib_that_loads_the_cubin_gets_its_hash_for_ptx(monkeypatch):
    """From jaxlib 0.11.2 the PTX's place holds one line naming the cubin's hash (jaxlib
    hashes the whole call at every launch, and keys its modules by the PTX too): one
    line, different for two builds of one kernel; before 0.11.2, the PTX itself."""
    first = _launch._build(
        _launch.kernel_spec(
            add_c, ["*fp32"] * 3, dict(N=256, BLOCK=128), num_warps=4, num_stages=3
        ),
        90,
    )
    other = _launch._build(
        _launch.kernel_spec(add_c, ["*fp32"] * 3, dict(N=256, BLOCK=64), num_warps=4, num_stages=3),
        90,
    )
    assert first.name == other.name and first.cubin != other.cubin
    monkeypatch.setattr(_launch, "JAXLIB_LOADS_MODULE_IMAGE", False)
    assert _launch.call_ptx(first) == first.ptx
    monkeypatch.setattr(_launch, "JAXLIB_LOADS_MODULE_IMAGE", True)
    lines = [_launch.call_ptx(b) for b in (first, other)]
    assert lines[0] == f"// add_c: cubin sha256 {sha256(first.cubin)}\n" != lines[1]


def test_the_cubin_is_added_to_the_serialized_call_and_nothing_else():
    """``with_module_image`` adds the kernel's field 11 to jaxlib's serialized call and
    leaves every other field of every level as it was."""
    import jax_triton  # after _launch, which keeps TRITON_CACHE_DIR as it was

    lib = jax_triton.triton_lib.triton_kernel_call_lib
    kernel = lib.TritonKernel("k", 4, 1, 1000, "ptx text", "", 90)
    call = lib.TritonKernelCall(kernel, 3, 2, 1, [lib.create_array_parameter(0, 16)] * 2)
    proto = call.to_proto("k", b"meta")
    build = _launch.Build("k", 4, 1, 1000, "ptx text", b"\x7fELF cubin", "", 0, 1)
    embedded = _launch.with_module_image(proto, build)
    outer, new = proto_fields(proto), proto_fields(embedded)
    assert {k: v for k, v in new.items() if k != 1} == {k: v for k, v in outer.items() if k != 1}
    old_call, new_call = proto_items(outer[1]), proto_items(new[1])
    assert [f for f in new_call if f[0] != 1] == [f for f in old_call if f[0] != 1]
    old_kernel, new_kernel = proto_items(dict(old_call)[1]), proto_items(dict(new_call)[1])
    assert new_kernel[:-1] == old_kernel and new_kernel[-1][0] == 11
    image = proto_fields(new_kernel[-1][1])
    assert image == {1: b"\x7fELF cubin", 2: b"k", 3: 1000}


_CHILD = """
import hashlib, json, os, sys
sys.path.insert(0, {root!r})
import jax
from triton import knobs
from tests.kernels.test_kernel_cache import decode_args, decode_step

events = []
knobs.compilation.listener = lambda src, cache_hit, **_: events.append([src.name, cache_hit])
text = jax.jit(decode_step).trace(*decode_args()).lower(lowering_platforms=("cuda",)).as_text()
digest = hashlib.sha256(text.encode()).hexdigest()
print(json.dumps({{"events": events, "module": digest, "jax_triton": "jax_triton" in sys.modules,
                  "cache_dir": os.environ.get("TRITON_CACHE_DIR")}}))
"""


def _lower_in_child(env) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT))],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _index(cache: Path) -> dict[str, str]:
    """The index's entries: kernel name -> build folder."""
    entries = [json.loads(p.read_text()) for p in (cache / "mla_jax_index").glob("*.json")]
    return {e["name"]: e["folder"] for e in entries}


def test_a_new_process_takes_both_kernels_from_the_disk_cache(tmp_path):
    env = os.environ | {"TRITON_CACHE_DIR": str(tmp_path)}
    env.pop("TRITON_ALWAYS_COMPILE", None)
    first = _lower_in_child(env)
    assert first["jax_triton"] and first["cache_dir"] == str(tmp_path)  # put back
    assert first["events"] == [["mla_decode_stage1", False], ["mla_decode_stage2", False]]
    builds = sorted(p.name for p in tmp_path.glob("*/mla_decode_stage*.json"))
    assert builds == ["mla_decode_stage1.json", "mla_decode_stage2.json"]
    index = _index(tmp_path)
    assert {n: Path(f, f"{n}.json").exists() for n, f in index.items()} == {
        "mla_decode_stage1": True,
        "mla_decode_stage2": True,
    }
    second = _lower_in_child(env)
    # The index named both builds: no triton.compile at all, and the same program.
    assert second["events"] == []
    assert second["module"] == first["module"]
    assert sorted(p.name for p in tmp_path.glob("*/mla_decode_stage*.json")) == builds
    assert _index(tmp_path) == index


def test_a_build_the_index_names_but_lost_is_built_again(tmp_path):
    env = os.environ | {"TRITON_CACHE_DIR": str(tmp_path)}
    env.pop("TRITON_ALWAYS_COMPILE", None)
    first = _lower_in_child(env)
    shutil.rmtree(_index(tmp_path)["mla_decode_stage2"])
    second = _lower_in_child(env)
    assert second["events"] == [["mla_decode_stage2", False]]
    assert second["module"] == first["module"]
    assert Path(_index(tmp_path)["mla_decode_stage2"], "mla_decode_stage2.json").exists()
    # TRITON_ALWAYS_COMPILE asks Triton for every build, index or not.
    third = _lower_in_child(env | {"TRITON_ALWAYS_COMPILE": "1"})
    assert third["events"] == [["mla_decode_stage1", False], ["mla_decode_stage2", False]]


def test_the_index_key_follows_the_build():
    spec = _launch.kernel_spec(
        add_c, ["*fp32", "*fp32", "*fp32"], dict(N=256, BLOCK=128), num_warps=4, num_stages=3
    )
    key = _launch._index_file(spec, 90)
    changed = [
        dataclasses.replace(spec, constexprs=(("N", "int", 256), ("BLOCK", "int", 64))),
        dataclasses.replace(spec, num_warps=8),
        dataclasses.replace(spec, signature=(("x_ptr", "*fp16"), *spec.signature[1:])),
    ]
    keys = {key, _launch._index_file(spec, 80), *(_launch._index_file(s, 90) for s in changed)}
    assert None not in keys and len(keys) == 5
    assert _launch._index_file(spec, 90) == key  # the same build, the same entry
    # A constexpr the key cannot spell reliably skips the index.
    odd = dataclasses.replace(spec, constexprs=(("N", "int", 256), ("BLOCK", "object", object())))
    assert _launch._index_file(odd, 90) is None


def add(x, c, **kw):
    return _launch.launch(
        add_c,
        [x, c],
        out_shapes=[S(x.shape, x.dtype)],
        grid=(2,),
        constexprs=dict(N=x.shape[0], BLOCK=128),
        compute_capability=90,
        **kw,
    )[0]


def test_one_build_per_process(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # nothing built before
    events = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda src, **_: events.append(src.name))
    _launch._build.cache_clear()
    jax.clear_caches()  # lowered before in this process: JAX would reuse the module
    x, c = S((256,), jnp.float32), S((1,), jnp.float32)
    for _ in range(2):  # lowered twice: one build
        (call,) = kernel_calls(lower(add, x, c))
        assert call.grid == (2, 1, 1)
    assert events == ["add_c"]
    lower(add, x, S((1,), jnp.float16))  # another signature (*fp16): another build
    assert events == ["add_c", "add_c"]
    spec = _launch.kernel_spec(
        add_c, ["*fp32", "*fp32", "*fp32"], dict(N=256, BLOCK=128), num_warps=4, num_stages=3
    )
    build = _launch._build(spec, 90)  # the first one, memoised
    assert events == ["add_c", "add_c"] and build.name == "add_c"
    files = set(os.listdir(build.folder))
    assert {"add_c.json", "add_c.ptx", "add_c.cubin"} <= files


def test_the_cache_works_when_jax_triton_emptied_its_setting(tmp_path, monkeypatch):
    """``import jax_triton`` sets TRITON_CACHE_DIR="": builds go to Triton's default
    folder (under TRITON_HOME) and the setting is left as it was."""
    monkeypatch.setenv("TRITON_CACHE_DIR", "")
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    assert not knobs.cache.dir
    spec = _launch.kernel_spec(
        add_c, ["*fp32", "*fp32", "*fp32"], dict(N=64, BLOCK=64), num_warps=2, num_stages=1
    )
    compiled = _launch.compile_kernel(spec, 90)
    assert Path(compiled.metadata_group["add_c.json"]).is_relative_to(tmp_path)
    assert os.environ["TRITON_CACHE_DIR"] == "" and not knobs.cache.dir


def test_gluon_kernels_compile_as_gluon():
    gluon = pytest.importorskip("triton.experimental.gluon")
    gl = gluon.language
    from triton.backends.compiler import Language

    @gluon.jit
    def copy(x_ptr, y_ptr, N: gl.constexpr, BLOCK: gl.constexpr):
        layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
        mask = offs < N
        gl.store(y_ptr + offs, gl.load(x_ptr + offs, mask=mask), mask=mask)

    spec = _launch.kernel_spec(
        copy, ["*fp32", "*fp32"], dict(N=256, BLOCK=128), num_warps=4, num_stages=1
    )
    assert _launch.compile_kernel(spec, 90).src.language == Language.GLUON

    def f(x):
        return _launch.launch(
            copy,
            [x],
            out_shapes=[S(x.shape, x.dtype)],
            grid=(2,),
            constexprs=dict(N=256, BLOCK=128),
            input_output_aliases={0: 0},
            compute_capability=90,
        )[0]

    (call,) = kernel_calls(lower(f, S((256,), jnp.float32)))
    assert call.kernel_name == "copy" and call.aliases == [0]


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(constexprs=dict(N=256)), r"no value for the constexpr parameters \['BLOCK'\]"),
        (dict(constexprs=dict(N=256, BLOCK=128, M=1)), r"has no parameters \['M'\]"),
        (dict(inputs="one"), r"takes 3 run-time arguments"),
        (dict(input_output_aliases={0: 0}, out=S((128,), jnp.float32)), r"alias 0 -> 0: input"),
        (dict(input_output_aliases={2: 0}), r"alias 2 -> 0: no such input"),
        (dict(inputs="scalar"), r"input 1 is a float, not an array"),
        (dict(grid=(1, 70000)), r"grid \(1, 70000\)"),
        (dict(cluster=3), r"cluster 3 with grid \(2,\)"),
        (dict(cluster=4), r"cluster 4 with grid \(2,\): .* a multiple of it"),
        (dict(kernel=triton.autotune([triton.Config({})], key=[])(add_c)), "autotuners"),
    ],
)
def test_bad_launches_fail_before_compiling(change, message):
    x = S((256,), jnp.float32)
    kwargs = dict(
        out_shapes=[change.pop("out", x)],
        grid=(2,),
        constexprs=dict(N=256, BLOCK=128),
        compute_capability=90,
    )
    kernel = change.pop("kernel", add_c)
    which = change.pop("inputs", None)
    kwargs.update(change)
    args = [x] if which == "one" else [x, S((1,), jnp.float32)]

    def f(*a):
        return _launch.launch(kernel, [a[0], 1.0] if which == "scalar" else list(a), **kwargs)

    with pytest.raises((ValueError, TypeError), match=message):
        lower(f, *args)


def test_a_cluster_launch_is_one_kernel_of_that_many_ctas_over_the_clusters(ptx_in_calls):
    """``cluster=2`` on a grid of 4 programs: jaxlib's call holds ``num_ctas=2`` and a
    grid of 2 clusters along x (it launches ``grid_0 * num_ctas`` CTAs in clusters of
    ``num_ctas``), as ``triton_call(grid=(2,), num_ctas=2)`` asks; the build is the
    one-CTA program."""
    x = S((512,), jnp.float32)

    def f(x, cluster):
        return _launch.launch(
            add_c,
            [x, x[:1]],
            out_shapes=[x],
            grid=(4,),
            constexprs=dict(N=512, BLOCK=128),
            compute_capability=90,
            cluster=cluster,
        )[0]

    (call,) = kernel_calls(lower(lambda x: f(x, 2), x))
    assert (call.cluster, call.grid) == (2, (4, 1, 1))
    assert (call.attributes["num_ctas"], call.attributes["clusters"]) == (2, (2, 1, 1))
    assert b".reqnctapercluster" not in call.ptx
    (call,) = kernel_calls(lower(lambda x: f(x, 1), x))
    assert (call.cluster, call.grid) == (1, (4, 1, 1))


@pytest.mark.parametrize("kernel, per_program", [(tma_add_one, 256), (gluon_tma_add_one, 128)])
def test_global_scratch_is_one_more_result_the_caller_never_sees(kernel, per_program):
    """A kernel that makes TMA descriptors on the device needs global scratch (128
    bytes a descriptor): the call gets it as a last result of ``global_scratch_size``
    bytes a program, whose pointer follows the kernel's arguments (where Triton's
    kernels read their scratch pointer) and is checked aligned as Triton asks."""
    spec = _launch.kernel_spec(
        kernel, ["*fp32", "*fp32"], dict(M=256, N=64, BM=64), num_warps=4, num_stages=1
    )
    compiled = _launch.compile_kernel(spec, 90)
    meta = compiled.metadata
    assert (meta.global_scratch_size, meta.global_scratch_align) == (per_program, 128)
    assert "cp.async.bulk.tensor" in compiled.asm["ptx"]

    x = S((256, 64), jnp.float32)
    text = lower(lambda x: tma_add_one_call(x, kernel), x)
    (call,) = kernel_calls(text)
    scratch = f"tensor<{4 * per_program}xui8>"  # four programs
    assert re.search(rf"-> \(tensor<256x64xf32>, {scratch}\)", call.line), call.line
    assert re.search(r"return %\S+#0 : tensor<256x64xf32>", text)
    # x, y, then the scratch: divisibility 16 for the arrays, 128 for the scratch.
    assert call.attributes["alignments"] == [16, 16, 128]
    assert jax.eval_shape(lambda x: tma_add_one_call(x, kernel), x) == x


@pytest.mark.parametrize(
    "metadata, message",
    [
        (dict(profile_scratch_size=64), "64 bytes of profile scratch memory"),
        (dict(shared=232449), "232449 bytes of shared memory; sm_90 allows 232448"),
        (dict(tmem_size=1024), "1024 tensor memory columns"),
    ],
)
def test_builds_jaxlib_cannot_run_are_refused(metadata, message):
    fields = dict(shared=1024, global_scratch_size=128, profile_scratch_size=0, tmem_size=None)
    meta = types.SimpleNamespace(**(fields | metadata))
    with pytest.raises(ValueError, match=message):
        _launch.check_resources(meta, 90, "k")
    _launch.check_resources(types.SimpleNamespace(**fields), 90, "k")


# B, H, L, max_seq_len (None: a run-time length), cache, fp8_mma: the stage 1 each runs
# on the occupancy rule's split count (the default buffer), as on the GPU's A/B.
EVERY_STAGE_1 = [
    ((4, 128, 4096, None, "bf16", False), "mla_decode_stage1_gluon_seesaw"),
    ((64, 64, 1024, 1024, "bf16", False), "mla_decode_stage1_gluon_seesaw"),  # clusters
    ((16, 64, 1024, 1024, "bf16", False), "mla_decode_stage1_gluon_h16"),
    ((64, 16, 4096, 4096, "bf16", False), "mla_decode_stage1_gluon_h16"),
    ((1, 16, 1024, 1024, "bf16", False), "mla_decode_stage1"),
    ((8, 16, 4096, 4096, "fp8", False), "mla_decode_stage1_gluon_fp8_h16"),
    ((4, 128, 2048, 2048, "fp8", False), "mla_decode_stage1_gluon_seesaw"),
    ((4, 128, 2048, 2048, "fp8", True), "mla_decode_stage1_gluon_fp8_mma"),
]


@pytest.mark.parametrize("case, stage1", EVERY_STAGE_1, ids=lambda v: str(v))
def test_every_stage_1_lowers_through_jax_triton_to_jaxlib_s_ffi_call(case, stage1):
    """Each stage-1 kernel (tl and Gluon) and stage 2, lowered for sm_90: jaxlib's FFI
    call only, the cubin embedded, the logits buffer donated and aliased to stage 1's
    first result."""
    import mla_jax

    batch, heads, length, max_seq_len, cache, fp8_mma = case
    kv_dtype = jnp.float8_e4m3fn if cache == "fp8" else jnp.bfloat16
    pages = length // 64
    buf = jax.eval_shape(lambda: mla_jax.reserve_logits_buffer(batch, heads, length, sm_count=132))
    args = (
        S((batch, heads, 576), jnp.bfloat16),
        S((batch * pages, 64, 576), kv_dtype),
        S((batch, pages), jnp.int32),
        S((batch,), jnp.int32),
        buf,
    )

    def step(q, kv, bt, sl, buf):
        return mla_jax.mla_decode(
            q, kv, bt, sl, buf, scale=0.1, max_seq_len=max_seq_len, backend="triton",
            compute_capability=90, fp8_mma=fp8_mma,
            k_scale=jnp.float32(0.5) if cache == "fp8" else None,
        )  # fmt: skip

    text = jax.jit(step, donate_argnums=4).trace(*args).lower(lowering_platforms=("cuda",))
    text = text.as_text()
    calls = kernel_calls(text)
    assert calls[0].kernel_name == stage1
    assert [c.kernel_name for c in calls[1:]] in ([], ["mla_decode_stage2"])
    assert len(re.findall(r"custom_call @", text)) == len(calls)  # jaxlib's, nothing else
    assert calls[0].aliases == [7] and "tf.aliasing_output = 2" in text
    for c in calls:
        assert c.cubin.startswith(b"\x7fELF") and c.attributes["image_kernel"] == c.kernel_name
        assert c.attributes["metadata"] == _launch.LAUNCH_METADATA
