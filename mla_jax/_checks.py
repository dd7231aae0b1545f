"""Argument checks shared by the public entry points: each error names the argument,
what it got and what it needed."""

from __future__ import annotations

import numbers
import operator
import sys

import jax
import jax.numpy as jnp
import numpy as np

INT32_MIN, INT32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)

# The CUDA capabilities the Triton kernels are built for: the keys of
# ``mla_jax._launch.MAX_SHARED_BYTES`` (a test keeps the two equal; ``_launch`` needs
# Triton, so it is not imported here). LLVM aborts the process on one it does not
# know (``compute_capability=0`` or 85: "Cannot select"), so others are refused.
CUDA_CAPABILITIES = (70, 75, 80, 86, 87, 89, 90, 100, 103, 120)
FP8_MIN_CAPABILITY = 89  # Triton's float8_e4m3fn ("fp8e4nv") starts at Ada
BF16_MIN_CAPABILITY = 80  # Triton's bf16 dot starts at Ampere


def shape_error(name: str, got, needed: str) -> ValueError:
    return ValueError(f"{name}: got {got}, needed {needed}")


def is_int(value) -> bool:
    """A Python or numpy integer scalar (``np.int64(4)`` from an array's ``max()``
    is as good as ``4``), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def as_int(name: str, value, minimum: int | None = None) -> int:
    """A Python or numpy integer (not a bool, not a float) as an ``int``, ``>= minimum``."""
    try:
        if isinstance(value, bool):
            raise TypeError
        result = operator.index(value)
    except TypeError:
        raise ValueError(f"{name}: got {value!r}, needed an int") from None
    if minimum is not None and result < minimum:
        raise ValueError(f"{name}: got {result}, needed an int >= {minimum}")
    return result


def positive_int(name: str, value) -> int:
    """A Python or numpy integer >= 1, as an ``int``."""
    try:
        return as_int(name, value, 1)
    except ValueError:
        raise ValueError(f"{name} must be a positive int, got {value!r}") from None


def check_positive(**values: int) -> None:
    """Each keyword must be a Python or numpy int >= 1."""
    for name, value in values.items():
        positive_int(name, value)


def check_array(name: str, x) -> None:
    """``x`` must be an array (JAX or numpy, traced or not), not a list or scalar."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        raise ValueError(
            f"{name}: got a {type(x).__name__}, needed an array (jax.Array or "
            "numpy.ndarray); wrap it with jnp.asarray (dtype jnp.int32 for indices)"
        )


def narrow_int32(name: str, x):
    """An integer array wider than int32 (numpy's int64, or JAX's with x64 on), narrowed
    to int32 after checking its values fit: ``jit`` would wrap them silently (a length
    of ``2**32 + 5`` would attend 5 tokens). Anything else is returned unchanged, for
    the callers' own dtype checks; a traced wide array too (it cannot be read here, and
    the int32 check refuses it)."""
    dtype = getattr(x, "dtype", None)
    if (
        dtype is None
        or not jnp.issubdtype(dtype, jnp.integer)
        or jnp.dtype(dtype).itemsize <= 4
        or isinstance(x, jax.core.Tracer)
    ):
        return x
    host = np.asarray(x)
    bad = (host < INT32_MIN) | (host > INT32_MAX)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f"[{', '.join(map(str, index))}]" if index else ""
        raise ValueError(
            f"{name}{where} = {host[index]} is outside int32's range "
            f"[{INT32_MIN}, {INT32_MAX}]; indices and lengths are int32"
        )
    return host.astype(np.int32) if isinstance(x, np.ndarray) else jnp.asarray(x, jnp.int32)


def check_compute_capability(compute_capability, *, fp8: bool = False) -> int | None:
    """``None``, or a CUDA capability the kernels are built for, as an ``int`` (numpy
    ints too); ``fp8``: the cache is float8_e4m3fn, which needs sm_89 or newer."""
    if compute_capability is None:
        return None
    try:
        cc = as_int("compute_capability", compute_capability)
    except ValueError:
        cc = None
    if cc not in CUDA_CAPABILITIES:
        raise ValueError(
            f"compute_capability: got {compute_capability!r}, needed None or an int, "
            f"major * 10 + minor, one of {CUDA_CAPABILITIES} (e.g. 90 for an H100/H200)"
        )
    if fp8 and cc < FP8_MIN_CAPABILITY:
        raise ValueError(
            f"compute_capability: got {cc}, but a float8_e4m3fn kv_cache needs "
            f">= {FP8_MIN_CAPABILITY} (Triton has no e4m3 before Ada); use a 16-bit "
            "cache or backend='xla' there"
        )
    return cc


def check_triton_build(
    dtype, compute_capability, config, config_type: type, *, operands: str
) -> int | None:
    """``check_compute_capability``'s value for a Triton op whose ``operands`` (the
    error's word for them: "weights", "inputs") are of ``dtype``, which at bfloat16
    needs sm_80 or newer; and ``config`` None or a ``config_type``."""
    cc = check_compute_capability(compute_capability)
    if dtype == jnp.bfloat16 and cc is not None and cc < BF16_MIN_CAPABILITY:
        raise ValueError(
            f"compute_capability: got {cc}, but bfloat16 {operands} need >= "
            f"{BF16_MIN_CAPABILITY}; use float16 {operands} there, or the xla backend"
        )
    if config is not None and not isinstance(config, config_type):
        name = config_type.__name__
        raise ValueError(f"config: got a {type(config).__name__}, needed a {name} or None")
    return cc


def check_block_table(block_table: jax.Array, batch: int) -> None:
    """int32 ``[batch, pages_per_seq >= 1]``."""
    if (
        block_table.dtype != jnp.int32
        or block_table.ndim != 2
        or block_table.shape[0] != batch
        or block_table.shape[1] < 1
    ):
        raise shape_error(
            "block_table",
            f"{block_table.dtype}{list(block_table.shape)}",
            f"int32 [{batch}, pages_per_seq >= 1]",
        )


def check_row_vector(name: str, x: jax.Array, batch: int) -> None:
    """int32 ``[batch]``: one value per sequence (lengths, positions)."""
    if x.dtype != jnp.int32 or x.shape != (batch,):
        raise shape_error(name, f"{x.dtype}{list(x.shape)}", f"int32 [{batch}]")


def from_torch(name: str, x):
    """``x`` itself, or the JAX array of a torch tensor (through DLPack, sharing its
    memory where it can: ``mla_jax.interop.to_jax``)."""
    # A torch tensor can only exist once torch is imported: no import here otherwise.
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        return x
    from mla_jax.interop import to_jax

    try:
        return to_jax(x)
    except (BufferError, ValueError, RuntimeError) as e:
        raise ValueError(
            f"{name}: got a torch.Tensor {x.dtype}{list(x.shape)} on {x.device} that JAX "
            f"cannot import ({e}); convert it with mla_jax.interop.to_jax(t, device=...) "
            "(a CUDA tensor needs a CUDA jaxlib, else t.cpu() first)"
        ) from e
