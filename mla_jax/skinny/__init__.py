"""A few activation rows times a weight through a Triton kernel: the projections of a
decode step, where the weight is the traffic.

    y = mla_jax.skinny.skinny_einsum("bhn,chn->bhc", q, w_uk)

- ``api``: ``skinny_einsum`` (an einsum spec mapped onto the kernel's strided axes) and
  ``fits``, whether a call is one the kernel takes.
- ``kernel``: the Triton kernel and its launch parameters (no JAX).
- ``config``: ``SkinnyConfig`` and ``default_config``, the rule that picks the splits.

Importing this package needs no Triton; ``skinny_einsum`` does.
"""

from mla_jax.skinny.api import fits, skinny_einsum
from mla_jax.skinny.config import MAX_ROWS, SkinnyConfig, default_config

__all__ = ["MAX_ROWS", "SkinnyConfig", "default_config", "fits", "skinny_einsum"]
