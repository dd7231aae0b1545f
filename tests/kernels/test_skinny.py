"""``skinny_einsum`` (``mla_jax.skinny``): its einsum plans, its kernel in the Triton
interpreter against float64, its sm_90 builds at DeepSeek-V2-Lite's decode shapes, the
split rule, and the call on a GPU."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from mla_jax.skinny import MAX_ROWS, SkinnyConfig, default_config, fits
from mla_jax.skinny.api import plan
from tests.interpreted import run_skinny

S = jax.ShapeDtypeStruct
BF16 = ml_dtypes.bfloat16

# Each projection of the decode layer (``mla_jax.layer``), small: (spec, x, w shapes).
SPECS = [
    ("bq,qhd->bhd", (1, 200), (200, 3, 40)),  # wq: 120 columns, a 200-long reduction
    ("bh,hc->bc", (3, 96), (96, 72)),  # wkv_a: 72 columns, not a tile multiple
    ("bhn,chn->bhc", (2, 4, 32), (64, 4, 32)),  # w_uk absorbed: a head per group
    ("bhc,chv->bhv", (5, 4, 64), (64, 4, 32)),  # w_uv: strided rows of the weight
    ("bhv,hvd->bd", (16, 4, 32), (4, 32, 48)),  # wo: heads and values contracted
]


def operands(rng, x_shape, w_shape, dtype):
    """Seeded x and w with O(1) products."""
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape) / w_shape[-1])
    return x.astype(dtype), w.astype(dtype)


def test_plans_read_each_array_in_its_own_layout():
    p = plan("bhn,chn->bhc", (1, 16, 128), (512, 16, 128))
    assert (p["groups"], p["m"], p["k"], p["n"]) == (16, 1, 128, 512)
    assert p["x_strides"] == (128, 2048, 1)  # (head, row, n)
    assert p["w_strides"] == (128, 1, 2048)  # w_uk[c, h, n]: n is the reduction
    assert p["out_strides"] == (512, 8192, 1)
    wo = plan("bhv,hvd->bd", (8, 16, 128), (16, 128, 2048))
    assert (wo["groups"], wo["m"], wo["k"], wo["n"]) == (1, 8, 2048, 2048)


@pytest.mark.parametrize(
    "spec, x_shape, w_shape",
    [
        ("bvh,hvd->bd", (1, 4, 8), (8, 4, 6)),  # contracted axes in two orders
        ("bh,hc->cb", (1, 8), (8, 6)),  # rows after columns: fine, strided
        ("...h,hc->...c", (1, 8), (8, 6)),  # an ellipsis: project() names it first
        ("bh,hc->b", (1, 8), (8, 6)),  # a column summed away
    ],
)
def test_specs_the_kernel_cannot_take(spec, x_shape, w_shape):
    got = plan(spec, x_shape, w_shape)
    if spec == "bh,hc->cb":
        assert got is not None and got["out_strides"] == (0, 1, 1)
    else:
        assert got is None


def test_fits_only_a_few_rows_in_one_float_dtype():
    x, w = jnp.ones((MAX_ROWS, 8), jnp.bfloat16), jnp.ones((8, 6), jnp.bfloat16)
    assert fits("bh,hc->bc", x, w)
    assert not fits("bh,hc->bc", jnp.ones((MAX_ROWS + 1, 8), jnp.bfloat16), w)
    assert not fits("bh,hc->bc", x, w.astype(jnp.float32))
    assert not fits("bh,hc->bc", x.astype(jnp.int8), w.astype(jnp.int8))


@pytest.mark.interpreter
@pytest.mark.parametrize("spec, x_shape, w_shape", SPECS)
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("splits", [None, 3])
def test_kernel_matches_float64(pool, rng, spec, x_shape, w_shape, dtype, splits):
    """Every element of every split written (NaN before), their sum within the
    float32 accumulation's error of the float64 einsum (bf16 operands are exact in
    float32). Three splits of these reductions leave a slice past the end, which
    must write zeros."""
    x, w = operands(rng, x_shape, w_shape, dtype)
    p = plan(spec, x_shape, w_shape)
    config = default_config(groups=p["groups"], k=p["k"], n=p["n"])
    if splits is not None:
        config = SkinnyConfig(block_n=32, block_k=32, splits=splits)
    partials = pool.apply(run_skinny, (spec, x, w, config))
    assert partials.shape == (config.splits, *p["out_shape"])
    assert not np.isnan(partials).any()
    want = np.einsum(spec, x.astype(np.float64), w.astype(np.float64))
    np.testing.assert_allclose(partials.sum(0), want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_split_rule():
    """Splits until the column tiles times the splits would pass 264 programs, never
    past one 128-deep step a slice."""
    pick = lambda groups, k, n: default_config(groups=groups, k=k, n=n).splits
    assert pick(1, 2048, 3072) == 4  # wq: 48 tiles
    assert pick(1, 2048, 576) == 16  # wkv_a: 9 tiles, 16 steps
    assert pick(16, 128, 512) == 1  # w_uk: 128 tiles of one step
    assert pick(16, 512, 128) == 4  # w_uv: 32 tiles
    assert pick(1, 2048, 2048) == 8  # wo: 32 tiles
    assert pick(1, 2048, 10944) == 1  # the dense MLP's gate: 171 tiles


@pytest.mark.parametrize("field, value", [("block_n", 48), ("block_k", 8), ("splits", 0)])
def test_config_is_checked(field, value):
    with pytest.raises(ValueError, match=f"SkinnyConfig.{field}: got {value}"):
        SkinnyConfig(**{field: value})


def test_a_call_it_cannot_take_is_named():
    from mla_jax.skinny import skinny_einsum

    x, w = jnp.ones((MAX_ROWS + 1, 8), jnp.bfloat16), jnp.ones((8, 6), jnp.bfloat16)
    with pytest.raises(ValueError, match=r"'bh,hc->bc' of bfloat16\[17, 8\].*use jnp.einsum"):
        skinny_einsum("bh,hc->bc", x, w, compute_capability=90)


V2_LITE = [
    ("bq,qhd->bhd", (2048,), (2048, 16, 192)),
    ("bh,hc->bc", (2048,), (2048, 576)),
    ("bhn,chn->bhc", (16, 128), (512, 16, 128)),
    ("bhc,chv->bhv", (16, 512), (512, 16, 128)),
    ("bhv,hvd->bd", (16, 128), (16, 128, 2048)),
    ("bi,ih->bh", (10944,), (10944, 2048)),  # a reduction 85.5 steps long
]


@pytest.mark.parametrize("rows", [1, 16])
@pytest.mark.parametrize("spec, x_shape, w_shape", V2_LITE)
def test_v2_lite_projections_build_for_sm90(spec, x_shape, w_shape, rows):
    """Each V2-Lite decode projection lowers for sm_90 to one kernel call, its output
    the splits' float32 partials (summed by XLA) or, unsplit, the result itself."""
    from mla_jax.skinny import skinny_einsum

    x, w = S((rows, *x_shape), jnp.bfloat16), S(w_shape, jnp.bfloat16)
    fn = lambda x, w: skinny_einsum(spec, x, w, compute_capability=90)
    text = jax.jit(fn).trace(x, w).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("triton_kernel_call_ffi") == 1
    p = plan(spec, x.shape, w.shape)
    splits = default_config(groups=p["groups"], k=p["k"], n=p["n"]).splits
    out = "x".join(map(str, (splits, *p["out_shape"])))
    dtype = "bf16" if splits == 1 else "f32"
    assert re.search(rf"-> tensor<{out}x{dtype}>", text), text[-2000:]


@pytest.mark.gpu
@pytest.mark.parametrize("spec, x_shape, w_shape", SPECS)
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=lambda d: np.dtype(d).name)
def test_skinny_einsum_on_the_gpu_matches_float64(rng, spec, x_shape, w_shape, dtype):
    """``skinny_einsum`` itself on a CUDA GPU, its default split, in x's dtype."""
    from mla_jax.skinny import skinny_einsum

    x, w = operands(rng, x_shape, w_shape, dtype)
    y = np.asarray(jax.jit(lambda x, w: skinny_einsum(spec, x, w))(x, w)).astype(np.float64)
    want = np.einsum(spec, x.astype(np.float64), w.astype(np.float64))
    rounding = 2**-8 if dtype == BF16 else 1e-5
    np.testing.assert_allclose(y, want, rtol=0, atol=rounding * np.abs(want).max())
