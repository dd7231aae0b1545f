"""DeepSeek-V2/V3 in JAX: load a transformers checkpoint, prefill, generate.

    model = mla_jax.deepseek.load_checkpoint("path/to/checkpoint")  # or a Hub id
    out = mla_jax.deepseek.generate(model, ["some text", "other"], max_new_tokens=32)
    out.text, out.tokens, out.lengths

The attention decodes through ``mla_jax.mla_decode`` (Triton on a GPU, XLA elsewhere).
"""

from mla_jax.deepseek.checkpoint import (
    DeepseekModel,
    load_checkpoint,
    load_tokenizer,
    resolve_checkpoint,
)
from mla_jax.deepseek.config import DeepseekConfig, from_hf_dict
from mla_jax.deepseek.generate import GenerateOutput, generate, new_decode_state, stream
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
    "DeepseekModel",
    "DeepseekParams",
    "GenerateOutput",
    "MLPParams",
    "MoEParams",
    "decode_step",
    "from_hf_dict",
    "generate",
    "init_params",
    "load_checkpoint",
    "load_tokenizer",
    "moe",
    "new_decode_state",
    "prefill",
    "resolve_checkpoint",
    "route",
    "stream",
]
