"""Inputs around the op (issue 60): each example of the issue is a clear error or a
documented result, and property tests feed every public function wrong dtypes,
ranks, integer widths, non-finite values and out-of-range integers.

An error is a ValueError raised before any work, naming the argument; a result is
checked against the float64 reference. Shapes are tiny and fixed, so the jitted
steps compile once per dtype.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import mla_jax
from mla_jax._checks import CUDA_CAPABILITIES, check_compute_capability
from mla_jax.cache import FP8_SCALE_FLOOR, append_latent, quantize_fp8
from mla_jax.deepseek import from_hf_dict, generate, init_params, load_checkpoint
from mla_jax.deepseek.checkpoint import expected_shapes
from mla_jax.deepseek.config import OPTIONAL_INTS
from mla_jax.layer import PRESETS
from mla_jax.layer import init_params as init_layer
from mla_jax.loop import decode_loop, init_decode_state
from mla_jax.reference import mla_decode_reference_np

B, H, LORA, ROPE, PAGE, PAGES = 2, 4, 32, 16, 4, 3
NUM_PAGES = B * PAGES
CAPACITY = PAGE * PAGES
SCALE = 0.2
PROPERTY = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def buffer(rows=B * 2, heads=H):
    return mla_jax.reserve_logits_buffer(
        rows, heads, CAPACITY, kv_lora_rank=LORA, rope_dim=ROPE, sm_count=4
    )


def problem(seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        q=rng.standard_normal((B, H, LORA + ROPE)).astype(np.float32),
        kv_cache=rng.standard_normal((NUM_PAGES, PAGE, LORA + ROPE)).astype(np.float32),
        block_table=rng.permutation(NUM_PAGES).reshape(B, PAGES).astype(np.int32),
        seq_lens=np.array([5, CAPACITY], np.int32),
    )


def decode(**over):
    args = problem()
    args.update(over)
    return mla_jax.mla_decode(
        jnp.asarray(args.pop("q")),
        jnp.asarray(args.pop("kv_cache")),
        logits_buffer=buffer(),
        scale=SCALE,
        **{"backend": "xla", **args},
    )


def close_to_reference(out, lse, block_table, seq_lens):
    args = problem()
    lens = np.clip(np.asarray(seq_lens, np.int64), 0, CAPACITY)
    want_out, want_lse = mla_decode_reference_np(
        args["q"],
        args["kv_cache"],
        np.asarray(block_table, np.int64),
        lens,
        scale=SCALE,
        kv_lora_rank=LORA,
    )
    np.testing.assert_allclose(np.asarray(out), want_out, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(lse), want_lse, rtol=2e-5, atol=2e-5)


# quantize_fp8 -------------------------------------------------------------------


def test_quantize_fp8_all_zero_cache_is_zeros_with_the_floor_scale():
    fp8, scale = quantize_fp8(jnp.zeros((2, 4, 8), jnp.bfloat16))
    assert float(scale) == FP8_SCALE_FLOOR > 0
    assert not np.asarray(fp8.astype(jnp.float32)).any()


def test_quantize_fp8_refuses_a_non_finite_entry_and_traced_keeps_it_local():
    cache = jnp.ones((3, 2, 4)).at[2, 1, 3].set(jnp.inf)
    with pytest.raises(ValueError, match=r"kv_cache\[2, 1, 3\] = inf: quantize_fp8 needs finite"):
        quantize_fp8(cache)
    fp8, scale = jax.jit(quantize_fp8)(cache)
    values = np.asarray(fp8.astype(jnp.float32))
    assert float(scale) == pytest.approx(1 / 448)  # the finite entries' amax
    assert np.isnan(values[2, 1, 3]) and np.isfinite(np.delete(values.ravel(), -1)).all()


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf"), 1e-45, True, "1"])
def test_quantize_fp8_refuses_a_bad_scale(scale):
    with pytest.raises(ValueError, match="scale: got"):
        quantize_fp8(jnp.ones((2, 2)), scale)


@PROPERTY
@given(
    exponent=st.integers(-140, 120),
    dtype=st.sampled_from(["float32", "bfloat16", "float16", "int32", "bool"]),
    seed=st.integers(0, 2**16),
)
def test_quantize_fp8_property(exponent, dtype, seed):
    """Any magnitude, tiny to huge: fp8 * scale is the float64 value to e4m3's
    precision (or a clear error for a non-float cache)."""
    x = np.random.default_rng(seed).standard_normal((3, 5)) * 2.0**exponent
    with np.errstate(over="ignore", invalid="ignore"):  # float16 overflows to inf
        cache = jnp.asarray(x, dtype)
    if dtype in ("int32", "bool") or not np.isfinite(np.asarray(cache, np.float64)).all():
        with pytest.raises(ValueError, match="kv_cache"):  # not float, or past float16
            quantize_fp8(cache)
        return
    fp8, scale = quantize_fp8(cache)
    want = np.asarray(cache.astype(jnp.float32), np.float64)
    got = np.asarray(fp8.astype(jnp.float32), np.float64) * float(scale)
    assert np.isfinite(float(scale)) and float(scale) >= FP8_SCALE_FLOOR
    # XLA flushes float32 subnormals (under the floor) to zero before any scaling.
    flushed = np.where(np.abs(want) < FP8_SCALE_FLOOR, FP8_SCALE_FLOOR, 0.0)
    bound = np.abs(want) * 2**-4 + float(scale) * 2**-9 + flushed
    assert (np.abs(got - want) <= bound).all()


# integer widths and kinds on the op ----------------------------------------------


def test_int64_seq_lens_past_int32_are_refused_not_wrapped():
    with pytest.raises(ValueError, match=r"seq_lens\[0\] = 4294967301 is outside int32's range"):
        decode(seq_lens=np.array([2**32 + 5, 3], np.int64))


def test_int64_block_table_past_int32_is_refused_not_wrapped():
    table = problem()["block_table"].astype(np.int64)
    table[1, 0] = 2**32 + 3
    with pytest.raises(ValueError, match=r"block_table\[1, 0\] = 4294967299 is outside int32"):
        decode(block_table=table)


@pytest.mark.parametrize(
    "cc, message",
    [
        (0, "compute_capability: got 0, needed None or an int"),
        (85, "compute_capability: got 85"),
        ("90", "compute_capability: got '90'"),
        (9.0, "compute_capability: got 9.0"),
    ],
)
def test_compute_capability_is_checked_before_triton(cc, message):
    with pytest.raises(ValueError, match=message):
        decode(backend="triton", compute_capability=cc)


def test_fp8_cache_needs_sm89():
    args = problem()
    fp8, k_scale = quantize_fp8(jnp.asarray(args["kv_cache"]))
    with pytest.raises(ValueError, match="compute_capability: got 80, but a float8_e4m3fn"):
        mla_jax.mla_decode(
            jnp.asarray(args["q"], jnp.bfloat16),
            fp8,
            args["block_table"],
            args["seq_lens"],
            buffer(),
            scale=SCALE,
            k_scale=k_scale,
            backend="triton",
            compute_capability=np.int64(80),
        )
    assert check_compute_capability(np.int32(90), fp8=True) == 90


def test_capabilities_are_the_launch_table():
    launch = pytest.importorskip("mla_jax._launch")
    assert set(CUDA_CAPABILITIES) == set(launch.MAX_SHARED_BYTES)


def test_numpy_ints_where_python_ints_are():
    buf = mla_jax.reserve_logits_buffer(
        np.int64(2), np.int64(4), np.int32(64), kv_lora_rank=32, rope_dim=16, sm_count=np.int8(4)
    )
    assert type(buf.num_heads) is int and type(buf.sm_count) is int
    assert "sm_count=4)" in buf.describe()


INT_DTYPES = ["int8", "int16", "int32", "int64", "uint32", "float32"]


@PROPERTY
@given(
    lens_dtype=st.sampled_from(INT_DTYPES),
    table_dtype=st.sampled_from(INT_DTYPES),
    lens=st.lists(
        st.one_of(st.integers(-3, CAPACITY + 3), st.integers(2**31, 2**40)),
        min_size=B,
        max_size=B,
    ),
    q_rank=st.sampled_from([2, 3, 4]),
    poison=st.booleans(),
)
def test_mla_decode_property(lens_dtype, table_dtype, lens, q_rank, poison):
    """A clear error, or the float64 reference's result (lengths clamped, NaN kept)."""
    args = problem()
    q = args["q"].copy()
    if poison:
        q[1, 0, 0] = np.nan
    q = q.reshape(q.shape[:2] + (1,) * (q_rank - 3) + q.shape[2:]) if q_rank > 3 else q
    q = q[:, 0] if q_rank == 2 else q
    wide = max(abs(v) for v in lens) > 2**31 - 1
    seq_lens = np.asarray(lens, np.int64).astype(lens_dtype) if not wide else np.asarray(lens)
    block_table = args["block_table"].astype(table_dtype)
    good = (
        q_rank == 3
        and np.dtype(seq_lens.dtype).name in ("int32", "int64")
        and np.dtype(block_table.dtype).name in ("int32", "int64")
        and not wide
    )
    if not good:
        with pytest.raises(ValueError, match=r"^(q|seq_lens|block_table)\b"):
            decode(q=q, seq_lens=seq_lens, block_table=block_table)
        return
    out, lse, _ = decode(q=q, seq_lens=seq_lens, block_table=block_table)
    if poison:
        assert np.isnan(np.asarray(lse)[1]).all() if min(max(lens[1], 0), CAPACITY) else True
        return
    close_to_reference(out, lse, args["block_table"], np.asarray(lens))


# lists where arrays belong ---------------------------------------------------------


def test_lists_are_refused_by_name():
    out, lse = jnp.ones((2, 4)), jnp.zeros(2)
    with pytest.raises(ValueError, match="out_b: got a list, needed an array"):
        mla_jax.merge_attention_states(out, lse, [[1.0] * 4] * 2, lse)
    with pytest.raises(ValueError, match="positions: got a list, needed an array"):
        append_latent(jnp.zeros((2, 2, 4)), jnp.ones((1, 4)), jnp.zeros((1, 1), jnp.int32), [0])
    args = problem()
    with pytest.raises(ValueError, match="seq_lens: got a list"):
        mla_jax.mla_decode_tokens(
            jnp.asarray(args["q"])[:, None],
            args["kv_cache"],
            args["block_table"],
            [1, 2],
            buffer(),
            scale=SCALE,
            backend="xla",
        )


@PROPERTY
@given(
    dtype=st.sampled_from(["float32", "float16", "int32"]),
    lse_dtype=st.sampled_from(["float32", "float16", "int32"]),
    rank=st.integers(1, 3),
    value=st.sampled_from([0.0, -np.inf, np.nan, 3.0]),
)
def test_merge_property(dtype, lse_dtype, rank, value):
    """Either a clear error or the float64 merge (an empty side is the identity)."""
    shape = (2,) * rank
    out = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) / 7
    lse_a = np.full(shape[:-1], value)
    lse_b = np.full(shape[:-1], 1.0)
    with np.errstate(invalid="ignore"):  # NaN and -inf cast to int32
        args = [jnp.asarray(out, dtype), jnp.asarray(lse_a, lse_dtype)]
        args += [jnp.asarray(out[::-1], dtype), jnp.asarray(lse_b, lse_dtype)]
    if dtype == "int32" or lse_dtype != "float32":
        with pytest.raises(ValueError, match=r"^(out_a|lse_a|lse_b) "):
            mla_jax.merge_attention_states(*args)
        return
    got, got_lse = mla_jax.merge_attention_states(*args)
    a_out, b_out = np.asarray(args[0], np.float64), np.asarray(args[2], np.float64)
    m = np.maximum(lse_a, lse_b)
    wa, wb = np.exp(lse_a - m), np.exp(lse_b - m)
    want = (wa[..., None] * a_out + wb[..., None] * b_out) / (wa + wb)[..., None]
    tol = 1e-3 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(got_lse), m + np.log(wa + wb), rtol=1e-6)


# mla_decode_tokens ----------------------------------------------------------------


def tokens(**over):
    args = problem()
    kw = dict(
        q=jnp.asarray(args["q"])[:, None].repeat(2, axis=1),
        kv_cache=jnp.asarray(args["kv_cache"]),
        block_table=args["block_table"],
        seq_lens=args["seq_lens"],
        logits_buffer=buffer(),
        scale=SCALE,
        backend="xla",
    )
    kw.update(over)
    return mla_jax.mla_decode_tokens(**kw)


@pytest.mark.parametrize(
    "over, message",
    [
        (dict(query_lens=np.array([3, 1], np.int32)), r"query_lens\[0\] = 3 is outside \[0, T=2\]"),
        (dict(query_lens=np.array([1.0, 2.0])), "query_lens: got float"),
        (dict(seq_lens=np.array([2**33, 1])), r"seq_lens\[0\] = 8589934592 is outside int32"),
        (dict(seq_lens=np.array([5.0, 2.0])), "seq_lens: got float"),
        (
            dict(seq_lens=np.array([5, CAPACITY + 1], np.int32), validate=True),
            rf"seq_lens\[1\] = {CAPACITY + 1} exceeds",  # request 1, not flattened row 3
        ),
    ],
)
def test_mla_decode_tokens_refuses(over, message):
    with pytest.raises(ValueError, match=message):
        tokens(**over)


@PROPERTY
@given(query_lens=st.lists(st.integers(-2, 4), min_size=B, max_size=B))
def test_mla_decode_tokens_property(query_lens):
    """query_lens in [0, T] decode (padding rows empty); others are refused."""
    q_lens = np.asarray(query_lens, np.int32)
    if ((q_lens < 0) | (q_lens > 2)).any():
        with pytest.raises(ValueError, match="query_lens"):
            tokens(query_lens=q_lens)
        return
    _, lse, _ = tokens(query_lens=q_lens)
    empty = np.arange(2)[None, :] >= q_lens[:, None]
    assert (np.asarray(lse)[empty] == -np.inf).all()
    assert np.isfinite(np.asarray(lse)[~empty]).all()


# the loop ----------------------------------------------------------------------------


def test_decode_loop_validate_checks_every_layer():
    config = PRESETS["tiny"]
    state = init_decode_state(
        config, 2, 2, 16, 4, sm_count=4, key=jax.random.key(0), prompt_lens=[3, 5]
    )
    # Layer 1's cache has fewer pages than the shared block table points into.
    small = state.kv_caches[1][:2]
    state = state._replace(kv_caches=(state.kv_caches[0], small))
    with pytest.raises(ValueError, match=r"state.kv_caches\[1\].*block_table\[\d, \d\]"):
        decode_loop(
            [None, None], config, jnp.zeros((2, config.hidden_size)), state, 2, validate=True
        )
    wide = state._replace(positions=np.array([2**32, 1], np.int64))
    with pytest.raises(ValueError, match=r"state.positions\[0\] = 4294967296 is outside int32"):
        decode_loop([None, None], config, jnp.zeros((2, config.hidden_size)), wide, 2)


# the model: config, loader, generate --------------------------------------------------

HF_CONFIG = {
    "model_type": "deepseek_v3",
    "vocab_size": 32,
    "hidden_size": 32,
    "intermediate_size": 48,
    "moe_intermediate_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "n_shared_experts": 1,
    "n_routed_experts": 4,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 16,
    "v_head_dim": 8,
    "qk_nope_head_dim": 8,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "n_group": 2,
    "topk_group": 1,
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny random DeepSeek-V3 folder, written from the shapes the loader expects."""
    from safetensors.numpy import save_file

    folder = tmp_path_factory.mktemp("ckpt")
    (folder / "config.json").write_text(json.dumps(HF_CONFIG))
    rng = np.random.default_rng(0)
    shapes = expected_shapes(from_hf_dict(HF_CONFIG), set())
    save_file(
        {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()},
        str(folder / "model.safetensors"),
    )
    return folder


def copy(folder, tmp_path):
    for f in folder.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    return tmp_path


def test_checkpoint_loads(checkpoint):
    config, params = load_checkpoint(checkpoint)
    assert params.embed.shape == (32, 32) and config.num_hidden_layers == 2


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda d: (d / "model.safetensors").write_bytes(b"garbage" * 9),
            "not a readable safetensors",
        ),
        (
            lambda d: (d / "model.safetensors").write_bytes(
                (d / "model.safetensors").read_bytes()[:-100]
            ),
            "model.safetensors.*not a readable safetensors file",
        ),
        (lambda d: (d / "config.json").write_text("[1, 2]"), "config.json: got a list"),
        (lambda d: (d / "config.json").write_text("{nope"), "config.json.*not a readable JSON"),
        (
            lambda d: (d / "config.json").write_text(
                json.dumps({k: v for k, v in HF_CONFIG.items() if k != "hidden_size"})
            ),
            "config.json hidden_size: missing, needed an int",
        ),
        (
            lambda d: (d / "config.json").write_text(json.dumps({**HF_CONFIG, "v_head_dim": 4})),
            r"tensor 'model.layers.0.self_attn.kv_b_proj.weight' in 'model.safetensors' has "
            r"shape \[32, 16\], but config.json implies \[24, 16\]",
        ),
        (
            lambda d: (d / "config.json").write_text(json.dumps({**HF_CONFIG, "v_head_dim": "8"})),
            "config.json v_head_dim: got '8', needed an int",
        ),
    ],
)
def test_checkpoint_damage_is_named(checkpoint, tmp_path, damage, message):
    damage(copy(checkpoint, tmp_path))
    with pytest.raises(ValueError, match=message):
        load_checkpoint(tmp_path)


def test_checkpoint_wrong_norm_shape_and_dtypes(checkpoint, tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = copy(checkpoint, tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["model.norm.weight"] = np.ones(31, np.float32)
    tensors["model.embed_tokens.weight"] = tensors["model.embed_tokens.weight"].astype(np.int32)
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(
        ValueError, match=r"'model.embed_tokens.weight' in 'model.safetensors' is I32"
    ):
        load_checkpoint(folder)
    with pytest.raises(ValueError, match=r"dtype: got 'int8', needed None or one of"):
        load_checkpoint(checkpoint, dtype="int8")
    tensors["model.embed_tokens.weight"] = np.ones((32, 32), np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match=r"'model.norm.weight'.*shape \[31\].*implies \[32\]"):
        load_checkpoint(folder)


@pytest.fixture(scope="module")
def model():
    config = from_hf_dict(HF_CONFIG)
    return config, init_params(config, jax.random.key(0), jnp.float32)


@pytest.mark.parametrize(
    "over, message",
    [
        (dict(temperature=float("nan"), key=jax.random.key(0)), "temperature: got nan"),
        (dict(temperature=float("inf"), key=jax.random.key(0)), "temperature: got inf"),
        (dict(prompts=np.array([[1, 32], [0, 0]])), r"prompts\[0, 1\] = 32 is outside the vocab"),
        (dict(prompts=np.array([[1, -1], [0, 0]])), r"prompts\[0, 1\] = -1 is outside"),
        (dict(prompts=np.array([[1, 2**32 + 1], [0, 0]])), r"prompts\[0, 1\] = 4294967297"),
        (dict(prompts=np.array([[1.0, 2.0], [0, 0]])), "prompts: got float64"),
        (dict(cache_dtype=jnp.float8_e4m3fn), "cache_dtype: got .*float8_e4m3fn"),
        (dict(page_size=0), "page_size must be a positive int, got 0"),
        (dict(max_new_tokens=2.0), "max_new_tokens must be a positive int"),
        (dict(top_k=np.int64(99)), r"top_k: got 99, needed None or in \[1, 32\]"),
        (dict(eos_id=32), r"eos_id: got 32"),
    ],
)
def test_generate_refuses(model, over, message):
    config, params = model
    kw = dict(prompts=np.array([[1, 2], [3, 0]]), prompt_lens=np.array([2, 1]), max_new_tokens=2)
    kw.update(over)
    with pytest.raises(ValueError, match=message):
        generate(params, config, backend="xla", sm_count=4, **kw)


# property tests of the model, the loop and the cache -----------------------------------
#
# Each feeds one family of bad arguments and asserts a ValueError/TypeError naming
# what is wrong, or (where the input is valid after all) the reference result; never
# another exception. Valid inputs keep one shape each, so each jitted path compiles once.

ERRORS = (ValueError, TypeError)
TENSORS = sorted(expected_shapes(from_hf_dict(HF_CONFIG), set()))
MISSING = object()  # a config field deleted


def _odd_value():
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 70),
        st.just(2**40),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=3),
        st.lists(st.integers(0, 3), max_size=2),
        st.just(MISSING),
    )


DAMAGE = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True)),
    st.tuples(st.just("overwrite"), st.integers(0, 2**20), st.binary(min_size=1, max_size=8)),
    st.tuples(
        st.just("shape"),
        st.sampled_from(TENSORS),
        st.sampled_from(["grow", "shrink", "add_dim", "drop_dim"]),
    ),
    st.tuples(
        st.just("dtype"),
        st.sampled_from(TENSORS),
        st.sampled_from(["int8", "int32", "uint8", "float64", "bool", "float16"]),
    ),
    st.tuples(st.just("drop"), st.sampled_from(TENSORS)),
    st.tuples(st.just("config"), st.sampled_from(sorted(HF_CONFIG)), _odd_value()),
)


def _damage(folder, damage) -> tuple[tuple[str, ...], bool]:
    """Applies ``damage`` to the checkpoint in ``folder``; returns the names an error
    may carry (one of them), and whether the folder may still be a valid checkpoint."""
    from safetensors.numpy import load_file, save_file

    kind, *how = damage
    weights = folder / "model.safetensors"
    if kind in ("truncate", "overwrite"):
        data = bytearray(weights.read_bytes())
        if kind == "truncate":
            del data[int(how[0] * len(data)) :]
        else:
            start = how[0] % len(data)
            data[start : start + len(how[1])] = how[1]
        weights.write_bytes(bytes(data))
        # A changed byte in the data region is a different, valid weight.
        return ("model.safetensors",), kind == "overwrite"
    if kind == "config":
        name, value = how
        hf = dict(HF_CONFIG)
        if value is MISSING:
            del hf[name]
        else:
            hf[name] = value
        (folder / "config.json").write_text(json.dumps(hf))
        # Another int, or an optional field left out, may be another valid model: the
        # tensors then decide, and an error names the first that does not fit (which
        # that config reads, not necessarily one of TENSORS).
        optional = name in OPTIONAL_INTS and value in (MISSING, None)
        return (name, "tensor"), optional or (type(value) is int and value >= 0)
    tensors = load_file(str(weights))
    name = how[0]
    if kind == "drop":
        del tensors[name]
    elif kind == "dtype":
        tensors[name] = tensors[name].astype(how[1])
    else:
        shape = list(tensors[name].shape)
        if how[1] == "grow":
            shape[-1] += 1
        elif how[1] == "shrink":
            shape[-1] -= 1
        elif how[1] == "add_dim":
            shape.append(1)
        else:
            shape.pop()
        tensors[name] = np.ones(shape, np.float32)
    save_file(tensors, str(weights))
    return (name,), kind == "dtype" and how[1] == "float16"


@PROPERTY
@given(damage=DAMAGE)
@example(damage=("overwrite", 667, b" "))  # a tensor's name in the header
def test_load_checkpoint_property(checkpoint, tmp_path_factory, damage):
    """A folder with one random corruption loads, or is refused naming the file, the
    tensor or the config field."""
    folder = copy(checkpoint, tmp_path_factory.mktemp("damaged"))
    names, may_load = _damage(folder, damage)
    try:
        config, params = load_checkpoint(folder)
    except ERRORS as e:
        assert any(name in str(e) for name in names), (damage, str(e))
        return
    assert may_load, (damage, "loaded")
    assert params.embed.shape == (config.vocab_size, config.attention.hidden_size)


def test_load_checkpoint_names_the_file_and_a_damaged_name(checkpoint, tmp_path):
    """One byte of a tensor's name overwritten in the header (hypothesis found it):
    the error names the file and the name it holds instead of the expected one."""
    from safetensors.numpy import load_file, save_file

    folder = copy(checkpoint, tmp_path)
    weights = folder / "model.safetensors"
    tensors = load_file(str(weights))
    name = next(n for n in sorted(tensors) if n.endswith("kv_a_layernorm.weight"))
    damaged = name.replace("kv_a_layernorm", "kv_a layernorm")
    tensors[damaged] = tensors.pop(name)
    save_file(tensors, str(weights))
    with pytest.raises(ValueError) as e:
        load_checkpoint(folder)
    assert str(e.value).startswith(f"checkpoint: tensor {name!r} (shape [")
    assert f"is in none of model.safetensors; they hold {damaged!r} instead" in str(e.value)


@pytest.fixture(scope="module")
def greedy(model):
    """The reference continuation: int32 ids, greedy."""
    config, params = model
    out = generate(
        params,
        config,
        np.array([[1, 2], [3, 0]], np.int32),
        np.array([2, 1], np.int32),
        2,
        backend="xla",
        sm_count=4,
    )
    return np.asarray(out.tokens)


INT_TYPES = ["int8", "uint8", "int16", "int32", "int64", "uint32"]
# One argument of generate changed at a time: (what, value); the others are the
# reference's (int32 ids [[1, 2], [3, 0]], lengths [2, 1], greedy, 2 tokens).
GENERATE_CHANGES = st.one_of(
    st.tuples(st.just("prompts dtype"), st.sampled_from([*INT_TYPES, "float32", "bool"])),
    st.tuples(st.just("prompts rank"), st.sampled_from([1, 3])),
    st.tuples(st.just("prompt id"), st.sampled_from([-1, 32, 2**31, 2**40])),
    st.tuples(st.just("prompt_lens dtype"), st.sampled_from([*INT_TYPES, "float32"])),
    st.tuples(st.just("prompt_lens[0]"), st.sampled_from([0, 3, -1, 2**33])),
    st.tuples(
        st.just("temperature"),
        st.sampled_from([0.0, np.float32(0), -0.5, float("nan"), float("inf"), "0", True]),
    ),
    st.tuples(st.just("top_k"), st.sampled_from([1, np.int64(32), 0, 33, 2.0, "1"])),
    st.tuples(st.just("max_new_tokens"), st.sampled_from([np.int32(2), 0, -1, 2.0, True])),
)


@PROPERTY
@given(change=GENERATE_CHANGES)
def test_generate_property(model, greedy, change):
    """Ids and lengths of any integer dtype, ints of any int type: the reference's
    tokens; other dtypes, ranks, non-finite or negative temperatures and out-of-range
    ints: an error naming the argument."""
    config, params = model
    what, value = change
    ids, lens = [[1, 2], [3, 0]], [2, 1]
    kw: dict = dict(max_new_tokens=2)
    valid, named = True, what.split(" ")[0].split("[")[0]
    if what == "prompts dtype":
        prompts, valid = np.array(ids, value), value in INT_TYPES
    elif what == "prompts rank":
        prompts, valid = np.array(ids).reshape((4,) if value == 1 else (2, 2, 1)), False
        if value == 1:  # one prompt of four ids: the two lengths are what is wrong
            named = "prompt_lens"
    elif what == "prompt id":
        prompts, valid = np.array([[1, value], [3, 0]]), False
    else:
        prompts = np.array(ids, np.int32)
    if what == "prompt_lens dtype":
        prompt_lens, valid = np.array(lens, value), value in INT_TYPES
    elif what == "prompt_lens[0]":
        prompt_lens, valid = np.array([value, 1]), False
    else:
        prompt_lens = np.array(lens, np.int32)
    if what in ("temperature", "top_k", "max_new_tokens"):
        kw[what] = value
        ok = {"temperature": [0.0, np.float32(0)], "top_k": [1, 32], "max_new_tokens": [2]}
        valid = not isinstance(value, (bool, str, float)) or what == "temperature"
        valid = valid and not isinstance(value, (bool, str)) and value in ok[what]
    try:
        out = generate(params, config, prompts, prompt_lens, backend="xla", sm_count=4, **kw)
    except ERRORS as e:
        assert not valid, (change, str(e))
        assert named in str(e), (change, str(e))
        return
    assert valid, (change, "accepted")
    np.testing.assert_array_equal(np.asarray(out.tokens), greedy)


@pytest.fixture(scope="module")
def loop_reference():
    """The tiny loop's inputs (a fresh state each call: the loop donates it) and its
    outputs from int32 positions and table."""
    config = PRESETS["tiny"]
    layers = [init_layer(config, k) for k in jax.random.split(jax.random.key(1), 2)]

    def state():
        return init_decode_state(
            config, 2, 2, 16, 4, sm_count=4, key=jax.random.key(0), prompt_lens=[3, 5]
        )

    x0 = jnp.ones((2, config.hidden_size))
    outputs, _ = decode_loop(layers, config, x0, state(), 2, backend="xla")
    return config, layers, state, x0, np.asarray(outputs)


def _first_page(table, page):
    """``table`` with row 0's first (live) page replaced by ``page``."""
    table = np.array(table)
    table[0, 0] = page
    return table


# One change to decode_loop's arguments at a time: (what, value, valid).
LOOP_CHANGES = st.sampled_from(
    [
        ("positions", np.array([3, 5], np.int64), True),
        ("positions", np.array([2**32 + 3, 5], np.int64), False),
        ("positions", np.array([-1, 5], np.int32), False),
        ("positions", np.array([15, 5], np.int32), False),  # + 2 steps passes capacity 16
        ("positions", np.array([3.0, 5.0], np.float32), False),
        ("block_table", lambda t: t.astype(np.int64), True),
        ("block_table", lambda t: _first_page(t.astype(np.int64), 2**33), False),
        ("block_table", lambda t: _first_page(t, -1), False),
        ("block_table", lambda t: _first_page(t, 99), False),
        ("block_table", lambda t: t.astype(np.int16), False),
        ("num_steps", np.int64(2), True),
        ("num_steps", 0, False),
        ("num_steps", 2.0, False),
        ("num_steps", True, False),
        ("x0", lambda x: x[:, :-1], False),
        ("x0", lambda x: x[0], False),
        ("x0", lambda x: x.astype(jnp.int32), False),
        ("params_list", lambda p: p[:1], False),
    ]
)


@PROPERTY
@given(change=LOOP_CHANGES)
def test_decode_loop_property(loop_reference, change):
    """Wider ints that fit and numpy ints: the int32 outputs; out-of-range positions and
    pages (validate=True), other dtypes, ranks, widths and layer counts: an error
    naming the argument."""
    config, layers, new_state, x0, want = loop_reference
    what, value, valid = change
    state, num_steps, params_list = new_state(), 2, layers
    if what == "positions":
        state = state._replace(positions=value)
    elif what == "block_table":
        state = state._replace(block_table=value(np.asarray(state.block_table)))
    elif what == "num_steps":
        num_steps = value
    elif what == "x0":
        x0 = value(x0)
    else:
        params_list = value(layers)
    try:
        outputs, _ = decode_loop(
            params_list, config, x0, state, num_steps, backend="xla", validate=True
        )
    except ERRORS as e:
        assert not valid, (change, str(e))
        assert what in str(e), (change, str(e))
        return
    assert valid, (change, "accepted")
    np.testing.assert_allclose(np.asarray(outputs), want, rtol=1e-6, atol=1e-6)


@PROPERTY
@given(
    positions=st.lists(
        st.integers(-6, 16) | st.sampled_from([2**31, 2**40]), min_size=B, max_size=B
    ),
    pages=st.lists(st.integers(-2, NUM_PAGES + 1), min_size=B * PAGES, max_size=B * PAGES),
    index_dtype=st.sampled_from(["int32", "int64", "int16"]),
    latent=st.sampled_from(["ok", "float16", "rank 1", "rank 3", "width"]),
)
def test_append_latent_property(positions, pages, index_dtype, latent):
    """A row is written where its position lies inside the table and on a page of the
    pool, and nowhere else; indices wider than int32 are checked, not wrapped."""
    width = 8
    cache = np.arange(NUM_PAGES * PAGE * width, dtype=np.float32).reshape(NUM_PAGES, PAGE, width)
    rows = -np.arange(1, B * width + 1, dtype=np.float32).reshape(B, width)
    table = np.array(pages).reshape(B, PAGES)
    pos = np.array(positions)
    given_latent = {
        "ok": rows,
        "float16": rows.astype(np.float16),
        "rank 1": rows[0],
        "rank 3": rows[:, None],
        "width": rows[:, :-1],
    }[latent]
    fits = (np.abs(pos) < 2**31).all()
    try:
        got = append_latent(
            jnp.asarray(cache),
            jnp.asarray(given_latent),
            table.astype(index_dtype),
            pos.astype(index_dtype) if fits or index_dtype == "int64" else pos,
        )
    except ERRORS as e:
        assert latent != "ok" or index_dtype == "int16" or not fits, str(e)
        named = "latent" if latent != "ok" else "positions" if not fits else "block_table"
        assert named in str(e) or "positions" in str(e), str(e)
        return
    assert latent == "ok" and index_dtype != "int16" and fits
    want = cache.copy()
    written = set()
    for b in range(B):
        slot, offset = pos[b] // PAGE, pos[b] % PAGE
        if pos[b] >= 0 and slot < PAGES and 0 <= table[b, slot] < NUM_PAGES:
            if (table[b, slot], offset) in written:
                return  # two rows at one place: either may win
            written.add((table[b, slot], offset))
            want[table[b, slot], offset] = rows[b]
    np.testing.assert_array_equal(np.asarray(got), want)


ODD_INTS = st.sampled_from([0, -1, 2.0, True, "2", None, np.int64(2), np.uint8(3), 2])


@PROPERTY
@given(arg=st.sampled_from(["num_seqs", "max_len", "page_size", "width"]), value=ODD_INTS)
def test_new_paged_cache_property(arg, value):
    """numpy and Python ints >= 1 give the documented shapes; anything else is an
    error naming the argument."""
    from mla_jax.cache import new_paged_cache

    kw = dict(num_seqs=2, max_len=5, page_size=2, width=3)
    kw[arg] = value
    valid = not isinstance(value, (bool, float, str, type(None))) and value >= 1
    try:
        cache, table = new_paged_cache(**kw, key=jax.random.key(0))
    except ERRORS as e:
        assert not valid and arg in str(e), str(e)
        return
    assert valid
    n, m, p, w = (int(kw[k]) for k in ("num_seqs", "max_len", "page_size", "width"))
    assert table.shape == (n, -(-m // p)) and table.dtype == jnp.int32
    assert cache.shape == (table.size, p, w)
    assert sorted(np.asarray(table).ravel().tolist()) == list(range(table.size))


@PROPERTY
@given(
    arg=st.sampled_from(
        ["max_num_seqs", "num_heads", "max_model_len", "kv_lora_rank", "rope_dim", "sm_count"]
    ),
    value=ODD_INTS,
)
def test_reserve_logits_buffer_property(arg, value):
    """numpy and Python ints >= 1 give the reservation their int values plan; anything
    else is an error naming the argument."""
    from mla_jax.buffers import plan_logits_buffer

    kw = dict(
        max_num_seqs=2, num_heads=4, max_model_len=32, kv_lora_rank=16, rope_dim=8, sm_count=4
    )
    kw[arg] = value
    valid = not isinstance(value, (bool, float, str, type(None))) and value >= 1
    # None asks the GPU, and plans for DEFAULT_SM_COUNT where there is none.
    valid = valid or (arg == "sm_count" and value is None)
    try:
        buf = mla_jax.reserve_logits_buffer(
            kw.pop("max_num_seqs"), kw.pop("num_heads"), kw.pop("max_model_len"), **kw
        )
    except ERRORS as e:
        assert not valid and arg in str(e), str(e)
        return
    assert valid
    if value is None:
        assert buf.sm_count == mla_jax.buffers.gpu_sm_count()
        return
    kw = dict(
        max_num_seqs=2, num_heads=4, max_model_len=32, kv_lora_rank=16, rope_dim=8, sm_count=4
    )
    kw[arg] = int(value)
    shape, _ = plan_logits_buffer(
        kw.pop("max_num_seqs"),
        kw.pop("num_heads"),
        kw.pop("max_model_len"),
        policy="occupancy",
        **kw,
    )
    assert buf.data.shape == shape


# the split rules, validate_inputs and write_latents ---------------------------------


@PROPERTY
@given(
    max_seq_len=st.integers(-5, 2**20),
    sm_count=st.one_of(st.integers(-2, 300), st.just(True), st.just(2.0)),
    int_type=st.sampled_from(["int", "int32", "int64"]),
)
def test_split_rules_property(max_seq_len, sm_count, int_type):
    """vLLM's rule against its formula, from a Python int, a numpy integer or a traced
    array alike; a negative length or a bad ``sm_count`` is an error naming it."""
    valid_sm = isinstance(sm_count, int) and not isinstance(sm_count, bool) and sm_count >= 1
    length = max_seq_len if int_type == "int" else np.dtype(int_type).type(max_seq_len)
    if not valid_sm or max_seq_len < 0:
        with pytest.raises(ERRORS, match="sm_count" if not valid_sm else "max_seq_len"):
            mla_jax.num_kv_splits(length, sm_count)
        return
    tokens = int(length)
    want = min(1 << max(0, max(1, tokens // 512) - 1).bit_length(), 2 * sm_count)
    assert mla_jax.num_kv_splits(length, sm_count) == want
    assert int(jax.jit(mla_jax.num_kv_splits, static_argnums=1)(jnp.int32(tokens), sm_count)) == (
        want
    )
    for policy in ("vllm", "occupancy"):
        got = mla_jax.kv_splits(
            policy, batch=np.int64(2), num_heads=16, max_seq_len=length, sm_count=sm_count
        )
        assert 1 <= int(got) <= max(want, 128)


@PROPERTY
@given(
    length=st.integers(-3, CAPACITY + 3),
    page=st.integers(-2, NUM_PAGES + 2),
    wide=st.booleans(),
)
def test_validate_inputs_property(length, page, wide):
    """A length outside ``[0, capacity]`` or a live page outside the pool is an error
    naming the entry; anything else passes; int64 arrays are read as they are."""
    dtype = np.int64 if wide else np.int32
    pages_per_seq = CAPACITY // PAGE
    table = np.arange(2 * pages_per_seq, dtype=dtype).reshape(2, pages_per_seq) % NUM_PAGES
    table[1, 0] = page
    lens = np.array([CAPACITY, length], dtype)
    kv = jax.ShapeDtypeStruct((NUM_PAGES, PAGE, LORA + ROPE), jnp.float32)
    bad_len = not 0 <= length <= CAPACITY
    bad_page = length > 0 and not 0 <= page < NUM_PAGES and not bad_len
    if bad_len or bad_page:
        with pytest.raises(ValueError, match=r"seq_lens\[1\]|block_table\[1, 0\]"):
            mla_jax.validate_inputs(kv, table, lens)
    else:
        mla_jax.validate_inputs(kv, table, lens)


@PROPERTY
@given(
    starts=st.lists(st.integers(-3, CAPACITY + 3), min_size=2, max_size=2),
    lengths=st.lists(st.integers(0, 4), min_size=2, max_size=2),
    seed=st.integers(0, 2**16),
)
def test_write_latents_property(starts, lengths, seed):
    """``write_latents`` against a numpy scatter: rows past a length, or at positions
    outside the table, write nothing; int64 positions are checked, then narrowed."""
    from mla_jax.cache import write_latents

    rng = np.random.default_rng(seed)
    pages_per_seq = CAPACITY // PAGE
    cache = rng.standard_normal((NUM_PAGES, PAGE, 8)).astype(np.float32)
    table = rng.permutation(NUM_PAGES)[: 2 * pages_per_seq].reshape(2, pages_per_seq)
    latents = rng.standard_normal((2, 4, 8)).astype(np.float32)
    want = cache.copy()
    for b in range(2):
        for t in range(lengths[b]):
            pos = starts[b] + t
            if 0 <= pos < CAPACITY:
                want[table[b, pos // PAGE], pos % PAGE] = latents[b, t]
    got = write_latents(
        jnp.asarray(cache),
        jnp.asarray(latents),
        table.astype(np.int64),
        np.array(starts, np.int64),
        np.array(lengths, np.int64),
    )
    np.testing.assert_array_equal(np.asarray(got), want)


# the sharded op and the layer ---------------------------------------------------------


@PROPERTY
@given(
    scheme=st.sampled_from(["heads", "batch", "rows"]),
    lens=st.lists(st.integers(-2, CAPACITY + 2), min_size=B, max_size=B),
    wide=st.booleans(),
    q_dtype=st.sampled_from(["float32", "int32"]),
)
def test_sharded_mla_decode_property(scheme, lens, wide, q_dtype):
    """On a one-device mesh: the float64 reference (lengths clamped as documented),
    int64 tables and lengths as int32 ones, and a clear error for an unknown scheme or
    an integer q."""
    from jax.sharding import Mesh

    from mla_jax.sharded import reserve_sharded_logits_buffer, sharded_mla_decode

    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))
    args = problem()
    table = args["block_table"].astype(np.int64 if wide else np.int32)
    seq_lens = np.array(lens, np.int64 if wide else np.int32)
    q = jnp.asarray(args["q"]).astype(q_dtype)

    def run():
        buf = reserve_sharded_logits_buffer(
            mesh, "d", scheme, B, H, CAPACITY, kv_lora_rank=LORA, rope_dim=ROPE, sm_count=4
        )
        return sharded_mla_decode(
            mesh, "d", scheme, q, jnp.asarray(args["kv_cache"]), table, seq_lens, buf,
            scale=SCALE, backend="xla",
        )  # fmt: skip

    if scheme == "rows" or q_dtype == "int32":
        with pytest.raises(ERRORS, match="scheme" if scheme == "rows" else "q"):
            run()
        return
    out, lse, _ = run()
    close_to_reference(out, lse, table, seq_lens)


@PROPERTY
@given(
    position=st.integers(-2, 2**33),
    x_dtype=st.sampled_from(["float32", "bfloat16", "int32"]),
    x_rank=st.sampled_from([1, 2]),
)
def test_mla_decode_layer_property(position, x_dtype, x_rank):
    """The layer's step: int64 positions past int32 are refused by name; an integer or
    wrongly ranked ``x`` is an error naming it; valid inputs give finite outputs equal
    to the int32-position step's."""
    from mla_jax.layer import mla_decode_layer

    config = PRESETS["tiny"]
    params = init_layer(config, jax.random.key(0))
    x = jax.random.normal(jax.random.key(2), (2, config.hidden_size)).astype(x_dtype)
    if x_rank == 1:
        x = x[0]
    positions = np.array([min(max(position, 0), 15), 3], np.int64)
    wide = np.array([position, 3], np.int64)

    def step(pos):  # each on a state of its own: a step donates the buffer
        state = init_decode_state(
            config, 1, 2, 16, 4, sm_count=4, key=jax.random.key(1), prompt_lens=[3, 3]
        )
        return mla_decode_layer(
            params, config, x, state.kv_caches[0], state.block_table, pos, state.logits_buffer,
            backend="xla",
        )  # fmt: skip

    if x_dtype == "int32" or x_rank == 1:
        with pytest.raises(ERRORS, match="x"):
            step(positions)
        return
    if not 0 <= position < 2**31:
        if position >= 2**31:
            with pytest.raises(ValueError, match=r"positions\[0\] = \d+ is outside int32"):
                step(wide)
        return
    out, cache, _ = step(wide)
    want, want_cache, _ = step(positions.astype(np.int32))
    assert np.isfinite(np.asarray(out, np.float32)).all()
    if position < 16:  # inside the table: the same write and the same attention
        np.testing.assert_array_equal(np.asarray(out), np.asarray(want))
        np.testing.assert_array_equal(np.asarray(cache), np.asarray(want_cache))
