"""merge_attention_states: shards of each sequence's tokens, merged, equal the whole."""

import jax.numpy as jnp
import numpy as np
import pytest

import mla_jax
from mla_jax.merge import merge_attention_states
from mla_jax.reference import mla_decode_reference_np
from tests.cases import TINY, random_case, tolerance

SM = 4


def shard(case, tokens):
    """``case`` reduced to ``tokens[b]`` (token indices) of each row ``b``.

    The shard's rows are copied into a fresh cache of the same shape (unused rows
    NaN, so a read of one shows) and table, so every shard compiles once.
    """
    batch, pages_per_seq = case.block_table.shape
    page_size = case.kv_cache.shape[1]
    kv = np.full_like(case.kv_cache, np.nan)
    table = np.arange(batch * pages_per_seq, dtype=np.int32).reshape(batch, pages_per_seq)
    for b, t in enumerate(tokens):
        src = case.kv_cache[case.block_table[b, t // page_size], t % page_size]
        new = np.arange(len(t))
        kv[table[b, new // page_size], new % page_size] = src
    return case._replace(
        kv_cache=kv, block_table=table, seq_lens=np.array([len(t) for t in tokens], np.int32)
    )


def decode(case):
    buffer = mla_jax.reserve_logits_buffer(
        case.q.shape[0],
        case.q.shape[1],
        4096,
        kv_lora_rank=case.kv_lora_rank,
        rope_dim=case.q.shape[2] - case.kv_lora_rank,
        sm_count=SM,
    )
    out, lse, _ = mla_jax.mla_decode(
        *(jnp.asarray(a) for a in case[:4]), buffer, scale=case.scale, backend="xla"
    )
    return out, lse


def assert_whole(case, out, lse, dtype):
    ref_out, ref_lse = mla_decode_reference_np(
        *case[:4], scale=case.scale, kv_lora_rank=case.kv_lora_rank
    )
    assert out.dtype == dtype and lse.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out, np.float64), ref_out, atol=tolerance(dtype), rtol=0)
    np.testing.assert_allclose(np.asarray(lse), ref_lse, atol=1e-4, rtol=1e-5)
    empty = case.seq_lens == 0
    assert np.all(np.asarray(out)[empty] == 0) and np.all(np.asarray(lse)[empty] == -np.inf)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_two_halves_merge_to_the_whole(dtype):
    rng = np.random.default_rng(7)
    lens = [0, 0, 1, 1, 17, 300, 1024, 1100, 600, 64]
    case = random_case(
        rng,
        batch=len(lens),
        heads=5,
        dims=TINY,
        page_size=16,
        pages_per_seq=70,
        dtype=dtype,
        seq_lens=lens,
    )
    # Rows 0-1: both halves empty; rows 2, 4, 6: the second half empty; 3, 5, 7: the
    # first; the rest cut inside, off and on page boundaries.
    cuts = [0, 0, 1, 0, 17, 0, 1024, 0, 333, 32]
    first = shard(case, [np.arange(c) for c in cuts])
    second = shard(case, [np.arange(c, n) for c, n in zip(cuts, lens)])
    out, lse = merge_attention_states(*decode(first), *decode(second))
    assert_whole(case, out, lse, dtype)


def test_three_parts_in_any_order():
    rng = np.random.default_rng(8)
    lens = [0, 1, 2, 3, 50, 700, 1500]
    case = random_case(
        rng, batch=len(lens), heads=4, dims=TINY, page_size=16, pages_per_seq=100, seq_lens=lens
    )
    # Context parallelism may interleave tokens: deal each row's tokens to three
    # parts at random (so some parts are empty).
    owner = [rng.integers(0, 3, n) for n in lens]
    a, b, c = (decode(shard(case, [np.flatnonzero(o == p) for o in owner])) for p in range(3))
    left = merge_attention_states(*merge_attention_states(*a, *b), *c)
    right = merge_attention_states(*a, *merge_attention_states(*b, *c))
    swapped = merge_attention_states(*merge_attention_states(*c, *b), *a)
    for x, y, z in zip(left, right, swapped):  # equal up to rounding (FMA contraction)
        np.testing.assert_allclose(x, y, atol=1e-6, rtol=1e-6)
        np.testing.assert_allclose(x, z, atol=1e-6, rtol=1e-6)
    assert_whole(case, *left, np.float32)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16])
def test_empty_shard_is_the_identity(dtype):
    rng = np.random.default_rng(9)
    out = jnp.asarray(rng.standard_normal((3, 4, 8)), dtype)
    lse = jnp.asarray(rng.normal(0, 30, (3, 4)), jnp.float32).at[0, 0].set(-jnp.inf)
    # An empty shard's output is ignored, whatever it holds.
    empty_out = jnp.full((3, 4, 8), jnp.nan, dtype).at[1].set(jnp.inf)
    empty_lse = jnp.full((3, 4), -jnp.inf, jnp.float32)
    for merged in (
        merge_attention_states(out, lse, empty_out, empty_lse),
        merge_attention_states(empty_out, empty_lse, out, lse),
    ):
        np.testing.assert_array_equal(merged[0][1:], out[1:])  # bitwise
        np.testing.assert_array_equal(merged[1], lse)
        assert merged[0].dtype == dtype
        # Both empty: out 0, lse -inf.
        np.testing.assert_array_equal(merged[0][0, 0], 0)


def test_far_apart_lse_never_nan():
    out_a = jnp.ones((2, 4), jnp.float32)
    out_b = -jnp.ones((2, 4), jnp.float32)
    lse_a = jnp.array([1e4, -3e38], jnp.float32)
    lse_b = jnp.array([-1e4, 3e38], jnp.float32)
    out, lse = merge_attention_states(out_a, lse_a, out_b, lse_b)
    np.testing.assert_array_equal(out, [[1] * 4, [-1] * 4])
    np.testing.assert_array_equal(lse, np.float32([1e4, 3e38]))
    out, lse = merge_attention_states(out_a, lse_a, out_b, lse_a)  # equal weights
    np.testing.assert_array_equal(out, 0)
    np.testing.assert_allclose(lse, lse_a + np.log(2), rtol=1e-7)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            dict(out_b=jnp.zeros((2, 3, 9))),
            r"out_a float32\[2, 3, 8\] and out_b float32\[2, 3, 9\]",
        ),
        (
            dict(out_b=jnp.zeros((2, 3, 8), jnp.float16)),
            r"out_a float32\[2, 3, 8\] and out_b float16\[2, 3, 8\]",
        ),
        (dict(lse_b=jnp.zeros((2, 4))), r"lse_b float32\[2, 4\] and out_a float32\[2, 3, 8\]"),
        (dict(lse_a=jnp.zeros((2, 3), jnp.float16)), r"lse_a float16\[2, 3\] and out_a"),
        (
            dict(out_a=jnp.zeros((2, 3, 8), jnp.int32), out_b=jnp.zeros((2, 3, 8), jnp.int32)),
            r"out_a int32\[2, 3, 8\]: needed a floating",
        ),
    ],
)
def test_mismatches_name_both_shapes(change, message):
    args = (
        dict(
            out_a=jnp.zeros((2, 3, 8)),
            lse_a=jnp.zeros((2, 3)),
            out_b=jnp.zeros((2, 3, 8)),
            lse_b=jnp.zeros((2, 3)),
        )
        | change
    )
    with pytest.raises(ValueError, match=message):
        merge_attention_states(**args)
