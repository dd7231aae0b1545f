"""The absorbed MLA layer against the naive (decompressed) attention."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mla_jax.buffers import reserve_logits_buffer
from mla_jax.cache import new_paged_cache
from mla_jax.layer import (
    PRESETS,
    MLAConfig,
    apply_rope,
    init_params,
    mla_decode_layer,
    naive_mla_attention,
    project,
)
from tests.cases import buffer_spec

SM = 132
TINY = PRESETS["tiny"]
jitted_layer = jax.jit(
    mla_decode_layer,
    static_argnames=("config", "backend"),
    donate_argnames=("kv_cache", "logits_buffer"),
)
naive = jax.jit(naive_mla_attention, static_argnames=("config",))


def _dense(cache, table):
    """``[B, pages_per_seq * page_size, D]``: each sequence's rows in token order."""
    return np.array(cache)[np.array(table)].reshape(table.shape[0], -1, cache.shape[-1])


def test_presets_and_checks():
    v3 = PRESETS["deepseek-v3"]
    assert (v3.hidden_size, v3.num_heads, v3.q_lora_rank, v3.kv_lora_rank) == (7168, 128, 1536, 512)
    assert (v3.qk_rope_head_dim, v3.qk_nope_head_dim, v3.v_head_dim) == (64, 128, 128)
    # YaRN (factor 40, mscale_all_dim 1) multiplies the scale by mscale**2.
    assert v3.latent_dim == 576
    assert v3.softmax_scale == pytest.approx(192**-0.5 * (0.1 * np.log(40) + 1) ** 2)
    assert TINY.softmax_scale == pytest.approx(32**-0.5)
    lite = PRESETS["deepseek-v2-lite"]
    assert lite.q_lora_rank is None and lite.num_heads == 16
    lite_params = jax.eval_shape(lambda k: init_params(lite, k), jax.random.key(0))
    assert lite_params.wq_a is None and lite_params.wq_b.shape == (2048, 16, 192)
    with pytest.raises(ValueError, match="q_lora_rank must be a positive int or None, got 0"):
        MLAConfig(64, 4, 0, 32, 16, 16, 16)
    with pytest.raises(ValueError, match="kv_lora_rank must be a power of two >= 16, got 48"):
        MLAConfig(64, 4, 32, 48, 16, 16, 16)
    with pytest.raises(ValueError, match="num_heads must be a positive int, got 0"):
        MLAConfig(64, 0, 32, 32, 16, 16, 16)
    params = init_params(TINY, jax.random.key(0))
    cache, table = new_paged_cache(2, 32, 16, TINY.latent_dim, key=jax.random.key(1))
    buffer = reserve_logits_buffer(2, TINY.num_heads, 32, kv_lora_rank=32, rope_dim=16, sm_count=SM)
    with pytest.raises(ValueError, match=r"x: got \[2, 32\], needed \[B, 64\]"):
        mla_decode_layer(
            params,
            TINY,
            jnp.ones((2, 32)),
            cache,
            table,
            jnp.zeros(2, jnp.int32),
            buffer,
            backend="xla",
        )


def test_rope_keeps_only_relative_position():
    q, k = jax.random.normal(jax.random.key(2), (2, 3, 16))
    pos = jnp.asarray([[0, 7, 300], [5, 12, 305]], jnp.int32)  # row 1 = row 0 + 5
    dots = jnp.sum(apply_rope(q, pos, TINY) * apply_rope(k, pos[:, ::-1], TINY), axis=-1)
    np.testing.assert_allclose(dots[0], dots[1], rtol=1e-4)
    np.testing.assert_allclose(
        jnp.linalg.norm(apply_rope(q, pos, TINY), axis=-1),
        jnp.broadcast_to(jnp.linalg.norm(q, axis=-1), (2, 3)),
        rtol=1e-5,
    )
    assert not np.allclose(dots[0], jnp.sum(q * k, axis=-1), rtol=1e-2)


def test_rope_pairs_are_interleaved():
    """Pair ``(x[2i], x[2i+1])`` rotates as the complex number ``x[2i] + i x[2i+1]``,
    by ``position * inv_freq[i]``; the result comes back de-interleaved."""
    x = np.asarray(jax.random.normal(jax.random.key(3), (16,)))
    pos = 11
    angles = pos * TINY.rope_inv_freq().astype(np.float64)
    want = (x[0::2] + 1j * x[1::2]) * np.exp(1j * angles)
    got = np.asarray(apply_rope(jnp.asarray(x), jnp.asarray(pos, jnp.int32), TINY))
    np.testing.assert_allclose(got, np.concatenate([want.real, want.imag]), rtol=1e-5, atol=1e-6)
    halves = dataclasses.replace(TINY, rope_interleave=False)
    want = (x[:8] + 1j * x[8:]) * np.exp(1j * angles)
    got = np.asarray(apply_rope(jnp.asarray(x), jnp.asarray(pos, jnp.int32), halves))
    np.testing.assert_allclose(got, np.concatenate([want.real, want.imag]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("page_size, use_jit", [(16, False), (16, True), (1, True)])
def test_absorbed_matches_naive(page_size, use_jit):
    """Five steps from ragged positions (one empty sequence) in float32."""
    seed = page_size + use_jit
    params = init_params(TINY, jax.random.key(seed))
    batch, max_len = 3, 48
    cache, table = new_paged_cache(
        batch, max_len, page_size, TINY.latent_dim, key=jax.random.key(seed + 10)
    )
    buffer = reserve_logits_buffer(
        batch, TINY.num_heads, max_len, kv_lora_rank=32, rope_dim=16, sm_count=SM
    )
    history = _dense(cache, table)  # rows past each prompt are random, never read
    positions = jnp.asarray([0, 5, 37], jnp.int32)
    layer = jitted_layer if use_jit else mla_decode_layer
    pointers = (cache.unsafe_buffer_pointer(), buffer.data.unsafe_buffer_pointer())
    for step, key in enumerate(jax.random.split(jax.random.key(seed + 20), 5)):
        x = jax.random.normal(key, (batch, TINY.hidden_size))
        y, cache, buffer = layer(params, TINY, x, cache, table, positions, buffer, backend="xla")
        want, row = naive(params, TINY, x, jnp.asarray(history), positions)
        history[np.arange(batch), np.asarray(positions)] = row
        assert y.shape == (batch, TINY.hidden_size) and y.dtype == jnp.float32
        np.testing.assert_allclose(
            y, want, rtol=1e-4, atol=1e-4 * float(jnp.abs(want).max()), err_msg=f"step {step}"
        )
        positions = positions + 1
    np.testing.assert_allclose(_dense(cache, table), history, rtol=1e-6, atol=1e-6)
    if use_jit:
        assert (cache.unsafe_buffer_pointer(), buffer.data.unsafe_buffer_pointer()) == pointers


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize(
    "spec, x_shape, w_shape, more_rows",
    [
        ("...h,hq->...q", (8,), (8, 12), 1),  # x [rows, 8]
        ("...h,hq->...q", (2, 8), (8, 12), 2),  # [rows, 2, 8]: 2 * rows rows
        ("bhn,chn->bhc", (4, 6), (5, 4, 6), 1),  # h a batch axis: rows rows
        ("bhv,hvd->bd", (4, 6), (4, 6, 7), 1),
    ],
)
def test_project_is_einsum(rows, spec, x_shape, w_shape, more_rows):
    """``project`` against numpy's float64 einsum; where x has one row (and only
    there) the product runs on two."""
    rng = np.random.default_rng(rows)
    x, w = rng.standard_normal((rows, *x_shape)), rng.standard_normal(w_shape)
    f32 = lambda a: jnp.asarray(a, jnp.float32)
    run = lambda a, b: project(spec, a, b, precision=jax.lax.Precision.HIGHEST)
    np.testing.assert_allclose(run(f32(x), f32(w)), np.einsum(spec, x, w), rtol=1e-5, atol=1e-5)
    one_row = rows * more_rows == 1
    text = jax.jit(run).lower(f32(x), f32(w)).as_text()
    assert (f"tensor<2x{'x'.join(map(str, x_shape))}xf32>" in text) == one_row


def test_bfloat16_cache_close_to_float32_naive():
    params = init_params(TINY, jax.random.key(5), jnp.bfloat16)
    cache, table = new_paged_cache(2, 64, 16, TINY.latent_dim, jnp.bfloat16, key=jax.random.key(6))
    buffer = reserve_logits_buffer(2, TINY.num_heads, 64, kv_lora_rank=32, rope_dim=16, sm_count=SM)
    positions = jnp.asarray([20, 50], jnp.int32)
    x = jax.random.normal(jax.random.key(7), (2, TINY.hidden_size), jnp.bfloat16)
    want, _ = naive(params, TINY, x, jnp.asarray(_dense(cache, table)), positions)
    y, cache, _ = jitted_layer(params, TINY, x, cache, table, positions, buffer, backend="xla")
    assert y.dtype == jnp.bfloat16 and cache.dtype == jnp.bfloat16
    err = float(jnp.abs(y.astype(jnp.float32) - want).max() / jnp.abs(want).max())
    assert err < 2e-2


def test_deepseek_v3_shapes():
    """The full-size preset traces end to end (abstractly: no weights allocated)."""
    v3 = PRESETS["deepseek-v3"]
    params = jax.eval_shape(lambda k: init_params(v3, k, jnp.bfloat16), jax.random.key(0))
    assert params.wq_b.shape == (1536, 128, 192) and params.wo.shape == (128, 128, 7168)
    batch, pages, page_size = 2, 8, 64
    y, cache, buffer = jax.eval_shape(
        lambda p, x, c, t, pos, b: mla_decode_layer(p, v3, x, c, t, pos, b, backend="xla"),
        params,
        jax.ShapeDtypeStruct((batch, 7168), jnp.bfloat16),
        jax.ShapeDtypeStruct((pages * batch, page_size, 576), jnp.bfloat16),
        jax.ShapeDtypeStruct((batch, pages), jnp.int32),
        jax.ShapeDtypeStruct((batch,), jnp.int32),
        buffer_spec(batch, 128, 2),
    )
    assert (y.shape, y.dtype) == ((batch, 7168), jnp.bfloat16)
    assert cache.shape == (pages * batch, page_size, 576)
    assert buffer.data.shape == (batch, 128, 2, 513)
