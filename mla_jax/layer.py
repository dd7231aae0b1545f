"""A DeepSeek-style MLA attention layer for decode, in pure JAX.

``mla_decode_layer`` takes the absorbed path: ``W_UK`` is folded into the query so
attention runs over the cached latent rows themselves (``mla_decode``), and ``W_UV``
is applied once to the latent output. ``naive_mla_attention`` is the same layer
without absorption (keys and values decompressed for every cached token), the
reference the absorbed path is tested against.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import NamedTuple

import jax
import jax.numpy as jnp

from mla_jax.buffers import LogitsBuffer
from mla_jax.cache import append_latent
from mla_jax.decode import Backend, mla_decode


@dataclasses.dataclass(frozen=True)
class MLAConfig:
    """Sizes of one MLA layer (DeepSeek-V2/V3 naming)."""

    hidden_size: int
    num_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type == "int" and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{field.name} must be a positive int, got {value!r}")
        # The Triton kernels tile both latent parts with tl.arange and tl.dot.
        for name in ("kv_lora_rank", "qk_rope_head_dim"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two >= 16, got {value}")

    @property
    def latent_dim(self) -> int:
        """Width of a cache row: ``kv_lora_rank + qk_rope_head_dim``."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        """DeepSeek's ``1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)``."""
        return (self.qk_nope_head_dim + self.qk_rope_head_dim) ** -0.5


PRESETS: MappingProxyType[str, MLAConfig] = MappingProxyType({
    "deepseek-v3": MLAConfig(hidden_size=7168, num_heads=128, q_lora_rank=1536,
                             kv_lora_rank=512, qk_rope_head_dim=64,
                             qk_nope_head_dim=128, v_head_dim=128),
    "tiny": MLAConfig(hidden_size=64, num_heads=4, q_lora_rank=32, kv_lora_rank=32,
                      qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16),
})


class MLAParams(NamedTuple):
    """One layer's weights (``H`` = num_heads, ``C`` = kv_lora_rank)."""

    wq_a: jax.Array       # [hidden, q_lora_rank]
    q_a_norm: jax.Array   # [q_lora_rank]
    wq_b: jax.Array       # [q_lora_rank, H, nope + rope]
    wkv_a: jax.Array      # [hidden, C + rope]
    kv_a_norm: jax.Array  # [C]
    w_uk: jax.Array       # [C, H, nope]: k_nope = kv_c @ w_uk
    w_uv: jax.Array       # [C, H, v_head]: v = kv_c @ w_uv
    wo: jax.Array         # [H, v_head, hidden]


def init_params(config: MLAConfig, key: jax.Array, dtype: jnp.dtype = jnp.float32) -> MLAParams:
    """Random weights, each matrix normal with variance 1/fan_in; norm weights 1."""
    c = config
    heads, qk_dim = c.num_heads, c.qk_nope_head_dim + c.qk_rope_head_dim
    shapes = {
        "wq_a": ((c.hidden_size, c.q_lora_rank), c.hidden_size),
        "wq_b": ((c.q_lora_rank, heads, qk_dim), c.q_lora_rank),
        "wkv_a": ((c.hidden_size, c.latent_dim), c.hidden_size),
        "w_uk": ((c.kv_lora_rank, heads, c.qk_nope_head_dim), c.kv_lora_rank),
        "w_uv": ((c.kv_lora_rank, heads, c.v_head_dim), c.kv_lora_rank),
        "wo": ((heads, c.v_head_dim, c.hidden_size), heads * c.v_head_dim),
    }
    keys = dict(zip(shapes, jax.random.split(key, len(shapes))))
    weights = {name: (jax.random.normal(keys[name], shape, jnp.float32)
                      * fan_in ** -0.5).astype(dtype)
               for name, (shape, fan_in) in shapes.items()}
    return MLAParams(q_a_norm=jnp.ones(c.q_lora_rank, dtype),
                     kv_a_norm=jnp.ones(c.kv_lora_rank, dtype), **weights)


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """RMSNorm over the last axis, computed in float32, returned in x's dtype."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (normed * weight.astype(jnp.float32)).astype(x.dtype)


def apply_rope(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
    """Rotary embedding, rotate-half convention, on the last axis of ``x``.

    ``positions`` broadcasts against ``x.shape[:-1]`` (``[B]`` for ``[B, rope]``,
    ``[B, 1]`` for ``[B, H, rope]``). Only relative positions survive a q.k product.
    """
    half = x.shape[-1] // 2
    inv_freq = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions.astype(jnp.float32)[..., None] * inv_freq
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).astype(x.dtype)


def _queries(params: MLAParams, config: MLAConfig, x, positions):
    """``q_nope [B, H, nope]`` and rotated ``q_pe [B, H, rope]``."""
    q = rms_norm(x @ params.wq_a, params.q_a_norm, config.rms_norm_eps)
    q = jnp.einsum("bq,qhd->bhd", q, params.wq_b)
    q_nope, q_pe = q[..., :config.qk_nope_head_dim], q[..., config.qk_nope_head_dim:]
    return q_nope, apply_rope(q_pe, positions[:, None], config.rope_theta)


def _latent_row(params: MLAParams, config: MLAConfig, x, positions):
    """The token's cache row ``[B, kv_lora_rank + rope]``: normed ``kv_c`` ++ rotated ``k_pe``."""
    kv = x @ params.wkv_a
    kv_c = rms_norm(kv[:, :config.kv_lora_rank], params.kv_a_norm, config.rms_norm_eps)
    k_pe = apply_rope(kv[:, config.kv_lora_rank:], positions, config.rope_theta)
    return jnp.concatenate([kv_c, k_pe], axis=-1)


def _check_x(config: MLAConfig, x: jax.Array, positions: jax.Array) -> None:
    if x.ndim != 2 or x.shape[1] != config.hidden_size:
        raise ValueError(f"x: got {list(x.shape)}, needed [B, {config.hidden_size}]")
    if positions.dtype != jnp.int32 or positions.shape != x.shape[:1]:
        raise ValueError(f"positions: got {positions.dtype}{list(positions.shape)}, "
                         f"needed int32 [{x.shape[0]}]")


def mla_decode_layer(
    params: MLAParams,
    config: MLAConfig,
    x: jax.Array,
    kv_cache: jax.Array,
    block_table: jax.Array,
    positions: jax.Array,
    logits_buffer: LogitsBuffer,
    *,
    backend: Backend = "auto",
) -> tuple[jax.Array, jax.Array, LogitsBuffer]:
    """One decode step of the absorbed MLA layer.

    Args:
      x: ``[B, hidden]``, the new token's hidden state per sequence.
      kv_cache: ``[num_pages, page_size, kv_lora_rank + rope]``; its dtype is the
        attention dtype (q is cast to it).
      block_table: int32 ``[B, pages_per_seq]``.
      positions: int32 ``[B]``, the new token's index; tokens ``[0, positions)``
        are already cached, and this step's row is appended at ``positions``.
      logits_buffer: from ``reserve_logits_buffer(..., kv_lora_rank=config.kv_lora_rank,
        rope_dim=config.qk_rope_head_dim)``; donated by ``mla_decode`` when this runs
        outside ``jit``.
      backend: passed to ``mla_decode``.

    Returns:
      ``y [B, hidden]`` in x's dtype, the cache with the new rows, the logits buffer.
    """
    _check_x(config, x, positions)
    q_nope, q_pe = _queries(params, config, x, positions)
    # Absorption: q_nope . (kv_c @ W_UK) == (W_UK @ q_nope) . kv_c, per head.
    q_latent = jnp.einsum("bhn,chn->bhc", q_nope, params.w_uk)
    row = _latent_row(params, config, x, positions)
    kv_cache = append_latent(kv_cache, row.astype(kv_cache.dtype), block_table, positions)
    out, _, logits_buffer = mla_decode(
        (q_latent.astype(kv_cache.dtype), q_pe.astype(kv_cache.dtype)), kv_cache,
        block_table, positions + 1, logits_buffer, scale=config.softmax_scale,
        max_seq_len=None, backend=backend)
    v = jnp.einsum("bhc,chv->bhv", out.astype(x.dtype), params.w_uv)
    return jnp.einsum("bhv,hvd->bd", v, params.wo), kv_cache, logits_buffer


def naive_mla_attention(
    params: MLAParams,
    config: MLAConfig,
    x: jax.Array,
    latents: jax.Array,
    positions: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """The same step without absorption, over a dense latent history, in float32.

    Args:
      x: ``[B, hidden]``.
      latents: ``[B, T, kv_lora_rank + rope]``, cached rows in token order; rows
        ``t < positions[b]`` are attended to, the rest ignored.
      positions: int32 ``[B]``, the new token's index.

    Returns:
      ``y [B, hidden]`` float32 and the new token's row ``[B, kv_lora_rank + rope]``.
    """
    _check_x(config, x, positions)
    params = jax.tree.map(lambda w: w.astype(jnp.float32), params)
    x = x.astype(jnp.float32)
    with jax.default_matmul_precision("highest"):
        q_nope, q_pe = _queries(params, config, x, positions)
        row = _latent_row(params, config, x, positions)
        # The new token attends to itself: its row goes last, always live.
        keys = jnp.concatenate([latents.astype(jnp.float32), row[:, None]], axis=1)
        t = jnp.arange(keys.shape[1])
        live = (t[None, :] < positions[:, None]) | (t == latents.shape[1])[None, :]
        kv_c, k_pe = keys[..., :config.kv_lora_rank], keys[..., config.kv_lora_rank:]
        k_nope = jnp.einsum("btc,chn->bthn", kv_c, params.w_uk)
        values = jnp.einsum("btc,chv->bthv", kv_c, params.w_uv)
        logits = (jnp.einsum("bhn,bthn->bht", q_nope, k_nope)
                  + jnp.einsum("bhr,btr->bht", q_pe, k_pe)) * config.softmax_scale
        weights = jax.nn.softmax(jnp.where(live[:, None, :], logits, -jnp.inf), axis=-1)
        heads = jnp.einsum("bht,bthv->bhv", weights, values)
        return jnp.einsum("bhv,hvd->bd", heads, params.wo), row
