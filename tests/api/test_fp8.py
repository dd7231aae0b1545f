"""fp8 (float8_e4m3fn) latent cache with one dequantisation scale, on every path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mla_jax
from mla_jax.cache import quantize_fp8
from mla_jax.reference import mla_decode_reference_np
from tests.cases import TINY, buffer_spec, random_case

SM = 4


def fp8_case(rng, **kw):
    case = random_case(rng, **kw)
    kv8, scale = quantize_fp8(jnp.asarray(case.kv_cache) * 3.0)
    dequant = np.asarray(kv8.astype(jnp.float32)) * float(scale)
    return case, kv8, scale, dequant


def test_quantize_fp8_round_trip():
    x = jax.random.normal(jax.random.key(0), (8, 16, 48), jnp.bfloat16) * 5
    q, scale = quantize_fp8(x)
    assert q.dtype == jnp.float8_e4m3fn and scale.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(q.astype(jnp.float32)))) == 448.0
    back = q.astype(jnp.float32) * scale
    rel = jnp.abs(back - x.astype(jnp.float32)) / (jnp.abs(x.astype(jnp.float32)) + scale)
    assert float(jnp.max(rel)) < 0.07  # 3 mantissa bits
    q2, s2 = quantize_fp8(x, scale=0.5)
    assert float(s2) == 0.5 and float(jnp.max(q2.astype(jnp.float32))) <= 448


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
@pytest.mark.parametrize("max_seq_len", [1500, None])
def test_xla_fp8_matches_reference_on_the_dequantised_cache(dtype, max_seq_len, rng):
    case, kv8, scale, dequant = fp8_case(
        rng,
        batch=4,
        heads=5,
        dims=TINY,
        page_size=16,
        pages_per_seq=100,
        seq_lens=[0, 1, 777, 1500],
    )
    buf = mla_jax.reserve_logits_buffer(
        4, 5, 1600, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
    )
    out, lse, _ = mla_jax.mla_decode(
        jnp.asarray(case.q, dtype),
        kv8,
        jnp.asarray(case.block_table),
        jnp.asarray(case.seq_lens),
        buf,
        scale=case.scale,
        max_seq_len=max_seq_len,
        backend="xla",
        k_scale=scale,
    )
    q_used = np.asarray(jnp.asarray(case.q, dtype).astype(jnp.float32))
    ref_out, ref_lse = mla_decode_reference_np(
        q_used, dequant, case.block_table, case.seq_lens, scale=case.scale, kv_lora_rank=TINY[0]
    )
    tol = 2e-5 if dtype == jnp.float32 else 2e-2  # fp16: the widened cache's products
    np.testing.assert_allclose(np.asarray(out, np.float64), ref_out, atol=tol * 3)
    np.testing.assert_allclose(np.asarray(lse), ref_lse, atol=tol * 10)


def test_fp8_needs_k_scale_and_q_dtype_is_checked(rng):
    case, kv8, scale, _ = fp8_case(rng, batch=2, heads=4, dims=TINY, page_size=16, pages_per_seq=4)
    buf = mla_jax.reserve_logits_buffer(
        2, 4, 64, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
    )
    args = (jnp.asarray(case.q), kv8, jnp.asarray(case.block_table), jnp.asarray(case.seq_lens))
    with pytest.raises(ValueError, match="kv_cache is float8_e4m3fn: pass k_scale"):
        mla_jax.mla_decode(*args, buf, scale=0.1, backend="xla")
    with pytest.raises(ValueError, match="kv_cache dtype: got float8_e5m2"):
        mla_jax.mla_decode(
            args[0],
            kv8.astype(jnp.float8_e5m2),
            *args[2:],
            buf,
            scale=0.1,
            backend="xla",
            k_scale=scale,
        )


def test_fp8_mma_needs_an_fp8_cache_and_is_exact_elsewhere(rng):
    """``fp8_mma=True`` on a 16-bit cache is refused, naming the fix; where no fp8-MMA
    kernel runs (here the xla backend) the result is the default's, bit for bit."""
    case, kv8, scale, _ = fp8_case(
        rng, batch=2, heads=4, dims=TINY, page_size=16, pages_per_seq=4, seq_lens=[5, 60]
    )
    args = (jnp.asarray(case.q), kv8, jnp.asarray(case.block_table), jnp.asarray(case.seq_lens))

    def run(**kw):
        buf = mla_jax.reserve_logits_buffer(
            2, 4, 64, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
        )
        return mla_jax.mla_decode(
            *args[:1], kw.pop("kv", kv8), *args[2:], buf, scale=0.1, backend="xla", **kw
        )

    with pytest.raises(
        ValueError, match="fp8_mma=True needs a float8_e4m3fn kv_cache, got float32"
    ):
        run(kv=jnp.asarray(case.kv_cache, jnp.float32), fp8_mma=True)
    out, lse, _ = run(k_scale=scale, fp8_mma=True)
    ref_out, ref_lse, _ = run(k_scale=scale)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref_out))
    np.testing.assert_array_equal(np.asarray(lse), np.asarray(ref_lse))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_fp8_kernels_compile_for_sm90(dtype):
    from jax import export

    from tests.kernel_calls import DISABLED, kernel_calls

    spec = jax.ShapeDtypeStruct
    args = (
        spec((4, 128, 576), dtype),
        spec((64, 64, 576), jnp.float8_e4m3fn),
        spec((4, 16), jnp.int32),
        spec((4,), jnp.int32),
        buffer_spec(4, 128, 2),
        spec((), jnp.float32),
    )

    def step(q, kv, bt, sl, buf, k_scale):
        return mla_jax.mla_decode(
            q,
            kv,
            bt,
            sl,
            buf,
            scale=0.1,
            max_seq_len=1024,
            k_scale=k_scale,
            backend="triton",
            compute_capability=90,
        )

    text = export.export(
        jax.jit(step, donate_argnums=4),
        platforms=["cuda"],
        disabled_checks=DISABLED,
    )(*args).mlir_module()
    # One kernel: the fp8 seesaw, a row's 2 splits one cluster, which merges them.
    assert len(kernel_calls(text)) == 1
    assert "tensor<64x64x576xf8E4M3FN>" in text
