"""``flash_prefill``: causal attention over right-padded prompts through the Triton
kernel (``mla_jax.prefill.kernel``), one launch, memory linear in the prompt.

MLA's prefill runs the non-absorbed form: each head's keys are its ``k_nope``
(decompressed from the latent rows) and the rope part ``k_pe``, one row a token shared
by every head; pass the keys as that pair and the kernel reads ``k_pe`` once a token,
not ``H`` copies of it. Plain multi-head attention passes one ``[B, T, H, D]`` array.
The queries' rope part may come apart too (``(q, q_pe)``), so a projection's output
passes as it is, with no concatenation.
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp

from mla_jax._checks import check_array, check_triton_build
from mla_jax.prefill.config import PrefillConfig, default_config

DTYPES = (jnp.bfloat16, jnp.float16, jnp.float32)

Keys = jax.Array | tuple[jax.Array, jax.Array]
Queries = jax.Array | tuple[jax.Array, jax.Array]


def split_dims(dim_qk: int) -> tuple[int, int]:
    """The two parts a ``dim_qk``-wide ``q . k`` of one key array is computed in: the
    largest power of two at most ``dim_qk``, then the rest (192: 128 + 64, DeepSeek's
    nope and rope widths; 128: 128 + 0), so neither part is padded far."""
    first = 1 << (dim_qk.bit_length() - 1)
    return first, dim_qk - first


def _describe(a) -> str:
    return f"{a.dtype}{list(a.shape)}"


def _pair(
    name: str, a: jax.Array | tuple[jax.Array, jax.Array], pair: str
) -> tuple[jax.Array, jax.Array | None]:
    """``a``'s two parts: the pair's, or the one array and None; ``pair`` names the
    pair's parts for the error of a tuple of any other length."""
    if not isinstance(a, tuple | list):
        return a, None
    if len(a) != 2:
        raise ValueError(
            f"{name}: got a {type(a).__name__} of {len(a)}, needed one [B, T, H, D] array "
            f"or the pair {pair}"
        )
    return a[0], a[1]


def _check(
    queries: Queries, k: Keys, v: jax.Array, lengths: jax.Array
) -> tuple[jax.Array, jax.Array | None, int, int, bool]:
    """Shapes and dtypes, each error naming the argument and what it needed; returns
    ``(q, q_pe, dim_nope, dim_rope, shared_pe)``: the queries apart (``q_pe`` None
    where q holds its rope part) and the two parts of ``q . k``."""
    q, q_pe = _pair("q", queries, "(q [B, T, H, D], q_pe [B, T, H, R])")
    check_array("q" if q_pe is None else "q[0] (q)", q)
    check_array("v", v)
    check_array("lengths", lengths)
    if q.ndim != 4 or q.dtype not in DTYPES:
        raise ValueError(
            f"q: got {_describe(q)}, needed [B, T, H, D] in bfloat16, float16 or float32"
        )
    batch, tokens, heads, dim_qk = q.shape
    key, k_pe = _pair("k", k, "(k_nope [B, T, H, D - R], k_pe [B, T, R])")
    if k_pe is not None:
        k_nope = key
        check_array("k[0] (k_nope)", k_nope)
        check_array("k[1] (k_pe)", k_pe)
        rope = k_pe.shape[-1] if k_pe.ndim == 3 else -1
        if k_pe.shape != (batch, tokens, rope) or not 0 < rope < dim_qk:
            raise ValueError(
                f"k[1] (k_pe): got {_describe(k_pe)}, needed [{batch}, {tokens}, R], the "
                f"rope keys shared by the heads, with 0 < R < {dim_qk} (q's last axis)"
            )
        nope = dim_qk - rope
        if k_nope.shape != (batch, tokens, heads, nope):
            raise ValueError(
                f"k[0] (k_nope): got {_describe(k_nope)}, needed {[batch, tokens, heads, nope]}"
                f" (q's [B, T, H] and its last axis {dim_qk} less k_pe's {rope})"
            )
        parts: tuple[tuple[str, jax.Array], ...] = (
            ("k[0] (k_nope)", k_nope),
            ("k[1] (k_pe)", k_pe),
        )
        shared = True
    else:
        check_array("k", key)
        if key.shape != q.shape:
            raise ValueError(
                f"k: got {_describe(key)}, needed q's shape {list(q.shape)} (or the pair "
                "(k_nope, k_pe) with the rope keys shared by the heads)"
            )
        nope, rope = split_dims(dim_qk)
        parts, shared = (("k", key),), False
    if q_pe is not None:
        check_array("q[1] (q_pe)", q_pe)
        if q_pe.shape != (batch, tokens, heads, rope) or rope == 0:
            raise ValueError(
                f"q[1] (q_pe): got {_describe(q_pe)}, needed {[batch, tokens, heads, rope]} "
                f"(the last {rope} of q[0]'s {dim_qk} values, which it replaces)"
                if rope
                else f"q[1] (q_pe): got {_describe(q_pe)}, but these keys have no rope part"
            )
        parts += (("q[1] (q_pe)", q_pe),)
    for name, a in (*parts, ("v", v)):
        if a.dtype != q.dtype:
            raise ValueError(f"{name}: got {a.dtype}, needed q's dtype {q.dtype} (cast it)")
    if v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"v: got {_describe(v)}, needed [{batch}, {tokens}, {heads}, DV]")
    if lengths.dtype != jnp.int32 or lengths.shape != (batch,):
        raise ValueError(
            f"lengths: got {_describe(lengths)}, needed int32 [{batch}] (each prompt's "
            f"tokens, 0 to {tokens})"
        )
    return q, q_pe, nope, rope, shared


def flash_prefill(
    q: Queries,
    k: Keys,
    v: jax.Array,
    lengths: jax.Array,
    *,
    scale: float,
    compute_capability: int | None = None,
    config: PrefillConfig | None = None,
) -> jax.Array:
    """Causal attention of right-padded prompts, ``softmax(scale * q . k) v`` per head,
    on a CUDA GPU.

    Args:
      q: ``[B, T, H, D]``, bfloat16, float16 or float32; or the pair ``(q, q_pe)``
        whose ``q_pe [B, T, H, R]`` replaces q's last ``R`` values, the keys' rope
        part (a projection's output passes unrotated, its rotated rope part beside
        it, and nothing is concatenated).
      k: the keys in q's dtype: ``[B, T, H, D]``, or MLA's pair ``(k_nope [B, T, H,
        D - R], k_pe [B, T, R])`` whose rope keys ``k_pe`` every head shares (``q``'s
        last ``R`` values meet ``k_pe``, its first ``D - R`` meet ``k_nope``).
      v: ``[B, T, H, DV]`` in q's dtype.
      lengths: int32 ``[B]``: prompt ``b`` is tokens ``[0, lengths[b])``; token ``t``
        attends to tokens ``[0, t]``. A length past ``T`` counts as ``T``.
      scale: the softmax scale, a Python or numpy number (it is compiled into the
        kernel: a traced scale cannot be).
      compute_capability: the CUDA capability to build for (e.g. 90: lowering needs
        no GPU); None asks device 0 at lowering.
      config: the kernel's tiles (``PrefillConfig``); None: ``default_config``'s choice.

    Returns:
      ``[B, T, H, DV]`` in q's dtype: the softmax computed in float32 (its weights
      rounded to v's dtype for the product with v), each row rounded once. Rows
      ``t >= lengths[b]`` are zeros, and the kernel reads no query, key or value past
      a length.
    """
    from mla_jax import _launch  # Triton: an optional dependency
    from mla_jax.prefill import kernel

    q, q_pe, dim_nope, dim_rope, shared_pe = _check(q, k, v, lengths)
    cc = check_triton_build(q.dtype, compute_capability, config, PrefillConfig, operands="inputs")
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ValueError(
            f"scale: got {scale!r}, needed a Python float (the kernel is built with it; a "
            "traced or array scale cannot be)"
        )
    batch, tokens, heads, _ = q.shape
    dim_v = v.shape[3]
    if batch * tokens * heads == 0:
        return jnp.zeros((batch, tokens, heads, dim_v), q.dtype)
    if config is None:
        config = default_config(
            tokens=tokens,
            dim_nope=dim_nope,
            dim_rope=dim_rope,
            dim_v=dim_v,
            itemsize=q.dtype.itemsize,
        )
    params = kernel.launch_params(
        batch=batch,
        tokens=tokens,
        heads=heads,
        dim_nope=dim_nope,
        dim_rope=dim_rope,
        dim_v=dim_v,
        shared_pe=shared_pe,
        scale=float(scale),
        float32=q.dtype == jnp.float32,
        config=config,
        q_pe=q_pe is not None,
    )
    keys = tuple(k) if shared_pe else (k, k)
    (out,) = _launch.launch(
        kernel.flash_prefill_fwd,
        [q, q if q_pe is None else q_pe, *keys, v, lengths, jnp.full((1,), tokens, jnp.int32)],
        out_shapes=[jax.ShapeDtypeStruct((batch, tokens, heads, dim_v), q.dtype)],
        compute_capability=cc,
        **params,
    )
    return out
