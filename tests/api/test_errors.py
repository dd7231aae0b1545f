"""Bad input fails at trace time with a ValueError naming what to change."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mla_jax
from mla_jax.buffers import DEFAULT_SM_COUNT, gpu_sm_count

B, H, LORA, ROPE, PAGE, PAGES = 3, 4, 32, 16, 16, 4


def inputs(**over):
    rng = np.random.default_rng(0)
    args = dict(
        q=jnp.asarray(rng.standard_normal((B, H, LORA + ROPE)), jnp.float32),
        kv_cache=jnp.asarray(rng.standard_normal((B * PAGES, PAGE, LORA + ROPE)), jnp.float32),
        block_table=jnp.arange(B * PAGES, dtype=jnp.int32).reshape(B, PAGES),
        seq_lens=jnp.asarray(rng.integers(1, PAGE * PAGES, B), jnp.int32),
        logits_buffer=buffer(),
    )
    args.update(over)
    return args


def decode(max_seq_len=64, **over):
    return mla_jax.mla_decode(**inputs(**over), scale=0.1, max_seq_len=max_seq_len, backend="xla")


def buffer(rows=4, heads=H, lora=LORA, rope=ROPE, **kw):
    return mla_jax.reserve_logits_buffer(
        rows, heads, 2048, kv_lora_rank=lora, rope_dim=rope, sm_count=4, **kw
    )


@pytest.mark.parametrize(
    "over, message",
    [
        (dict(q=jnp.ones((B, LORA + ROPE))), r"q: got \[3, 48\], needed \[B >= 1, H, 48\]"),
        (dict(q=jnp.ones((B, H, 40))), r"q: got \[3, 4, 40\], needed \[B, H, 48\]"),
        (dict(q=(jnp.ones((B, H, 30)), jnp.ones((B, H, ROPE)))), r"q_nope: got \[3, 4, 30\]"),
        (dict(q=(jnp.ones((B, H, LORA)), jnp.ones((B, H, 8)))), r"q_pe: got \[3, 4, 8\]"),
        (dict(q=jnp.ones((B, H, LORA + ROPE), jnp.int32)), "q dtype: got int32"),
        (dict(q=(jnp.ones((B, H, LORA)),) * 3), "q: got a tuple of 3 arrays"),
        (
            dict(kv_cache=jnp.ones((B * PAGES, PAGE, LORA + ROPE), jnp.float16)),
            "kv_cache dtype: got float16, needed q's dtype float32",
        ),
        (dict(kv_cache=jnp.ones((PAGE, LORA + ROPE))), r"kv_cache: got \[16, 48\]"),
        (dict(kv_cache=jnp.ones((0, PAGE, LORA + ROPE))), r"kv_cache: got \[0, 16, 48\]"),
        (
            dict(kv_cache=jnp.ones((B * PAGES, PAGE, LORA))),
            r"kv_cache: rows are 32 wide, but LogitsBuffer.* was reserved for kv_lora_rank \+ "
            r"rope_dim = 32 \+ 16 = 48",
        ),
        (dict(block_table=jnp.zeros((B, PAGES), jnp.int16)), "block_table: got int16"),
        (
            dict(block_table=jnp.zeros((B + 1, PAGES), jnp.int32)),
            r"needed int32 \[3, pages_per_seq >= 1\]",
        ),
        (dict(block_table=jnp.zeros((B, 0), jnp.int32)), r"block_table: got int32\[3, 0\]"),
        (dict(block_table=[[0, 1, 2, 3]] * B), "block_table: got a list, needed an array"),
        (
            dict(seq_lens=jnp.ones((B,), jnp.uint32)),
            r"seq_lens: got uint32\[3\], needed int32 \[3\]",
        ),
        (dict(seq_lens=jnp.ones((B, 1), jnp.int32)), r"seq_lens: got int32\[3, 1\]"),
        (dict(seq_lens=[5, 6, 7]), "seq_lens: got a list, needed an array"),
        (dict(logits_buffer=buffer(rows=2)), "reserve with max_num_seqs >= 3"),
        (dict(logits_buffer=buffer(heads=8)), "q: 4 heads, but LogitsBuffer.* reserved for 8"),
        (
            dict(logits_buffer=buffer().data),
            r"logits_buffer: got float32\[4, 4, 8, 33\], needed "
            "the LogitsBuffer",
        ),
        # A buffer reserved for another kv_lora_rank (rope_dim left at its default).
        (
            dict(
                logits_buffer=mla_jax.reserve_logits_buffer(4, H, 2048, kv_lora_rank=40, sm_count=4)
            ),
            r"kv_cache: rows are 48 wide, .* 40 \+ 64 = 104; reserve the buffer with the cache's",
        ),
    ],
)
def test_shape_and_dtype_errors(over, message):
    with pytest.raises(ValueError, match=message):
        decode(**over)


def test_max_seq_len_beyond_reservation_names_the_reservation_that_fits():
    # vLLM's rule: the split count grows with the length alone (2048 -> 4, 4096 -> 8).
    buf = buffer(policy="vllm")
    with pytest.raises(
        ValueError,
        match=r"needs 8 KV splits under policy='vllm', sm_count=4, "
        r"but .* holds 4; reserve it with max_model_len >= 4096",
    ):
        mla_jax.mla_decode(**inputs(logits_buffer=buf), scale=0.1, max_seq_len=4096, backend="xla")


@pytest.mark.parametrize("policy", ["vllm", "occupancy"])
def test_a_step_plans_its_splits_with_the_reservations_settings(policy):
    """The buffer carries its policy and SM count: a step at the reserved length always
    fits, whichever policy it was reserved with (no setting to pass differently)."""
    buf = buffer(policy=policy)
    out, _, buf = mla_jax.mla_decode(
        **inputs(logits_buffer=buf), scale=0.1, max_seq_len=2048, backend="xla"
    )
    assert (buf.policy, buf.sm_count) == (policy, 4)
    assert np.isfinite(np.asarray(out)).all()


@pytest.mark.parametrize(
    "scale", [float("nan"), float("inf"), "0.1", None, True, jnp.float32(0.1) * jnp.ones(())]
)
def test_scale_must_be_a_finite_python_float(scale):
    with pytest.raises(ValueError, match=r"scale: got .*, needed a finite Python float"):
        mla_jax.mla_decode(**inputs(), scale=scale, backend="xla")


@pytest.mark.parametrize("k_scale", [jnp.ones((2,)), jnp.ones((H,))])
def test_k_scale_must_be_one_scale(k_scale):
    with pytest.raises(ValueError, match=r"k_scale: got shape \[\d+\], needed one scale"):
        mla_jax.mla_decode(**inputs(), scale=0.1, k_scale=k_scale, backend="xla")


def test_empty_batch_is_refused():
    args = inputs(
        q=jnp.ones((0, H, LORA + ROPE)),
        block_table=jnp.zeros((0, PAGES), jnp.int32),
        seq_lens=jnp.zeros((0,), jnp.int32),
    )
    with pytest.raises(ValueError, match=r"q: got \[0, 4, 48\], needed \[B >= 1"):
        mla_jax.mla_decode(**args, scale=0.1, backend="xla")
    with pytest.raises(ValueError, match=r"q: got \[0, 4, 48\], needed \[B >= 1"):
        mla_jax.mla_decode(
            **inputs(**{k: v for k, v in args.items() if k != "logits_buffer"}),
            scale=0.1,
            batch_invariant=True,  # "auto": the xla backend refuses it on a GPU
        )


def test_triton_backend_without_a_gpu_asks_for_compute_capability():
    if jax.default_backend() == "gpu":
        pytest.skip("a GPU runs the triton backend")
    with pytest.raises(ValueError, match=r"backend='triton' needs a CUDA GPU.*compute_capability"):
        mla_jax.mla_decode(**inputs(), scale=0.1, backend="triton")


@pytest.mark.parametrize("lora, rope", [(32, 24), (48, 16), (8, 16)])
def test_triton_backend_names_the_sizes_it_cannot_tile(lora, rope):
    args = inputs(
        q=jnp.ones((B, H, lora + rope)),
        kv_cache=jnp.ones((B * PAGES, PAGE, lora + rope)),
        logits_buffer=buffer(lora=lora, rope=rope),
    )
    with pytest.raises(
        ValueError, match="the triton backend needs a power of two >= 16; use backend='xla'"
    ):
        jax.jit(
            lambda **a: mla_jax.mla_decode(**a, scale=0.1, backend="triton", compute_capability=90)
        ).trace(**args)


def test_batch_invariant_takes_numpy_inputs():
    args = {k: np.asarray(v) if k != "logits_buffer" else v for k, v in inputs().items()}
    # "auto": triton on a GPU (where the xla backend refuses batch_invariant), else xla.
    _, lse, _ = mla_jax.mla_decode(**args, scale=0.1, batch_invariant=True)
    assert np.isfinite(np.asarray(lse)).all()


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend must be"):
        mla_jax.mla_decode(**inputs(), scale=0.1, backend="cuda")


def test_donated_buffer_cannot_be_used_again():
    """The reused buffer is named, said to be donated, and the fix given."""
    args = inputs()
    mla_jax.mla_decode(**args, scale=0.1, max_seq_len=64, backend="xla")
    assert args["logits_buffer"].data.is_deleted()
    with pytest.raises(
        ValueError,
        match=r"logits_buffer: LogitsBuffer\[4, 4, \d+, 33\] .* was donated to an earlier "
        r"step and deleted; pass the buffer that step returned",
    ):
        mla_jax.mla_decode(**args, scale=0.1, max_seq_len=64, backend="xla")


def test_buffer_repr_is_one_line():
    buf = buffer()
    assert repr(buf) == f"<{buf.describe()}>" and "\n" not in repr(buf)
    mla_jax.mla_decode(**inputs(logits_buffer=buf), scale=0.1, max_seq_len=64, backend="xla")
    assert repr(buf).endswith(", donated>")


def test_numpy_integers_are_ints():
    """``np.int64`` (an array's ``max()``, a shape read back) is accepted as an int."""
    buf = mla_jax.reserve_logits_buffer(
        np.int64(4), np.int32(H), np.int64(2048), kv_lora_rank=LORA, rope_dim=ROPE, sm_count=4
    )
    assert buf.describe() == buffer().describe() and type(buf.sm_count) is int
    with pytest.raises(ValueError, match="max_num_seqs must be a positive int, got True"):
        mla_jax.reserve_logits_buffer(True, H, 2048, sm_count=4)


def test_torch_tensors_come_in_through_dlpack():
    """torch tensors as q, kv_cache, ... give the same step as JAX arrays (imported
    with mla_jax.interop.to_jax); one JAX cannot import names to_jax."""
    torch = pytest.importorskip("torch")
    args = inputs()
    want = decode(**{**args, "logits_buffer": buffer()})
    # On the device JAX computes on (a torch tensor comes in on its own device).
    on = "cuda" if jax.default_backend() == "gpu" else "cpu"
    as_torch = {
        k: torch.from_numpy(np.array(v)).to(on) for k, v in args.items() if k != "logits_buffer"
    }
    got = decode(**as_torch, logits_buffer=buffer())
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    meta = torch.zeros(B, H, LORA + ROPE, device="meta")  # no memory to share
    with pytest.raises(ValueError, match=r"q: got a torch.Tensor .*mla_jax\.interop\.to_jax"):
        decode(q=meta)


def test_reserving_without_gpu_plans_for_an_h100():
    """``sm_count=None`` without a GPU plans for DEFAULT_SM_COUNT (an H100/H200's 132)
    rather than refusing: a CPU laptop runs the snippets as written."""
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("a GPU answers the question")
    buf = mla_jax.reserve_logits_buffer(4, H, 2048, kv_lora_rank=LORA, rope_dim=ROPE)
    assert buf.sm_count == DEFAULT_SM_COUNT == 132
    assert gpu_sm_count(jax.devices("cpu")[0]) == DEFAULT_SM_COUNT


def test_validate_flag_stops_bad_pages_before_the_kernel():
    args = inputs()
    bad = np.asarray(args["block_table"]).copy()
    bad[1, 0] = 10_000  # row 1's first page is live (seq_len >= 1)
    args["block_table"] = jnp.asarray(bad)
    with pytest.raises(ValueError, match=r"block_table\[1, 0\] = 10000 is outside \[0, 12\)"):
        mla_jax.mla_decode(**args, scale=0.1, max_seq_len=64, backend="xla", validate=True)
    assert not args["logits_buffer"].data.is_deleted()  # nothing ran, nothing was donated


def test_layer_config_takes_numpy_integers():
    from mla_jax.layer import MLAConfig

    sizes = dict(hidden_size=64, num_heads=4, q_lora_rank=None, kv_lora_rank=32)
    sizes.update(qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16)
    config = MLAConfig(**{k: v if v is None else np.int64(v) for k, v in sizes.items()})
    assert config == MLAConfig(**sizes) and type(config.num_heads) is int
