import jax.numpy as jnp
import numpy as np
import pytest

from mla_jax.reference import mla_decode_reference, mla_decode_reference_np
from tests.cases import DEEPSEEK, TINY, edge_lengths, random_case


def naive_np(case):
    """Attention written out token by token, in float64, without the block table trick."""
    q, kv, bt, sl, scale, lora = case
    out = np.zeros(q.shape[:2] + (lora,))
    lse = np.full(q.shape[:2], -np.inf)
    for b in range(q.shape[0]):
        keys = [
            kv[bt[b, t // kv.shape[1]], t % kv.shape[1]].astype(np.float64) for t in range(sl[b])
        ]
        for h in range(q.shape[1]):
            if not keys:
                continue
            s = np.array([q[b, h].astype(np.float64) @ k * scale for k in keys])
            w = np.exp(s - s.max())
            out[b, h] = sum(wi * k[:lora] for wi, k in zip(w, keys)) / w.sum()
            lse[b, h] = s.max() + np.log(w.sum())
    return out, lse


@pytest.mark.parametrize("dims, page", [(TINY, 1), (TINY, 16), (DEEPSEEK, 64)])
def test_numpy_reference_against_token_loop(dims, page, rng):
    case = random_case(
        rng,
        batch=4,
        heads=3,
        dims=dims,
        page_size=page,
        pages_per_seq=max(1, 96 // page),
        seq_lens=rng.permutation(edge_lengths(page, max(1, 96 // page) * page))[:4],
    )
    out, lse = mla_decode_reference_np(*case[:4], scale=case.scale, kv_lora_rank=case.kv_lora_rank)
    want_out, want_lse = naive_np(case)
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12)


@pytest.mark.parametrize("pair", [False, True])
def test_jnp_reference_against_float64(pair, rng):
    case = random_case(
        rng, batch=5, heads=7, dims=TINY, page_size=8, pages_per_seq=9, seq_lens=[0, 1, 8, 9, 72]
    )
    q = jnp.asarray(case.q)
    if pair:
        q = (q[..., : TINY[0]], q[..., TINY[0] :])
    out, lse = mla_decode_reference(
        q, *(jnp.asarray(a) for a in case[1:4]), scale=case.scale, kv_lora_rank=TINY[0]
    )
    want_out, want_lse = mla_decode_reference_np(*case[:4], scale=case.scale, kv_lora_rank=TINY[0])
    np.testing.assert_allclose(np.asarray(out), want_out, atol=2e-6)
    np.testing.assert_allclose(np.asarray(lse), want_lse, atol=2e-6)
    assert np.all(np.asarray(out)[0] == 0) and np.all(np.asarray(lse)[0] == -np.inf)
