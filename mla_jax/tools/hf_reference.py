"""Tiny random transformers DeepSeek models and their outputs, for parity checks.

Needs ``torch`` and ``transformers`` (the test extra). Used by the tests, the
DeepSeek notebook and the model bench's parity check (``hf_baseline.parity``); nothing
here is needed to load or run a model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np

YARN = {
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 16,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 0.707,
    "mscale_all_dim": 0.707,
    "rope_theta": 10000.0,
}


def tiny_config(
    kind: Literal["deepseek_v2", "deepseek_v3"],
    *,
    q_lora_rank: int | None = 24,
    yarn: bool = True,
    **overrides: Any,
):
    """A transformers config: 3 layers (1 dense, 2 MoE), 4 heads, 8 experts in 4 groups.

    YaRN stretches a 16-token pre-training context 4x, so prompts of a few dozen tokens
    reach past ``original_max_position_embeddings``. Weights are drawn with std 0.3
    (``initializer_range``) so the logits are far from ties.
    """
    from transformers import DeepseekV2Config, DeepseekV3Config

    common: dict[str, Any] = {
        "vocab_size": 128,
        "hidden_size": 64,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "n_shared_experts": 1,
        "n_routed_experts": 8,
        "kv_lora_rank": 32,
        "q_lora_rank": q_lora_rank,
        "qk_rope_head_dim": 16,
        "v_head_dim": 16,
        "qk_nope_head_dim": 16,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "initializer_range": 0.3,
        "max_position_embeddings": 64,
        "n_group": 4,
        "topk_group": 2,
        "rms_norm_eps": 1e-5,
        "eos_token_id": None,  # greedy runs go the full length
        "rope_parameters": dict(YARN) if yarn else {"rope_type": "default", "rope_theta": 10000.0},
    }
    if kind == "deepseek_v3":
        common.update(routed_scaling_factor=2.5)
        return DeepseekV3Config(**{**common, **overrides})
    common.update(routed_scaling_factor=1.5, topk_method="group_limited_greedy")
    return DeepseekV2Config(**{**common, **overrides})


def tiny_model(config, *, seed: int = 0):
    """A random ``DeepseekV2ForCausalLM`` / ``DeepseekV3ForCausalLM`` in eval mode, eager
    attention, float32; V3's ``e_score_correction_bias`` drawn too (it starts at 0)."""
    import torch
    from transformers import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    cls = DeepseekV3ForCausalLM if config.model_type == "deepseek_v3" else DeepseekV2ForCausalLM
    config._attn_implementation = "eager"
    model = cls(config).eval()
    if config.model_type == "deepseek_v3":
        with torch.no_grad():
            for layer in model.model.layers[config.first_k_dense_replace :]:
                layer.mlp.gate.e_score_correction_bias.normal_(0.0, 0.1)
    return model


# The words of ``word_tokenizer``'s vocabulary, at token ids 10, 11, ...
WORDS = ("some", "text", "other")


def word_tokenizer(vocab_size: int, *, eos_token_id: int | None = None):
    """transformers' fast tokenizer over a ``tokenizers`` word-level model, split on
    whitespace: ``WORDS`` are tokens 10, 11, ..., "w{i}" is any other token ``i``
    ("w0" also stands for unknown words), and ``eos_token_id`` is the special "</s>"."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    names = {i: f"w{i}" for i in range(vocab_size)}
    names.update({10 + i: w for i, w in enumerate(WORDS)})
    eos = {}
    if eos_token_id is not None:
        names[eos_token_id] = eos["eos_token"] = "</s>"
    tok = Tokenizer(models.WordLevel({n: i for i, n in names.items()}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", **eos)


def save_tiny_checkpoint(
    folder: str | Path, model=None, *, eos_token_id: int | None = None
) -> Path:
    """A tiny checkpoint, as ``save_pretrained`` writes one: ``model`` (default a
    random DeepSeek-V2 of ``tiny_config``, without q LoRA) and its ``word_tokenizer``,
    with ``eos_token_id`` as the model's and the tokenizer's EOS. Returns the folder."""
    if model is None:
        model = tiny_model(tiny_config("deepseek_v2", q_lora_rank=None))
    model.config.eos_token_id = model.generation_config.eos_token_id = eos_token_id
    model.save_pretrained(folder)
    word_tokenizer(model.config.vocab_size, eos_token_id=eos_token_id).save_pretrained(folder)
    return Path(folder)


def save_fused(folder: str | Path, out: str | Path, *, shards: int = 2) -> None:
    """Rewrites a Hub-layout checkpoint (per-expert ``experts.{e}.*_proj.weight``) in
    the fused layout of transformers' modules (``experts.gate_up_proj`` ``[E, 2I, hidden]``,
    ``experts.down_proj`` ``[E, hidden, I]``), split into ``shards`` files with a
    ``model.safetensors.index.json``."""
    from safetensors.numpy import load_file, save_file

    folder, out = Path(folder), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    fused: dict[str, np.ndarray] = {}
    experts: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    for name, value in tensors.items():
        parts = name.split(".")
        if "experts" in parts and parts[parts.index("experts") + 1].isdigit():
            i = parts.index("experts")
            prefix = ".".join(parts[: i + 1])
            experts.setdefault(prefix, {}).setdefault(int(parts[i + 1]), {})[parts[i + 2]] = value
        else:
            fused[name] = value
    for prefix, per_expert in experts.items():
        order = [per_expert[e] for e in sorted(per_expert)]
        fused[f"{prefix}.gate_up_proj"] = np.stack(
            [np.concatenate([e["gate_proj"], e["up_proj"]]) for e in order]
        )
        fused[f"{prefix}.down_proj"] = np.stack([e["down_proj"] for e in order])
    names = sorted(fused)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s::shards]
        save_file({n: np.ascontiguousarray(fused[n]) for n in part}, str(out / file))
        weight_map.update(dict.fromkeys(part, file))
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1)
    )
    (out / "config.json").write_text((folder / "config.json").read_text())


def logits(model, tokens: np.ndarray) -> np.ndarray:
    """float32 ``[T, vocab]``: one sequence's logits at every position."""
    import torch

    with torch.no_grad():
        return (
            model(torch.as_tensor(np.asarray(tokens)[None], dtype=torch.long))
            .logits[0]
            .float()
            .numpy()
        )


def greedy(model, prompt: np.ndarray, max_new_tokens: int) -> np.ndarray:
    """transformers' own greedy ``generate``: int ``[max_new_tokens]``."""
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.as_tensor(np.asarray(prompt)[None], dtype=torch.long),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
    return out[0, len(prompt) :].numpy()
