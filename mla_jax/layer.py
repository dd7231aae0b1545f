"""DeepSeek-V2/V3's MLA attention layer, in pure JAX, with the math of transformers'
``DeepseekV2Attention`` / ``DeepseekV3Attention``.

The rope part of the query and key rotates interleaved pairs ``(x0, x1), (x2, x3), ...``
(``rope_interleave``; V2's complex rotation is the same), with YaRN frequencies and
``mscale`` when ``rope_scaling`` is set; the query comes through a LoRA
(``q_a_proj``, norm, ``q_b_proj``) or, with ``q_lora_rank=None``, one ``q_proj``.

``mla_decode_layer`` takes the absorbed path: ``W_UK`` is folded into the query so
attention runs over the cached latent rows themselves (``mla_decode``), and ``W_UV``
is applied once to the latent output. ``mla_prefill_layer`` runs a whole prompt with
causal attention and writes its rows into the paged cache. ``naive_mla_attention`` is
the decode step without absorption (keys and values decompressed for every cached
token), the reference the absorbed path is tested against.

A cache row is ``kv_c ++ k_pe`` with the rotated ``k_pe`` stored de-interleaved
(the even lanes, then the odd ones, as transformers' V3 returns them); queries are
permuted the same way, so every ``q . k`` is DeepSeek's.
"""

from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax._checks import check_array, is_int, narrow_int32, positive_int
from mla_jax.buffers import LogitsBuffer
from mla_jax.cache import append_latent, write_latents
from mla_jax.decode import Backend, mla_decode, resolve_backend
from mla_jax.prefill import flash_prefill
from mla_jax.validate import validate_inputs


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


@dataclasses.dataclass(frozen=True)
class YarnScaling:
    """YaRN RoPE scaling (``rope_scaling`` type ``"yarn"``), as transformers computes it.

    ``factor`` stretches the low frequencies, ``original_max_position_embeddings``
    is the pre-training context, ``beta_fast``/``beta_slow`` bound the ramp between
    interpolated and extrapolated frequencies. ``cos``/``sin`` are multiplied by
    ``attention_factor`` (default ``mscale(factor, mscale) / mscale(factor,
    mscale_all_dim)`` when both are set, else ``mscale(factor)``), and the softmax
    scale by ``mscale(factor, mscale_all_dim) ** 2`` when ``mscale_all_dim`` is set.
    """

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 0.0
    mscale_all_dim: float = 0.0
    attention_factor: float | None = None
    truncate: bool = True

    def __post_init__(self):
        if not self.factor > 0 or self.original_max_position_embeddings < 1:
            raise ValueError(
                f"YarnScaling: got factor={self.factor}, original_max_position_"
                f"embeddings={self.original_max_position_embeddings}, needed both > 0"
            )

    def rope_factor(self) -> float:
        """What ``cos`` and ``sin`` are multiplied by."""
        if self.attention_factor is not None:
            return self.attention_factor
        if self.mscale and self.mscale_all_dim:
            return _yarn_mscale(self.factor, self.mscale) / _yarn_mscale(
                self.factor, self.mscale_all_dim
            )
        return _yarn_mscale(self.factor)

    def softmax_factor(self) -> float:
        """What the softmax scale is multiplied by."""
        if not self.mscale_all_dim:
            return 1.0
        return _yarn_mscale(self.factor, self.mscale_all_dim) ** 2

    def inv_freq(self, dim: int, base: float) -> np.ndarray:
        """float32 ``[dim // 2]``, computed in float32 like transformers."""

        def correction_dim(rotations):
            return (
                dim * math.log(self.original_max_position_embeddings / (rotations * 2 * math.pi))
            ) / (2 * math.log(base))

        low, high = correction_dim(self.beta_fast), correction_dim(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001  # as transformers: no zero-width ramp
        pos_freqs = np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))
        extrapolation = np.float32(1) / pos_freqs
        interpolation = np.float32(1) / (np.float32(self.factor) * pos_freqs)
        ramp = np.clip(
            (np.arange(dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1
        ).astype(np.float32)
        keep = np.float32(1) - ramp
        return (interpolation * (1 - keep) + extrapolation * keep).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class MLAConfig:
    """Sizes of one MLA layer (DeepSeek-V2/V3 naming).

    ``q_lora_rank=None`` is a plain ``q_proj`` (DeepSeek-V2-Lite). ``rope_interleave``
    rotates interleaved pairs (DeepSeek's checkpoints); ``False`` rotates the two
    contiguous halves (transformers' V3 with ``rope_interleave=False``).
    """

    hidden_size: int
    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    rope_interleave: bool = True
    rope_scaling: YarnScaling | None = None

    def __post_init__(self):
        for name in (
            "hidden_size",
            "num_heads",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "qk_nope_head_dim",
            "v_head_dim",
        ):
            # Stored as a Python int (a numpy integer is accepted): the sizes are static.
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        if self.q_lora_rank is not None:
            if not is_int(self.q_lora_rank) or self.q_lora_rank < 1:
                raise ValueError(
                    f"q_lora_rank must be a positive int or None, got {self.q_lora_rank!r}"
                )
            object.__setattr__(self, "q_lora_rank", int(self.q_lora_rank))
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
        """``(qk_nope_head_dim + qk_rope_head_dim) ** -0.5``, times YaRN's ``mscale**2``."""
        scale = (self.qk_nope_head_dim + self.qk_rope_head_dim) ** -0.5
        return scale * (self.rope_scaling.softmax_factor() if self.rope_scaling else 1.0)

    def rope_inv_freq(self) -> np.ndarray:
        """float32 ``[qk_rope_head_dim // 2]``: each rotary pair's frequency."""
        dim, base = self.qk_rope_head_dim, self.rope_theta
        if self.rope_scaling is not None:
            return self.rope_scaling.inv_freq(dim, base)
        return (
            1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
        ).astype(np.float32)


_YARN_40: dict[str, Any] = {
    "factor": 40.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
}
PRESETS: MappingProxyType[str, MLAConfig] = MappingProxyType(
    {
        "deepseek-v3": MLAConfig(
            hidden_size=7168,
            num_heads=128,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            rope_scaling=YarnScaling(**_YARN_40, mscale=1.0, mscale_all_dim=1.0),
        ),
        "deepseek-v2-lite": MLAConfig(
            hidden_size=2048,
            num_heads=16,
            q_lora_rank=None,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            rope_scaling=YarnScaling(**_YARN_40, mscale=0.707, mscale_all_dim=0.707),
        ),
        "tiny": MLAConfig(
            hidden_size=64,
            num_heads=4,
            q_lora_rank=32,
            kv_lora_rank=32,
            qk_rope_head_dim=16,
            qk_nope_head_dim=16,
            v_head_dim=16,
        ),
    }
)


class MLAParams(NamedTuple):
    """One layer's weights (``H`` = num_heads, ``C`` = kv_lora_rank), ``x @ w`` layout."""

    wq_a: jax.Array | None  # [hidden, q_lora_rank]; None without a q LoRA
    q_a_norm: jax.Array | None  # [q_lora_rank]; None without a q LoRA
    wq_b: jax.Array  # [q_lora_rank, H, nope + rope], or q_proj [hidden, H, ...]
    wkv_a: jax.Array  # [hidden, C + rope]
    kv_a_norm: jax.Array  # [C]
    w_uk: jax.Array  # [C, H, nope]: k_nope = kv_c @ w_uk
    w_uv: jax.Array  # [C, H, v_head]: v = kv_c @ w_uv
    wo: jax.Array  # [H, v_head, hidden]


def init_params(config: MLAConfig, key: jax.Array, dtype: jnp.dtype = jnp.float32) -> MLAParams:
    """Random weights, each matrix normal with variance 1/fan_in; norm weights 1."""
    c = config
    heads, qk_dim = c.num_heads, c.qk_nope_head_dim + c.qk_rope_head_dim
    q_in = c.hidden_size if c.q_lora_rank is None else c.q_lora_rank
    shapes = {
        "wq_b": ((q_in, heads, qk_dim), q_in),
        "wkv_a": ((c.hidden_size, c.latent_dim), c.hidden_size),
        "w_uk": ((c.kv_lora_rank, heads, c.qk_nope_head_dim), c.kv_lora_rank),
        "w_uv": ((c.kv_lora_rank, heads, c.v_head_dim), c.kv_lora_rank),
        "wo": ((heads, c.v_head_dim, c.hidden_size), heads * c.v_head_dim),
    }
    if c.q_lora_rank is not None:
        shapes["wq_a"] = ((c.hidden_size, c.q_lora_rank), c.hidden_size)
    keys = dict(zip(shapes, jax.random.split(key, len(shapes))))
    weights = {
        name: (jax.random.normal(keys[name], shape, jnp.float32) * fan_in**-0.5).astype(dtype)
        for name, (shape, fan_in) in shapes.items()
    }
    weights.setdefault("wq_a", None)
    q_a_norm = None if c.q_lora_rank is None else jnp.ones(c.q_lora_rank, dtype)
    return MLAParams(q_a_norm=q_a_norm, kv_a_norm=jnp.ones(c.kv_lora_rank, dtype), **weights)


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """RMSNorm over the last axis, computed in float32, returned in x's dtype."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (normed * weight.astype(jnp.float32)).astype(x.dtype)


def project(spec: str, x: jax.Array, w: jax.Array, **einsum: Any) -> jax.Array:
    """``jnp.einsum(spec, x, w, **einsum)`` of activations ``x`` and a weight ``w``,
    with a lone row computed as two (a zero row beside it, sliced off).

    ``spec`` names ``x``'s axes first, leading ``...`` allowed; its first axis must be
    a row axis (in the output, not in ``w``). Why the second row: XLA's GPU compiler
    rewrites a dot with a vector operand (its row axes multiply to 1) into a multiply
    and a reduction when (rows + columns) x the contracted size is under ten million,
    which covers every projection of a V2-Lite decode step; at batch one it stores the
    whole weight-sized product before reducing it, about three times a matmul's memory
    traffic, each product rounded to the operands' dtype. Two rows keep it a matrix
    product, which XLA hands to a GEMM (docs/performance.md, "One-row matmuls").
    """
    inputs, out = spec.split("->")
    xs, ws = inputs.split(",")
    lead = xs.startswith("...")
    named = xs.removeprefix("...")
    ellipsis = x.shape[: x.ndim - len(named)] if lead else ()
    rows = math.prod(ellipsis) * math.prod(
        n for n, axis in zip(x.shape[len(ellipsis) :], named) if axis in out and axis not in ws
    )
    if rows != 1:
        return jnp.einsum(spec, x, w, **einsum)
    two = jnp.concatenate([x, jnp.zeros_like(x)], axis=0)
    return jnp.einsum(spec, two, w, **einsum)[:1]


def apart(x: jax.Array, n: int) -> tuple[jax.Array, ...]:
    """``n`` handles on ``x`` that XLA's GPU compiler takes for different inputs, for
    matmuls of many rows that share ``x``.

    Its dot merger joins small matmuls that share an input into one over their weights
    concatenated. A fused GEMM reads such a concatenation in place, but the large-row
    matmuls of a prefill go to cuBLAS: there the merged one copies the weights into
    one array each call, and its output is cut apart again by copies where each part
    must be an array of its own (``_flash_inputs``). The outputs of an optimization
    barrier are distinct values to the merger; the barrier itself launches nothing.
    """
    return tuple(jax.lax.optimization_barrier((x,) * n))


def apply_rope(x: jax.Array, positions: jax.Array, config: MLAConfig) -> jax.Array:
    """DeepSeek's rotary embedding on the last axis of ``x`` (``qk_rope_head_dim`` wide).

    With ``config.rope_interleave`` the pairs ``(x[2i], x[2i+1])`` rotate by
    ``positions * inv_freq[i]`` and the result is returned de-interleaved (the pairs'
    first lanes, then their second lanes), as transformers' V3 does; otherwise the
    halves ``x[:d/2]``, ``x[d/2:]`` pair up. ``cos`` and ``sin`` carry YaRN's factor.
    ``positions`` broadcasts against ``x.shape[:-1]`` (``[B]`` for ``[B, rope]``,
    ``[B, 1]`` for ``[B, H, rope]``). Computed in float32, returned in x's dtype.
    """
    factor = config.rope_scaling.rope_factor() if config.rope_scaling else 1.0
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(config.rope_inv_freq())
    cos, sin = jnp.cos(angles) * factor, jnp.sin(angles) * factor
    x32 = x.astype(jnp.float32)
    if config.rope_interleave:
        x1, x2 = x32[..., 0::2], x32[..., 1::2]
    else:
        half = x.shape[-1] // 2
        x1, x2 = x32[..., :half], x32[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def _query_heads(params: MLAParams, config: MLAConfig, x, positions):
    """The query projection ``q [..., H, nope + rope]`` of ``x [..., hidden]`` (its rope
    part as projected) and that part rotated, ``q_pe [..., H, rope]``."""
    if params.wq_a is None:
        q = x
    else:
        assert params.q_a_norm is not None, "a q LoRA has its norm"
        q = rms_norm(project("...h,hq->...q", x, params.wq_a), params.q_a_norm, config.rms_norm_eps)
    q = project("...q,qhd->...hd", q, params.wq_b)
    return q, apply_rope(q[..., config.qk_nope_head_dim :], positions[..., None], config)


def _queries(params: MLAParams, config: MLAConfig, x, positions):
    """``q_nope [..., H, nope]`` and rotated ``q_pe [..., H, rope]`` for ``x [..., hidden]``."""
    q, q_pe = _query_heads(params, config, x, positions)
    return q[..., : config.qk_nope_head_dim], q_pe


def _latent_row(params: MLAParams, config: MLAConfig, x, positions):
    """Cache rows ``[..., kv_lora_rank + rope]``: normed ``kv_c`` ++ rotated ``k_pe``."""
    kv = project("...h,hc->...c", x, params.wkv_a)
    kv_c = rms_norm(kv[..., : config.kv_lora_rank], params.kv_a_norm, config.rms_norm_eps)
    k_pe = apply_rope(kv[..., config.kv_lora_rank :], positions, config)
    return jnp.concatenate([kv_c, k_pe], axis=-1)


def _check_float(name: str, x: jax.Array) -> None:
    """Hidden states are floats: an integer array would be multiplied as one."""
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{name}: got {x.dtype}{list(x.shape)}, needed a float array")


def _check_x(config: MLAConfig, x: jax.Array, positions: jax.Array) -> None:
    if x.ndim != 2 or x.shape[1] != config.hidden_size:
        raise ValueError(f"x: got {list(x.shape)}, needed [B, {config.hidden_size}]")
    _check_float("x", x)
    if positions.dtype != jnp.int32 or positions.shape != x.shape[:1]:
        raise ValueError(
            f"positions: got {positions.dtype}{list(positions.shape)}, needed int32 [{x.shape[0]}]"
        )


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
    compute_capability: int | None = None,
    validate: bool = False,
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
      backend, compute_capability: passed to ``mla_decode``.
      validate: check first that each row's append position and new length lie
        inside the block table and on pages of the cache (``validate_inputs``): on
        concrete arrays a ValueError naming the row before anything runs; under a
        trace, checkify checks (wrap the enclosing function in ``checkify.checkify``).

    Returns:
      ``y [B, hidden]`` in x's dtype, the cache with the new rows, the logits buffer.
    """
    block_table, positions = check_decode_inputs(config, x, block_table, positions)
    if validate:
        validate_inputs(kv_cache, block_table, positions + 1, positions=positions)
    return decode_attention(
        params,
        config,
        x,
        kv_cache,
        block_table,
        positions,
        logits_buffer,
        backend=backend,
        compute_capability=compute_capability,
    )


def check_decode_inputs(
    config: MLAConfig, x: jax.Array, block_table: jax.Array, positions: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``mla_decode_layer``'s argument checks (errors naming the argument);
    ``block_table`` and ``positions`` returned as int32."""
    for name, array in (("x", x), ("block_table", block_table), ("positions", positions)):
        check_array(name, array)
    block_table = narrow_int32("block_table", block_table)
    positions = narrow_int32("positions", positions)
    _check_x(config, x, positions)
    return block_table, positions


def decode_attention(
    params: MLAParams,
    config: MLAConfig,
    x: jax.Array,
    kv_cache: jax.Array,
    block_table: jax.Array,
    positions: jax.Array,
    logits_buffer: LogitsBuffer,
    *,
    backend: Backend,
    compute_capability: int | None,
) -> tuple[jax.Array, jax.Array, LogitsBuffer]:
    """``mla_decode_layer``'s computation, unchecked, for ``x [R, hidden]`` with ``R >=
    B = positions.shape[0]``: rows past ``B`` are padding, computed alongside and
    neither cached nor attended (their rows of the output are unspecified).

    Why padding rows: a decode step at batch one that carries a zero row beside its
    token (``mla_jax.deepseek.model.decode_step``) keeps every matmul here at two rows
    without the pad ``project`` adds to a lone row, one small kernel fewer per matmul;
    only the attention's output, one row, is padded back for ``w_uv``.
    """
    b, extra = positions.shape[0], x.shape[0] - positions.shape[0]
    at = jnp.pad(positions, (0, extra)) if extra else positions
    q_nope, q_pe = _queries(params, config, x, at)
    # Absorption: q_nope . (kv_c @ W_UK) == (W_UK @ q_nope) . kv_c, per head.
    q_latent = project("bhn,chn->bhc", q_nope, params.w_uk)
    row = _latent_row(params, config, x, at)[:b]
    kv_cache = append_latent(kv_cache, row.astype(kv_cache.dtype), block_table, positions)
    out, _, logits_buffer = mla_decode(
        (q_latent[:b].astype(kv_cache.dtype), q_pe[:b].astype(kv_cache.dtype)),
        kv_cache,
        block_table,
        positions + 1,
        logits_buffer,
        scale=config.softmax_scale,
        max_seq_len=None,
        compute_capability=compute_capability,
        backend=backend,
    )
    out = out.astype(x.dtype)
    if extra:
        out = jnp.pad(out, ((0, extra), (0, 0), (0, 0)))
    v = project("bhc,chv->bhv", out, params.w_uv)
    return project("bhv,hvd->bd", v, params.wo), kv_cache, logits_buffer


def _dense_attention(params: MLAParams, config: MLAConfig, q_nope, q_pe, rows, live):
    """Decompressed attention in float32: queries ``[B, S, H, *]`` over latent
    ``rows [B, T, C + rope]``; ``live [B, S, T]`` says which keys each query sees.
    Returns the heads' values ``[B, S, H, v_head]`` float32."""
    f32 = jnp.float32
    kv_c, k_pe = rows[..., : config.kv_lora_rank], rows[..., config.kv_lora_rank :]
    k_nope = jnp.einsum("btc,chn->bthn", kv_c, params.w_uk, preferred_element_type=f32)
    values = jnp.einsum("btc,chv->bthv", kv_c, params.w_uv, preferred_element_type=f32)
    logits = jnp.einsum("bshn,bthn->bhst", q_nope.astype(f32), k_nope) + jnp.einsum(
        "bshr,btr->bhst", q_pe.astype(f32), k_pe.astype(f32)
    )
    logits = jnp.where(live[:, None], logits * config.softmax_scale, -jnp.inf)
    weights = jax.nn.softmax(logits, axis=-1)
    # A query with no live key (a padding row past its prompt) gives zeros, not NaN.
    weights = jnp.where(live[:, None].any(-1, keepdims=True), weights, 0.0)
    return jnp.einsum("bhst,bthv->bshv", weights, values)


def _flash_inputs(params: MLAParams, config: MLAConfig, q, q_pe, rows):
    """``flash_prefill``'s operands for queries ``[B, T, H, *]`` over latent ``rows
    [B, T, C + rope]``, all in the queries' dtype: the queries as the pair ``(q [B,
    T, H, nope + rope], q_pe [B, T, H, rope])``, the projection as it is and its
    rotated rope part (which the kernel reads in place of q's own), the keys as MLA's
    pair (``k_nope [B, T, H, nope]`` decompressed as ``_dense_attention``
    does, accumulated in float32, stored rounded; the rows' ``k_pe [B, T, rope]``, one
    for all heads) and ``v [B, T, H, v_head]``."""
    dtype = jnp.result_type(q, q_pe)
    kv_c, k_pe = rows[..., : config.kv_lora_rank], rows[..., config.kv_lora_rank :]
    # Two matmuls, each rounded by its own store (they accumulate in float32): one
    # merged float32 matmul, rounded and cut in two, would write and read both
    # [B, T, H, 128] arrays twice more.
    kv_k, kv_v = apart(kv_c, 2)
    k_nope = jnp.einsum("btc,chn->bthn", kv_k, params.w_uk, preferred_element_type=dtype)
    values = jnp.einsum("btc,chv->bthv", kv_v, params.w_uv, preferred_element_type=dtype)
    return (q.astype(dtype), q_pe.astype(dtype)), (k_nope, k_pe.astype(dtype)), values


def mla_prefill_layer(
    params: MLAParams,
    config: MLAConfig,
    x: jax.Array,
    kv_cache: jax.Array,
    block_table: jax.Array,
    lengths: jax.Array,
    *,
    backend: Backend = "auto",
    compute_capability: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """A whole prompt through the MLA layer, its rows written into the paged cache.

    Causal attention over the prompt, in the non-absorbed form (each head's keys and
    values decompressed from the latent rows), on one of two paths:

    - ``backend="triton"`` (and ``"auto"`` on a CUDA GPU, or when lowering for one
      with ``compute_capability``): ``mla_jax.prefill.flash_prefill``, one
      causal flash-attention kernel (memory linear in ``T``) on operands in the
      queries' dtype (``k_nope`` and ``v`` decompressed with float32 accumulation,
      stored in it; the rope keys read once a token for all heads). Needs a CUDA GPU, or
      ``compute_capability`` to lower for one.
    - ``backend="xla"`` (and ``"auto"`` elsewhere): dense and masked (logits and
      softmax in float32): memory ``B * H * T * T`` floats, so long prompts at a large
      batch are better prefilled a few sequences at a time (the cache is shared).

    Args:
      x: ``[B, T, hidden]``, right-padded: token ``t`` of sequence ``b`` is real when
        ``t < lengths[b]``.
      kv_cache: ``[num_pages, page_size, kv_lora_rank + rope]``; rows ``[0, lengths[b])``
        of each sequence are written (``mla_jax.cache.write_latents``), padding is not.
      block_table: int32 ``[B, pages_per_seq]``.
      lengths: int32 ``[B]`` in ``[0, T]``; the prompt starts at position 0.
      backend: ``"auto"``, ``"xla"`` or ``"triton"`` (above).
      compute_capability: the CUDA capability the kernel is built for on
        ``"triton"`` (e.g. 90; lowering needs no GPU); None asks device 0.

    Returns:
      ``y [B, T, hidden]`` in x's dtype (rows past a length are padding: computed,
      not meaningful, on ``"triton"`` zeros), and the cache with the prompt's rows.
    """
    flash = resolve_backend(backend, compute_capability) == "triton"
    if x.ndim != 3 or x.shape[2] != config.hidden_size:
        raise ValueError(f"x: got {list(x.shape)}, needed [B, T, {config.hidden_size}]")
    _check_float("x", x)
    if lengths.dtype != jnp.int32 or lengths.shape != x.shape[:1]:
        raise ValueError(
            f"lengths: got {lengths.dtype}{list(lengths.shape)}, needed int32 [{x.shape[0]}]"
        )
    batch, steps = x.shape[:2]
    positions = jnp.broadcast_to(jnp.arange(steps, dtype=jnp.int32), (batch, steps))
    x_q, x_kv = apart(x, 2)
    q, q_pe = _query_heads(params, config, x_q, positions)
    rows = _latent_row(params, config, x_kv, positions)
    kv_cache = write_latents(
        kv_cache, rows.astype(kv_cache.dtype), block_table, jnp.zeros_like(lengths), lengths
    )
    # The keys as the cache holds them, so prefill and decode see the same rows.
    rows = rows.astype(kv_cache.dtype)
    if flash:
        queries, k, v = _flash_inputs(params, config, q, q_pe, rows)
        heads = flash_prefill(
            queries,
            k,
            v,
            lengths,
            scale=config.softmax_scale,
            compute_capability=compute_capability,
        )
    else:
        t = jnp.arange(steps)
        live = (t[None, None, :] <= t[None, :, None]) & (t[None, None, :] < lengths[:, None, None])
        q_nope = q[..., : config.qk_nope_head_dim]
        heads = _dense_attention(params, config, q_nope, q_pe, rows, live)
    y = jnp.einsum("bshv,hvd->bsd", heads.astype(x.dtype), params.wo)
    return y, kv_cache


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
        heads = _dense_attention(
            params, config, q_nope[:, None], q_pe[:, None], keys, live[:, None]
        )
        return jnp.einsum("bhv,hvd->bd", heads[:, 0], params.wo), row
