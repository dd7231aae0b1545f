"""Several query tokens per request: every token against the float64 reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mla_jax
from mla_jax.multi_token import mla_decode_tokens, token_lengths
from mla_jax.reference import mla_decode_reference_np
from tests.cases import TINY, buffer_spec, random_case

SM = 4
# The softmax scales the fuzz draws from: random_case's range (0.5 to 1.5 over the
# square root of the head dim), its ends and middle. The scale is static, so each value
# compiles once; a fresh value per example would compile 60 times.
SCALES = tuple(f / np.sqrt(sum(TINY)) for f in (0.5, 1.0, 1.5))


def test_token_lengths():
    seq_lens = jnp.asarray([10, 2, 0, 7], jnp.int32)
    causal = token_lengths(seq_lens, 3, causal=True, query_lens=jnp.asarray([3, 3, 3, 2]))
    np.testing.assert_array_equal(causal, [[8, 9, 10], [0, 1, 2], [0, 0, 0], [6, 7, 0]])
    flat = token_lengths(seq_lens, 3, causal=False, query_lens=jnp.asarray([3, 3, 3, 2]))
    np.testing.assert_array_equal(flat, [[10, 10, 10], [2, 2, 2], [0, 0, 0], [7, 7, 0]])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("max_seq_len", ["static", None])
def test_every_token_matches_reference(causal, max_seq_len, rng):
    batch, tokens, heads = 4, 3, 5
    case = random_case(
        rng,
        batch=batch,
        heads=heads,
        dims=TINY,
        page_size=16,
        pages_per_seq=70,
        seq_lens=[1100, 3, 0, int(rng.integers(1, 1120))],
    )
    q = rng.standard_normal((batch, tokens, heads, sum(TINY))).astype(np.float32)
    query_lens = np.array([3, 3, 3, 2], np.int32)
    buf = mla_jax.reserve_logits_buffer(
        batch * tokens, heads, 1120, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
    )
    out, lse, buf = mla_decode_tokens(
        jnp.asarray(q),
        jnp.asarray(case.kv_cache),
        jnp.asarray(case.block_table),
        jnp.asarray(case.seq_lens),
        buf,
        causal=causal,
        query_lens=jnp.asarray(query_lens),
        scale=case.scale,
        backend="xla",
        max_seq_len=1100 if max_seq_len else None,
    )
    assert out.shape == (batch, tokens, heads, TINY[0]) and lse.shape == (batch, tokens, heads)
    lens = np.asarray(
        token_lengths(
            jnp.asarray(case.seq_lens), tokens, causal=causal, query_lens=jnp.asarray(query_lens)
        )
    )
    for t in range(tokens):
        want_out, want_lse = mla_decode_reference_np(
            q[:, t],
            case.kv_cache,
            case.block_table,
            lens[:, t],
            scale=case.scale,
            kv_lora_rank=TINY[0],
        )
        np.testing.assert_allclose(np.asarray(out[:, t]), want_out, atol=2e-5)
        np.testing.assert_allclose(np.asarray(lse[:, t]), want_lse, atol=1e-4)
    assert np.all(np.asarray(lse)[3, 2] == -np.inf)  # a padding token


def test_query_pair_and_shape_errors(rng):
    case = random_case(rng, batch=2, heads=4, dims=TINY, page_size=16, pages_per_seq=4)
    q = jnp.asarray(rng.standard_normal((2, 2, 4, sum(TINY))), jnp.float32)
    buf = mla_jax.reserve_logits_buffer(
        4, 4, 64, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
    )
    args = (jnp.asarray(case.kv_cache), jnp.asarray(case.block_table), jnp.asarray(case.seq_lens))
    out1, _, buf = mla_decode_tokens(q, *args, buf, scale=0.3, backend="xla")
    out2, _, buf = mla_decode_tokens(
        (q[..., : TINY[0]], q[..., TINY[0] :]), *args, buf, scale=0.3, backend="xla"
    )
    np.testing.assert_allclose(np.asarray(out1), np.asarray(out2), atol=1e-6)
    with pytest.raises(ValueError, match=r"q: got \[2, 4, 48\], needed \[B, T, H, D\]"):
        mla_decode_tokens(q[:, 0], *args, buf, scale=0.3, backend="xla")
    with pytest.raises(ValueError, match="reserve with max_num_seqs >= 6"):
        mla_decode_tokens(
            jnp.concatenate([q, q[:, :1]], axis=1), *args, buf, scale=0.3, backend="xla"
        )


def test_triton_path_lowers_for_cuda():
    from jax import export

    from tests.kernel_calls import DISABLED, kernel_calls

    spec = jax.ShapeDtypeStruct
    args = (
        spec((4, 2, 16, 576), jnp.bfloat16),
        spec((64, 64, 576), jnp.bfloat16),
        spec((4, 16), jnp.int32),
        spec((4,), jnp.int32),
        buffer_spec(8, 16, 2),
    )

    def step(q, kv, bt, sl, buf):
        return mla_decode_tokens(
            q, kv, bt, sl, buf, scale=0.1, max_seq_len=1024, backend="triton", compute_capability=90
        )

    text = export.export(
        jax.jit(step, donate_argnums=4),
        platforms=["cuda"],
        disabled_checks=DISABLED,
    )(*args).mlir_module()
    assert len(kernel_calls(text)) == 2
    assert "tensor<8x16x576xbf16>" in text  # B * T = 8 rows reach the kernel


@settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzz_multi_token_rows(data):
    """Random lengths, query counts (padding rows), causal or not, shared pages."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    batch, tokens, heads, page, pages = 3, 4, 4, 16, 12
    capacity = page * pages
    seq_lens = np.array(
        [data.draw(st.sampled_from([0, 1, 2, 3, 4, 15, 16, 17, capacity])) for _ in range(batch)],
        np.int32,
    )
    query_lens = np.array([data.draw(st.integers(0, tokens)) for _ in range(batch)], np.int32)
    causal = data.draw(st.booleans())
    case = random_case(
        rng,
        batch=batch,
        heads=heads,
        dims=TINY,
        page_size=page,
        pages_per_seq=pages,
        seq_lens=seq_lens,
    )
    table = case.block_table.copy()
    table[1] = table[0]  # two requests reading the same pages is valid
    q = rng.standard_normal((batch, tokens, heads, sum(TINY))).astype(np.float32)
    buf = mla_jax.reserve_logits_buffer(
        batch * tokens, heads, capacity, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
    )
    scale = float(data.draw(st.sampled_from(SCALES)))
    out, lse, _ = mla_decode_tokens(
        jnp.asarray(q),
        jnp.asarray(case.kv_cache),
        jnp.asarray(table),
        jnp.asarray(seq_lens),
        buf,
        causal=causal,
        query_lens=jnp.asarray(query_lens),
        scale=scale,
        backend="xla",
    )
    lens = np.asarray(
        token_lengths(
            jnp.asarray(seq_lens), tokens, causal=causal, query_lens=jnp.asarray(query_lens)
        )
    )
    for t in range(tokens):
        want_out, want_lse = mla_decode_reference_np(
            q[:, t], case.kv_cache, table, lens[:, t], scale=scale, kv_lora_rank=TINY[0]
        )
        np.testing.assert_allclose(np.asarray(out[:, t]), want_out, atol=2e-5)
        np.testing.assert_allclose(np.asarray(lse[:, t]), want_lse, atol=1e-4)
