"""The split-KV logits buffer: reserved once, at the worst case, then threaded.

The buffer is stage 1's scratch: per (sequence, head, split) a partial output of
``kv_lora_rank`` floats followed by its log-sum-exp (the Triton kernels store a bf16
q's partial in bf16, two to a float32 slot: ``mla_jax.kernels.bf16_partials``; the
XLA backend's are float32). It is reserved once for
``max_num_seqs`` sequences of up to ``max_model_len`` tokens and threaded through
every decode step; a step with fewer sequences or splits uses a corner of it.

``LogitsBuffer`` carries the settings it was reserved with (split policy, SM count,
latent sizes) next to its one array, so a step cannot plan its splits with other
settings than the reservation did: the step reads them from the buffer.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from mla_jax._checks import positive_int
from mla_jax.splits import DEFAULT_POLICY, Policy, check_policy, reserved_splits

LOGITS_DTYPE = jnp.float32
# What ``sm_count=None`` plans for where no GPU can be asked (a CPU machine that
# develops, tests or exports for one): an H100/H200 SXM's multiprocessor count.
DEFAULT_SM_COUNT = 132


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LogitsBuffer:
    """The reserved logits buffer and the settings it was reserved with.

    A pytree whose only leaf is ``data``, float32 ``[max_num_seqs, num_heads,
    max_splits, kv_lora_rank + 1]``; the other fields are static (part of the
    tree structure, so a jitted step specialises on them). ``mla_decode`` donates
    the buffer and returns a new ``LogitsBuffer`` holding the same memory.
    """

    data: jax.Array
    kv_lora_rank: int = dataclasses.field(metadata={"static": True})
    rope_dim: int = dataclasses.field(metadata={"static": True})
    policy: Policy = dataclasses.field(metadata={"static": True})
    sm_count: int = dataclasses.field(metadata={"static": True})

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def max_num_seqs(self) -> int:
        return self.data.shape[0]

    @property
    def num_heads(self) -> int:
        return self.data.shape[1]

    @property
    def max_splits(self) -> int:
        return self.data.shape[2]

    def describe(self) -> str:
        """The buffer as error messages name it."""
        return (
            f"LogitsBuffer{list(self.data.shape)} (kv_lora_rank={self.kv_lora_rank}, "
            f"rope_dim={self.rope_dim}, policy={self.policy!r}, sm_count={self.sm_count})"
        )

    def is_donated(self) -> bool:
        """Whether ``data`` was donated to a step (deleted): thread the returned buffer."""
        data = self.data
        concrete = isinstance(data, jax.Array) and not isinstance(data, jax.core.Tracer)
        return concrete and data.is_deleted()

    def __repr__(self) -> str:
        # One line: the contents are scratch (NaN until a step writes them), and the
        # dataclass's repr would print every float.
        return f"<{self.describe()}{', donated' if self.is_donated() else ''}>"


def gpu_sm_count(device: jax.Device | None = None) -> int:
    """The multiprocessor count ``sm_count=None`` stands for.

    ``device``'s (default: the first GPU's); without a GPU to ask (``device`` a CPU,
    or no GPU visible to JAX), ``DEFAULT_SM_COUNT``, so planning on a laptop plans
    for an H100/H200. Raises a ValueError only for a GPU that does not report it.
    """
    if device is None:
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        device = gpus[0] if gpus else None
    if device is None or device.platform != "gpu":
        return DEFAULT_SM_COUNT
    count = getattr(device, "core_count", None)
    if not count:
        raise ValueError(
            f"sm_count=None reads the GPU's multiprocessor count, but {device} does not "
            "report one (core_count). Pass sm_count explicitly (132 for an H200/H100 SXM)."
        )
    return int(count)


def logits_buffer_shape(
    max_num_seqs: int, num_heads: int, max_splits: int, kv_lora_rank: int
) -> tuple[int, int, int, int]:
    """``[rows, heads, splits, kv_lora_rank + 1]``: partial output, then its LSE."""
    return (max_num_seqs, num_heads, max_splits, kv_lora_rank + 1)


def plan_logits_buffer(
    max_num_seqs: int,
    num_heads: int,
    max_model_len: int,
    *,
    kv_lora_rank: int,
    rope_dim: int,
    sm_count: int,
    policy: Policy,
) -> tuple[tuple[int, int, int, int], dict]:
    """The shape of a reservation and its static settings, after checking them; numpy
    integers become Python ints (the settings are static fields, named in messages)."""
    max_num_seqs = positive_int("max_num_seqs", max_num_seqs)
    num_heads = positive_int("num_heads", num_heads)
    max_model_len = positive_int("max_model_len", max_model_len)
    kv_lora_rank = positive_int("kv_lora_rank", kv_lora_rank)
    rope_dim = positive_int("rope_dim", rope_dim)
    sm_count = positive_int("sm_count", sm_count)
    check_policy(policy)
    splits = reserved_splits(
        policy, num_heads=num_heads, max_model_len=max_model_len, sm_count=sm_count
    )
    shape = logits_buffer_shape(max_num_seqs, num_heads, splits, kv_lora_rank)
    return shape, dict(
        kv_lora_rank=kv_lora_rank, rope_dim=rope_dim, policy=policy, sm_count=sm_count
    )


def reserve_logits_buffer(
    max_num_seqs: int,
    num_heads: int,
    max_model_len: int,
    *,
    kv_lora_rank: int = 512,
    rope_dim: int = 64,
    sm_count: int | None = None,
    device: jax.Device | jax.sharding.Sharding | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> LogitsBuffer:
    """Reserves the float32 logits buffer for the worst case, once.

    Args:
      max_num_seqs: the most sequences a step will decode.
      num_heads: query heads.
      max_model_len: the longest sequence a step will see.
      kv_lora_rank, rope_dim: the cache's latent sizes (a cache row is
        ``kv_lora_rank + rope_dim`` wide); a step with another cache width raises.
      sm_count: the GPU's multiprocessor count the split rule plans for; ``None``
        asks the GPU (``device``, else the first one), or, without a GPU,
        ``DEFAULT_SM_COUNT`` (132, an H100/H200 SXM's).
      device: where to place the buffer (a device or a sharding).
      policy: the split rule (``mla_jax.splits.kv_splits``).

    Returns:
      A ``LogitsBuffer`` whose ``data`` is float32 ``[max_num_seqs, num_heads,
      max_splits, kv_lora_rank + 1]``, ``max_splits`` being the most splits
      ``policy`` asks for at any batch and length in range. Its contents are
      scratch (NaN until a step writes them). Thread the buffer ``mla_decode``
      returns into the next step; the one passed in is donated.
    """
    if sm_count is None:
        sm_count = gpu_sm_count(device if isinstance(device, jax.Device) else None)
    shape, settings = plan_logits_buffer(
        max_num_seqs,
        num_heads,
        max_model_len,
        kv_lora_rank=kv_lora_rank,
        rope_dim=rope_dim,
        sm_count=sm_count,
        policy=policy,
    )
    # NaN, not zeros: a read of a slot no kernel wrote shows up at once.
    return LogitsBuffer(jnp.full(shape, jnp.nan, LOGITS_DTYPE, device=device), **settings)
