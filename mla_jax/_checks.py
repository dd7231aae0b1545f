"""Argument checks shared by the public entry points: each error names the argument,
what it got and what it needed."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def shape_error(name: str, got, needed: str) -> ValueError:
    return ValueError(f"{name}: got {got}, needed {needed}")


def check_positive(**values: int) -> None:
    """Each keyword must be a Python int >= 1."""
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


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
