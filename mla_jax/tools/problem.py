"""One seeded random decode problem, shared by ``compare``, the notebooks and tests.

Everything is normal random data (never zeros, so a kernel that reads a wrong or
unwritten row shows up), and each sequence's pages are scattered over the whole
pool in a shuffled order, as a paged allocator leaves them after a while.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

# DeepSeek-V2/V3's query-key head dim before absorption is qk_nope (128) + rope; the
# absorbed query keeps that softmax scale.
QK_NOPE_HEAD_DIM = 128


def softmax_scale(qk_nope_head_dim: int = QK_NOPE_HEAD_DIM, rope_dim: int = 64) -> float:
    """DeepSeek's softmax scale, ``1 / sqrt(qk_nope_head_dim + rope_dim)``.

    Absorbing W_UK into the query changes the dot product's width, not its value, so
    the absorbed decode keeps the scale of the unabsorbed head dim.
    """
    return float((qk_nope_head_dim + rope_dim) ** -0.5)


class Problem(NamedTuple):
    """Inputs of one MLA decode step (numpy arrays; bfloat16 via ml_dtypes).

    q: ``[B, H, kv_lora_rank + rope_dim]``; kv_cache: ``[num_pages, page_size,
    kv_lora_rank + rope_dim]`` in q's dtype; block_table: int32 ``[B, pages_per_seq]``;
    seq_lens: int32 ``[B]``.
    """

    q: np.ndarray
    kv_cache: np.ndarray
    block_table: np.ndarray
    seq_lens: np.ndarray
    scale: float
    kv_lora_rank: int

    @property
    def max_seq_len(self) -> int:
        return int(self.seq_lens.max(initial=0))

    def as_jax(self, device: jax.Device | None = None) -> Problem:
        """The same problem with every array on ``device`` (default: JAX's default)."""
        put = lambda a: jax.device_put(a, device)
        return self._replace(
            q=put(self.q),
            kv_cache=put(self.kv_cache),
            block_table=put(self.block_table),
            seq_lens=put(self.seq_lens),
        )


def _lengths(
    seq_lens: Sequence[int] | int, batch: int, empty_rows: int, rng: np.random.Generator
) -> np.ndarray:
    """Explicit lengths, or ragged ones in [1, max] with row 0 at the max and
    ``empty_rows`` other rows set to 0."""
    if not isinstance(seq_lens, int):
        lens = np.asarray(seq_lens, np.int32)
        if lens.shape != (batch,) or (lens < 0).any():
            raise ValueError(f"seq_lens: got {list(seq_lens)}, needed {batch} lengths >= 0")
        return lens
    if seq_lens < 1 or not 0 <= empty_rows < batch:
        raise ValueError(
            f"need max seq_len >= 1 and 0 <= empty_rows < batch={batch}, "
            f"got seq_lens={seq_lens}, empty_rows={empty_rows}"
        )
    lens = rng.integers(1, seq_lens + 1, batch, dtype=np.int32)
    lens[0] = seq_lens  # the max is exact: it sets the split count
    lens[1 + rng.permutation(batch - 1)[:empty_rows]] = 0
    return lens


def make_problem(
    *,
    batch: int,
    num_heads: int,
    seq_lens: Sequence[int] | int,
    page_size: int,
    dtype: str | np.dtype = "bfloat16",
    kv_lora_rank: int = 512,
    rope_dim: int = 64,
    seed: int = 0,
    empty_rows: int = 0,
    extra_pages: int = 3,
    shuffle: bool = True,
    scale: float | None = None,
) -> Problem:
    """A seeded random decode step over a paged latent cache.

    Args:
      seq_lens: the ``batch`` lengths, or a max length: then lengths are drawn in
        ``[1, max]``, row 0 gets exactly ``max`` and ``empty_rows`` others get 0.
      dtype: of q and kv_cache: ``"float32"``, ``"float16"`` or ``"bfloat16"``.
      extra_pages: pool pages no sequence uses (random too, never read).
      shuffle: scatter the pages over the pool at random; else row-major in order.
      scale: softmax scale; default ``softmax_scale(rope_dim=rope_dim)`` (DeepSeek-V3's).

    Returns:
      A ``Problem``; ``block_table`` has ``max(1, cdiv(max_len, page_size))`` columns
      and entries past a row's length point at random (valid) pages.
    """
    dtype = jnp.dtype(dtype)
    rng = np.random.default_rng(seed)
    lens = _lengths(seq_lens, batch, empty_rows, rng)
    width = kv_lora_rank + rope_dim
    pages_per_seq = max(1, -(-int(lens.max(initial=0)) // page_size))
    needed = -(-lens // page_size)  # [B] pages each row reads
    num_pages = int(needed.sum()) + extra_pages
    if num_pages < 1:
        raise ValueError("an all-empty batch needs extra_pages >= 1")
    pool = rng.permutation(num_pages) if shuffle else np.arange(num_pages)
    table = rng.integers(0, num_pages, (batch, pages_per_seq)).astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(needed)])
    for b in range(batch):
        table[b, : needed[b]] = pool[starts[b] : starts[b + 1]]
    return Problem(
        q=rng.standard_normal((batch, num_heads, width), np.float32).astype(dtype),
        kv_cache=rng.standard_normal((num_pages, page_size, width), np.float32).astype(dtype),
        block_table=table,
        seq_lens=lens,
        scale=float(scale) if scale is not None else softmax_scale(rope_dim=rope_dim),
        kv_lora_rank=kv_lora_rank,
    )
