"""The kernel launches in a lowered module: jaxlib's ``triton_kernel_call_ffi`` calls
that ``mla_jax._launch`` emits, read back from their serialized ``TritonAnyKernelCall``
(jaxlib/gpu/triton.proto) by a protobuf reader of their own; and the NVIDIA tools
Triton bundles (ptxas, cuobjdump) run on a build's PTX or cubin."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import zlib
from typing import NamedTuple

import jax

import mla_jax

CALL = re.compile(rf"stablehlo\.custom_call @({mla_jax.KERNEL_CALL_TARGET})\(([^)]*)\)")
DISABLED = [jax.export.DisabledSafetyCheck.custom_call(mla_jax.KERNEL_CALL_TARGET)]


class KernelCall(NamedTuple):
    target: str
    operands: list[str]
    aliases: list[int]  # operands aliased to results, in order
    kernel_name: str  # the build's (Triton's) name
    grid: tuple[int, int, int]  # programs, as ``_launch.launch`` takes it
    cluster: int
    num_warps: int
    ptx: bytes  # what a jaxlib before 0.11.2 compiles
    cubin: bytes  # the kernel's module image, which jaxlib loads from 0.11.2 on
    attributes: dict  # the serialized call's fields
    line: str

    @property
    def stage(self) -> str:
        """Which of mla_decode's stages the kernel is: ``mla_decode_stage1`` or ``2``."""
        return re.match(r"mla_decode_stage\d", self.kernel_name).group(0)


def backend_config(line: str) -> bytes:
    """The serialized jaxlib Triton kernel call (zlib-compressed) in a custom call's
    ``opaque`` attribute (the FFI call), or its ``backend_config`` (jaxlib's legacy
    call, which jax-triton emits)."""
    string = r' = "((?:[^"\\]|\\.)*)"'
    config = (re.search("opaque" + string, line) or re.search("backend_config" + string, line))[1]
    # MLIR escapes a backslash as \\ and every other unprintable byte or quote as \XX.
    raw = re.sub(
        rb"\\(\\|[0-9A-Fa-f]{2})",
        lambda m: b"\\" if m.group(1) == b"\\" else bytes([int(m.group(1), 16)]),
        config.encode("latin-1"),
    )
    return zlib.decompress(raw)


def proto_items(data: bytes) -> list[tuple[int, int | bytes]]:
    """The fields of a serialized protobuf message in order, as ``(number, value)``:
    varints as ints, others as bytes (a repeated field appears once per value)."""

    def varint(i):
        value = shift = 0
        while True:
            byte = data[i]
            value, shift, i = value | (byte & 0x7F) << shift, shift + 7, i + 1
            if byte < 0x80:
                return value, i

    items, i = [], 0
    while i < len(data):
        key, i = varint(i)
        wire = key & 7
        if wire == 0:
            value, i = varint(i)
        elif wire == 2:
            size, i = varint(i)
            value, i = data[i : i + size], i + size
        else:  # fixed 64 / 32 bits
            size = {1: 8, 5: 4}[wire]
            value, i = data[i : i + size], i + size
        items.append((key >> 3, value))
    return items


def proto_fields(data: bytes) -> dict[int, int | bytes]:
    """The fields of a serialized protobuf message (a repeated one: its last value)."""
    return dict(proto_items(data))


def kernel_call_fields(line: str) -> dict:
    """jaxlib's ``TritonAnyKernelCall``: field 1 the ``TritonKernelCall`` (1 kernel,
    2-4 grid in clusters, 5 parameters), 3 the metadata, 4 the name; the kernel's
    field 11 its ``ModuleImageProto`` (1 the object file, 2 its kernel, 3 shared bytes)."""
    outer = proto_fields(backend_config(line))
    call = proto_fields(outer[1])
    kernel = proto_fields(call[1])
    image = proto_fields(kernel.get(11, b""))
    parameters = [v for f, v in proto_items(outer[1]) if f == 5]
    return {
        "name": outer.get(4, b"").decode(),
        "metadata": outer.get(3, b""),
        "clusters": tuple(call.get(f, 0) for f in (2, 3, 4)),
        "kernel_name": kernel[1].decode(),
        "num_warps": kernel[2],
        "num_ctas": kernel.get(10, 1),  # a cluster's CTAs (optional: absent is 1)
        "shared": kernel.get(3, 0),
        "ptx": kernel.get(4, b""),
        "ttir": kernel.get(5, b""),
        "cc": kernel[6],
        "image_kernel": image.get(2, b"").decode(),
        "image_shared": image.get(3, 0),
        "cubin": image.get(1, b""),
        # each parameter's array (field 1): its divisibility (field 2)
        "alignments": [proto_fields(proto_fields(p)[1]).get(2) for p in parameters],
    }


def kernel_call(line: str) -> KernelCall:
    target, operands = CALL.search(line).groups()
    aliases = [int(a) for a in re.findall(r"operand_index = (\d+)", line)]
    f = kernel_call_fields(line)
    x, y, z = f["clusters"]
    return KernelCall(
        target=target,
        operands=operands.split(", "),
        aliases=aliases,
        kernel_name=f["kernel_name"],
        grid=(x * f["num_ctas"], y, z),
        cluster=f["num_ctas"],
        num_warps=f["num_warps"],
        ptx=f["ptx"],
        cubin=f["cubin"],
        attributes=f,
        line=line,
    )


def kernel_calls(text: str) -> list[KernelCall]:
    """Every kernel launch in a lowered module's text, in order."""
    return [kernel_call(line) for line in text.splitlines() if CALL.search(line)]


# ------------------------------------------------------- Triton's bundled tools


def nvidia_tool(name: str) -> str:
    """The path of ``name`` (ptxas, cuobjdump...) among the tools Triton bundles."""
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def ptxas_log(ptx: str) -> str:
    """``ptxas -v``'s report (registers, spills, shared memory) of a PTX build for
    sm_90a."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        return subprocess.run(
            [nvidia_tool("ptxas"), "-v", "--gpu-name", "sm_90a", "-o", os.devnull, path],
            capture_output=True,
            text=True,
            check=True,
        ).stderr


def sass(cubin: bytes) -> str:
    """``cuobjdump -sass`` of a cubin."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return subprocess.run(
            [nvidia_tool("cuobjdump"), "-sass", path], capture_output=True, text=True, check=True
        ).stdout
