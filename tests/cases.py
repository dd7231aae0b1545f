"""Random decode problems for the tests (shuffled pages, edge lengths), and their seeds."""

from __future__ import annotations

import os
import zlib
from typing import NamedTuple

import numpy as np
import pytest

TINY = (32, 16)  # kv_lora_rank, rope_dim: the smallest sizes the kernels take
DEEPSEEK = (512, 64)


class Case(NamedTuple):
    q: np.ndarray  # [B, H, lora + rope]
    kv_cache: np.ndarray  # [num_pages, page_size, lora + rope]
    block_table: np.ndarray  # int32 [B, pages_per_seq]
    seq_lens: np.ndarray  # int32 [B]
    scale: float
    kv_lora_rank: int


def edge_lengths(page_size: int, capacity: int, tokens_per_split: int = 512) -> list[int]:
    """0, 1, page and split boundaries +-1, and the full capacity, within capacity."""
    picks = {
        0,
        1,
        page_size - 1,
        page_size,
        page_size + 1,
        tokens_per_split - 1,
        tokens_per_split,
        tokens_per_split + 1,
        capacity - 1,
        capacity,
    }
    return sorted(n for n in picks if 0 <= n <= capacity)


def random_case(
    rng: np.random.Generator,
    *,
    batch: int,
    heads: int,
    dims=TINY,
    page_size: int = 16,
    pages_per_seq: int = 4,
    dtype=np.float32,
    seq_lens=None,
) -> Case:
    """Normal random q and cache; each row's pages drawn from a shuffled, larger pool."""
    lora, rope = dims
    num_pages = batch * pages_per_seq + 5
    kv = rng.standard_normal((num_pages, page_size, lora + rope)).astype(dtype)
    table = rng.permutation(num_pages)[: batch * pages_per_seq].reshape(batch, pages_per_seq)
    capacity = pages_per_seq * page_size
    if seq_lens is None:
        seq_lens = rng.integers(0, capacity + 1, batch)
    q = rng.standard_normal((batch, heads, lora + rope)).astype(dtype)
    scale = float(rng.uniform(0.5, 1.5) / np.sqrt(lora + rope))
    return Case(q, kv, table.astype(np.int32), np.asarray(seq_lens, np.int32), scale, lora)


def pack_bf16_partials(part: np.ndarray) -> np.ndarray:
    """Partials ``[..., LORA]`` in bf16, two to a float32 slot from the slot's start, as
    stage 1 stores them for a bf16 q (``kernels.bf16_partials``): ``[..., LORA / 2]``."""
    import ml_dtypes

    return np.asarray(part).astype(ml_dtypes.bfloat16).view(np.uint16).view(np.float32)


def unpack_bf16_partials(buffer: np.ndarray) -> np.ndarray:
    """A logits buffer ``[..., LORA + 1]`` holding bf16 partials (``pack_bf16_partials``)
    as float32 partials in columns ``[0, LORA)``; the lse in slot ``LORA`` as it was."""
    import ml_dtypes

    lora = buffer.shape[-1] - 1
    out = np.array(buffer, np.float32)
    out[..., :lora] = np.ascontiguousarray(buffer[..., : lora // 2]).view(ml_dtypes.bfloat16)
    return out


def tolerance(dtype) -> float:
    """Max abs error allowed on outputs of O(1): the output's own rounding dominates."""
    return {np.float32: 2e-5, np.float16: 4e-3}[np.dtype(dtype).type]


def buffer_spec(
    rows: int, heads: int, splits: int, *, dims=DEEPSEEK, policy: str = "vllm", sm_count: int = 132
):
    """An abstract ``LogitsBuffer`` (its array a ``ShapeDtypeStruct``) for tracing and
    lowering without allocating."""
    import jax
    import jax.numpy as jnp

    import mla_jax

    lora, rope = dims
    return mla_jax.LogitsBuffer(
        jax.ShapeDtypeStruct((rows, heads, splits, lora + 1), jnp.float32),
        kv_lora_rank=lora,
        rope_dim=rope,
        policy=policy,
        sm_count=sm_count,
    )


# ------------------------------------------------------------------------ seeds
# Every draw in the suite is seeded: conftest's ``rng`` and ``seed`` fixtures, and any
# fixture of a wider scope, take their seed from ``seed_for``; a failed test reports it.

SEED_ENV = "MLA_JAX_SEED"
SEED_KEY = pytest.StashKey[int]()


def seed_from_env() -> int | None:
    """``MLA_JAX_SEED`` as an int (decimal or 0x...), or None when unset or empty."""
    value = os.environ.get(SEED_ENV, "").strip()
    if not value:
        return None
    try:
        seed = int(value, 0)
    except ValueError:
        raise pytest.UsageError(f"{SEED_ENV} must be an integer, got {value!r}") from None
    if not 0 <= seed < 2**32:
        raise pytest.UsageError(f"{SEED_ENV} must be in [0, 2**32), got {seed}")
    return seed


def seed_for(node: pytest.Item | pytest.Collector) -> int:
    """The seed of ``node`` (a test, or a module for a module-scoped fixture):
    ``MLA_JAX_SEED`` if set, else the CRC-32 of its node id, stable across runs,
    machines and xdist workers. Recorded on the node, so that a failed test at or
    below it reports it."""
    env = seed_from_env()
    seed = zlib.crc32(node.nodeid.encode()) if env is None else env
    node.stash[SEED_KEY] = seed
    return seed
