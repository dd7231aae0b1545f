"""The DeepSeek-V2/V3 decoder in JAX: weights, MLP and MoE, prefill and one decode step.

``prefill`` runs right-padded prompts through every layer with causal attention (the
flash-attention kernel of ``mla_jax.prefill`` on the triton backend, dense XLA
attention on xla) and writes their latent rows into the paged caches; ``decode_step``
runs one token per sequence through the absorbed attention (``mla_jax.mla_decode``).
Both return float32 logits. The MoE layers' routed experts run on the same backend:
the fused Triton kernels (``mla_jax.moe.fused_moe``) or XLA's gathered or
``ragged_dot`` matmuls. ``"auto"`` is the triton backend on a CUDA GPU (or when
lowering for one), xla elsewhere, for every kernel alike. The math is transformers'
``DeepseekV2ForCausalLM`` / ``DeepseekV3ForCausalLM`` (pre-norm residual layers,
SwiGLU MLPs).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from mla_jax.decode import Backend, resolve_backend
from mla_jax.deepseek.config import DeepseekConfig
from mla_jax.layer import (
    MLAParams,
    apart,
    check_decode_inputs,
    decode_attention,
    mla_prefill_layer,
    project,
    rms_norm,
)
from mla_jax.layer import init_params as init_attention
from mla_jax.loop import DecodeState
from mla_jax.moe import fused_mlp, fused_moe, mlp_slices, shared_in_kernels

# Rows past which ``mlp``'s gate and up stay two matmuls (``apart``): a prefill's,
# which XLA hands to cuBLAS. Up to a decode batch of 64 a merged matmul is one fused
# GEMM that reads both weights in place, one launch fewer.
PREFILL_ROWS = 64
EXPERTS_DRAWN_AT_ONCE = 8  # init_layer's routed experts: the draw's temporaries


class MLPParams(NamedTuple):
    """A SwiGLU MLP, ``x @ w`` layout: ``down(silu(x @ gate) * (x @ up))``."""

    gate: jax.Array  # [hidden, I]
    up: jax.Array  # [hidden, I]
    down: jax.Array  # [I, hidden]


class MoEParams(NamedTuple):
    """A routed mixture of SwiGLU experts plus the shared experts (one fused MLP)."""

    router: jax.Array  # float32 [hidden, E]
    router_bias: jax.Array | None  # float32 [E]: V3's e_score_correction_bias; None for V2
    gate: jax.Array  # [E, hidden, I]
    up: jax.Array  # [E, hidden, I]
    down: jax.Array  # [E, I, hidden]
    shared: MLPParams | None  # n_shared_experts * I wide; None without shared experts


class DecoderLayerParams(NamedTuple):
    input_norm: jax.Array  # [hidden]
    attn: MLAParams
    post_attn_norm: jax.Array  # [hidden]
    mlp: MLPParams | MoEParams


class DeepseekParams(NamedTuple):
    embed: jax.Array  # [vocab, hidden]
    layers: tuple[DecoderLayerParams, ...]
    norm: jax.Array  # [hidden]
    lm_head: jax.Array  # [hidden, vocab]


def _normal(key, shape, fan_in, dtype):
    return (jax.random.normal(key, shape, jnp.float32) * fan_in**-0.5).astype(dtype)


def init_layer(
    config: DeepseekConfig, key: jax.Array, dtype: jnp.dtype = jnp.bfloat16, *, moe: bool
) -> DecoderLayerParams:
    """One decoder layer's random weights (``init_params``' layer drawn from ``key``):
    the MoE block when ``moe``, else the dense MLP. Jitted with ``config``, ``dtype``
    and ``moe`` static, it builds any layer of a model with one of two compilations."""
    hidden, experts = config.hidden_size, config.n_routed_experts

    def draw(k, shape, fan_in, stacked):
        if not stacked:
            return _normal(k, shape, fan_in, dtype)
        # The routed experts' stacks a few experts at a time: one draw of a whole
        # stack holds its float32 values and random bits at once, more than the
        # layer's weights for DeepSeek-V3 (256 experts of 7168 x 2048).
        return jax.lax.map(
            lambda k: _normal(k, shape, fan_in, dtype),
            jax.random.split(k, experts),
            batch_size=EXPERTS_DRAWN_AT_ONCE,
        )

    def mlp(k, width, stacked=False):
        kg, ku, kd = jax.random.split(k, 3)
        return (
            draw(kg, (hidden, width), hidden, stacked),
            draw(ku, (hidden, width), hidden, stacked),
            draw(kd, (width, hidden), width, stacked),
        )

    k_attn, k_mlp, k_router, k_shared = jax.random.split(key, 4)
    if moe:
        shared = (
            MLPParams(*mlp(k_shared, config.n_shared_experts * config.moe_intermediate_size))
            if config.n_shared_experts
            else None
        )
        bias = jnp.zeros(experts, jnp.float32) if config.model_type == "deepseek_v3" else None
        gate, up, down = mlp(k_mlp, config.moe_intermediate_size, stacked=True)
        block: MLPParams | MoEParams = MoEParams(
            router=_normal(k_router, (hidden, experts), hidden, jnp.float32),
            router_bias=bias,
            gate=gate,
            up=up,
            down=down,
            shared=shared,
        )
    else:
        block = MLPParams(*mlp(k_mlp, config.intermediate_size))
    return DecoderLayerParams(
        jnp.ones(hidden, dtype),
        init_attention(config.attention, k_attn, dtype),
        jnp.ones(hidden, dtype),
        block,
    )


def layer_keys(config: DeepseekConfig, key: jax.Array) -> tuple[jax.Array, jax.Array, list]:
    """``(embedding key, lm_head key, one key per layer)``, as ``init_params`` draws them."""
    k_embed, k_head, *k_layers = jax.random.split(key, config.num_hidden_layers + 2)
    return k_embed, k_head, k_layers


def init_embeddings(
    config: DeepseekConfig, k_embed: jax.Array, k_head: jax.Array, dtype: jnp.dtype
) -> tuple[jax.Array, jax.Array]:
    """``(embed [vocab, hidden], lm_head [hidden, vocab])``, as ``init_params`` draws them."""
    hidden, vocab = config.hidden_size, config.vocab_size
    return _normal(k_embed, (vocab, hidden), 1.0, dtype), _normal(
        k_head, (hidden, vocab), hidden, dtype
    )


def init_params(
    config: DeepseekConfig, key: jax.Array, dtype: jnp.dtype = jnp.bfloat16
) -> DeepseekParams:
    """Random weights of the right shapes (normal, variance 1/fan_in; norms 1): for
    throughput runs, not a trained model. Jit it to build small models on the device;
    a big one builds faster a layer at a time (``init_layer`` jitted, per layer key of
    ``layer_keys``: the same draws)."""
    k_embed, k_head, k_layers = layer_keys(config, key)
    layers = tuple(
        init_layer(config, k, dtype, moe=config.is_moe_layer(i)) for i, k in enumerate(k_layers)
    )
    embed, lm_head = init_embeddings(config, k_embed, k_head, dtype)
    return DeepseekParams(embed, layers, jnp.ones(config.hidden_size, dtype), lm_head)


def mlp(params: MLPParams, x: jax.Array) -> jax.Array:
    """SwiGLU over the last axis of ``x`` (a lone row's matmuls kept GEMMs: ``project``;
    a prefill's gate and up kept two matmuls: ``apart``)."""
    x_gate, x_up = apart(x, 2) if x.size // x.shape[-1] > PREFILL_ROWS else (x, x)
    gate = project("...h,hi->...i", x_gate, params.gate)
    h = jax.nn.silu(gate) * project("...h,hi->...i", x_up, params.up)
    return project("...i,ih->...h", h, params.down)


def _top_groups(scores: jax.Array, config: DeepseekConfig, group_score) -> jax.Array:
    """bool ``[N, E]``: the experts in each token's ``topk_group`` best groups."""
    n, experts = scores.shape
    grouped = scores.reshape(n, config.n_group, experts // config.n_group)
    best = jax.lax.top_k(group_score(grouped), config.topk_group)[1]
    chosen = jax.nn.one_hot(best, config.n_group, dtype=jnp.int32).sum(axis=1) > 0
    return jnp.repeat(chosen, experts // config.n_group, axis=1)


def route(
    params: MoEParams, config: DeepseekConfig, x: jax.Array, *, ranked: bool = False
) -> tuple[jax.Array, jax.Array]:
    """Each token's weights and experts: float32 ``[N, k]`` and int32 ``[N, k]``.

    The router runs in float32 (as transformers'); see ``DeepseekConfig`` for the
    V2 and V3 rules. ``ranked`` (V2's rules): every expert, best first, ``[N, E]``,
    the top ``k`` being the first ``k`` columns: the sort ``top_k`` runs, without the
    copies that cut its first ``k`` columns out (``fused_moe(top_k=k)`` reads them in
    place at one token). V3's weights are the top ``k``'s, renormalised: ``[N, k]``.
    """
    logits = project(
        "nh,he->ne", x.astype(jnp.float32), params.router, precision=jax.lax.Precision.HIGHEST
    )
    k = config.num_experts_per_tok
    if config.model_type == "deepseek_v2":
        scores = jax.nn.softmax(logits, axis=-1)
        if config.topk_method == "group_limited_greedy":
            keep = _top_groups(scores, config, lambda g: g.max(axis=-1))
            scores = jnp.where(keep, scores, 0.0)
        weights, experts = jax.lax.top_k(scores, scores.shape[-1] if ranked else k)
    else:
        scores = jax.nn.sigmoid(logits)
        assert params.router_bias is not None, "V3's router has e_score_correction_bias"
        choice = scores + params.router_bias
        keep = _top_groups(choice, config, lambda g: jax.lax.top_k(g, 2)[0].sum(axis=-1))
        experts = jax.lax.top_k(jnp.where(keep, choice, -jnp.inf), k)[1]
        weights = jnp.take_along_axis(scores, experts, axis=1)
        if config.norm_topk_prob:
            weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20)
    return weights * config.routed_scaling_factor, experts


def _experts_gathered(params: MoEParams, x, weights, experts):
    """Each token through its own ``k`` experts' weights (gathered): reads ``N * k``
    experts' weights, the least when ``N * k`` is below the expert count (decode)."""
    h = jax.nn.silu(jnp.einsum("nh,nkhi->nki", x, params.gate[experts])) * jnp.einsum(
        "nh,nkhi->nki", x, params.up[experts]
    )
    out = jnp.einsum("nki,nkih->nkh", h, params.down[experts])
    return jnp.einsum("nkh,nk->nh", out.astype(jnp.float32), weights)


def _experts_grouped(params: MoEParams, x, weights, experts):
    """The ``N * k`` (token, expert) pairs sorted by expert, one ``ragged_dot`` per
    matrix: reads every expert's weights once, computes only the chosen pairs."""
    n, k = experts.shape
    flat = experts.reshape(-1)
    order = jnp.argsort(flat)
    rows = x[order // k]
    sizes = jnp.bincount(flat, length=params.gate.shape[0]).astype(jnp.int32)
    h = jax.nn.silu(jax.lax.ragged_dot(rows, params.gate, sizes)) * jax.lax.ragged_dot(
        rows, params.up, sizes
    )
    out = jax.lax.ragged_dot(h, params.down, sizes).astype(jnp.float32)
    out = out * weights.reshape(-1)[order][:, None]
    return jnp.zeros((n, x.shape[1]), jnp.float32).at[order // k].add(out)


def moe(
    params: MoEParams,
    config: DeepseekConfig,
    x: jax.Array,
    *,
    backend: Backend = "auto",
    compute_capability: int | None = None,
) -> jax.Array:
    """The mixture of experts on ``x [..., hidden]``, plus the shared experts.

    ``backend`` (``"auto"``: triton on a CUDA GPU or when lowering for one, else xla):

    - ``"xla"``: reference-grade, jit-able and exact, not a tuned kernel: at decode
      sizes (``tokens * k <= experts``) each token gathers its experts' weights (a
      copy of them); otherwise the (token, expert) pairs are sorted by expert and run
      through ``jax.lax.ragged_dot``.
    - ``"triton"``: ``mla_jax.moe.fused_moe``, the pairs sorted by expert and two
      Triton kernels that read each routed expert's weights in place, once per block
      of its pairs (the SwiGLU in float32, rounded once to x's dtype, where XLA
      rounds each matmul's output first). Up to 16 tokens (a decode step's), the
      shared experts are more pairs of the same kernels (``shared_in_kernels``),
      their output summed with the routed experts' in float32.

    The weighted sum of the routed experts is taken in float32 (on ``"triton"`` of
    each pair's output rounded to x's dtype, as transformers' MoE stores each
    expert's).
    """
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    y = _moe_rows(params, config, x, x.shape[0], backend, compute_capability)
    return y.reshape(shape)


def _moe_rows(
    params: MoEParams,
    config: DeepseekConfig,
    x: jax.Array,
    tokens: int,
    backend: Backend,
    compute_capability: int | None,
) -> jax.Array:
    """``moe`` of ``x [R, hidden]`` whose first ``tokens`` rows are tokens and the rest
    padding (``decode_step``'s zero row at batch one): the router and a shared MLP run
    over all ``R`` rows (matmuls of two rows need no pad), the experts over the
    tokens only; the padding rows of the result are zero."""
    triton = resolve_backend(backend, compute_capability) == "triton"
    # One token's kernels read its choices in place: the router's ranking, uncut.
    weights, experts = route(params, config, x, ranked=triton and tokens == 1)
    in_kernels = triton and params.shared is not None and shared_in_kernels(tokens=tokens)
    if triton:  # the kernels skip the padding rows: nothing sliced off
        y = fused_moe(
            x,
            weights,
            experts,
            params.gate,
            params.up,
            params.down,
            shared=params.shared if in_kernels else None,
            compute_capability=compute_capability,
            tokens=tokens,
            top_k=config.num_experts_per_tok,
        )
    else:
        weights, experts, rows = weights[:tokens], experts[:tokens], x[:tokens]
        if experts.size <= config.n_routed_experts:
            y = _experts_gathered(params, rows, weights, experts)
        else:
            y = _experts_grouped(params, rows, weights, experts)
    y = y.astype(x.dtype)
    if params.shared is not None and not in_kernels:
        y = y + mlp(params.shared, x)[:tokens]
    extra = x.shape[0] - tokens
    return jnp.pad(y, ((0, extra), (0, 0))) if extra else y


def _ffn(
    layer: DecoderLayerParams,
    config: DeepseekConfig,
    h: jax.Array,
    backend: Backend,
    compute_capability: int | None,
    tokens: int | None = None,
) -> jax.Array:
    """The residual MLP/MoE half of a decoder layer (``backend`` the MoE's) on ``h
    [..., hidden]``; ``tokens``: ``h`` is ``[R, hidden]`` and only its first
    ``tokens`` rows are tokens (``_moe_rows``). A dense MLP on one token runs on the
    triton backend through the MoE's kernels (``fused_mlp``: its weights streamed in
    place, where XLA's GEMM pads V2-Lite's down-projection weight every step)."""
    x = rms_norm(h, layer.post_attn_norm, config.rms_norm_eps)
    if isinstance(layer.mlp, MoEParams):
        if tokens is not None:
            return h + _moe_rows(layer.mlp, config, x, tokens, backend, compute_capability)
        return h + moe(layer.mlp, config, x, backend=backend, compute_capability=compute_capability)
    if tokens == 1 and resolve_backend(backend, compute_capability) == "triton":
        width = layer.mlp.gate.shape[1]
        y = fused_mlp(
            x,
            *layer.mlp,
            slices=mlp_slices(width, per_slice=config.moe_intermediate_size or width),
            compute_capability=compute_capability,
        )
        return h + jnp.pad(y.astype(h.dtype), ((0, h.shape[0] - 1), (0, 0)))
    return h + mlp(layer.mlp, x)


def _logits(params: DeepseekParams, config: DeepseekConfig, h: jax.Array) -> jax.Array:
    h = rms_norm(h, params.norm, config.rms_norm_eps)
    return project("...h,hv->...v", h, params.lm_head, preferred_element_type=jnp.float32)


def _check_params(params: DeepseekParams, config: DeepseekConfig, num_caches: int) -> None:
    if len(params.layers) != config.num_hidden_layers or num_caches != len(params.layers):
        raise ValueError(
            f"params.layers: got {len(params.layers)} layers and {num_caches} "
            f"caches, needed config.num_hidden_layers={config.num_hidden_layers} "
            "of each"
        )


def prefill(
    params: DeepseekParams,
    config: DeepseekConfig,
    tokens: jax.Array,
    lengths: jax.Array,
    kv_caches: tuple[jax.Array, ...],
    block_table: jax.Array,
    *,
    all_logits: bool = False,
    backend: Backend = "auto",
    compute_capability: int | None = None,
) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    """Right-padded prompts through the model, their latent rows written to the caches.

    Args:
      tokens: int32 ``[B, T]``; token ``t`` of row ``b`` is real when ``t < lengths[b]``.
      lengths: int32 ``[B]`` in ``[1, T]``; prompts start at position 0.
      kv_caches: one paged cache per layer, ``[num_pages, page_size, latent_dim]``.
      block_table: int32 ``[B, pages_per_seq]``, shared by the layers.
      all_logits: return every position's logits, not only each prompt's last.
      backend, compute_capability: the attention's (``mla_prefill_layer``: the
        causal flash-attention kernel on the triton backend, dense XLA attention on
        xla) and the MoE layers' (``moe``).

    Returns:
      float32 logits ``[B, vocab]`` at each prompt's last token (``[B, T, vocab]``
      with ``all_logits``; padding positions meaningless), and the caches.
    """
    _check_params(params, config, len(kv_caches))
    if tokens.ndim != 2 or lengths.shape != tokens.shape[:1] or lengths.dtype != jnp.int32:
        raise ValueError(
            f"tokens/lengths: got {tokens.dtype}{list(tokens.shape)} and "
            f"{lengths.dtype}{list(lengths.shape)}, needed [B, T] and int32 [B]"
        )
    h = params.embed[tokens]
    caches = []
    for layer, cache in zip(params.layers, kv_caches):
        x = rms_norm(h, layer.input_norm, config.rms_norm_eps)
        attn, cache = mla_prefill_layer(
            layer.attn,
            config.attention,
            x,
            cache,
            block_table,
            lengths,
            backend=backend,
            compute_capability=compute_capability,
        )
        h = _ffn(layer, config, h + attn, backend, compute_capability)
        caches.append(cache)
    if not all_logits:
        h = jnp.take_along_axis(h, jnp.maximum(lengths - 1, 0)[:, None, None], axis=1)[:, 0]
    return _logits(params, config, h), tuple(caches)


def decode_step(
    params: DeepseekParams,
    config: DeepseekConfig,
    tokens: jax.Array,
    state: DecodeState,
    *,
    backend: Backend = "auto",
    compute_capability: int | None = None,
) -> tuple[jax.Array, DecodeState]:
    """One token per sequence through the model at ``state.positions``.

    Args:
      tokens: int32 ``[B]``, the token at ``state.positions``.
      state: per-layer caches, block table, logits buffer, positions (tokens
        ``[0, positions)`` cached).
      backend, compute_capability: passed to ``mla_decode`` and the MoE layers
        (``moe``; lowering for ``compute_capability`` needs no GPU). The split rule
        and SM count are the ones ``state.logits_buffer`` was reserved with.

    Returns:
      float32 logits ``[B, vocab]`` for the next token, and the state one token on.
    """
    _check_params(params, config, len(state.kv_caches))
    h = params.embed[tokens]
    block_table, positions = check_decode_inputs(
        config.attention, h, state.block_table, state.positions
    )
    # At batch one a zero row rides beside the token through the step: every matmul
    # then has two rows of its own, where ``project`` would pad a lone row for each
    # (one small kernel per matmul); the experts and the attention see the token only.
    b = h.shape[0]
    if b == 1:
        h = jnp.pad(h, ((0, 1), (0, 0)))
    buffer, caches = state.logits_buffer, []
    for layer, cache in zip(params.layers, state.kv_caches):
        x = rms_norm(h, layer.input_norm, config.rms_norm_eps)
        attn, cache, buffer = decode_attention(
            layer.attn,
            config.attention,
            x,
            cache,
            block_table,
            positions,
            buffer,
            backend=backend,
            compute_capability=compute_capability,
        )
        h = _ffn(layer, config, h + attn, backend, compute_capability, tokens=b)
        caches.append(cache)
    return _logits(params, config, h)[:b], DecodeState(
        tuple(caches), state.block_table, buffer, state.positions + 1
    )
