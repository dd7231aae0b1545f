"""The fused MoE (``mla_jax.moe``): its alignment in JAX, its kernels in the Triton
interpreter against the float64 reference, its sm_90 builds at DeepSeek-V2-Lite's
shapes, and the model's MoE layers on the triton backend lowered for CUDA."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from mla_jax.moe import MoEConfig, default_config, mlp_slices, moe_align
from mla_jax.moe.config import max_blocks
from mla_jax.moe.reference import pair_outputs_reference
from tests.interpreted import run_moe

S = jax.ShapeDtypeStruct
HIDDEN, INTER = 64, 48  # gate+up: 48 columns in 64-wide tiles; down: a 48-long reduction

# What the kernels' rounding allows, relative to the largest reference value. bf16: h
# and each pair's output are rounded to bf16 (the interpreter truncates, 2^-7 at most,
# the GPU rounds to nearest); float32: the float32 accumulation alone.
H_RTOL = {np.float32: 1e-5, ml_dtypes.bfloat16: 2**-7}
OUT_TOL = {np.float32: 1e-5, ml_dtypes.bfloat16: 2**-6}


def routing(rng, tokens, num_experts, top_k):
    """Skewed routing: each token's ``top_k`` distinct experts drawn with weights 2^-e,
    the last expert never (so some experts get many pairs, some none), and positive
    routing weights."""
    p = 0.5 ** np.arange(num_experts)
    p[-1] = 0
    p /= p.sum()
    experts = np.stack([rng.choice(num_experts, top_k, replace=False, p=p) for _ in range(tokens)])
    weights = rng.uniform(0.1, 1.0, (tokens, top_k))
    return experts.astype(np.int32), weights.astype(np.float32)


def problem(rng, tokens, num_experts, top_k, dtype):
    """x ``[tokens, HIDDEN]`` and weights scaled so every product is O(1)."""
    experts, weights = routing(rng, tokens, num_experts, top_k)
    x = rng.standard_normal((tokens, HIDDEN))
    gate = rng.standard_normal((num_experts, HIDDEN, INTER)) * HIDDEN**-0.5
    up = rng.standard_normal((num_experts, HIDDEN, INTER)) * HIDDEN**-0.5
    down = rng.standard_normal((num_experts, INTER, HIDDEN)) * INTER**-0.5
    cast = lambda a: a.astype(dtype)
    return cast(x), weights, experts, cast(gate), cast(up), cast(down)


def aligned(experts, num_experts, block_m):
    """``moe_align``'s arrays as numpy (jitted: one compilation, not one an op)."""
    a = jax.jit(moe_align, static_argnums=(1, 2))(jnp.asarray(experts), num_experts, block_m)
    return tuple(np.asarray(v) for v in a)


# ------------------------------------------------------------------------ align


@pytest.mark.parametrize("tokens, num_experts, top_k, block_m", [(1, 64, 6, 16), (37, 8, 3, 4)])
def test_align_groups_pairs_by_expert_in_padded_blocks(rng, tokens, num_experts, top_k, block_m):
    experts, _ = routing(rng, tokens, num_experts, top_k)
    pairs, block_experts, num_padded = aligned(experts, num_experts, block_m)
    blocks = max_blocks(tokens * top_k, num_experts, block_m)
    assert pairs.shape == (blocks * block_m,) and block_experts.shape == (blocks,)
    assert pairs.dtype == block_experts.dtype == num_padded.dtype == np.int32
    counts = np.bincount(experts.reshape(-1), minlength=num_experts)
    padded = int(num_padded[0])
    assert padded == (-(-counts // block_m) * block_m).sum()
    assert (pairs[padded:] == -1).all()
    # Every pair once, in its expert's blocks, in increasing order within the expert.
    used = pairs[:padded].reshape(-1, block_m)
    assert sorted(used[used >= 0].tolist()) == list(range(tokens * top_k))
    flat = experts.reshape(-1)
    for block, expert in zip(used, block_experts[: padded // block_m]):
        assert (flat[block[block >= 0]] == expert).all()
    for e in range(num_experts):
        got = [p for b, x in zip(used, block_experts) if x == e for p in b if p >= 0]
        assert got == np.flatnonzero(flat == e).tolist()


def test_align_has_no_loop():
    """A decode step runs ``moe_align`` once a MoE layer: it lowers to straight-line
    ops, no ``while`` loop (whose body a GPU runs as kernels once an iteration)."""
    text = jax.jit(moe_align, static_argnums=(1, 2)).lower(S((4, 6), jnp.int32), 64, 16).as_text()
    assert "stablehlo.while" not in text and "stablehlo.sort" in text


def test_align_bound_is_reached_and_out_of_range_ids_are_dropped():
    # Each expert one pair past a block: the most padding there can be.
    block_m, num_experts = 4, 3
    experts = np.repeat(np.arange(num_experts), block_m + 1).reshape(-1, 1).astype(np.int32)
    pairs, _, num_padded = aligned(experts, num_experts, block_m)
    assert int(num_padded[0]) == pairs.size == max_blocks(experts.size, num_experts, block_m) * 4
    bad = np.array([[0, -1], [5, 1]], np.int32)
    pairs, block_experts, num_padded = aligned(bad, 3, 4)
    assert int(num_padded[0]) == 8 and block_experts[:2].tolist() == [0, 1]
    assert pairs[:8].tolist() == [0, -1, -1, -1, 3, -1, -1, -1] and (pairs[8:] == -1).all()


@pytest.mark.parametrize("num_experts, key", [(64, "ui8"), (300, "ui16")])
def test_align_of_a_prefill_sorts_narrow_keys(rng, num_experts, key):
    """From ``NARROW_SORT_PAIRS`` pairs the sort's keys are the narrowest unsigned type
    that holds the expert ids (a radix sort's passes), below it int32 (XLA's own sort
    kernel); either way every in-range pair is in its expert's blocks in pair order,
    and ids out of range (negative or past the experts) are in none."""
    from mla_jax.moe.align import NARROW_SORT_PAIRS

    top_k, block_m = 6, 64
    tokens = NARROW_SORT_PAIRS // top_k + 1
    for rows, want in ((tokens, key), (tokens // 4, "i32")):
        args = (S((rows, top_k), jnp.int32), num_experts, block_m)
        text = jax.jit(moe_align, static_argnums=(1, 2)).lower(*args).as_text()
        assert re.search(rf"stablehlo\.sort.*tensor<{rows * top_k}x{want}>", text, re.S)
    experts = rng.integers(0, num_experts, (tokens, top_k)).astype(np.int32)
    experts.reshape(-1)[rng.choice(experts.size, 50, replace=False)] = rng.choice(
        [-1, -7, num_experts, num_experts + 3, 255, 65535], 50
    )
    pairs, block_experts, num_padded = aligned(experts, num_experts, block_m)
    flat = experts.reshape(-1)
    inside = (flat >= 0) & (flat < num_experts)
    counts = np.bincount(flat[inside], minlength=num_experts)
    padded = int(num_padded[0])
    assert padded == (-(-counts // block_m) * block_m).sum() and (pairs[padded:] == -1).all()
    used = pairs[:padded].reshape(-1, block_m)
    assert sorted(used[used >= 0].tolist()) == np.flatnonzero(inside).tolist()
    got = {e: [] for e in range(num_experts)}
    for block, expert in zip(used, block_experts[: padded // block_m]):
        got[int(expert)] += block[block >= 0].tolist()
    for e in range(num_experts):
        assert got[e] == np.flatnonzero(flat == e).tolist()


# ------------------------------------------------------------------ interpreter

CASES = [
    # (tokens, experts, top_k, dtype)
    (1, 8, 2, ml_dtypes.bfloat16),
    (1, 16, 6, np.float32),
    (3, 8, 6, np.float32),
    (3, 16, 2, ml_dtypes.bfloat16),
    (64, 8, 2, np.float32),
    (64, 8, 6, ml_dtypes.bfloat16),
    (64, 16, 2, ml_dtypes.bfloat16),
    (64, 16, 6, np.float32),
]
CONFIGS = {
    "default": None,
    # 16-wide tiles: no padded columns, a reduction 16 at a time, grouped programs.
    "small-tiles": MoEConfig(block_m=16, block_n=16, block_k=16, group_m=3),
}
# Every case at the default config, the 64-token ones at the small tiles too.
RUNS = [(*c, "default") for c in CASES] + [(*c, "small-tiles") for c in CASES if c[0] == 64]


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "tokens, num_experts, top_k, dtype, config", RUNS, ids=lambda v: getattr(v, "__name__", v)
)
def test_kernels_match_float64(pool, rng, tokens, num_experts, top_k, dtype, config):
    """Both kernels against the float64 reference, pair by pair: every row of h and of
    out written (NaN before), h within its rounding, out within its rounding of the
    product of the h the kernel stored, and the per-token sum within the dtype's
    tolerance."""
    x, weights, experts, gate, up, down = problem(rng, tokens, num_experts, top_k, dtype)
    cfg = CONFIGS[config] or default_config(
        tokens=tokens, top_k=top_k, num_experts=num_experts, itemsize=np.dtype(dtype).itemsize
    )
    counts = np.bincount(experts.reshape(-1), minlength=num_experts)
    assert counts[-1] == 0  # an expert with no pair
    # One token: its pairs straight from the router, as fused_moe runs them.
    alignment = None if tokens == 1 else aligned(experts, num_experts, cfg.block_m)
    h, out = pool.apply(run_moe, (x, weights, experts, gate, up, down, alignment, cfg))
    assert not np.isnan(h).any() and not np.isnan(out).any()
    ref_h, ref_out = pair_outputs_reference(x, weights, experts, gate, up, down)
    h_err = np.abs(h - ref_h)
    assert (h_err <= H_RTOL[dtype] * np.abs(ref_h) + 1e-6 * np.abs(ref_h).max()).all()
    # down alone, from the h the first kernel stored: float32 accumulation, then the
    # store's rounding to x's dtype.
    e = experts.reshape(-1)
    exact = weights.reshape(-1, 1) * np.einsum("pi,pih->ph", h, down[e].astype(np.float64))
    err = np.abs(out - exact)
    assert (err <= H_RTOL[dtype] * np.abs(exact) + 1e-5 * np.abs(exact).max()).all()
    y = out.reshape(tokens, top_k, HIDDEN).sum(axis=1)
    ref_y = ref_out.reshape(tokens, top_k, HIDDEN).sum(axis=1)
    np.testing.assert_allclose(y, ref_y, rtol=0, atol=OUT_TOL[dtype] * np.abs(ref_y).max())


def shared_mlp(rng, n_shared, dtype):
    """A shared MLP of ``n_shared`` experts: ``[HIDDEN, n INTER]`` gate and up,
    ``[n INTER, HIDDEN]`` down."""
    width = n_shared * INTER
    gate = rng.standard_normal((HIDDEN, width)) * HIDDEN**-0.5
    up = rng.standard_normal((HIDDEN, width)) * HIDDEN**-0.5
    down = rng.standard_normal((width, HIDDEN)) * width**-0.5
    return tuple(a.astype(dtype) for a in (gate, up, down))


def dense_reference(x, gate, up, down):
    """A SwiGLU MLP in float64."""
    x, gate, up, down = (np.asarray(a).astype(np.float64) for a in (x, gate, up, down))
    g = x @ gate
    return (g / (1.0 + np.exp(-g)) * (x @ up)) @ down


def with_shared(experts, weights, num_experts, n_shared):
    """Each token's pairs plus the shared experts ``num_experts ..`` at weight 1."""
    tokens = experts.shape[0]
    ids = np.broadcast_to(np.arange(num_experts, num_experts + n_shared), (tokens, n_shared))
    ones = np.ones((tokens, n_shared), np.float32)
    return (
        np.concatenate([experts, ids], axis=1).astype(np.int32),
        np.concatenate([weights, ones], axis=1),
    )


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "tokens, num_experts, top_k, n_shared, dtype, config",
    [
        (1, 8, 2, 2, ml_dtypes.bfloat16, "default"),
        (3, 16, 6, 1, np.float32, "default"),
        (16, 8, 2, 2, np.float32, "small-tiles"),
    ],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_kernels_with_shared_experts_match_float64(
    pool, rng, tokens, num_experts, top_k, n_shared, dtype, config
):
    """The shared experts as experts ``E ..`` of every token (weight 1), read in place
    from the shared MLP's arrays (column slices of gate and up, row slices of down):
    every row written, and each token's sum the routed experts' plus the dense shared
    MLP's, against float64."""
    x, weights, experts, gate, up, down = problem(rng, tokens, num_experts, top_k, dtype)
    shared = shared_mlp(rng, n_shared, dtype)
    all_experts, all_weights = with_shared(experts, weights, num_experts, n_shared)
    cfg = CONFIGS[config] or default_config(
        tokens=tokens, top_k=top_k, num_experts=num_experts, itemsize=np.dtype(dtype).itemsize
    )
    if tokens == 1:  # the routed experts alone, the shared ones after them in-kernel
        routed = (x, weights, experts, gate, up, down, None, cfg, shared)
        h, out = pool.apply(run_moe, routed)
    else:
        alignment = aligned(all_experts, num_experts + n_shared, cfg.block_m)
        h, out = pool.apply(
            run_moe, (x, all_weights, all_experts, gate, up, down, alignment, cfg, shared)
        )
    assert not np.isnan(h).any() and not np.isnan(out).any()
    y = out.reshape(tokens, top_k + n_shared, HIDDEN).sum(axis=1)
    from mla_jax.moe import fused_moe_reference

    want = fused_moe_reference(x, weights, experts, gate, up, down) + dense_reference(x, *shared)
    np.testing.assert_allclose(y, want, rtol=0, atol=OUT_TOL[dtype] * np.abs(want).max())


@pytest.mark.interpreter
def test_one_token_leaves_out_pairs_of_experts_out_of_range(pool, rng):
    """One token's pairs straight from the router: an expert id outside ``[0, E)``
    (past the routed experts, or negative) leaves that pair's rows unwritten (NaN
    here) and reads nothing outside the arrays; the other pairs, the shared expert's
    among them, are right."""
    x, weights, _, gate, up, down = problem(rng, 1, 8, 4, np.float32)
    experts = np.array([[3, 8, 0, -2]], np.int32)  # 8 would be the shared expert's id
    shared = shared_mlp(rng, 1, np.float32)
    cfg = default_config(tokens=1, top_k=4, num_experts=8, itemsize=4)
    h, out = pool.apply(run_moe, (x, weights, experts, gate, up, down, None, cfg, shared))
    assert np.isnan(h[[1, 3]]).all() and np.isnan(out[[1, 3]]).all()
    ok = [0, 2]
    _, ref_out = pair_outputs_reference(x, weights[:, ok], experts[:, ok], gate, up, down)
    np.testing.assert_allclose(out[ok], ref_out, rtol=0, atol=1e-5 * np.abs(ref_out).max())
    np.testing.assert_allclose(out[4], dense_reference(x, *shared)[0], rtol=0, atol=1e-5)


@pytest.mark.interpreter
def test_one_token_reads_its_choices_in_place(pool, rng):
    """One token with a padding row after it (``fused_moe(..., tokens=1, top_k=6)``,
    a decode step's zero row) and its choices the first columns of a ranking of every
    expert (``route(ranked=True)``): x's second row NaN, the ranking's other columns
    and the padding row's experts out of range and weights NaN change nothing, as the
    kernels read the first row's first six alone."""
    x, weights, experts, gate, up, down = problem(rng, 1, 16, 6, np.float32)
    shared = shared_mlp(rng, 2, np.float32)
    cfg = default_config(tokens=1, top_k=6, num_experts=16, itemsize=4)
    want = pool.apply(run_moe, (x, weights, experts, gate, up, down, None, cfg, shared))
    rest = (1, 16 - 6)
    padded = (
        np.concatenate([x, np.full_like(x, np.nan)]),
        np.pad(np.concatenate([weights, np.full(rest, np.nan, np.float32)], 1), ((0, 1), (0, 0)),
               constant_values=np.nan),
        np.pad(np.concatenate([experts, np.full(rest, 99, np.int32)], 1), ((0, 1), (0, 0)),
               constant_values=-7),
    )  # fmt: skip
    got = pool.apply(run_moe, (*padded, gate, up, down, None, cfg, shared, 1, 6))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "slices, width, dtype", [(3, 120, np.float32), (2, 96, ml_dtypes.bfloat16)]
)
def test_dense_mlp_as_slices_matches_float64(pool, rng, slices, width, dtype):
    """A dense MLP on one token as ``slices`` shared experts and no routed one
    (``fused_mlp``'s launch): every slice's rows written (NaN before), the padding
    row after the token (NaN) unread, and the slices' sum the dense MLP's, against
    float64. 120 wide in 3: 40-column slices, so the gate+up tiles wrap and the down
    reduction has a tail."""
    x = np.concatenate([rng.standard_normal((1, HIDDEN)), np.full((1, HIDDEN), np.nan)])
    gate = rng.standard_normal((HIDDEN, width)) * HIDDEN**-0.5
    up = rng.standard_normal((HIDDEN, width)) * HIDDEN**-0.5
    down = rng.standard_normal((width, HIDDEN)) * width**-0.5
    mlp = tuple(a.astype(dtype) for a in (gate, up, down))
    none = np.zeros((0, HIDDEN, width // slices), dtype)  # no routed experts
    routed = (x.astype(dtype), np.zeros((1, 0), np.float32), np.zeros((1, 0), np.int32))
    cfg = default_config(tokens=1, top_k=slices, num_experts=0, itemsize=np.dtype(dtype).itemsize)
    h, out = pool.apply(run_moe, (*routed, none, none, none.transpose(0, 2, 1), None, cfg, mlp, 1))
    assert h.shape[0] == out.shape[0] == slices
    assert not np.isnan(h).any() and not np.isnan(out).any()
    want = dense_reference(x[:1].astype(dtype), *mlp)
    np.testing.assert_allclose(
        out.sum(axis=0, keepdims=True), want, rtol=0, atol=OUT_TOL[dtype] * np.abs(want).max()
    )


@pytest.mark.gpu
@pytest.mark.parametrize("width, slices", [(96, 3), (10944, 8)])
def test_fused_mlp_on_the_gpu_matches_float64(rng, width, slices):
    """``fused_mlp`` on a CUDA GPU (bf16, V2-Lite's dense width among them): the
    token's output against float64, the padding row after it NaN and unread."""
    from mla_jax.moe import fused_mlp

    hidden = 2048 if width > 1000 else HIDDEN
    x = np.concatenate([rng.standard_normal((1, hidden)), np.full((1, hidden), np.nan)])
    mlp = (
        rng.standard_normal((hidden, width)) * hidden**-0.5,
        rng.standard_normal((hidden, width)) * hidden**-0.5,
        rng.standard_normal((width, hidden)) * width**-0.5,
    )
    bf16 = [a.astype(ml_dtypes.bfloat16) for a in (x, *mlp)]
    y = np.asarray(jax.jit(fused_mlp, static_argnames="slices")(*bf16, slices=slices))
    assert y.dtype == np.float32 and y.shape == (1, hidden)
    want = dense_reference(bf16[0][:1], *bf16[1:])
    np.testing.assert_allclose(y, want, rtol=0, atol=2**-7 * np.abs(want).max())


@pytest.mark.gpu
@pytest.mark.parametrize(
    "tokens, num_experts, top_k, n_shared, dtype",
    [
        (1, 64, 6, 0, ml_dtypes.bfloat16),
        (1, 64, 6, 2, ml_dtypes.bfloat16),
        (3, 16, 6, 1, np.float32),
        (200, 16, 6, 0, ml_dtypes.bfloat16),
    ],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_fused_moe_on_the_gpu_matches_float64(rng, tokens, num_experts, top_k, n_shared, dtype):
    """``fused_moe`` itself on a CUDA GPU (the default config, compiled for the
    device): the per-token sum against float64 (200 tokens: 32-pair blocks), with the
    shared experts in the kernels where ``n_shared``."""
    from mla_jax.moe import fused_moe, fused_moe_reference

    args = problem(rng, tokens, num_experts, top_k, dtype)
    shared = shared_mlp(rng, n_shared, dtype) if n_shared else None
    y = np.asarray(
        jax.jit(fused_moe)(
            *map(jnp.asarray, args),
            shared=None if shared is None else tuple(map(jnp.asarray, shared)),
        )
    )
    assert y.dtype == np.float32 and y.shape == (tokens, HIDDEN)
    want = fused_moe_reference(*args)
    if shared is not None:
        want = want + dense_reference(args[0], *shared)
    np.testing.assert_allclose(y, want, rtol=0, atol=OUT_TOL[dtype] * np.abs(want).max())


# ----------------------------------------------------------------- sm_90 builds


def lowered(fn, *args) -> str:
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize("tokens", [1, 64, 512, 4096])
def test_v2_lite_builds_for_sm90(tokens):
    """DeepSeek-V2-Lite's routed experts (hidden 2048, 1408 per expert, 64 experts,
    top-6) at decode (1, 64 tokens), between (512) and prefill sizes (4096): two
    jaxlib FFI calls carrying sm_90 cubins, each within sm_90's shared memory, on the
    grid ``launch_params`` gives for the config ``default_config`` picks."""
    from mla_jax import _launch
    from mla_jax.moe import fused_moe, kernel
    from tests.kernel_calls import kernel_calls

    experts, hidden, inter, top_k = 64, 2048, 1408, 6
    args = (
        S((tokens, hidden), jnp.bfloat16),
        S((tokens, top_k), jnp.float32),
        S((tokens, top_k), jnp.int32),
        S((experts, hidden, inter), jnp.bfloat16),
        S((experts, hidden, inter), jnp.bfloat16),
        S((experts, inter, hidden), jnp.bfloat16),
    )
    text = lowered(lambda *a: fused_moe(*a, compute_capability=90), *args)
    calls = kernel_calls(text)
    assert [c.kernel_name for c in calls] == ["moe_gate_up", "moe_down"]
    assert len(re.findall(r"custom_call @", text)) == 2  # no gathered weights either
    config = default_config(tokens=tokens, top_k=top_k, num_experts=experts, itemsize=2)
    launches = kernel.launch_params(
        num_pairs=tokens * top_k,
        top_k=top_k,
        num_experts=experts,
        hidden=hidden,
        intermediate=inter,
        float32=False,
        config=config,
        one_token=tokens == 1,
    )
    for call, launch in zip(calls, launches):
        assert call.target == "triton_kernel_call_ffi" and call.cubin.startswith(b"\x7fELF")
        assert call.attributes["cc"] == 90
        assert 0 < call.attributes["shared"] <= _launch.MAX_SHARED_BYTES[90]
        assert call.grid == (launch["grid"][0], 1, 1)
        assert call.num_warps == config.num_warps
    if tokens == 1:  # six blocks (one an expert) of 22 and 32 column tiles
        assert [c.grid[0] for c in calls] == [6 * 22, 6 * 32]
    # No copy of any expert's weights: the only arrays of an expert's shape are the
    # stacked inputs (the xla path's gather makes a [tokens, 6, 2048, 1408] one).
    weight_types = set(re.findall(r"tensor<[0-9x]*(?:2048x1408|1408x2048)xbf16>", text))
    assert weight_types == {"tensor<64x2048x1408xbf16>", "tensor<64x1408x2048xbf16>"}


def test_v2_lite_shared_experts_build_for_sm90():
    """V2-Lite's two shared experts in the kernels at one token: eight blocks (six
    routed, two shared) of 22 and 32 column tiles, the shared MLP read in place (no
    copy of it, no matmul beside the two calls), the router's choices unaligned (no
    sort, scatter or concatenation before the calls), and the same SASS as the routed-only
    build's where it matters: every weight tile by 128-bit asynchronous copies (the
    shared experts' runtime row stride keeps them) and as many MMAs."""
    from mla_jax.moe import fused_moe
    from tests.kernel_calls import kernel_calls, sass

    routed = (S((64, 2048, 1408), jnp.bfloat16),) * 2 + (S((64, 1408, 2048), jnp.bfloat16),)
    shared = (S((2048, 2816), jnp.bfloat16),) * 2 + (S((2816, 2048), jnp.bfloat16),)
    args = (S((1, 2048), jnp.bfloat16), S((1, 6), jnp.float32), S((1, 6), jnp.int32), *routed)

    def build(shared):
        text = lowered(
            lambda *a: fused_moe(*a[:6], shared=a[6:] or None, compute_capability=90),
            *args,
            *shared,
        )
        return text, kernel_calls(text)

    def opcodes(call):
        return sorted(re.findall(r"\b(?:LDGSTS|HMMA)[.\w]*", sass(call.cubin)))

    text, calls = build(shared)
    assert [(c.kernel_name, c.grid[0]) for c in calls] == [("moe_gate_up", 176), ("moe_down", 256)]
    assert len(re.findall(r"custom_call @", text)) == 2 and "dot_general" not in text
    # The router's experts and weights go to the kernels as they are: no alignment.
    assert not re.search(r"stablehlo\.(sort|scatter|concatenate)", text)
    assert set(re.findall(r"tensor<2048x2816xbf16>|tensor<2816x2048xbf16>", text)) == {
        "tensor<2048x2816xbf16>",
        "tensor<2816x2048xbf16>",
    }
    _, plain = build(())
    for with_shared, routed_only in zip(calls, plain):
        assert opcodes(with_shared) == opcodes(routed_only)
        assert set(opcodes(with_shared)) >= {"LDGSTS.E.BYPASS.128"}


def test_v2_lite_dense_mlp_builds_for_sm90():
    """V2-Lite's dense MLP (10944 wide) on one token in 8 slices of 1368: the two
    kernels on 8 blocks of 22 and 32 column tiles, the weights read in place (no
    padded or sliced copy of any, no matmul beside the calls), a float32 sum."""
    from mla_jax.moe import fused_mlp, mlp_slices
    from tests.kernel_calls import kernel_calls

    slices = mlp_slices(10944, per_slice=1408)
    assert slices == 8
    args = (S((2, 2048), jnp.bfloat16), *(S((2048, 10944), jnp.bfloat16),) * 2)
    args += (S((10944, 2048), jnp.bfloat16),)
    text = lowered(lambda *a: fused_mlp(*a, slices=slices, compute_capability=90), *args)
    calls = kernel_calls(text)
    assert [(c.kernel_name, c.grid[0]) for c in calls] == [("moe_gate_up", 176), ("moe_down", 256)]
    assert len(re.findall(r"custom_call @", text)) == 2 and "dot_general" not in text
    assert set(re.findall(r"tensor<\d+x\d+xbf16>", text)) == {
        "tensor<2x2048xbf16>",
        "tensor<2048x10944xbf16>",
        "tensor<10944x2048xbf16>",
        "tensor<8x1368xbf16>",  # h
    }


def test_float32_builds_for_sm90():
    """float32 weights (IEEE dots) at V2-Lite's decode and prefill shapes fit sm_90."""
    from mla_jax.moe import fused_moe
    from tests.kernel_calls import kernel_calls

    for tokens in (1, 4096):
        args = (S((tokens, 2048), jnp.float32), S((tokens, 6), jnp.float32))
        args += (S((tokens, 6), jnp.int32), S((64, 2048, 1408), jnp.float32))
        args += (S((64, 2048, 1408), jnp.float32), S((64, 1408, 2048), jnp.float32))
        calls = kernel_calls(lowered(lambda *a: fused_moe(*a, compute_capability=90), *args))
        assert [c.kernel_name for c in calls] == ["moe_gate_up", "moe_down"]


# ------------------------------------------------------------------------ model


def tiny_model():
    from mla_jax.deepseek import DeepseekConfig, init_params
    from mla_jax.layer import PRESETS

    config = DeepseekConfig(
        model_type="deepseek_v2",
        vocab_size=64,
        num_hidden_layers=2,
        attention=PRESETS["tiny"],
        intermediate_size=64,
        moe_intermediate_size=32,
        n_routed_experts=8,
        n_shared_experts=1,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
    )
    return config, jax.eval_shape(lambda: init_params(config, jax.random.key(0)))


def test_model_on_the_triton_backend_lowers_for_cuda():
    """decode_step and prefill with backend="triton": the MoE layer's two kernels (and
    the attention's) in the lowered step, the dense layer's MLP on the same two at
    batch one (``fused_mlp``); prefill's MoE the same kernels after the
    layers' flash-attention kernels (tests/kernels/test_prefill.py). backend="xla" lowers no
    kernel. The shared expert (its down projection the only ``[32, 64]`` matrix) is in
    the decode step's kernels, a matmul of its own in prefill's 32 tokens."""
    from mla_jax.deepseek import decode_step, new_decode_state, prefill
    from tests.kernel_calls import kernel_calls

    config, params = tiny_model()
    state = jax.eval_shape(lambda: new_decode_state(config, 2, 64, sm_count=132))
    texts = []

    def calls(fn, *args):
        texts.append(lowered(fn, *args))
        return [c.kernel_name for c in kernel_calls(texts[-1])]

    def step(backend):
        return lambda p, t, s: decode_step(p, config, t, s, backend=backend, compute_capability=90)

    def fill(backend):
        return lambda p, *a: prefill(p, config, *a, backend=backend, compute_capability=90)

    one = jax.eval_shape(lambda: new_decode_state(config, 1, 64, sm_count=132))
    names = calls(step("triton"), params, S((1,), jnp.int32), one)
    assert names.count("moe_gate_up") == names.count("moe_down") == 2  # the dense MLP's too
    args = (params, S((2,), jnp.int32), state)
    names = calls(step("triton"), *args)
    assert names.count("moe_gate_up") == names.count("moe_down") == 1  # one MoE layer
    assert any(n.startswith("mla_decode_stage1") for n in names)
    step_text = texts[-1]
    assert calls(step("xla"), *args) == []
    args = (params, S((2, 16), jnp.int32), S((2,), jnp.int32), state.kv_caches, state.block_table)
    names = calls(fill("triton"), *args)
    assert names == ["flash_prefill_fwd", "flash_prefill_fwd", "moe_gate_up", "moe_down"]
    dots = lambda text: [line for line in text.splitlines() if "dot_general" in line]
    assert not any(", tensor<32x64xbf16>) ->" in line for line in dots(step_text))
    assert any(", tensor<32x64xbf16>) ->" in line for line in dots(texts[-1]))
    assert calls(fill("xla"), *args) == []


def test_model_moe_xla_path_is_unchanged():
    """moe(backend="xla") is the gathered path at decode sizes and ragged_dot above."""
    from mla_jax.deepseek import init_params, moe
    from mla_jax.deepseek.model import _experts_gathered, _experts_grouped, route

    config, _ = tiny_model()
    params = init_params(config, jax.random.key(0), jnp.float32)
    layer = params.layers[1].mlp
    for tokens, path in ((3, _experts_gathered), (9, _experts_grouped)):
        x = jax.random.normal(jax.random.key(tokens), (tokens, 64), jnp.float32)

        def want(x, path=path):
            weights, experts = route(layer, config, x)
            shared = layer.shared
            dense = (jax.nn.silu(x @ shared.gate) * (x @ shared.up)) @ shared.down
            return path(layer, x, weights, experts) + dense

        # One compilation for both (XLA:CPU compiles take a second or two each).
        got, wanted = jax.jit(lambda x, w=want: (moe(layer, config, x, backend="xla"), w(x)))(x)
        np.testing.assert_allclose(got, wanted, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------ errors

X, W, E = S((2, 64), jnp.bfloat16), S((2, 2), jnp.float32), S((2, 2), jnp.int32)
G, D = S((8, 64, 32), jnp.bfloat16), S((8, 32, 64), jnp.bfloat16)
SG, SD = S((64, 32), jnp.bfloat16), S((32, 64), jnp.bfloat16)  # one shared expert


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(x=S((2, 3, 64), jnp.bfloat16)), r"x: got bfloat16\[2, 3, 64\], needed \[tokens"),
        (dict(x=S((2, 64), jnp.int32)), "x: .* in bfloat16, float16 or float32"),
        (dict(gate=S((8, 32, 64), jnp.bfloat16)), r"gate: got \[8, 32, 64\], needed \[experts, 64"),
        (dict(up=S((8, 64, 16), jnp.bfloat16)), r"up: got \[8, 64, 16\], needed \[8, 64, 32\]"),
        (dict(down=S((8, 64, 32), jnp.bfloat16)), r"down: got \[8, 64, 32\], needed \[8, 32, 64\]"),
        (dict(down=S((8, 32, 64), jnp.float32)), "down: got float32, needed x's dtype bfloat16"),
        (dict(experts=S((2, 2), jnp.float32)), r"experts: got float32\[2, 2\], needed integer"),
        (dict(experts=S((2, 9), jnp.int32)), "experts: got top_k = 9, needed 1 to 8"),
        (dict(weights=S((2, 3), jnp.float32)), r"weights: .* needed floating \[2, 2\]"),
        (dict(compute_capability=75), "bfloat16 weights need >= 80"),
        (dict(compute_capability=91), "compute_capability: got 91"),
        (dict(config={"block_m": 16}), "config: got a dict, needed a MoEConfig"),
        (dict(shared=[SG, SG, SD]), "shared: got a list, needed None or a tuple"),
        (dict(tokens=3), "tokens: got 3, needed at most x's 2 rows"),
        (dict(tokens=-1), "tokens: got -1, needed an int >= 0"),
        (dict(tokens=1.0), "tokens: got 1.0, needed an int"),
        (dict(top_k=3), "top_k: got 3, needed at most experts' 2 columns"),
        (dict(top_k=0), "top_k: got 0, needed an int >= 1"),
        (
            dict(shared=(S((64, 40), jnp.bfloat16), SG, SD)),
            r"shared gate: got \[64, 40\], needed \[64, n \* 32\]",
        ),
        (dict(shared=(SG, SG, SG)), r"shared down: got \[64, 32\], needed \[32, 64\]"),
        (
            dict(shared=(SG, S((64, 32), jnp.float32), SD)),
            "shared up: got float32, needed x's dtype bfloat16",
        ),
    ],
)
def test_bad_arguments_are_named(change, message):
    from mla_jax.moe import fused_moe

    args = dict(x=X, weights=W, experts=E, gate=G, up=G, down=D) | change
    keywords = ("compute_capability", "config", "shared", "tokens", "top_k")
    options = {k: args.pop(k) for k in keywords if k in args}
    with pytest.raises(ValueError, match=message):
        jax.eval_shape(lambda a: fused_moe(**a, **options), args)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(x=S((0, 64), jnp.bfloat16)), r"x: got bfloat16\[0, 64\], needed \[rows >= 1"),
        (dict(slices=0), "slices: got 0, needed an int >= 1"),
        (dict(slices=3), r"gate: got \[64, 32\], needed \[64, width\] with width a multiple"),
        (dict(up=S((64, 16), jnp.bfloat16)), r"up: got \[64, 16\], needed \[64, 32\]"),
        (dict(down=S((64, 32), jnp.bfloat16)), r"down: got \[64, 32\], needed \[32, 64\]"),
        (dict(down=S((32, 64), jnp.float16)), "down: got float16, needed x's dtype bfloat16"),
        (dict(compute_capability=75), "bfloat16 weights need >= 80"),
    ],
)
def test_fused_mlp_bad_arguments_are_named(change, message):
    from mla_jax.moe import fused_mlp

    args = dict(x=X, gate=SG, up=SG, down=SD, slices=2) | change
    options = {k: args.pop(k) for k in ("slices", "compute_capability") if k in args}
    with pytest.raises(ValueError, match=message):
        jax.eval_shape(lambda a: fused_mlp(**a, **options), args)


def test_mlp_slices_nearest_the_experts_width():
    assert mlp_slices(10944, per_slice=1408) == 8  # V2-Lite's dense MLP: 1368 wide
    assert mlp_slices(18432, per_slice=2048) == 9  # V3's
    assert mlp_slices(2816, per_slice=1408) == 2
    assert mlp_slices(7, per_slice=100) == 1 and mlp_slices(64, per_slice=1) == 64


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("block_m", 8, "block_m: got 8, needed a power of two >= 16"),
        ("block_n", 48, "block_n: got 48"),
        ("group_m", 0, "group_m: got 0, needed an int >= 1"),
        ("num_warps", 3, "num_warps: got 3, needed a power of two"),
    ],
)
def test_config_is_checked(field, value, message):
    with pytest.raises(ValueError, match=message):
        MoEConfig(**{field: value})


def test_default_config_by_pairs_per_expert():
    pick = lambda tokens, itemsize=2: default_config(
        tokens=tokens, top_k=6, num_experts=64, itemsize=itemsize
    )
    assert pick(1) == pick(64) == MoEConfig(16, 64, 128, 1, 4, 4)
    assert pick(512).block_m == 32 and pick(4096).block_m == 128
    assert pick(1, itemsize=4).block_k == 64  # 256 bytes of a weight row
    assert MoEConfig(block_n=64, block_k=128).tile(2048, 48) == (128, 64)
    assert MoEConfig(block_n=128, block_k=128).tile(32, 20) == (32, 32)
