"""vLLM's Triton MLA decode kernel, loaded from a copy of its source file.

vLLM itself is not installed (it pins its own torch and pulls in far more than one
kernel). ``load`` takes a copy of ``vllm/v1/attention/ops/triton_decode_attention.py``
from the vllm wheel, swaps its vllm imports for small stand-ins and imports the
result; ``vllm_decode`` calls its ``decode_attention_fwd`` the way vLLM's TRITON_MLA
backend does (``TritonMLAImpl.forward_mqa``). Get the file with

    pip download --no-deps vllm==0.33.0 -d /tmp/vllm_wheel
    mkdir -p .vllm && unzip -p /tmp/vllm_wheel/vllm-0.33.0-*.whl \\
        vllm/v1/attention/ops/triton_decode_attention.py > .vllm/triton_decode_attention.py

and point ``MLA_JAX_VLLM_KERNEL`` at it (``.vllm/`` is git-ignored: vLLM's code is
never committed here).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
import tempfile
import types
from pathlib import Path

ENV_VAR = "MLA_JAX_VLLM_KERNEL"

# Stand-ins for what vllm 0.33.0's kernel file imports from vllm: (module, name) ->
# replacement source. ``current_platform`` is only asked ``is_rocm()`` (ROCm tiles).
_STAND_INS = {
    ("vllm.platforms", "current_platform"): (
        "import torch as _torch\n"
        "class current_platform:  # mla_jax stand-in for vllm.platforms.current_platform\n"
        "    is_rocm = staticmethod(lambda: _torch.version.hip is not None)\n"
    ),
    ("vllm.triton_utils", "triton"): "import triton\n",
    ("vllm.triton_utils", "tl"): "import triton.language as tl\n",
}
_VLLM_IMPORT = re.compile(r"^from (vllm[\w.]*) import (\([^)]*\)|[^\n]*)$", re.MULTILINE)


def patch_source(source: str) -> str:
    """``source`` with every ``from vllm... import ...`` replaced by its stand-in.

    Raises a ValueError naming any vllm import without a stand-in (a newer vLLM
    file than this was written for), rather than failing later inside Triton.
    """
    unknown = []

    def replace(match: re.Match) -> str:
        module, names = match.group(1), match.group(2).strip("() \n")
        lines = []
        for item in filter(None, (n.strip() for n in names.split(","))):
            name, _, alias = (part.strip() for part in item.partition(" as "))
            stand_in = _STAND_INS.get((module, name))
            if stand_in is None:
                unknown.append(f"from {module} import {name}")
                continue
            lines.append(stand_in if not alias else f"{stand_in}{alias} = {name}\n")
        return "".join(lines).rstrip("\n")

    patched = _VLLM_IMPORT.sub(replace, source)
    left = re.findall(r"^\s*(?:import vllm|from vllm)\b.*$", patched, re.MULTILINE)
    if unknown or left:
        raise ValueError(
            "vLLM kernel file has vllm imports without a stand-in in "
            f"mla_jax.tools.vllm_kernel: {unknown + left}"
        )
    return patched


def _write_patched(source_path: Path, patched: str) -> Path:
    """Writes the patched source to a real file (Triton's @jit reads its source back).

    Next to the original when that folder is writable, else in a temporary folder;
    an unchanged file is not rewritten.
    """
    name = f"_mla_jax_patched_{source_path.stem}.py"
    for folder in (source_path.parent, Path(tempfile.gettempdir()) / "mla_jax_vllm"):
        target = folder / name
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if not target.exists() or target.read_text() != patched:
                target.write_text(patched)
            return target
        except OSError:
            continue
    raise OSError(
        f"cannot write the patched vLLM kernel next to {source_path} or in the temporary folder"
    )


def load(path: str | os.PathLike | None = None) -> types.ModuleType | None:
    """Imports vLLM's ``triton_decode_attention`` from ``path`` or ``$MLA_JAX_VLLM_KERNEL``.

    Returns the module (it has ``decode_attention_fwd``), or None when no path is
    given or the file does not exist. Needs torch and triton, not a GPU.
    """
    path = path or os.environ.get(ENV_VAR)
    if not path or not Path(path).is_file():
        return None
    source_path = Path(path).resolve()
    patched = patch_source(source_path.read_text())
    target = _write_patched(source_path, patched)
    # One module per distinct source, so a reload after an edit is a new module.
    module_name = f"mla_jax._vllm_kernel_{hashlib.sha1(patched.encode()).hexdigest()[:12]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, target)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the patched kernel file {target}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # Triton resolves globals through the module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    if not callable(getattr(module, "decode_attention_fwd", None)):
        raise ValueError(f"{source_path} has no decode_attention_fwd")
    return module


def ensure_triton_cache_dir() -> None:
    """Gives Triton's own launcher a cache folder again.

    ``import jax_triton`` sets ``TRITON_CACHE_DIR=""`` for the whole process, after
    which any kernel launched through Triton's runtime (vLLM's) fails with "Could not
    create or locate cache dir"; this points the cache knob back at Triton's default.
    mla_jax itself no longer imports jax_triton, so this is a no-op unless something
    else in the process did.
    """
    from triton import knobs

    if not knobs.cache.dir:
        knobs.cache.dir = knobs.cache.get_triton_dir("cache")


def vllm_decode(
    mod,
    q,
    kv_cache,
    block_table,
    seq_lens,
    *,
    scale: float,
    num_kv_splits: int,
    kv_lora_rank: int = 512,
    k_scale=None,
    v_scale=None,
):
    """One MLA decode step through vLLM's ``decode_attention_fwd`` (torch tensors).

    Args:
      mod: what ``load`` returned (or any object with a ``decode_attention_fwd`` of
        vLLM's signature).
      q: ``[B, H, kv_lora_rank + rope_dim]``, q_nope then q_pe.
      kv_cache: ``[num_pages, page_size, kv_lora_rank + rope_dim]`` in q's dtype.
      block_table: int32 ``[B, pages_per_seq]``; seq_lens: int32 ``[B]``.
      scale: the softmax scale.
      num_kv_splits: the split count (vLLM: ``mla_jax.num_kv_splits(max_seq_len, sms)``).
      k_scale, v_scale: float32 device scalars; None makes ones here. Pass tensors
        made beforehand when capturing a CUDA graph (vLLM's own fallback copies a
        host scalar, which a capture refuses).

    Returns:
      ``out [B, H, kv_lora_rank]`` and ``lse [B, H]``, both in q's dtype as vLLM
      returns them.
    """
    import torch

    batch, heads, dim = q.shape
    if kv_cache.ndim != 3 or kv_cache.shape[-1] != dim:
        raise ValueError(
            f"kv_cache {list(kv_cache.shape)} does not match q {list(q.shape)}: "
            f"needed [num_pages, page_size, {dim}]"
        )
    if block_table.shape[0] != batch or seq_lens.shape != (batch,):
        raise ValueError(
            f"block_table {list(block_table.shape)} / seq_lens "
            f"{list(seq_lens.shape)} do not match batch {batch}"
        )
    ensure_triton_cache_dir()
    ones = lambda: torch.ones((), dtype=torch.float32, device=q.device)
    k_scale = ones() if k_scale is None else k_scale
    v_scale = ones() if v_scale is None else v_scale
    # As forward_mqa: zeroed outputs, an uninitialised split buffer (vLLM serves it
    # from a workspace), the cache with a kv-head dim of 1, and its kv_c part as v.
    out = torch.zeros(batch, heads, kv_lora_rank, dtype=q.dtype, device=q.device)
    lse = torch.zeros(batch, heads, dtype=q.dtype, device=q.device)
    attn_logits = torch.empty(
        batch, heads, num_kv_splits, kv_lora_rank + 1, dtype=torch.float32, device=q.device
    )
    kv = kv_cache.unsqueeze(2)
    mod.decode_attention_fwd(
        q,
        kv,
        kv[..., :kv_lora_rank],
        out,
        lse,
        block_table,
        seq_lens,
        attn_logits,
        num_kv_splits,
        scale,
        kv.size(1),
        logit_cap=0.0,
        k_scale=k_scale,
        v_scale=v_scale,
        is_mla=True,
    )
    return out, lse


def torch_reference_module() -> types.SimpleNamespace:
    """A dense torch ``decode_attention_fwd`` with vLLM's signature, for CPU dry runs.

    It reads the arguments the way vLLM's kernel does (k: ``[pages, page, 1, Lk]``,
    v: a ``[..., Lv]`` view of it, page indices per row, lengths), so a dry run
    exercises ``vllm_decode``'s plumbing and checks it against the JAX paths.
    """
    import torch

    def decode_attention_fwd(
        q,
        k_buffer,
        v_buffer,
        o,
        lse,
        req_to_token,
        b_seq_len,
        attn_logits,
        num_kv_splits,
        sm_scale,
        page_size=1,
        logit_cap=0.0,
        k_scale=None,
        v_scale=None,
        is_mla=False,
    ):
        del logit_cap, k_scale, v_scale, is_mla  # vLLM's signature; the stand-in needs none
        assert num_kv_splits == attn_logits.shape[2]
        assert k_buffer.shape[1] == page_size and k_buffer.shape[2] == 1
        k = k_buffer[req_to_token.long()].flatten(1, 3).float()  # [B, N, Lk]
        v = v_buffer[req_to_token.long()].flatten(1, 3).float()  # [B, N, Lv]
        logits = torch.einsum("bhd,bnd->bhn", q.float(), k) * sm_scale
        live = torch.arange(k.shape[1], device=q.device)[None, :] < b_seq_len[:, None]
        logits = logits.masked_fill(~live[:, None, :], float("-inf"))
        o.copy_(torch.einsum("bhn,bnd->bhd", torch.softmax(logits, -1), v))
        lse.copy_(torch.logsumexp(logits, -1))

    return types.SimpleNamespace(decode_attention_fwd=decode_attention_fwd)
