"""``DeepseekConfig``: the sizes and routing rules of a DeepSeek-V2/V3 model.

Built from a transformers ``config.json`` (``from_hf_dict``), in the meaning
transformers' ``DeepseekV2ForCausalLM`` / ``DeepseekV3ForCausalLM`` give it. The
attention part is a ``mla_jax.layer.MLAConfig``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal

from mla_jax.layer import MLAConfig, YarnScaling

ModelType = Literal["deepseek_v2", "deepseek_v3"]
MODEL_TYPES = ("deepseek_v2", "deepseek_v3")
V2_TOPK_METHODS = ("greedy", "group_limited_greedy")


@dataclasses.dataclass(frozen=True)
class DeepseekConfig:
    """A whole decoder: embedding, ``num_hidden_layers`` MLA + MLP/MoE layers, norm, head.

    Layers ``[0, first_k_dense_replace)`` have a dense SwiGLU MLP of
    ``intermediate_size``; the others a mixture of ``n_routed_experts`` experts of
    ``moe_intermediate_size`` (``num_experts_per_tok`` chosen per token) plus
    ``n_shared_experts`` always-on experts, fused into one MLP of
    ``n_shared_experts * moe_intermediate_size``.

    Routing follows ``model_type``: ``deepseek_v2`` takes a softmax over the router
    logits and the top-k (``topk_method`` ``"greedy"``, or ``"group_limited_greedy"``:
    only experts in the ``topk_group`` groups with the best single score), weights
    times ``routed_scaling_factor`` (transformers' V2 ignores ``norm_topk_prob``, and
    so does this). ``deepseek_v3`` takes a sigmoid, picks groups by the sum of their
    two best ``score + e_score_correction_bias`` and experts by the same biased score,
    weights by the unbiased score, normalised when ``norm_topk_prob``, times
    ``routed_scaling_factor``.
    """

    model_type: ModelType
    vocab_size: int
    num_hidden_layers: int
    attention: MLAConfig
    intermediate_size: int
    moe_intermediate_size: int
    n_routed_experts: int
    n_shared_experts: int
    num_experts_per_tok: int
    first_k_dense_replace: int
    routed_scaling_factor: float = 1.0
    topk_method: str = "greedy"
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = False
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    eos_token_id: int | None = None

    def __post_init__(self):
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type: got {self.model_type!r}, needed one of {MODEL_TYPES}")
        for name in (
            "vocab_size",
            "num_hidden_layers",
            "intermediate_size",
            "moe_intermediate_size",
            "n_routed_experts",
            "num_experts_per_tok",
            "n_group",
            "topk_group",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name in ("n_shared_experts", "first_k_dense_replace"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if self.num_experts_per_tok > self.n_routed_experts:
            raise ValueError(
                f"num_experts_per_tok: got {self.num_experts_per_tok}, needed at "
                f"most n_routed_experts={self.n_routed_experts}"
            )
        if self.n_routed_experts % self.n_group or self.topk_group > self.n_group:
            raise ValueError(
                f"n_group={self.n_group}, topk_group={self.topk_group}: needed "
                f"n_group dividing n_routed_experts={self.n_routed_experts} "
                "and topk_group <= n_group"
            )
        if self.model_type == "deepseek_v2" and self.topk_method not in V2_TOPK_METHODS:
            raise ValueError(
                f"topk_method: got {self.topk_method!r}, needed one of "
                f"{V2_TOPK_METHODS} for deepseek_v2"
            )
        if self.model_type == "deepseek_v3" and self.n_routed_experts // self.n_group < 2:
            raise ValueError(
                f"n_group={self.n_group}: deepseek_v3 scores a group by its two "
                f"best experts, so n_routed_experts={self.n_routed_experts} "
                "needs at least 2 per group"
            )

    @property
    def hidden_size(self) -> int:
        return self.attention.hidden_size

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` has the mixture of experts (else a dense MLP)."""
        return index >= self.first_k_dense_replace


def _rope(hf: Mapping[str, Any]) -> tuple[float, YarnScaling | None]:
    """``(rope_theta, yarn)`` from transformers 5's ``rope_parameters`` or the Hub's
    ``rope_theta`` + ``rope_scaling``."""
    params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type != "yarn":
        raise ValueError(
            f"rope_scaling type: got {rope_type!r}, only 'default' and 'yarn' are supported"
        )
    unknown = set(params) - {
        "rope_type",
        "type",
        "rope_theta",
        "factor",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "attention_factor",
        "original_max_position_embeddings",
        "truncate",
    }
    if unknown:
        raise ValueError(f"rope_scaling: unsupported yarn keys {sorted(unknown)}")
    original = params.get(
        "original_max_position_embeddings",
        hf.get("original_max_position_embeddings", hf.get("max_position_embeddings")),
    )
    factor = params.get("factor")
    if factor is None:  # transformers: the ratio of the context lengths
        factor = hf["max_position_embeddings"] / original
    yarn = YarnScaling(
        factor=float(factor),
        original_max_position_embeddings=int(original),
        beta_fast=float(params.get("beta_fast") or 32),
        beta_slow=float(params.get("beta_slow") or 1),
        mscale=float(params.get("mscale") or 0),
        mscale_all_dim=float(params.get("mscale_all_dim") or 0),
        attention_factor=(
            None if params.get("attention_factor") is None else float(params["attention_factor"])
        ),
        truncate=bool(params.get("truncate", True)),
    )
    return theta, yarn


REQUIRED_INTS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "intermediate_size",
    "moe_intermediate_size",
    "n_routed_experts",
    "num_experts_per_tok",
)
OPTIONAL_INTS = (
    "q_lora_rank",
    "n_shared_experts",
    "first_k_dense_replace",
    "n_group",
    "topk_group",
)
OPTIONAL_REALS = ("rms_norm_eps", "routed_scaling_factor", "rope_theta")


def _check_fields(hf: Mapping[str, Any]) -> None:
    """The sizes present and ints (JSON's true/false are not), the real numbers finite:
    what the model is built from, checked before anything reads them."""
    for name in REQUIRED_INTS + OPTIONAL_INTS:
        value = hf.get(name)
        if value is None and name in OPTIONAL_INTS:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            got = "missing" if name not in hf else f"got {value!r}"
            raise ValueError(f"config.json {name}: {got}, needed an int")

    # The ranges: a size of 0 or less, or routing that cannot pick its experts, would
    # load and then fail (or route wrongly) inside generate.
    def needed(name: str, rule: str) -> ValueError:
        return ValueError(f"config.json {name}: got {hf[name]!r}, needed {rule}")

    for name in REQUIRED_INTS + ("q_lora_rank", "n_group", "topk_group"):
        if hf.get(name) is not None and hf[name] < 1:
            raise needed(name, "an int >= 1")
    for name in ("n_shared_experts", "first_k_dense_replace"):
        if hf.get(name) is not None and hf[name] < 0:
            raise needed(name, "an int >= 0")
    if hf["qk_rope_head_dim"] % 2:
        raise needed("qk_rope_head_dim", "an even int (RoPE rotates pairs)")
    if (hf.get("first_k_dense_replace") or 0) > hf["num_hidden_layers"]:
        raise needed("first_k_dense_replace", f"<= num_hidden_layers ({hf['num_hidden_layers']})")
    groups, experts = hf.get("n_group") or 1, hf["n_routed_experts"]
    if experts % groups:
        raise needed("n_group", f"a divisor of n_routed_experts ({experts})")
    if (hf.get("topk_group") or 1) > groups:
        raise needed("topk_group", f"<= n_group ({groups})")
    reachable = (hf.get("topk_group") or 1) * experts // groups
    if hf["num_experts_per_tok"] > reachable:
        raise needed(
            "num_experts_per_tok",
            f"<= the experts of topk_group of n_group groups ({reachable})",
        )
    for name in OPTIONAL_REALS:
        value = hf.get(name)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise ValueError(f"config.json {name}: got {value!r}, needed a finite number")


def from_hf_dict(hf: Mapping[str, Any]) -> DeepseekConfig:
    """A ``DeepseekConfig`` from a transformers ``config.json`` dict.

    Raises ValueError naming what is not supported: another ``model_type``, a
    ``quantization_config`` (fp8 block-quantised weights), a ``hidden_act`` other than
    silu, attention or MLP biases, a RoPE scaling other than YaRN, a V2 MoE on only
    some layers (``moe_layer_freq``), a ``partial_rotary_factor`` other than 1.
    """
    if not isinstance(hf, Mapping):
        raise ValueError(f"config.json: got a {type(hf).__name__}, needed a JSON object")
    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"config.json model_type: got {model_type!r}, needed one of {MODEL_TYPES}")
    quantization = hf.get("quantization_config")
    if quantization:
        method = quantization.get("quant_method", "?") if isinstance(quantization, Mapping) else "?"
        raise ValueError(
            f"config.json quantization_config ({method!r}): quantised weights "
            "(e.g. fp8 block-quantised) are not supported; dequantise to "
            "bf16 first"
        )
    if hf.get("hidden_act", "silu") != "silu":
        raise ValueError(f"config.json hidden_act: got {hf['hidden_act']!r}, needed 'silu'")
    for name in ("attention_bias", "mlp_bias"):
        if hf.get(name):
            raise ValueError(f"config.json {name}=True is not supported")
    if hf.get("moe_layer_freq", 1) != 1:
        raise ValueError(
            f"config.json moe_layer_freq: got {hf['moe_layer_freq']!r}, needed 1 "
            "(every layer past first_k_dense_replace is MoE)"
        )
    if hf.get("n_routed_experts") is None:
        raise ValueError(
            "config.json n_routed_experts: got None, needed an int (a model "
            "without MoE layers is not supported)"
        )
    if hf.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(
            f"config.json partial_rotary_factor: got {hf['partial_rotary_factor']}, needed 1.0"
        )
    _check_fields(hf)
    theta, yarn = _rope(hf)
    eps = float(hf.get("rms_norm_eps", 1e-6))
    attention = MLAConfig(
        hidden_size=hf["hidden_size"],
        num_heads=hf["num_attention_heads"],
        q_lora_rank=hf.get("q_lora_rank"),
        kv_lora_rank=hf["kv_lora_rank"],
        qk_rope_head_dim=hf["qk_rope_head_dim"],
        qk_nope_head_dim=hf["qk_nope_head_dim"],
        v_head_dim=hf["v_head_dim"],
        rope_theta=theta,
        rms_norm_eps=eps,
        # V2 rotates interleaved pairs as complex numbers: the same as V3's interleave.
        rope_interleave=bool(hf.get("rope_interleave", True))
        if model_type == "deepseek_v3"
        else True,
        rope_scaling=yarn,
    )
    eos = hf.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    return DeepseekConfig(
        model_type=model_type,
        vocab_size=hf["vocab_size"],
        num_hidden_layers=hf["num_hidden_layers"],
        attention=attention,
        intermediate_size=hf["intermediate_size"],
        moe_intermediate_size=hf["moe_intermediate_size"],
        n_routed_experts=hf["n_routed_experts"],
        n_shared_experts=hf.get("n_shared_experts") or 0,
        num_experts_per_tok=hf["num_experts_per_tok"],
        first_k_dense_replace=hf.get("first_k_dense_replace") or 0,
        routed_scaling_factor=float(hf.get("routed_scaling_factor", 1.0)),
        # transformers' V3 always routes the noaux_tc way, whatever the config says.
        topk_method=(hf.get("topk_method") or "greedy")
        if model_type == "deepseek_v2"
        else "noaux_tc",
        n_group=hf.get("n_group") or 1,
        topk_group=hf.get("topk_group") or 1,
        norm_topk_prob=bool(hf.get("norm_topk_prob", False)),
        rms_norm_eps=eps,
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        eos_token_id=eos,
    )
