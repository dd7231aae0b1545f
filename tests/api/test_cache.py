"""append_latent against a numpy loop, its checks, in-place updates; new_paged_cache."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mla_jax.cache import append_latent, new_block_table, new_paged_cache

WIDTH = 48


def _problem(rng, batch, pages_per_seq, page_size, dtype=jnp.float32):
    """Random cache, a shuffled block table with one spare page, random latents."""
    num_pages = batch * pages_per_seq + 1
    cache = rng.standard_normal((num_pages, page_size, WIDTH)).astype(np.float32)
    table = rng.permutation(num_pages)[: batch * pages_per_seq].reshape(batch, pages_per_seq)
    latent = rng.standard_normal((batch, WIDTH)).astype(np.float32)
    return (jnp.asarray(cache, dtype), jnp.asarray(table, jnp.int32), jnp.asarray(latent, dtype))


def _numpy_append(cache, latent, table, positions):
    cache, page_size = np.array(cache), cache.shape[1]
    for b, pos in enumerate(np.asarray(positions)):
        if 0 <= pos < table.shape[1] * page_size and table[b, pos // page_size] >= 0:
            cache[table[b, pos // page_size], pos % page_size] = latent[b]
    return cache


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint16 if x.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("page_size", [1, 5, 16])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_append_matches_numpy_loop(page_size, dtype):
    rng = np.random.default_rng(page_size)
    batch, pages_per_seq = 4, 7
    cache, table, latent = _problem(rng, batch, pages_per_seq, page_size, dtype)
    positions = rng.integers(0, pages_per_seq * page_size, batch).astype(np.int32)
    got = append_latent(cache, latent, table, jnp.asarray(positions))
    want = _numpy_append(cache, np.asarray(latent), np.asarray(table), positions)
    assert got.shape == cache.shape and got.dtype == cache.dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # Exactly `batch` rows changed, each to its sequence's latent.
    changed = np.any(_bits(got) != _bits(cache), axis=-1)
    assert changed.sum() == batch


def test_out_of_range_writes_nothing():
    rng = np.random.default_rng(7)
    cache, table, latent = _problem(rng, 5, 3, 4)
    capacity = 3 * 4
    table = table.at[4, 2].set(-1)  # an unassigned page entry
    positions = jnp.asarray([-1, capacity, capacity + 9, 5, 2 * 4 + 1], jnp.int32)
    got = append_latent(cache, latent, table, positions)
    want = _numpy_append(cache, np.asarray(latent), np.asarray(table), positions)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # Only sequence 3 (position 5) lands; the others would have clamped or wrapped.
    assert np.any(_bits(got) != _bits(cache), axis=-1).sum() == 1


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(kv_cache=jnp.zeros((4, 48))), r"kv_cache: got \[4, 48\], needed \[num_pages"),
        (dict(latent=jnp.zeros((2, 40))), r"latent: got \[2, 40\], needed \[B, 48\]"),
        (
            dict(latent=jnp.zeros((2, 48), jnp.bfloat16)),
            r"latent dtype: got bfloat16, needed kv_cache's float32",
        ),
        (
            dict(block_table=jnp.zeros((2, 3), jnp.float32)),
            r"block_table: got float32\[2, 3\], needed int32 \[2, pages_per_seq >= 1\]",
        ),
        (
            dict(block_table=jnp.zeros((3, 3), jnp.int32)),
            r"block_table: got int32\[3, 3\], needed int32 \[2,",
        ),
        (
            dict(positions=jnp.zeros((3,), jnp.int32)),
            r"positions: got int32\[3\], needed int32 \[2\]",
        ),
        (
            dict(positions=jnp.zeros((2,), jnp.float32)),
            r"positions: got float32\[2\], needed int32 \[2\]",
        ),
    ],
)
def test_checks(change, match):
    args = dict(
        kv_cache=jnp.ones((8, 4, 48)),
        latent=jnp.ones((2, 48)),
        block_table=jnp.zeros((2, 3), jnp.int32),
        positions=jnp.zeros((2,), jnp.int32),
    )
    with pytest.raises(ValueError, match=match):
        append_latent(**{**args, **change})


def test_donated_step_updates_in_place():
    rng = np.random.default_rng(3)
    batch = 4
    # Allocated by XLA, as in real use: a buffer imported zero-copy from numpy is
    # not XLA's to reuse, so donating it makes a copy.
    cache, table = new_paged_cache(batch, 256, 16, WIDTH, key=jax.random.key(3))
    step = jax.jit(append_latent, donate_argnums=0)
    latent = jnp.asarray(rng.standard_normal((batch, WIDTH)), jnp.float32)
    positions = jnp.asarray(rng.integers(0, 200, batch), jnp.int32)
    compiled = step.lower(cache, latent, table, positions).compile()
    assert compiled.memory_analysis().temp_size_in_bytes < cache.nbytes // 10

    # A copy: a zero-copy numpy view (np.asarray) would pin the buffer and make
    # JAX copy instead of donating.
    want, pointer = np.array(cache, copy=True), cache.unsafe_buffer_pointer()
    for _ in range(4):
        latent = jnp.asarray(rng.standard_normal((batch, WIDTH)), jnp.float32)
        old = cache
        cache = step(cache, latent, table, positions)
        want = _numpy_append(want, np.asarray(latent), np.asarray(table), positions)
        assert old.is_deleted()
        assert cache.unsafe_buffer_pointer() == pointer
        positions = positions + 1
    np.testing.assert_array_equal(np.asarray(cache), want)


def test_new_paged_cache():
    cache, table = new_paged_cache(3, 50, 16, WIDTH, jnp.bfloat16, key=jax.random.key(4))
    assert cache.shape == (12, 16, WIDTH) and cache.dtype == jnp.bfloat16
    assert table.shape == (3, 4) and table.dtype == jnp.int32
    assert sorted(np.asarray(table).ravel()) == list(range(12))
    assert not np.array_equal(np.asarray(table).ravel(), np.arange(12))  # shuffled
    assert 0.5 < float(jnp.std(cache.astype(jnp.float32))) < 1.5
    assert new_block_table(3, 50, 16, key=jax.random.key(5)).shape == (3, 4)
    with pytest.raises(ValueError, match="page_size must be a positive int, got 0"):
        new_paged_cache(3, 50, 0, WIDTH, key=jax.random.key(4))
