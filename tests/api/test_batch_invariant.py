"""Batch-invariant mode: a row's output is bitwise independent of its batch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mla_jax
from mla_jax.reference import mla_decode_reference_np
from tests.cases import TINY, random_case

SM = 4


def decode(case, rows, **kw):
    """Decode ``rows`` of ``case`` as one batch (in that order)."""
    buf = mla_jax.reserve_logits_buffer(
        8, case.q.shape[1], 4096, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
    )
    out, lse, _ = mla_jax.mla_decode(
        jnp.asarray(case.q[rows]),
        jnp.asarray(case.kv_cache),
        jnp.asarray(case.block_table[rows]),
        jnp.asarray(case.seq_lens[rows]),
        buf,
        scale=case.scale,
        backend="xla",
        batch_invariant=True,
        **kw,
    )
    return np.asarray(out), np.asarray(lse)


@pytest.mark.parametrize("max_seq_len", [4000, None])
def test_row_is_bitwise_independent_of_batch(max_seq_len, rng):
    # The xla backend's invariance holds on the CPU (on a GPU it raises, below).
    with jax.default_device(jax.devices("cpu")[0]):
        check_rows_bitwise_independent(rng, max_seq_len)


def check_rows_bitwise_independent(rng, max_seq_len):
    case = random_case(
        rng,
        batch=6,
        heads=4,
        dims=TINY,
        page_size=16,
        pages_per_seq=250,
        seq_lens=[3900, 1, 0, 2100, 777, 4000],
    )
    alone = [decode(case, [r], max_seq_len=max_seq_len) for r in range(6)]
    for rows in ([0, 1, 2, 3, 4, 5], [5, 3, 0], [3, 3, 1, 0, 4], [2, 0]):
        out, lse = decode(case, rows, max_seq_len=max_seq_len)
        for i, r in enumerate(rows):
            np.testing.assert_array_equal(out[i], alone[r][0][0])
            np.testing.assert_array_equal(lse[i], alone[r][1][0])
    ref_out, _ = mla_decode_reference_np(*case[:4], scale=case.scale, kv_lora_rank=TINY[0])
    np.testing.assert_allclose(np.concatenate([a[0] for a in alone]), ref_out, atol=2e-5)


def test_xla_backend_on_a_gpu_refuses_batch_invariance(monkeypatch, rng):
    """XLA:GPU's dots are not batch-invariant (rows differed on the H200): say so."""
    from mla_jax import decode as decode_module

    monkeypatch.setattr(decode_module.jax, "default_backend", lambda: "gpu")
    case = random_case(rng, batch=2, heads=4, dims=TINY, page_size=16, pages_per_seq=4)
    buf = mla_jax.reserve_logits_buffer(
        2, 4, 64, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
    )

    @jax.jit
    def step(q, kv, bt, sl, buf):  # traced: the platform is the default backend's
        return mla_jax.mla_decode(
            q, kv, bt, sl, buf, scale=case.scale, backend="xla", batch_invariant=True
        )

    with pytest.raises(ValueError, match="use backend='triton'"):
        step(*(jnp.asarray(a) for a in case[:4]), buf)
