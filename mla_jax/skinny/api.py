"""``skinny_einsum``: ``jnp.einsum(spec, x, w)`` of a few activation rows and a weight,
through the Triton kernel ``mla_jax.skinny.kernel.skinny_matmul``.

The spec's axes fall in four groups: batch (in ``x``, ``w`` and the output), rows
(``x`` and the output), contracted (``x`` and ``w``) and columns (``w`` and the
output). Each group's axes must be adjacent and in one order wherever they appear,
so each group is one strided axis of the kernel: every array is read and written in
its own layout.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from mla_jax.skinny.config import MAX_ROWS, SkinnyConfig, default_config

DTYPES = (jnp.bfloat16, jnp.float16, jnp.float32)


def _strides(shape: tuple[int, ...]) -> list[int]:
    """Row-major element strides of ``shape``."""
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return out[::-1]


def _group(letters: str, arrays: list[tuple[str, tuple[int, ...]]]) -> tuple[int, ...] | None:
    """One stride per array for the axes ``letters`` merged into one, or None where
    they are not adjacent and in this order in an array that has them. Arrays without
    them get stride 0 (a group of no axes is one element)."""
    found = []
    for axes, shape in arrays:
        if not letters or letters[0] not in axes:
            found.append(0)
            continue
        start = axes.index(letters[0])
        if axes[start : start + len(letters)] != letters:
            return None
        found.append(_strides(shape)[start + len(letters) - 1])
    return tuple(found)


def plan(spec: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> dict[str, Any] | None:
    """``(groups, m, k, n)`` and the arrays' strides for ``spec``, or None where its
    axes cannot be merged into the kernel's four (then ``jnp.einsum`` it)."""
    inputs, out = spec.split("->")
    xs, ws = inputs.split(",")
    if "." in spec or len(set(xs)) != len(xs) or len(set(ws)) != len(ws):
        return None
    sizes = dict(zip(xs, x_shape)) | dict(zip(ws, w_shape))
    out_shape = tuple(sizes[a] for a in out)
    arrays = [(xs, x_shape), (ws, w_shape), (out, out_shape)]
    groups = {
        "g": "".join(a for a in out if a in xs and a in ws),
        "m": "".join(a for a in out if a in xs and a not in ws),
        "k": "".join(a for a in xs if a in ws and a not in out),
        "n": "".join(a for a in out if a in ws and a not in xs),
    }
    if set(xs) | set(ws) != set(out) | set(groups["k"]):
        return None  # an axis summed away in one operand alone
    strides = {}
    for name, letters in groups.items():
        merged = _group(letters, arrays)
        if merged is None:
            return None
        strides[name] = merged
    size = {name: math.prod(sizes[a] for a in letters) for name, letters in groups.items()}
    return {
        "groups": size["g"],
        "m": size["m"],
        "k": size["k"],
        "n": size["n"],
        "x_strides": (strides["g"][0], strides["m"][0], strides["k"][0]),
        "w_strides": (strides["g"][1], strides["k"][1], strides["n"][1]),
        "out_strides": (strides["g"][2], strides["m"][2], strides["n"][2]),
        "out_shape": out_shape,
    }


def fits(spec: str, x: jax.Array, w: jax.Array) -> bool:
    """Whether ``skinny_einsum`` takes this call: one float dtype, at most ``MAX_ROWS``
    rows, axes the kernel can stride through."""
    if x.dtype != w.dtype or x.dtype not in DTYPES or x.size == 0:
        return False
    p = plan(spec, x.shape, w.shape)
    return p is not None and p["m"] <= MAX_ROWS


def skinny_einsum(
    spec: str,
    x: jax.Array,
    w: jax.Array,
    *,
    preferred_element_type: Any = None,
    compute_capability: int | None = None,
    config: SkinnyConfig | None = None,
) -> jax.Array:
    """``jnp.einsum(spec, x, w, preferred_element_type=...)`` on a CUDA GPU for a call
    ``fits`` takes: the products in float32, the reduction's slices summed in float32,
    the result in ``preferred_element_type`` (default x's dtype)."""
    from mla_jax import _launch  # Triton: an optional dependency
    from mla_jax.skinny import kernel

    if not fits(spec, x, w):
        raise ValueError(
            f"skinny_einsum: {spec!r} of {x.dtype}{list(x.shape)} and {w.dtype}{list(w.shape)} "
            f"is not a product of at most {MAX_ROWS} rows in one float dtype with mergeable "
            "axes; use jnp.einsum"
        )
    p = plan(spec, x.shape, w.shape)
    assert p is not None
    if config is None:
        config = default_config(groups=p["groups"], k=p["k"], n=p["n"])
    dtype = jnp.dtype(preferred_element_type or x.dtype)
    partial_dtype = dtype if config.splits == 1 else jnp.float32
    params = kernel.launch_params(
        groups=p["groups"],
        m=p["m"],
        k=p["k"],
        n=p["n"],
        x_strides=p["x_strides"],
        w_strides=p["w_strides"],
        out_strides=p["out_strides"],
        float32=x.dtype == jnp.float32,
        config=config,
    )
    (out,) = _launch.launch(
        kernel.skinny_matmul,
        [x, w],
        out_shapes=[jax.ShapeDtypeStruct((config.splits, *p["out_shape"]), partial_dtype)],
        compute_capability=compute_capability,
        **params,
    )
    if config.splits == 1:
        return out[0]
    return out.sum(axis=0).astype(dtype)
