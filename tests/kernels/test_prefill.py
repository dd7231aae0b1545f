"""The prefill attention kernel (``mla_jax.prefill``): in the Triton interpreter against
the float64 reference, the layer's ``backend="triton"`` against its dense path (the
kernel interpreted), the sm_90 builds at DeepSeek-V2-Lite's and V3's shapes, and the
model's prefill lowered for CUDA."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from mla_jax.prefill import PrefillConfig, default_config, flash_prefill_reference
from tests.interpreted import run_prefill
from tests.kernel_calls import ptxas_log

S = jax.ShapeDtypeStruct
BF16 = ml_dtypes.bfloat16

# What the kernel's rounding allows, relative to the largest value of v. bf16: p is
# rounded to bf16 for the second dot and the output once (the interpreter truncates,
# 2^-7 each at most; the GPU rounds to nearest); float32: IEEE dots, float32 sums.
TOL = {np.float32: 1e-5, BF16: 2**-6}

# Head dimensions: (nope, rope, v, rope shared by the heads).
DIMS = {
    "mla": (128, 64, 128, True),  # DeepSeek's 192-wide keys, k_pe shared
    "tiny": (16, 8, 16, True),  # d_qk 24 / d_v 16: the rope part padded to 16
    "tiny-mha": (16, 8, 16, False),  # one [B, T, H, 24] key array, split 16 + 8
}


def problem(rng, batch, tokens, heads, dims, dtype, lengths):
    """q, k, v in ``dtype`` (k one array or the pair ``(k_nope, k_pe)``), each token's
    values past its sequence's length NaN: the kernel must read none of them."""
    nope, rope, dim_v, shared = DIMS[dims]
    normal = lambda *shape: rng.standard_normal(shape).astype(dtype)
    q, v = normal(batch, tokens, heads, nope + rope), normal(batch, tokens, heads, dim_v)
    if shared:
        k = (normal(batch, tokens, heads, nope), normal(batch, tokens, rope))
    else:
        k = normal(batch, tokens, heads, nope + rope)
    for b, n in enumerate(lengths):
        for a in (q, v, *(k if shared else (k,))):
            a[b, n:] = np.nan
    return q, k, v, np.asarray(lengths, np.int32), (nope + rope) ** -0.5


# ------------------------------------------------------------------ interpreter

CASES = [
    # (batch, tokens, heads, dims, dtype, lengths, config: None for the default)
    (1, 1, 1, "mla", BF16, [1], None),
    (2, 1, 3, "tiny", np.float32, [1, 0], None),
    (3, 17, 3, "mla", np.float32, [17, 1, 9], None),
    (2, 17, 1, "tiny-mha", BF16, [5, 17], None),
    (2, 64, 3, "mla", BF16, [64, 33], None),
    # key blocks wider than the query blocks: the diagonal straddles two programs
    (2, 64, 1, "tiny", np.float32, [1, 64], PrefillConfig(block_m=16, block_n=32)),
    (2, 130, 1, "mla", np.float32, [130, 127], None),
    (3, 130, 3, "mla", BF16, [130, 65, 1], None),
    (2, 130, 3, "tiny-mha", BF16, [130, 100], PrefillConfig(block_m=32, block_n=16)),
    (2, 130, 3, "tiny", np.float32, [0, 129], None),
]


def case_id(value) -> str | None:
    """Parameter ids: dtypes by name, lengths joined, configs as their tiles."""
    if isinstance(value, list):
        return "L" + "-".join(map(str, value))
    if isinstance(value, PrefillConfig):
        return f"{value.block_m}x{value.block_n}"
    if value is None:
        return "default"
    return getattr(value, "__name__", None)


@pytest.mark.interpreter
@pytest.mark.parametrize("batch, tokens, heads, dims, dtype, lengths, config", CASES, ids=case_id)
def test_kernel_matches_float64(pool, rng, batch, tokens, heads, dims, dtype, lengths, config):
    """Every row written (the output starts as NaN), rows past a length zeros, the rest
    within the dtype's rounding of float64 causal attention; NaN in every input past
    a length reaches no output."""
    q, k, v, lengths, scale = problem(rng, batch, tokens, heads, dims, dtype, lengths)
    out = pool.apply(run_prefill, (q, k, v, lengths), dict(scale=scale, config=config))
    assert out.shape == (batch, tokens, heads, DIMS[dims][2])
    assert not np.isnan(out).any()
    want = flash_prefill_reference(q, k, v, lengths, scale=scale)
    for b, n in enumerate(lengths):
        assert (out[b, n:] == 0).all()
    live = np.nan_to_num(v.astype(np.float32))
    np.testing.assert_allclose(out, want, rtol=0, atol=TOL[dtype] * np.abs(live).max())


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "dims, dtype, lengths", [("mla", BF16, [64, 33]), ("tiny-mha", np.float32, [17, 5])]
)
def test_queries_rope_part_apart(pool, rng, dims, dtype, lengths):
    """``q`` as the pair ``(q, q_pe)``: the rope part read from ``q_pe`` and never from
    q's own last values (NaN there), every row as the reference on the joined q."""
    q, k, v, lengths, scale = problem(rng, 2, max(lengths), 3, dims, dtype, lengths)
    rope = DIMS[dims][1]
    q_pe = q[..., -rope:].copy()
    unrotated = q.copy()
    unrotated[..., -rope:] = np.nan
    out = pool.apply(run_prefill, ((unrotated, q_pe), k, v, lengths), dict(scale=scale))
    assert not np.isnan(out).any()
    want = flash_prefill_reference(q, k, v, lengths, scale=scale)
    live = np.nan_to_num(v.astype(np.float32))
    np.testing.assert_allclose(out, want, rtol=0, atol=TOL[dtype] * np.abs(live).max())


@pytest.mark.gpu
@pytest.mark.parametrize(
    "batch, tokens, heads, dims, dtype, lengths",
    [
        (2, 130, 3, "mla", BF16, [130, 65]),
        (3, 300, 2, "mla", np.float32, [300, 1, 0]),
        (2, 1000, 16, "mla", BF16, [1000, 777]),
        (2, 130, 3, "tiny-mha", BF16, [130, 100]),
    ],
    ids=case_id,
)
def test_flash_prefill_on_the_gpu_matches_float64(rng, batch, tokens, heads, dims, dtype, lengths):
    """``flash_prefill`` itself on a CUDA GPU (the default config, built for the
    device) against float64, NaN past every length in every input (the GPU rounds to
    nearest, within the interpreter's truncation bound)."""
    from mla_jax.prefill import flash_prefill

    q, k, v, lengths, scale = problem(rng, batch, tokens, heads, dims, dtype, lengths)
    to_jax = lambda a: jnp.asarray(a)
    k_jax = tuple(map(to_jax, k)) if isinstance(k, tuple) else to_jax(k)
    run = jax.jit(lambda q, k, v, n: flash_prefill(q, k, v, n, scale=scale))
    out = np.asarray(run(to_jax(q), k_jax, to_jax(v), to_jax(lengths)), np.float32)
    assert not np.isnan(out).any()
    want = flash_prefill_reference(q, k, v, lengths, scale=scale)
    for b, n in enumerate(lengths):
        assert (out[b, n:] == 0).all()
    live = np.nan_to_num(v.astype(np.float32))
    np.testing.assert_allclose(out, want, rtol=0, atol=TOL[dtype] * np.abs(live).max())


# ------------------------------------------------------------------------ layer


def tiny_yarn():
    """A small MLA layer with YaRN's softmax factor (V2-Lite's mscale 0.707), 32 + 16
    wide keys (so ``q . k`` is 48 wide, the nope part a power of two and the rope
    part one too) and 16-wide values, no q LoRA."""
    from mla_jax.layer import MLAConfig, YarnScaling

    return MLAConfig(
        hidden_size=64,
        num_heads=3,
        q_lora_rank=None,
        kv_lora_rank=32,
        qk_rope_head_dim=16,
        qk_nope_head_dim=32,
        v_head_dim=16,
        rope_scaling=YarnScaling(
            factor=40.0, original_max_position_embeddings=8, mscale=0.707, mscale_all_dim=0.707
        ),
    )


def check_layer_against_dense(dtype, compute_capability):
    """``mla_prefill_layer(backend="triton")`` against its dense path (``"xla"``) at
    ``tiny_yarn``, ragged lengths 19, 7 and 1 of 19 tokens: the same cache, the same
    output rows up to each length (within the dtype's rounding of the decompressed
    keys and values), zeros past it."""
    from mla_jax import layer
    from mla_jax.cache import new_paged_cache

    config = tiny_yarn()
    batch, tokens = 3, 19
    params = layer.init_params(config, jax.random.key(0), dtype)
    x = jax.random.normal(jax.random.key(1), (batch, tokens, 64), jnp.float32).astype(dtype)
    lengths = jnp.array([19, 7, 1], jnp.int32)
    cache, table = new_paged_cache(batch, 32, 8, config.latent_dim, dtype, key=jax.random.key(2))

    def run(x, cache, backend):
        return layer.mla_prefill_layer(
            params,
            config,
            x,
            cache,
            table,
            lengths,
            backend=backend,
            compute_capability=compute_capability,
        )

    both = jax.jit(lambda x, cache: (run(x, cache, "triton"), run(x, cache, "xla")))
    (y, y_cache), (want, want_cache) = both(x, cache)
    np.testing.assert_array_equal(
        np.asarray(y_cache, np.float32), np.asarray(want_cache, np.float32)
    )
    y, want = np.asarray(y, np.float32), np.asarray(want, np.float32)
    tol = 1e-5 if dtype == jnp.float32 else 2**-5
    for b, n in enumerate(np.asarray(lengths)):
        assert (y[b, n:] == 0).all()
        np.testing.assert_allclose(y[b, :n], want[b, :n], rtol=0, atol=tol * np.abs(want).max())


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=lambda d: jnp.dtype(d).name)
def test_layer_triton_backend_matches_dense(pool, monkeypatch, dtype):
    """``check_layer_against_dense`` with the kernel run in the interpreter, through a
    host callback in place of the launch; ``flash_prefill`` gets the config's softmax
    scale (YaRN's factor in it), the capability, the queries' projection with its
    rotated rope part beside it, and MLA's pair of keys."""
    from mla_jax import layer

    seen = {}

    def interpreted(q, k, v, lengths, *, scale, compute_capability=None):
        seen.update(scale=scale, compute_capability=compute_capability, q=q, k=k)

        def host(q, q_pe, k_nope, k_pe, v, lengths):
            q, q_pe, k_nope, k_pe, v, lengths = map(np.asarray, (q, q_pe, k_nope, k_pe, v, lengths))
            args = ((q, q_pe), (k_nope, k_pe), v, lengths)
            return pool.apply(run_prefill, args, dict(scale=scale)).astype(q.dtype)

        out = S((*q[0].shape[:3], v.shape[3]), q[0].dtype)
        return jax.pure_callback(host, out, *q, *k, v, lengths)

    monkeypatch.setattr(layer, "flash_prefill", interpreted)
    check_layer_against_dense(dtype, 90)
    config = tiny_yarn()
    assert config.softmax_scale != pytest.approx(48**-0.5)  # YaRN's factor is in it
    assert seen["scale"] == config.softmax_scale and seen["compute_capability"] == 90
    k_nope, k_pe = seen["k"]  # the rope keys once a token, not once a head
    assert k_nope.shape == (3, 19, 3, 32) and k_pe.shape == (3, 19, 16)
    q, q_pe = seen["q"]  # no concatenation of the two
    assert q.shape == (3, 19, 3, 48) and q_pe.shape == (3, 19, 3, 16)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=lambda d: jnp.dtype(d).name)
def test_layer_triton_backend_on_the_gpu(dtype):
    """``check_layer_against_dense`` on a CUDA GPU, the kernel built for the device."""
    check_layer_against_dense(dtype, None)


def test_auto_takes_the_kernel_where_it_lowers_for_cuda():
    """Lowering for CUDA with a capability, ``"auto"`` (the default) lowers to the same
    module as ``"triton"``, one kernel call; on ``"xla"`` to the dense path with no
    kernel call; an unknown backend is refused by name."""
    from mla_jax.layer import PRESETS, init_params, mla_prefill_layer
    from tests.kernel_calls import kernel_calls

    config = PRESETS["tiny"]
    params = jax.eval_shape(lambda: init_params(config, jax.random.key(0)))
    args = (S((2, 8, 64), jnp.float32), S((8, 4, 48), jnp.float32))
    args += (S((2, 4), jnp.int32), S((2,), jnp.int32))

    def text(**kw):
        fn = lambda p, x, c, t, n: mla_prefill_layer(p, config, x, c, t, n, **kw)
        return jax.jit(fn).trace(params, *args).lower(lowering_platforms=("cuda",)).as_text()

    dense = text(backend="xla", compute_capability=90)
    assert kernel_calls(dense) == []
    flash = text(backend="triton", compute_capability=90)
    assert [c.kernel_name for c in kernel_calls(flash)] == ["flash_prefill_fwd"]
    assert text(compute_capability=90) == flash
    # Without a capability "auto" asks for a GPU.
    assert text() == (flash if jax.default_backend() == "gpu" else dense)
    with pytest.raises(ValueError, match="backend must be 'auto', 'triton' or 'xla', got 'gpu'"):
        text(backend="gpu")
    if not any(d.platform == "gpu" for d in jax.devices()):
        with pytest.raises(ValueError, match="backend='triton' needs a CUDA GPU"):
            text(backend="triton")


# ----------------------------------------------------------------- sm_90 builds


def ptxas_spills(ptx: str) -> tuple[int, int]:
    """(registers, spill-store bytes) of a PTX build for sm_90a, from the ptxas that
    Triton bundles (``-v``)."""
    log = ptxas_log(ptx)
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    return regs, int(re.search(r"(\d+) bytes spill stores", log).group(1))


def lowered_layer(preset: str, batch: int, tokens: int, dtype=jnp.bfloat16) -> str:
    from mla_jax.layer import PRESETS, init_params, mla_prefill_layer

    config = PRESETS[preset]
    params = jax.eval_shape(lambda: init_params(config, jax.random.key(0), dtype))
    pages = batch * tokens // 64
    args = (S((batch, tokens, config.hidden_size), dtype), S((pages, 64, 576), dtype))
    args += (S((batch, tokens // 64), jnp.int32), S((batch,), jnp.int32))

    def fn(p, x, cache, table, lengths):
        return mla_prefill_layer(
            p, config, x, cache, table, lengths, backend="triton", compute_capability=90
        )

    return jax.jit(fn).trace(params, *args).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize("preset, heads", [("deepseek-v2-lite", 16), ("deepseek-v3", 128)])
def test_layer_builds_for_sm90_at_4096_tokens(ptx_in_calls, preset, heads):
    """The layer's prefill at T=4096 on backend="triton": one jaxlib FFI call carrying
    an sm_90 cubin on the grid (heads, batch, 4096 / 128), within sm_90's shared
    memory and without register spills (ptxas -v on the call's PTX); its operands
    the query projection and its rotated rope part apart, the rope keys once a token
    ([B, T, 64], not a [B, T, H, 64] copy), the decompressed keys and values in bf16
    straight from their own matmuls (no float32 copy of them; the matmuls sharing an
    input kept apart from XLA's dot merger by optimization barriers), and no
    [T, T] array anywhere in the module (the dense path's logits)."""
    from mla_jax import _launch
    from tests.kernel_calls import kernel_calls

    text = lowered_layer(preset, 1, 4096)
    calls = kernel_calls(text)
    assert [c.kernel_name for c in calls] == ["flash_prefill_fwd"]
    (call,) = calls
    assert call.target == "triton_kernel_call_ffi" and call.cubin.startswith(b"\x7fELF")
    assert call.attributes["cc"] == 90
    assert 0 < call.attributes["shared"] <= _launch.MAX_SHARED_BYTES[90]
    config = default_config(tokens=4096, dim_nope=128, dim_rope=64, dim_v=128, itemsize=2)
    assert call.grid == (heads, 1, 4096 // config.block_m)
    assert call.num_warps == config.num_warps
    regs, spills = ptxas_spills(call.ptx.decode())
    assert spills == 0, f"{regs} registers, {spills} bytes of spill stores"
    assert "4096x4096" not in text
    assert f"tensor<1x4096x{heads}x128xf32>" not in text
    assert text.count("stablehlo.optimization_barrier") == 2  # x, then the latent rows
    # q, q_pe, k_nope, k_pe, v, lengths, T: the projection's queries with their rotated
    # rope part beside them (not joined), the rope keys once a token, not once a head.
    operand_types = re.search(r"\} : \(([^)]*)\) ->", call.line)[1].split(", ")
    assert operand_types[:5] == [
        f"tensor<1x4096x{heads}x192xbf16>",
        f"tensor<1x4096x{heads}x64xbf16>",
        f"tensor<1x4096x{heads}x128xbf16>",
        "tensor<1x4096x64xbf16>",
        f"tensor<1x4096x{heads}x128xbf16>",
    ]


def test_float32_and_batched_builds_for_sm90(ptx_in_calls):
    """float32 operands (IEEE dots) at V2-Lite's heads build within sm_90's shared
    memory without spills; a batch of 4 is the same build on a wider grid."""
    from mla_jax import _launch
    from mla_jax.prefill import flash_prefill
    from tests.kernel_calls import kernel_calls

    def call(batch, dtype):
        args = (S((batch, 4096, 16, 192), dtype), S((batch, 4096, 16, 128), dtype))
        args += (S((batch, 4096, 64), dtype), S((batch, 4096, 16, 128), dtype))
        args += (S((batch,), jnp.int32),)
        fn = lambda q, kn, kp, v, n: flash_prefill(
            q, (kn, kp), v, n, scale=0.1, compute_capability=90
        )
        text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        (found,) = kernel_calls(text)
        return found

    f32 = call(1, jnp.float32)
    assert 0 < f32.attributes["shared"] <= _launch.MAX_SHARED_BYTES[90]
    assert ptxas_spills(f32.ptx.decode())[1] == 0
    one, four = call(1, jnp.bfloat16), call(4, jnp.bfloat16)
    assert one.cubin == four.cubin and four.grid == (16, 4, 32)


# ------------------------------------------------------------------------ model


def test_model_prefill_on_the_triton_backend_lowers_for_cuda():
    """prefill(backend="triton") at a tiny config: the flash kernel once a layer
    (ahead of that layer's MoE kernels); "auto" lowers the same calls for CUDA, "xla"
    none."""
    from mla_jax.deepseek import prefill
    from tests.kernel_calls import kernel_calls
    from tests.kernels.test_moe import tiny_model

    config, params = tiny_model()
    caches = tuple(S((8, 16, 48), jnp.float32) for _ in range(2))
    args = (params, S((2, 16), jnp.int32), S((2,), jnp.int32), caches, S((2, 4), jnp.int32))

    def calls(backend):
        fn = lambda p, *a: prefill(p, config, *a, backend=backend, compute_capability=90)
        text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        return [c.kernel_name for c in kernel_calls(text)]

    assert calls("triton") == ["flash_prefill_fwd", "flash_prefill_fwd", "moe_gate_up", "moe_down"]
    assert calls("auto") == calls("triton") and calls("xla") == []


# ------------------------------------------------------------------------ errors

Q, KN, KP = (
    S((2, 8, 3, 48), jnp.bfloat16),
    S((2, 8, 3, 32), jnp.bfloat16),
    S((2, 8, 16), jnp.bfloat16),
)
V, N = S((2, 8, 3, 16), jnp.bfloat16), S((2,), jnp.int32)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            dict(q=S((2, 8, 48), jnp.bfloat16)),
            r"q: got bfloat16\[2, 8, 48\], needed \[B, T, H, D\]",
        ),
        (dict(q=S((2, 8, 3, 48), jnp.int32)), "q: .* in bfloat16, float16 or float32"),
        (dict(k=(KN, KP, KP)), "k: got a tuple of 3, needed one"),
        (dict(q=(Q, Q, Q)), "q: got a tuple of 3, needed one"),
        (dict(q=(Q, S((2, 8, 3, 8), jnp.bfloat16))), r"q\[1\] \(q_pe\): .* needed \[2, 8, 3, 16\]"),
        (dict(q=(Q, S((2, 8, 3, 16), jnp.float16))), r"q\[1\] \(q_pe\): got float16, needed q's"),
        (
            dict(q=(S((2, 8, 3, 32), jnp.bfloat16), KP), k=S((2, 8, 3, 32), jnp.bfloat16)),
            r"q\[1\] \(q_pe\): .* these keys have no rope part",
        ),
        (dict(k=(KN, S((2, 8, 3, 16), jnp.bfloat16))), r"k\[1\] \(k_pe\): .* needed \[2, 8, R\]"),
        (dict(k=(KN, S((2, 8, 48), jnp.bfloat16))), r"with 0 < R < 48"),
        (dict(k=(S((2, 8, 3, 24), jnp.bfloat16), KP)), r"k\[0\] \(k_nope\): .* \[2, 8, 3, 32\]"),
        (dict(k=(KN, S((2, 8, 16), jnp.float32))), r"k\[1\] \(k_pe\): got float32, needed q's"),
        (dict(k=S((2, 8, 3, 32), jnp.bfloat16)), r"k: got bfloat16\[2, 8, 3, 32\], needed q's"),
        (dict(v=S((2, 8, 2, 16), jnp.bfloat16)), r"v: got .* needed \[2, 8, 3, DV\]"),
        (dict(v=S((2, 8, 3, 16), jnp.float16)), "v: got float16, needed q's dtype bfloat16"),
        (dict(lengths=S((2,), jnp.float32)), r"lengths: got float32\[2\], needed int32 \[2\]"),
        (dict(compute_capability=75), "bfloat16 inputs need >= 80"),
        (dict(compute_capability=91), "compute_capability: got 91"),
        (dict(config={"block_m": 64}), "config: got a dict, needed a PrefillConfig"),
        (dict(scale=jnp.asarray(0.1)), "scale: got .* needed a Python float"),
    ],
)
def test_bad_arguments_are_named(change, message):
    from mla_jax.prefill import flash_prefill

    args = dict(q=Q, k=(KN, KP), v=V, lengths=N, scale=0.1) | change
    options = {k: args.pop(k) for k in ("compute_capability", "config", "scale") if k in args}
    with pytest.raises(ValueError, match=message):
        jax.eval_shape(lambda a: flash_prefill(**a, **options), args)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("block_m", 8, "block_m: got 8, needed a power of two >= 16"),
        ("block_n", 48, "block_n: got 48"),
        ("num_stages", 0, "num_stages: got 0, needed an int >= 1"),
        ("num_warps", 3, "num_warps: got 3, needed a power of two"),
    ],
)
def test_config_is_checked(field, value, message):
    with pytest.raises(ValueError, match=message):
        PrefillConfig(**{field: value})


def test_default_config():
    pick = lambda tokens, itemsize=2, nope=128, rope=64, v=128: default_config(
        tokens=tokens, dim_nope=nope, dim_rope=rope, dim_v=v, itemsize=itemsize
    )
    assert pick(4096) == PrefillConfig(128, 64, 8, 3)
    assert pick(4096, itemsize=4) == PrefillConfig(64, 16, 8, 2)
    assert pick(17) == PrefillConfig(32, 32, 8, 3) and pick(1) == PrefillConfig(16, 16, 8, 3)
    # 512-wide heads: fewer stages, then narrower key steps, under the budget.
    wide = pick(4096, nope=256, rope=256, v=512)
    assert wide.num_stages == 2 and wide.block_n < 64
