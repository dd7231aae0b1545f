"""Causal flash attention for prefill in JAX: one Triton kernel over right-padded
prompts (FlashAttention-2's forward, causal block skipping, lengths a row), with MLA's
rope keys shared by the heads, written for ``mla_jax._launch``.

    out = mla_jax.prefill.flash_prefill(q, (k_nope, k_pe), v, lengths, scale=scale)

- ``api``: ``flash_prefill``, the entry point (checks, the launch).
- ``kernel``: the Triton kernel and its launch parameters (no JAX).
- ``config``: ``PrefillConfig``, the tiles, and ``default_config``, the rule that picks them.
- ``reference``: the float64 numpy reference.

Importing this package needs no Triton; ``flash_prefill`` does (the ``triton`` extra).
``mla_jax.layer.mla_prefill_layer`` runs it under ``backend="triton"``.
"""

from mla_jax.prefill.api import flash_prefill
from mla_jax.prefill.config import PrefillConfig, default_config
from mla_jax.prefill.reference import flash_prefill_reference

__all__ = ["PrefillConfig", "default_config", "flash_prefill", "flash_prefill_reference"]
