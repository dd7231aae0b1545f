"""The model benchmark's models and floors: pure arithmetic on a ``DeepseekConfig``.

``python -m mla_jax model-bench`` measures decode and prefill of a whole DeepSeek
model; this module says what the card could do at best:

- **Decode step floor** at ``B`` tokens and a ``context``-token cache: the bytes a
  step must read over the HBM bandwidth, or its flops over the bf16 peak, whichever
  is longer. The bytes are the weights the step touches (``step_weight_bytes``) plus
  the latent cache (``B * context * latent_dim * cache bytes * layers``). A MoE layer
  touches its router, its shared experts and, with uniform routing, the expected
  number of distinct routed experts its ``B`` tokens pick,
  ``E * (1 - (1 - k/E)**B)`` (``expected_experts``); every other weight is read once
  a step, the embedding one row a token.
- **Prefill roofline**: ``2 * active params * tokens`` plus the causal attention's
  flops (``prefill_flops``) over the bf16 peak.

The cards: ``CARDS`` (HBM bandwidth, dense bf16 tensor FLOP/s from the data sheets),
found by the device's name (``card_for``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from mla_jax.deepseek.config import DeepseekConfig
from mla_jax.layer import PRESETS

MODELS = ("v2-lite", "v3-stack")
V2_LITE_LAYERS = 27
V3_LAYERS = 61  # the real DeepSeek-V3's (the stack holds as many as fit)


class Card(NamedTuple):
    name: str
    hbm_bytes_per_s: float
    bf16_flops: float  # dense bf16 tensor-core peak


# Data-sheet numbers (SXM parts): HBM bandwidth and dense (not sparse) bf16 FLOP/s.
CARDS = (
    Card("H200", 4.8e12, 989e12),
    Card("H100 SXM", 3.35e12, 989e12),
)


def card_for(device_kind: str) -> Card | None:
    """The ``CARDS`` entry of a device name (``jax.Device.device_kind``, e.g. "NVIDIA
    H100 80GB HBM3"), or None for another card (the PCIe and NVL H100s have other
    numbers)."""
    kind = device_kind.upper()
    if "H200" in kind:
        return CARDS[0]
    if "H100" in kind and ("HBM3" in kind or "SXM" in kind):
        return CARDS[1]
    return None


def v2_lite(layers: int = V2_LITE_LAYERS) -> DeepseekConfig:
    """DeepSeek-V2-Lite's shapes: hidden 2048, 16 heads, no q LoRA, 64 routed experts
    top-6 plus 2 shared, the first layer dense, vocabulary 102400."""
    return DeepseekConfig(
        model_type="deepseek_v2",
        vocab_size=102400,
        num_hidden_layers=layers,
        attention=PRESETS["deepseek-v2-lite"],
        intermediate_size=10944,
        moe_intermediate_size=1408,
        n_routed_experts=64,
        n_shared_experts=2,
        num_experts_per_tok=6,
        first_k_dense_replace=1,
    )


def v3_stack(layers: int) -> DeepseekConfig:
    """``layers`` of DeepSeek-V3's MoE layer (hidden 7168, 128 heads, q LoRA 1536, 256
    routed experts top-8 in 8 groups plus 1 shared, expert width 2048) between V3's
    embedding and head; no dense layer (V3's first three are)."""
    return DeepseekConfig(
        model_type="deepseek_v3",
        vocab_size=129280,
        num_hidden_layers=layers,
        attention=PRESETS["deepseek-v3"],
        intermediate_size=18432,
        moe_intermediate_size=2048,
        n_routed_experts=256,
        n_shared_experts=1,
        num_experts_per_tok=8,
        first_k_dense_replace=0,
        routed_scaling_factor=2.5,
        n_group=8,
        topk_group=4,
        norm_topk_prob=True,
        topk_method="noaux_tc",
    )


def tiny(model: str, layers: int) -> DeepseekConfig:
    """The dry run's stand-in for ``model``: the same structure at toy sizes."""
    common = dict(
        vocab_size=512,
        num_hidden_layers=layers,
        attention=PRESETS["tiny"],
        intermediate_size=128,
        moe_intermediate_size=32,
        n_routed_experts=16,
    )
    if model == "v3-stack":
        return DeepseekConfig(
            model_type="deepseek_v3",
            n_shared_experts=1,
            num_experts_per_tok=4,
            first_k_dense_replace=0,
            n_group=4,
            topk_group=2,
            norm_topk_prob=True,
            topk_method="noaux_tc",
            **common,  # type: ignore[arg-type]
        )
    return DeepseekConfig(
        model_type="deepseek_v2",
        n_shared_experts=2,
        num_experts_per_tok=6,
        first_k_dense_replace=1,
        **common,  # type: ignore[arg-type]
    )


def expected_experts(experts: int, k: int, tokens: int) -> float:
    """The expected number of distinct experts ``tokens`` tokens pick, each ``k`` of
    ``experts`` uniformly: ``E * (1 - (1 - k/E)**tokens)`` (k at one token)."""
    return experts * (1.0 - (1.0 - k / experts) ** tokens)


class Sizes(NamedTuple):
    """A model's weights by part, in elements (the router's in float32)."""

    attention: int  # one layer's MLA weights, its two norms' too
    layer_norms: int  # one layer's input and post-attention norms
    dense_mlp: int  # one dense layer's SwiGLU
    router: int  # one MoE layer's router (+ V3's bias), float32
    shared: int  # one MoE layer's shared experts
    expert: int  # one routed expert
    embedding: int  # the embedding table
    lm_head: int
    final_norm: int


def sizes(config: DeepseekConfig) -> Sizes:
    a = config.attention
    hidden, heads = a.hidden_size, a.num_heads
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    if a.q_lora_rank is None:
        query = hidden * heads * qk
    else:
        query = hidden * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * heads * qk
    attention = (
        query
        + hidden * a.latent_dim  # wkv_a
        + a.kv_lora_rank  # kv_a_norm
        + a.kv_lora_rank * heads * a.qk_nope_head_dim  # w_uk
        + a.kv_lora_rank * heads * a.v_head_dim  # w_uv
        + heads * a.v_head_dim * hidden  # wo
    )
    experts = config.n_routed_experts
    return Sizes(
        attention=attention,
        layer_norms=2 * hidden,
        dense_mlp=3 * hidden * config.intermediate_size,
        router=hidden * experts + (experts if config.model_type == "deepseek_v3" else 0),
        shared=3 * hidden * config.n_shared_experts * config.moe_intermediate_size,
        expert=3 * hidden * config.moe_intermediate_size,
        embedding=config.vocab_size * hidden,
        lm_head=hidden * config.vocab_size,
        final_norm=hidden,
    )


def layer_counts(config: DeepseekConfig) -> tuple[int, int]:
    """``(dense layers, MoE layers)``."""
    dense = min(config.first_k_dense_replace, config.num_hidden_layers)
    return dense, config.num_hidden_layers - dense


def param_count(config: DeepseekConfig) -> int:
    """Every weight's elements (what ``init_params`` builds)."""
    s, (dense, moe) = sizes(config), layer_counts(config)
    per_moe = s.router + s.shared + config.n_routed_experts * s.expert
    layers = config.num_hidden_layers * (s.attention + s.layer_norms)
    return layers + dense * s.dense_mlp + moe * per_moe + s.embedding + s.lm_head + s.final_norm


def weight_bytes(config: DeepseekConfig, dtype_bytes: int = 2) -> int:
    """Every weight's bytes (routers float32, the rest ``dtype_bytes``)."""
    s, (_, moe) = sizes(config), layer_counts(config)
    return (param_count(config) - moe * s.router) * dtype_bytes + moe * s.router * 4


def step_weight_bytes(config: DeepseekConfig, batch: int, dtype_bytes: int = 2) -> dict:
    """The weight bytes one decode step of ``batch`` tokens must read, by part:
    attention (every layer's MLA weights and norms), dense MLP, MoE (routers in
    float32, shared experts, the expected distinct routed experts), other (the
    embedding rows, the final norm, the lm_head); and ``experts_touched`` per MoE
    layer."""
    s, (dense, moe) = sizes(config), layer_counts(config)
    touched = expected_experts(config.n_routed_experts, config.num_experts_per_tok, batch)
    parts = {
        "attention": config.num_hidden_layers * (s.attention + s.layer_norms) * dtype_bytes,
        "dense_mlp": dense * s.dense_mlp * dtype_bytes,
        "moe": moe * (s.router * 4 + (s.shared + touched * s.expert) * dtype_bytes),
        "other": (min(batch, config.vocab_size) * config.hidden_size + s.final_norm + s.lm_head)
        * dtype_bytes,
    }
    return {**parts, "total": sum(parts.values()), "experts_touched": touched}


def kv_read_bytes(config: DeepseekConfig, batch: int, context: int, cache_bytes: int = 2) -> int:
    """The latent cache a step reads: ``B * context * latent_dim * bytes * layers``."""
    latent = config.attention.latent_dim
    return batch * context * latent * cache_bytes * config.num_hidden_layers


def token_matmul_params(config: DeepseekConfig) -> int:
    """The weights one token is multiplied through, lm_head excluded: every layer's
    attention matrices, the dense MLPs, and per MoE layer its router, shared experts
    and ``k`` routed experts."""
    s, (dense, moe) = sizes(config), layer_counts(config)
    a = config.attention
    norms = a.kv_lora_rank + (a.q_lora_rank or 0)  # the attention's norms: no matmul
    per_moe = s.router + s.shared + config.num_experts_per_tok * s.expert
    return config.num_hidden_layers * (s.attention - norms) + dense * s.dense_mlp + moe * per_moe


def decode_flops(config: DeepseekConfig, batch: int, context: int) -> float:
    """A decode step's flops: ``2 * B`` times the per-token matmul weights and the
    lm_head, plus the absorbed attention over the cache, per layer
    ``2 * B * H * context * (latent_dim + kv_lora_rank)`` (QK over the whole row, PV
    over the latent part)."""
    a = config.attention
    matmuls = 2 * batch * (token_matmul_params(config) + sizes(config).lm_head)
    attention = 2 * batch * a.num_heads * context * (a.latent_dim + a.kv_lora_rank)
    return matmuls + config.num_hidden_layers * attention


def decode_floor(
    config: DeepseekConfig,
    batch: int,
    context: int,
    card: Card,
    *,
    dtype_bytes: int = 2,
    cache_bytes: int = 2,
) -> dict:
    """The decode step's floor on ``card``: bytes (weights touched + latent cache)
    over the bandwidth, flops over the peak, the longer one, and tokens/s there."""
    weights = step_weight_bytes(config, batch, dtype_bytes)
    kv = kv_read_bytes(config, batch, context, cache_bytes)
    flops = decode_flops(config, batch, context)
    memory_s = (weights["total"] + kv) / card.hbm_bytes_per_s
    compute_s = flops / card.bf16_flops
    floor_s = max(memory_s, compute_s)
    return {
        "weight_bytes": weights["total"],
        "weight_bytes_by_part": {k: weights[k] for k in ("attention", "dense_mlp", "moe", "other")},
        "experts_touched_per_moe_layer": weights["experts_touched"],
        "kv_bytes": kv,
        "flops": flops,
        "memory_ms": memory_s * 1e3,
        "compute_ms": compute_s * 1e3,
        "floor_ms": floor_s * 1e3,
        "bound": "memory" if memory_s >= compute_s else "compute",
        "floor_tokens_per_s": batch / floor_s,
    }


def prefill_flops(config: DeepseekConfig, batch: int, length: int) -> float:
    """Prefill of ``batch`` prompts of ``length`` tokens: ``2 * token_matmul_params *
    tokens``, the lm_head at each prompt's last token (what ``prefill`` computes), and
    the causal attention, per layer ``2 * B * H * T(T+1)/2 * (qk_head + v_head)``."""
    a = config.attention
    tokens = batch * length
    pairs = batch * length * (length + 1) // 2
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    attention = 2 * a.num_heads * pairs * (qk + a.v_head_dim)
    return (
        2 * tokens * token_matmul_params(config)
        + 2 * batch * sizes(config).lm_head
        + config.num_hidden_layers * attention
    )


def prefill_roofline(config: DeepseekConfig, batch: int, length: int, card: Card) -> dict:
    flops = prefill_flops(config, batch, length)
    return {"flops": flops, "roofline_ms": flops / card.bf16_flops * 1e3}


def stack_layers(
    config: DeepseekConfig,
    budget_bytes: float,
    *,
    batch: int,
    context: int,
    dtype_bytes: int = 2,
    cache_bytes: int = 2,
) -> int:
    """How many of ``config``'s MoE layers fit ``budget_bytes`` with the embedding and
    head, one ``batch x context`` latent cache per layer, and the decode's largest
    per-layer temporary (the gathered experts' weights, ``batch * k`` of them, when
    ``batch * k <= E``); at least 1."""
    s = sizes(config)
    weights = s.attention + s.layer_norms + s.shared + config.n_routed_experts * s.expert
    cache = batch * context * config.attention.latent_dim * cache_bytes
    per_layer = weights * dtype_bytes + s.router * 4 + cache
    fixed = (s.embedding + s.lm_head + s.final_norm) * dtype_bytes
    picks = batch * config.num_experts_per_tok
    if picks <= config.n_routed_experts:
        fixed += picks * s.expert * dtype_bytes
    return max(1, math.floor((budget_bytes - fixed) / per_layer))
