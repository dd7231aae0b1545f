"""Argument checks shared by the public entry points: each error names the argument,
what it got and what it needed."""

from __future__ import annotations

import numbers
import sys

import jax
import jax.numpy as jnp


def shape_error(name: str, got, needed: str) -> ValueError:
    return ValueError(f"{name}: got {got}, needed {needed}")


def is_int(value) -> bool:
    """A Python or numpy integer scalar (``np.int64(4)`` from an array's ``max()``
    is as good as ``4``), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_positive(**values: int) -> None:
    """Each keyword must be an integer (Python or numpy) >= 1."""
    for name, value in values.items():
        if not is_int(value) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def positive_int(name: str, value: int) -> int:
    """``value`` as a Python int, after ``check_positive``."""
    check_positive(**{name: value})
    return int(value)


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
