"""DeepSeek-V2/V3 in JAX: load a transformers checkpoint, prefill, generate.

    config, params = mla_jax.deepseek.load_checkpoint("path/to/checkpoint")
    tokens = mla_jax.deepseek.generate(params, config, prompts, prompt_lens, max_new_tokens=32)

The attention decodes through ``mla_jax.mla_decode`` (Triton on a GPU, XLA elsewhere).
"""

from mla_jax.deepseek.checkpoint import load_checkpoint
from mla_jax.deepseek.config import DeepseekConfig, from_hf_dict
from mla_jax.deepseek.generate import GenerateOutput, generate, new_decode_state
from mla_jax.deepseek.model import (
    DecoderLayerParams,
    DeepseekParams,
    MLPParams,
    MoEParams,
    decode_step,
    init_params,
    moe,
    prefill,
    route,
)

__all__ = [
    "DecoderLayerParams",
    "DeepseekConfig",
    "DeepseekParams",
    "GenerateOutput",
    "MLPParams",
    "MoEParams",
    "decode_step",
    "from_hf_dict",
    "generate",
    "init_params",
    "load_checkpoint",
    "moe",
    "new_decode_state",
    "prefill",
    "route",
]
