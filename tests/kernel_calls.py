"""The kernel launches in a lowered module, read the same way whichever custom call
``mla_jax._launch`` emitted (its FFI handler's, or jaxlib's ``triton_kernel_call``)."""

from __future__ import annotations

import base64
import re
import zlib
from typing import NamedTuple

import jax

import mla_jax
from mla_jax import _launch

TARGETS = "|".join(mla_jax.KERNEL_CALL_TARGETS)
CALL = re.compile(rf"stablehlo\.custom_call @({TARGETS})\(([^)]*)\)")
DISABLED = [jax.export.DisabledSafetyCheck.custom_call(t) for t in mla_jax.KERNEL_CALL_TARGETS]


class KernelCall(NamedTuple):
    target: str
    operands: list[str]
    aliases: list[int]  # operands aliased to results, in order
    kernel_name: str  # the build's (Triton's) name
    grid: tuple[int, int, int]  # programs, as ``_launch.launch`` takes it
    cluster: int
    num_warps: int
    binary: bytes  # PTX (jaxlib's call) or cubin (the FFI handler's)
    attributes: dict  # the target's own fields
    line: str

    @property
    def stage(self) -> str:
        """Which of mla_decode's stages the kernel is: ``mla_decode_stage1`` or ``2``."""
        return re.match(r"mla_decode_stage\d", self.kernel_name).group(0)


def backend_config(line: str) -> bytes:
    """The serialized (zlib) jaxlib Triton kernel call in a custom call's backend_config."""
    config = re.search(r'backend_config = "((?:[^"\\]|\\.)*)"', line).group(1)
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


def _jaxlib_fields(line: str) -> dict:
    """jaxlib's ``TritonAnyKernelCall`` (jaxlib/gpu/triton.proto): field 1 the
    ``TritonKernelCall`` (1 kernel, 2-4 grid in clusters, 5 parameters), 4 the name."""
    outer = proto_fields(backend_config(line))
    call = proto_fields(outer[1])
    kernel = proto_fields(call[1])
    parameters = [v for f, v in proto_items(outer[1]) if f == 5]
    return {
        "name": outer[4].decode(),
        "clusters": tuple(call.get(f, 0) for f in (2, 3, 4)),
        "kernel_name": kernel[1].decode(),
        "num_warps": kernel[2],
        "num_ctas": kernel.get(10, 1),  # a cluster's CTAs (optional: absent is 1)
        "ptx": kernel.get(4, b""),
        "ttir": kernel.get(5, b""),
        "cc": kernel[6],
        # each parameter's array (field 1): its divisibility (field 2)
        "alignments": [proto_fields(proto_fields(p)[1]).get(2) for p in parameters],
    }


def _ffi_fields(line: str) -> dict:
    """The FFI call's attributes (``mhlo.backend_config``): ints and strings."""
    config = re.search(r"backend_config = \{(.*?)\}", line).group(1)
    strings = dict(re.findall(r'(\w+) = "([^"]*)"', config))
    # The ints, searched with the strings blanked: the cubin's long runs of word
    # characters would make an unanchored search quadratic.
    ints = re.findall(r"(\w+) = (-?\d+) : i64", re.sub(r'"[^"]*"', '""', config))
    return {k: int(v) for k, v in ints} | strings


def kernel_call(line: str) -> KernelCall:
    target, operands = CALL.search(line).groups()
    aliases = [int(a) for a in re.findall(r"operand_index = (\d+)", line)]
    if target == _launch.JAXLIB_TARGET:
        f = _jaxlib_fields(line)
        x, y, z = f["clusters"]
        grid, cluster = (x * f["num_ctas"], y, z), f["num_ctas"]
        name, warps, binary = f["kernel_name"], f["num_warps"], f["ptx"]
    else:
        f = _ffi_fields(line)
        grid, cluster = (f["grid_x"], f["grid_y"], f["grid_z"]), f["cluster"]
        name, warps, binary = f["kernel"], f["num_warps"], base64.b64decode(f["cubin"])
    return KernelCall(
        target, operands.split(", "), aliases, name, grid, cluster, warps, binary, f, line
    )


def kernel_calls(text: str) -> list[KernelCall]:
    """Every kernel launch in a lowered module's text, in order."""
    return [kernel_call(line) for line in text.splitlines() if CALL.search(line)]
