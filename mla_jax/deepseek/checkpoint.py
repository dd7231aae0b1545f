"""``load_checkpoint``: a transformers DeepSeek-V2/V3 checkpoint folder into JAX arrays.

Reads ``config.json`` and the ``*.safetensors`` files (one, or shards listed by
``model.safetensors.index.json``) with ``safetensors``' flax loader (no torch).
Expert weights come in either layout: the Hub's per-expert
``mlp.experts.{e}.gate_proj/up_proj/down_proj.weight``, or the fused
``mlp.experts.gate_up_proj`` / ``mlp.experts.down_proj`` of transformers' modules.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp

from mla_jax.deepseek.config import DeepseekConfig, from_hf_dict
from mla_jax.deepseek.model import DecoderLayerParams, DeepseekParams, MLPParams, MoEParams
from mla_jax.layer import MLAParams

ROUTER_DTYPE = jnp.float32  # transformers keeps the router in float32 and routes in it


class _Tensors:
    """Name -> array over one or several safetensors files, read lazily."""

    def __init__(self, folder: Path):
        from safetensors import safe_open  # an optional dependency: the deepseek extra

        index = folder / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted(set(weight_map.values()))
        else:
            files = sorted(p.name for p in folder.glob("*.safetensors"))
        if not files:
            raise ValueError(f"path: no *.safetensors in {str(folder)!r}")
        self._handles = {f: safe_open(str(folder / f), framework="flax") for f in files}
        self._where = {name: f for f, h in self._handles.items() for name in h.keys()}  # noqa: SIM118
        self.used: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def names(self) -> set[str]:
        return set(self._where)

    def get(self, name: str, dtype=None):
        if name not in self._where:
            raise ValueError(f"checkpoint: tensor {name!r} missing")
        self.used.add(name)
        array = self._handles[self._where[name]].get_tensor(name)
        if str(array.dtype).startswith("float8"):
            raise ValueError(
                f"checkpoint: tensor {name!r} is {array.dtype}; quantised weights are not supported"
            )
        return array if dtype is None else array.astype(dtype)


def _linear(t: _Tensors, name: str, dtype):
    """A torch ``Linear`` weight ``[out, in]`` as ``[in, out]``."""
    return t.get(f"{name}.weight", dtype).T


def _attention(t: _Tensors, prefix: str, config: DeepseekConfig, dtype) -> MLAParams:
    a = config.attention
    heads, qk = a.num_heads, a.qk_nope_head_dim + a.qk_rope_head_dim
    if a.q_lora_rank is None:
        wq_a = q_a_norm = None
        wq_b = _linear(t, f"{prefix}.q_proj", dtype)
    else:
        wq_a = _linear(t, f"{prefix}.q_a_proj", dtype)
        q_a_norm = t.get(f"{prefix}.q_a_layernorm.weight", dtype)
        wq_b = _linear(t, f"{prefix}.q_b_proj", dtype)
    # kv_b_proj's rows are per head [k_nope | v]: W_UK and W_UV for absorption.
    kv_b = t.get(f"{prefix}.kv_b_proj.weight", dtype).reshape(
        heads, a.qk_nope_head_dim + a.v_head_dim, a.kv_lora_rank
    )
    return MLAParams(
        wq_a=wq_a,
        q_a_norm=q_a_norm,
        wq_b=wq_b.reshape(wq_b.shape[0], heads, qk),
        wkv_a=_linear(t, f"{prefix}.kv_a_proj_with_mqa", dtype),
        kv_a_norm=t.get(f"{prefix}.kv_a_layernorm.weight", dtype),
        w_uk=kv_b[:, : a.qk_nope_head_dim].transpose(2, 0, 1),
        w_uv=kv_b[:, a.qk_nope_head_dim :].transpose(2, 0, 1),
        wo=_linear(t, f"{prefix}.o_proj", dtype).reshape(heads, a.v_head_dim, a.hidden_size),
    )


def _mlp(t: _Tensors, prefix: str, dtype) -> MLPParams:
    return MLPParams(
        *(_linear(t, f"{prefix}.{n}", dtype) for n in ("gate_proj", "up_proj", "down_proj"))
    )


def _experts(t: _Tensors, prefix: str, config: DeepseekConfig, dtype):
    """``(gate [E, hidden, I], up [E, hidden, I], down [E, I, hidden])``."""
    if f"{prefix}.gate_up_proj" in t:  # fused: gate_up [E, 2I, hidden], down [E, hidden, I]
        gate_up = t.get(f"{prefix}.gate_up_proj", dtype)
        inter = config.moe_intermediate_size
        return (
            gate_up[:, :inter].transpose(0, 2, 1),
            gate_up[:, inter:].transpose(0, 2, 1),
            t.get(f"{prefix}.down_proj", dtype).transpose(0, 2, 1),
        )
    per_expert = [_mlp(t, f"{prefix}.{e}", dtype) for e in range(config.n_routed_experts)]
    return tuple(jnp.stack(ws) for ws in zip(*per_expert))


def _moe(t: _Tensors, prefix: str, config: DeepseekConfig, dtype) -> MoEParams:
    bias_name = f"{prefix}.gate.e_score_correction_bias"
    if config.model_type == "deepseek_v3":
        bias = t.get(bias_name, ROUTER_DTYPE)
    else:
        bias = None
    gate, up, down = _experts(t, f"{prefix}.experts", config, dtype)
    shared = _mlp(t, f"{prefix}.shared_experts", dtype) if config.n_shared_experts else None
    return MoEParams(
        router=_linear(t, f"{prefix}.gate", ROUTER_DTYPE),
        router_bias=bias,
        gate=gate,
        up=up,
        down=down,
        shared=shared,
    )


def load_checkpoint(path: str | Path, *, dtype=None) -> tuple[DeepseekConfig, DeepseekParams]:
    """Reads a transformers ``DeepseekV2ForCausalLM`` / ``DeepseekV3ForCausalLM`` folder.

    Args:
      path: a folder with ``config.json`` and ``*.safetensors`` (sharded with
        ``model.safetensors.index.json``, or not).
      dtype: the weights' dtype; ``None`` keeps the embedding's stored dtype. The
        router (and V3's ``e_score_correction_bias``) stays float32, as in transformers.

    Returns:
      ``(config, params)``; ``params`` is a ``DeepseekParams`` pytree of jax arrays,
      ``W_UK``/``W_UV`` split out of ``kv_b_proj`` for absorption.

    Raises:
      ValueError naming what is unsupported (see ``config.from_hf_dict``: quantised
      weights, other RoPE scalings, ...) or missing.
    """
    folder = Path(path)
    config_file = folder / "config.json"
    if not config_file.exists():
        raise ValueError(f"path: {str(folder)!r} has no config.json")
    config = from_hf_dict(json.loads(config_file.read_text()))
    t = _Tensors(folder)
    if dtype is None:
        dtype = t.get("model.embed_tokens.weight").dtype
    dtype = jnp.dtype(dtype)
    layers = []
    for i in range(config.num_hidden_layers):
        prefix = f"model.layers.{i}"
        mlp = (
            _moe(t, f"{prefix}.mlp", config, dtype)
            if config.is_moe_layer(i)
            else _mlp(t, f"{prefix}.mlp", dtype)
        )
        layers.append(
            DecoderLayerParams(
                input_norm=t.get(f"{prefix}.input_layernorm.weight", dtype),
                attn=_attention(t, f"{prefix}.self_attn", config, dtype),
                post_attn_norm=t.get(f"{prefix}.post_attention_layernorm.weight", dtype),
                mlp=mlp,
            )
        )
    embed = t.get("model.embed_tokens.weight", dtype)
    if config.tie_word_embeddings:
        lm_head = embed.T
    else:
        lm_head = _linear(t, "lm_head", dtype)
    params = DeepseekParams(
        embed=embed, layers=tuple(layers), norm=t.get("model.norm.weight", dtype), lm_head=lm_head
    )
    # Layers past num_hidden_layers (V3's multi-token-prediction layer) are not used.
    unused = sorted(
        n
        for n in t.names() - t.used
        if not n.startswith("model.layers.") or int(n.split(".")[2]) < config.num_hidden_layers
    )
    if unused:
        raise ValueError(
            f"checkpoint: {len(unused)} tensors this model does not read, "
            f"e.g. {unused[:3]} (an unsupported variant?)"
        )
    return config, params
