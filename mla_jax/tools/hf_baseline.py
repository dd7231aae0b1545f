"""The model benchmark's baseline: the same model through transformers' PyTorch classes.

``hf_config`` writes a ``DeepseekConfig`` as transformers' config (the inverse of
``mla_jax.deepseek.config.from_hf_dict``); ``hf_layer_tensors`` writes one layer of
ours in transformers' names and layout (the inverse of ``load_checkpoint``'s mapping);
``build_hf_model`` builds ``DeepseekV2ForCausalLM`` / ``DeepseekV3ForCausalLM`` on a
device, layer by layer from ``init_layer``'s draws, so it holds the very weights the
model bench times in JAX; ``time_generate`` times its greedy ``generate`` (prefill
and decode apart); ``parity`` is the tiny-model parity check with transformers.

Needs torch and transformers (the test extra); imported only by the bench's torch
phase.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from mla_jax.decode import Backend
from mla_jax.deepseek import DeepseekConfig, generate, load_checkpoint
from mla_jax.deepseek.config import ModelType
from mla_jax.deepseek.model import (
    DecoderLayerParams,
    MoEParams,
    init_embeddings,
    init_layer,
    layer_keys,
)

# What transformers' DeepSeek configs need for positions past the 4096 of YaRN's
# pre-training context (V2-Lite's and V3's: 40 x 4096).
DEFAULT_MAX_POSITIONS = 163840


def hf_dict(config: DeepseekConfig) -> dict[str, Any]:
    """``config`` as a transformers ``config.json`` dict (``from_hf_dict`` reads it back
    to ``config``)."""
    a = config.attention
    if a.rope_scaling is None:
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": a.rope_theta}
        max_positions = DEFAULT_MAX_POSITIONS
    else:
        y = a.rope_scaling
        rope = {
            "rope_type": "yarn",
            "rope_theta": a.rope_theta,
            "factor": y.factor,
            "original_max_position_embeddings": y.original_max_position_embeddings,
            "beta_fast": y.beta_fast,
            "beta_slow": y.beta_slow,
            "mscale": y.mscale,
            "mscale_all_dim": y.mscale_all_dim,
        }
        if not y.truncate:  # written only when not the default (older transformers)
            rope["truncate"] = False
        if y.attention_factor is not None:
            rope["attention_factor"] = y.attention_factor
        max_positions = round(y.factor * y.original_max_position_embeddings)
    d: dict[str, Any] = {
        "model_type": config.model_type,
        "vocab_size": config.vocab_size,
        "hidden_size": a.hidden_size,
        "intermediate_size": config.intermediate_size,
        "moe_intermediate_size": config.moe_intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": a.num_heads,
        "num_key_value_heads": a.num_heads,
        "n_shared_experts": config.n_shared_experts,
        "n_routed_experts": config.n_routed_experts,
        "num_experts_per_tok": config.num_experts_per_tok,
        "first_k_dense_replace": config.first_k_dense_replace,
        "routed_scaling_factor": config.routed_scaling_factor,
        "n_group": config.n_group,
        "topk_group": config.topk_group,
        "norm_topk_prob": config.norm_topk_prob,
        "kv_lora_rank": a.kv_lora_rank,
        "q_lora_rank": a.q_lora_rank,
        "qk_rope_head_dim": a.qk_rope_head_dim,
        "qk_nope_head_dim": a.qk_nope_head_dim,
        "v_head_dim": a.v_head_dim,
        "rms_norm_eps": config.rms_norm_eps,
        "tie_word_embeddings": config.tie_word_embeddings,
        "eos_token_id": config.eos_token_id,
        "max_position_embeddings": max_positions,
        "rope_parameters": rope,
        "hidden_act": "silu",
    }
    if config.model_type == "deepseek_v2":
        d["topk_method"] = config.topk_method
    else:
        d["rope_interleave"] = a.rope_interleave
    return d


def hf_config(config: DeepseekConfig):
    """transformers' ``DeepseekV2Config`` / ``DeepseekV3Config`` of ``config``."""
    from transformers import DeepseekV2Config, DeepseekV3Config

    d = hf_dict(config)
    cls = DeepseekV3Config if d.pop("model_type") == "deepseek_v3" else DeepseekV2Config
    return cls(**d)


def _t(x: jax.Array) -> torch.Tensor:
    """The tensor sharing ``x``'s buffer (DLPack; the device stream handshake included)."""
    return torch.from_dlpack(x)


def _linear(w: jax.Array) -> torch.Tensor:
    """An ``x @ w`` weight ``[in, out]`` as torch's ``Linear.weight`` ``[out, in]``."""
    return _t(w).T.contiguous()


def hf_layer_tensors(
    layer: DecoderLayerParams, index: int, config: DeepseekConfig, *, fused_experts: bool
) -> dict[str, torch.Tensor]:
    """Layer ``index`` of ours as transformers' state-dict entries (new torch tensors on
    the arrays' device): what ``load_checkpoint`` maps back to ``layer``.
    ``fused_experts``: transformers' ``experts.gate_up_proj`` / ``experts.down_proj``,
    else the Hub's ``experts.{e}.*_proj``."""
    a = config.attention
    p, attn = f"model.layers.{index}", layer.attn
    out = {
        f"{p}.input_layernorm.weight": _t(layer.input_norm).clone(),
        f"{p}.post_attention_layernorm.weight": _t(layer.post_attn_norm).clone(),
        f"{p}.self_attn.kv_a_proj_with_mqa.weight": _linear(attn.wkv_a),
        f"{p}.self_attn.kv_a_layernorm.weight": _t(attn.kv_a_norm).clone(),
        # kv_b_proj's rows are per head [k_nope | v]: W_UK and W_UV put back together.
        f"{p}.self_attn.kv_b_proj.weight": torch.cat(
            [_t(attn.w_uk).permute(1, 2, 0), _t(attn.w_uv).permute(1, 2, 0)], dim=1
        ).reshape(-1, a.kv_lora_rank),
        f"{p}.self_attn.o_proj.weight": _t(attn.wo).reshape(-1, a.hidden_size).T.contiguous(),
    }
    wq_b = _t(attn.wq_b).reshape(attn.wq_b.shape[0], -1).T.contiguous()
    if attn.wq_a is None:
        out[f"{p}.self_attn.q_proj.weight"] = wq_b
    else:
        assert attn.q_a_norm is not None
        out[f"{p}.self_attn.q_a_proj.weight"] = _linear(attn.wq_a)
        out[f"{p}.self_attn.q_a_layernorm.weight"] = _t(attn.q_a_norm).clone()
        out[f"{p}.self_attn.q_b_proj.weight"] = wq_b

    def mlp(prefix: str, gate, up, down) -> None:
        out[f"{prefix}.gate_proj.weight"] = _linear(gate)
        out[f"{prefix}.up_proj.weight"] = _linear(up)
        out[f"{prefix}.down_proj.weight"] = _linear(down)

    block = layer.mlp
    if not isinstance(block, MoEParams):
        mlp(f"{p}.mlp", block.gate, block.up, block.down)
        return out
    out[f"{p}.mlp.gate.weight"] = _linear(block.router)
    if block.router_bias is not None:
        out[f"{p}.mlp.gate.e_score_correction_bias"] = _t(block.router_bias).clone()
    if block.shared is not None:
        mlp(f"{p}.mlp.shared_experts", *block.shared)
    gate, up, down = _t(block.gate), _t(block.up), _t(block.down)
    if fused_experts:
        out[f"{p}.mlp.experts.gate_up_proj"] = torch.cat(
            [gate.transpose(1, 2), up.transpose(1, 2)], dim=1
        )
        out[f"{p}.mlp.experts.down_proj"] = down.transpose(1, 2).contiguous()
    else:
        for e in range(config.n_routed_experts):
            out[f"{p}.mlp.experts.{e}.gate_proj.weight"] = gate[e].T.contiguous()
            out[f"{p}.mlp.experts.{e}.up_proj.weight"] = up[e].T.contiguous()
            out[f"{p}.mlp.experts.{e}.down_proj.weight"] = down[e].T.contiguous()
    return out


def torch_dtype(dtype: jnp.dtype) -> torch.dtype:
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[
        jnp.dtype(dtype).name
    ]


def build_hf_model(
    config: DeepseekConfig,
    key: jax.Array,
    dtype: jnp.dtype,
    device: str,
):
    """transformers' model of ``config`` on ``device`` (eval mode, ``dtype``), holding
    the weights ``init_params(config, key, dtype)`` draws, built a layer at a time:
    each layer is drawn in JAX (``init_layer`` jitted), copied into the model in
    transformers' layout and dropped, so the JAX side never holds more than a layer.
    The model is made with transformers' own (random) initialisation first, on the
    device; every weight is then overwritten (checked: all of the state dict)."""
    from transformers import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM

    cls = DeepseekV3ForCausalLM if config.model_type == "deepseek_v3" else DeepseekV2ForCausalLM
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype(dtype))
    try:
        with torch.device(device):
            model = cls(hf_config(config)).eval()
    finally:
        torch.set_default_dtype(previous)
    expected = set(model.state_dict())
    fused = any(name.endswith("mlp.experts.gate_up_proj") for name in expected)
    loaded: set[str] = set()

    def load(tensors: dict[str, torch.Tensor]) -> None:
        result = model.load_state_dict(tensors, strict=False)
        if result.unexpected_keys:
            raise ValueError(
                f"transformers' {cls.__name__} has no {result.unexpected_keys[:3]} "
                "(another weight layout?)"
            )
        loaded.update(tensors)

    layer_fn = jax.jit(init_layer, static_argnums=(0, 2), static_argnames="moe")
    k_embed, k_head, k_layers = layer_keys(config, key)
    with torch.no_grad():
        for i, k in enumerate(k_layers):
            layer = layer_fn(config, k, dtype, moe=config.is_moe_layer(i))
            load(hf_layer_tensors(layer, i, config, fused_experts=fused))
            del layer
        embed, head = jax.jit(init_embeddings, static_argnums=(0, 3))(
            config, k_embed, k_head, dtype
        )
        norm = jnp.ones(config.hidden_size, dtype)
        load(
            {
                "model.embed_tokens.weight": _t(embed).clone(),
                "model.norm.weight": _t(norm).clone(),
                "lm_head.weight": _linear(head),
            }
        )
        del embed, head, norm
    missing = expected - loaded
    if missing:
        raise ValueError(
            f"build_hf_model: {len(missing)} weights not set, e.g. {sorted(missing)[:3]}"
        )
    return model


class _Clock:
    """A logits processor that notes the time (after a device sync) each time
    ``generate`` has new logits: after the prefill, then after every decode step."""

    def __init__(self, sync: Callable[[], None]):
        self.sync, self.times = sync, list[float]()

    def __call__(self, input_ids, scores):  # noqa: ARG002 (generate's signature)
        self.sync()
        self.times.append(time.perf_counter())
        return scores


def time_generate(model, batch: int, context: int, steps: int, *, seed: int = 0) -> dict:
    """transformers' greedy ``generate`` of ``steps + 1`` tokens after random prompts of
    ``context`` tokens: the prefill's seconds (the call's start to the first logits)
    and the decode steps' (first logits to last, over ``steps`` steps, each step's
    sampling and stopping checks included). The tokens are read to the host."""
    from transformers import LogitsProcessorList

    device = model.device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, model.config.vocab_size, (batch, context), generator=generator)
    prompts = prompts.to(device)
    clock = _Clock(sync)
    sync()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=steps + 1,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
            logits_processor=LogitsProcessorList([clock]),
        )
    tokens = out[:, context:].cpu().numpy()
    if tokens.shape != (batch, steps + 1) or len(clock.times) != steps + 1:
        raise RuntimeError(
            f"generate made {tokens.shape[1]} tokens with {len(clock.times)} logits, "
            f"needed {steps + 1}"
        )
    decode_s = (clock.times[-1] - clock.times[0]) / steps
    return {
        "prefill_ms": (clock.times[0] - start) * 1e3,
        "step_ms": decode_s * 1e3,
        "tokens_per_s": batch / decode_s,
        "tokens_read": int(tokens.size),
    }


def parity(
    backend: Backend,
    sm_count: int,
    log: Callable[[str], None],
    kinds: tuple[ModelType, ...] = ("deepseek_v3", "deepseek_v2"),
) -> dict:
    """The tests' parity through ``backend``: the tiny random V3 (q LoRA) and V2 (no q
    LoRA) models of ``hf_reference`` (float32), 20 greedy tokens for three ragged
    prompts against transformers' ``generate``, and each step's logits
    (teacher-forced) within 1e-4."""
    from mla_jax.tools import hf_reference as hf

    results: dict[str, Any] = {}
    lens = np.array([40, 23, 7])
    with jax.default_matmul_precision("highest"), tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            q_lora = 24 if kind == "deepseek_v3" else None
            model = hf.tiny_model(hf.tiny_config(kind, q_lora_rank=q_lora), seed=len(kind))
            model.save_pretrained(f"{tmp}/{kind}")
            config, params = load_checkpoint(f"{tmp}/{kind}")
            prompts = np.random.default_rng(1).integers(0, config.vocab_size, (3, 40))
            out = generate(
                params,
                config,
                prompts,
                lens,
                20,
                backend=backend,
                return_logits=True,
                sm_count=sm_count,
            )
            assert out.logits is not None
            same, err = True, 0.0
            for b, n in enumerate(lens):
                want_tokens = hf.greedy(model, prompts[b, :n], 20)
                same &= bool((np.asarray(out.tokens[b]) == want_tokens).all())
                sequence = np.concatenate([prompts[b, :n], np.asarray(out.tokens[b])])
                want = hf.logits(model, sequence)[n - 1 : n + 19]
                got = np.asarray(out.logits[b])
                err = max(err, float(np.abs(got - want).max() / np.abs(want).max()))
            ok = same and err < 1e-4
            results[kind] = {"tokens_identical": same, "logits_max_rel_err": err, "pass": ok}
            log(
                f"parity {kind} ({backend}): 20 greedy tokens x 3 ragged prompts "
                f"identical: {same}; step logits max rel err {err:.2e} -> "
                f"{'PASS' if ok else 'FAIL'}"
            )
    return results
