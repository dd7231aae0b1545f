"""``load_checkpoint``: a transformers DeepSeek-V2/V3 checkpoint into a ``DeepseekModel``.

The checkpoint is a folder, or a Hugging Face Hub id resolved through
``huggingface_hub``'s local cache (downloaded when not there and the machine can).
Reads ``config.json`` and the ``*.safetensors`` files (one, or shards listed by
``model.safetensors.index.json``) with ``safetensors``' flax loader (no torch), and
the tokenizer in the same folder when there is one. Expert weights come in either
layout: the Hub's per-expert ``mlp.experts.{e}.gate_proj/up_proj/down_proj.weight``,
or the fused ``mlp.experts.gate_up_proj`` / ``mlp.experts.down_proj`` of
transformers' modules.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax.numpy as jnp

from mla_jax.deepseek.config import DeepseekConfig, from_hf_dict
from mla_jax.deepseek.model import DecoderLayerParams, DeepseekParams, MLPParams, MoEParams
from mla_jax.layer import MLAParams

ROUTER_DTYPE = jnp.float32  # transformers keeps the router in float32 and routes in it
# "org/name", as the Hub spells a repository id.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# What a Hub snapshot needs for load_checkpoint: the config, the weights, the tokenizer.
HUB_FILES = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt"]


@dataclasses.dataclass(frozen=True)
class DeepseekModel:
    """What ``load_checkpoint`` returns and ``generate`` takes: config, weights and
    (when the checkpoint has one) its tokenizer.

    ``config, params = model`` unpacks it as the earlier ``(config, params)`` pair.
    """

    config: DeepseekConfig
    params: DeepseekParams
    # transformers' tokenizer (AutoTokenizer) or a ``tokenizers.Tokenizer``; None when
    # the folder has none. ``generate`` takes strings only with one.
    tokenizer: Any = None
    path: Path | None = None  # the folder it was read from

    def __iter__(self) -> Iterator[Any]:
        return iter((self.config, self.params))

    def __repr__(self) -> str:
        # One line: the default repr would print every weight.
        c = self.config
        dtype = jnp.dtype(self.params.embed.dtype).name
        tokenizer = type(self.tokenizer).__name__ if self.tokenizer is not None else None
        return (
            f"DeepseekModel({c.model_type}, {c.num_hidden_layers} layers, vocab "
            f"{c.vocab_size}, {dtype}, tokenizer={tokenizer}, path={str(self.path)!r})"
        )


# The weights' dtypes: what the checkpoint may store and ``dtype`` may ask for (an
# integer or fp8 dtype would silently cast trained weights into garbage).
WEIGHT_DTYPES = ("float32", "float16", "bfloat16")
_SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{str(path)!r}: not a readable JSON file ({e})") from None


class _Tensors:
    """Name -> array over one or several safetensors files, read lazily; only the
    headers are read when it is built."""

    def __init__(self, folder: Path):
        from safetensors import safe_open  # an optional dependency: the deepseek extra

        index = folder / "model.safetensors.index.json"
        if index.exists():
            weight_map = _read_json(index)
            weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
            if not isinstance(weight_map, dict) or not all(
                isinstance(f, str) for f in weight_map.values()
            ):
                raise ValueError(
                    f"{str(index)!r}: needed an object whose weight_map maps tensor "
                    "names to file names"
                )
            files = sorted(set(weight_map.values()))
        else:
            files = sorted(p.name for p in folder.glob("*.safetensors"))
        if not files:
            raise ValueError(f"path: no *.safetensors in {str(folder)!r}")
        self._handles = {}
        for f in files:
            try:
                self._handles[f] = safe_open(str(folder / f), framework="flax")
            except Exception as e:  # safetensors' SafetensorError, or an OSError
                raise ValueError(
                    f"{str(folder / f)!r}: not a readable safetensors file ({e})"
                ) from None
        self._where = {name: f for f, h in self._handles.items() for name in h.keys()}  # noqa: SIM118
        self.used: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def names(self) -> set[str]:
        return set(self._where)

    def check(self, expected: dict[str, tuple[int, ...]]) -> None:
        """Every expected tensor present, of a float dtype and its shape, from the
        headers alone: before any tensor is read."""
        for name, shape in expected.items():
            if name not in self._where:
                unexpected = [n for n in self._where if n not in expected]
                close = difflib.get_close_matches(name, unexpected, n=1, cutoff=0.9)
                instead = f"; they hold {close[0]!r} instead" if close else ""
                raise ValueError(
                    f"checkpoint: tensor {name!r} (shape {list(shape)}) is in none of "
                    f"{', '.join(self._handles)}{instead} (a damaged file, or another "
                    "model's)"
                )
            where = f"checkpoint: tensor {name!r} in {self._where[name]!r}"
            header = self._handles[self._where[name]].get_slice(name)
            stored = header.get_dtype()
            if stored not in _SAFETENSORS_DTYPES:
                quantised = "; quantised weights are not supported" if "F8" in stored else ""
                raise ValueError(f"{where} is {stored}, needed one of {WEIGHT_DTYPES}{quantised}")
            if tuple(header.get_shape()) != shape:
                raise ValueError(
                    f"{where} has shape {list(header.get_shape())}, but config.json "
                    f"implies {list(shape)}"
                )

    def get(self, name: str, dtype=None):
        self.used.add(name)
        array = self._handles[self._where[name]].get_tensor(name)
        return array if dtype is None else array.astype(dtype)


def expected_shapes(config: DeepseekConfig, names: set[str]) -> dict[str, tuple[int, ...]]:
    """Every tensor ``load_checkpoint`` reads and the shape ``config`` implies for it
    (torch's ``[out, in]`` layout); ``names`` (the checkpoint's) picks the experts'
    layout, fused or per expert."""
    a = config.attention
    hidden, heads = a.hidden_size, a.num_heads
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config.vocab_size, hidden),
        "model.norm.weight": (hidden,),
    }
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, hidden)

    def mlp(prefix: str, width: int) -> None:
        shapes[f"{prefix}.gate_proj.weight"] = (width, hidden)
        shapes[f"{prefix}.up_proj.weight"] = (width, hidden)
        shapes[f"{prefix}.down_proj.weight"] = (hidden, width)

    for i in range(config.num_hidden_layers):
        prefix = f"model.layers.{i}"
        shapes[f"{prefix}.input_layernorm.weight"] = (hidden,)
        shapes[f"{prefix}.post_attention_layernorm.weight"] = (hidden,)
        attn = f"{prefix}.self_attn"
        if a.q_lora_rank is None:
            shapes[f"{attn}.q_proj.weight"] = (heads * qk, hidden)
        else:
            shapes[f"{attn}.q_a_proj.weight"] = (a.q_lora_rank, hidden)
            shapes[f"{attn}.q_a_layernorm.weight"] = (a.q_lora_rank,)
            shapes[f"{attn}.q_b_proj.weight"] = (heads * qk, a.q_lora_rank)
        shapes[f"{attn}.kv_a_proj_with_mqa.weight"] = (a.latent_dim, hidden)
        shapes[f"{attn}.kv_a_layernorm.weight"] = (a.kv_lora_rank,)
        shapes[f"{attn}.kv_b_proj.weight"] = (
            heads * (a.qk_nope_head_dim + a.v_head_dim),
            a.kv_lora_rank,
        )
        shapes[f"{attn}.o_proj.weight"] = (hidden, heads * a.v_head_dim)
        if not config.is_moe_layer(i):
            mlp(f"{prefix}.mlp", config.intermediate_size)
            continue
        moe, experts, inter = f"{prefix}.mlp", config.n_routed_experts, config.moe_intermediate_size
        shapes[f"{moe}.gate.weight"] = (experts, hidden)
        if config.model_type == "deepseek_v3":
            shapes[f"{moe}.gate.e_score_correction_bias"] = (experts,)
        if f"{moe}.experts.gate_up_proj" in names:
            shapes[f"{moe}.experts.gate_up_proj"] = (experts, 2 * inter, hidden)
            shapes[f"{moe}.experts.down_proj"] = (experts, hidden, inter)
        else:
            for e in range(experts):
                mlp(f"{moe}.experts.{e}", inter)
        if config.n_shared_experts:
            mlp(f"{moe}.shared_experts", config.n_shared_experts * inter)
    return shapes


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


def resolve_checkpoint(
    path: str | Path,
    *,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    local_files_only: bool = False,
) -> Path:
    """The folder of ``path``: itself when it is one, else the snapshot of the Hub
    repository ``path`` (``"org/name"``) in ``huggingface_hub``'s cache, downloaded
    first when it is not there (unless ``local_files_only``).

    Raises:
      ValueError naming the cache folder when the snapshot is neither cached nor
      downloadable, or when ``path`` is neither a folder nor a Hub id.
    """
    folder = Path(path).expanduser()
    if folder.is_dir():
        return folder
    if not HUB_ID.fullmatch(str(path)):
        raise ValueError(
            f"path: {str(path)!r} is neither a folder nor a Hugging Face Hub id ('org/name')"
        )
    try:
        from huggingface_hub import constants, snapshot_download
    except ImportError as e:
        raise ValueError(
            f"path: {str(path)!r} is not a folder, and a Hub id needs huggingface_hub "
            "(pip install huggingface_hub; it comes with the deepseek extra)"
        ) from e
    cache = Path(cache_dir) if cache_dir is not None else Path(constants.HF_HUB_CACHE)

    def snapshot(local: bool) -> Path:
        return Path(
            snapshot_download(
                str(path),
                revision=revision,
                cache_dir=cache_dir,
                allow_patterns=HUB_FILES,
                local_files_only=local,
            )
        )

    try:
        return snapshot(local=True)
    # huggingface_hub's errors for a missing entry differ between its versions.
    except Exception as cached_error:
        if local_files_only:
            raise ValueError(
                f"path: {str(path)!r} is not in the Hugging Face cache {str(cache)!r} "
                f"({cached_error}); download it where there is a network "
                f"(huggingface-cli download {path}) into that cache, pass a folder, or "
                "pass local_files_only=False"
            ) from cached_error
    try:
        return snapshot(local=False)
    # Network errors come from whichever HTTP client huggingface_hub uses.
    except Exception as e:
        raise ValueError(
            f"path: {str(path)!r} is not in the Hugging Face cache {str(cache)!r} and "
            f"could not be downloaded ({type(e).__name__}: {e}); download it where there "
            f"is a network (huggingface-cli download {path}) into that cache, or pass a folder"
        ) from e


def load_tokenizer(folder: str | Path) -> Any:
    """The tokenizer saved in ``folder``, or None when there is none.

    transformers' ``AutoTokenizer`` where ``tokenizer_config.json`` says how to build
    it (special tokens, BOS) and transformers is installed; else the bare
    ``tokenizers.Tokenizer`` of ``tokenizer.json``.
    """
    folder = Path(folder)
    has_config = (folder / "tokenizer_config.json").exists()
    has_json = (folder / "tokenizer.json").exists()
    if has_config:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            pass  # the bare tokenizer.json below, when there is one
        else:
            return AutoTokenizer.from_pretrained(str(folder))
    if not has_json:
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ValueError(
            f"{str(folder)!r} has a tokenizer.json, which needs the tokenizers package "
            "(pip install tokenizers; it comes with the deepseek extra), or pass tokenizer=False"
        ) from e
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def load_checkpoint(
    path: str | Path,
    *,
    dtype=None,
    tokenizer: bool = True,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    local_files_only: bool = False,
) -> DeepseekModel:
    """Reads a transformers ``DeepseekV2ForCausalLM`` / ``DeepseekV3ForCausalLM``.

    Args:
      path: a folder with ``config.json`` and ``*.safetensors`` (sharded with
        ``model.safetensors.index.json``, or not), or a Hugging Face Hub id such as
        ``"deepseek-ai/DeepSeek-V2-Lite"``, read from ``huggingface_hub``'s cache
        (``cache_dir``, default ``HF_HUB_CACHE``) and downloaded there first when
        it is missing and ``local_files_only`` is off.
      dtype: the weights' dtype, float32, float16 or bfloat16; ``None`` keeps the
        embedding's stored dtype. The router (and V3's ``e_score_correction_bias``)
        stays float32, as in transformers.
      tokenizer: load the folder's tokenizer when it has one (``load_tokenizer``).
      revision: the Hub revision (branch, tag or commit); default the main branch.

    Returns:
      A ``DeepseekModel``: ``config``, ``params`` (a ``DeepseekParams`` pytree of jax
      arrays, ``W_UK``/``W_UV`` split out of ``kv_b_proj`` for absorption),
      ``tokenizer`` (or None) and ``path``. ``config, params = model`` still unpacks.

    Raises:
      ValueError naming what is unsupported (see ``config.from_hf_dict``: quantised
      weights, other RoPE scalings, ...) or missing, before any tensor is read: a
      config.json or index that is not a JSON object, a field missing or of the wrong
      type, a file that is not safetensors, a tensor missing, not float32, float16 or
      bfloat16, or of another shape than config.json implies (naming file and tensor);
      and the cache folder when a Hub id can neither be found there nor downloaded.
    """
    if dtype is not None:
        try:
            name = jnp.dtype(dtype).name
        except TypeError:
            name = None
        if name not in WEIGHT_DTYPES:
            raise ValueError(f"dtype: got {dtype!r}, needed None or one of {WEIGHT_DTYPES}")
    folder = resolve_checkpoint(
        path, revision=revision, cache_dir=cache_dir, local_files_only=local_files_only
    )
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ValueError(f"path: {str(folder)!r} has no config.json")
    hf = _read_json(config_file)
    try:
        config = from_hf_dict(hf)
    except ValueError as e:
        raise ValueError(f"{str(config_file)!r}: {e}") from None
    t = _Tensors(folder)
    t.check(expected_shapes(config, t.names()))
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
    return DeepseekModel(
        config, params, load_tokenizer(folder) if tokenizer else None, folder.resolve()
    )
