"""A fused mixture of experts for JAX: Triton kernels over the (token, expert) pairs
sorted by expert, reading each routed expert's weights once (vLLM's ``fused_moe``
design, written for ``mla_jax._launch``).

    y = mla_jax.moe.fused_moe(x, weights, experts, gate, up, down)  # float32 [N, hidden]

- ``api``: ``fused_moe``, the entry point (checks, alignment, two launches, the sum),
  and ``fused_mlp``, a dense SwiGLU MLP on one token through the same kernels.
- ``align``: ``moe_align``, the pairs sorted and padded per expert (JAX ops).
- ``kernel``: the Triton kernels and their launch parameters (no JAX).
- ``config``: ``MoEConfig``, the tiles, ``default_config``, the rule that picks them,
  ``shared_in_kernels``, whether the shared experts join the kernels, and
  ``mlp_slices``, the parts ``fused_mlp`` cuts an MLP into.
- ``reference``: the float64 numpy reference.

Importing this package needs no Triton; ``fused_moe`` and ``fused_mlp`` do (the
``triton`` extra).
"""

from mla_jax.moe.align import Alignment, moe_align
from mla_jax.moe.api import fused_mlp, fused_moe
from mla_jax.moe.config import MoEConfig, default_config, mlp_slices, shared_in_kernels
from mla_jax.moe.reference import fused_moe_reference

__all__ = [
    "Alignment",
    "MoEConfig",
    "default_config",
    "fused_mlp",
    "fused_moe",
    "fused_moe_reference",
    "mlp_slices",
    "moe_align",
    "shared_in_kernels",
]
