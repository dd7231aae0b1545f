"""The portable XLA backend vs the float64 reference, and vs the interpreted kernels."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mla_jax
from mla_jax.reference import mla_decode_reference_np
from tests.cases import DEEPSEEK, TINY, edge_lengths, random_case, tolerance
from tests.interpreted import run

SM = 4  # a small SM count makes the cap (2 * SM = 8 splits) reachable at small lengths


def decode(case, buffer, **kw):
    q, kv, bt, sl = (jnp.asarray(a) for a in case[:4])
    return mla_jax.mla_decode(q, kv, bt, sl, buffer, scale=case.scale, backend="xla", **kw)


def assert_matches_reference(case, out, lse, dtype):
    ref_out, ref_lse = mla_decode_reference_np(
        *case[:4], scale=case.scale, kv_lora_rank=case.kv_lora_rank
    )
    np.testing.assert_allclose(np.asarray(out, np.float64), ref_out, atol=tolerance(dtype), rtol=0)
    np.testing.assert_allclose(np.asarray(lse), ref_lse, atol=1e-4, rtol=1e-5)
    assert out.dtype == case.q.dtype and lse.dtype == jnp.float32


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("max_seq_len", ["static", "traced", "none"])
def test_edge_lengths(dtype, page_size, max_seq_len, rng):
    pages = max(2, 2200 // page_size // 8)
    lens = edge_lengths(page_size, pages * page_size)
    case = random_case(
        rng,
        batch=len(lens),
        heads=int(rng.integers(1, 20)),
        dims=TINY,
        page_size=page_size,
        pages_per_seq=pages,
        dtype=dtype,
        seq_lens=rng.permutation(lens),
    )
    buffer = mla_jax.reserve_logits_buffer(
        len(lens) + 2, case.q.shape[1], 8192, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
    )
    length = int(case.seq_lens.max())
    arg = {"static": length, "traced": jnp.int32(length), "none": None}[max_seq_len]
    out, lse, buffer = decode(case, buffer, max_seq_len=arg)
    assert_matches_reference(case, out, lse, dtype)


def test_deepseek_dims(rng):
    case = random_case(
        rng,
        batch=3,
        heads=16,
        dims=DEEPSEEK,
        page_size=64,
        pages_per_seq=40,
        seq_lens=[0, 1031, 2560],
    )
    buffer = mla_jax.reserve_logits_buffer(4, 16, 4096, sm_count=SM)
    out, lse, _ = decode(case, buffer, max_seq_len=2560)
    assert_matches_reference(case, out, lse, np.float32)


@pytest.mark.interpreter
def test_partials_match_interpreted_kernels(pool, rng):
    """Both backends write the same partial output and LSE into each live split slot."""
    case = random_case(
        rng,
        batch=5,
        heads=6,
        dims=TINY,
        page_size=16,
        pages_per_seq=150,
        seq_lens=[0, 1, 600, 1700, 2400],
    )
    splits = mla_jax.num_kv_splits(2400, SM)
    assert splits == 4
    buffer = mla_jax.reserve_logits_buffer(
        8, 6, 8192, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM, policy="vllm"
    )
    poisoned = np.full(buffer.shape, np.nan, np.float32)
    _, _, xla_buf = decode(case, buffer, max_seq_len=2400)
    _, _, kern_buf = pool.apply(
        run, (*case[:4], poisoned), dict(scale=case.scale, num_splits=splits)
    )
    xla_buf = np.asarray(xla_buf.data)
    compared = 0
    for b, n in enumerate(case.seq_lens):
        per = -(-n // splits)
        for s in range(splits):
            if s * per < n:  # a live split
                np.testing.assert_allclose(
                    xla_buf[b, :, s], kern_buf[b, :, s], atol=3e-5, rtol=1e-5
                )
                compared += 1
    assert compared == 0 + 1 + 4 + 4 + 4


def test_one_compilation_across_split_counts(rng):
    """A run-time max_seq_len crossing several powers of two reuses one executable."""
    case = random_case(rng, batch=2, heads=4, dims=TINY, page_size=32, pages_per_seq=160)
    q, kv, bt = (jnp.asarray(a) for a in case[:3])
    buffer = mla_jax.reserve_logits_buffer(
        2, 4, 5120, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
    )

    @jax.jit
    def step(seq_lens, buffer):
        return mla_jax.mla_decode(q, kv, bt, seq_lens, buffer, scale=case.scale, backend="xla")

    for n in [5, 700, 1100, 2100, 4200, 5100]:
        seq_lens = np.array([n, max(0, n - 300)], np.int32)
        out, lse, buffer = step(jnp.asarray(seq_lens), buffer)
        assert_matches_reference(case._replace(seq_lens=seq_lens), out, lse, np.float32)
    assert step._cache_size() == 1
