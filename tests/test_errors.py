"""Bad input fails at trace time with a ValueError naming what to change."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mla_jax

B, H, LORA, ROPE, PAGE, PAGES = 3, 4, 32, 16, 16, 4


def inputs(**over):
    rng = np.random.default_rng()
    args = dict(
        q=jnp.asarray(rng.standard_normal((B, H, LORA + ROPE)), jnp.float32),
        kv_cache=jnp.asarray(rng.standard_normal((B * PAGES, PAGE, LORA + ROPE)), jnp.float32),
        block_table=jnp.arange(B * PAGES, dtype=jnp.int32).reshape(B, PAGES),
        seq_lens=jnp.asarray(rng.integers(1, PAGE * PAGES, B), jnp.int32),
        logits_buffer=mla_jax.reserve_logits_buffer(4, H, 2048, kv_lora_rank=LORA, sm_count=4),
    )
    args.update(over)
    return args


def decode(max_seq_len=64, **over):
    return mla_jax.mla_decode(**inputs(**over), scale=0.1, max_seq_len=max_seq_len, sm_count=4,
                              backend="xla")


@pytest.mark.parametrize("over, message", [
    (dict(q=jnp.ones((B, LORA + ROPE))), r"q: got \[3, 48\], needed \[B, H"),
    (dict(q=jnp.ones((B, H, 40))), r"q: got \[3, 4, 40\], needed \[B, H, 48\]"),
    (dict(q=(jnp.ones((B, H, 30)), jnp.ones((B, H, ROPE)))), r"q_nope: got \[3, 4, 30\]"),
    (dict(q=(jnp.ones((B, H, LORA)), jnp.ones((B, H, 8)))), r"q_pe: got \[3, 4, 8\]"),
    (dict(q=jnp.ones((B, H, LORA + ROPE), jnp.int32)), "q dtype: got int32"),
    (dict(kv_cache=jnp.ones((B * PAGES, PAGE, LORA + ROPE), jnp.float16)),
     "kv_cache dtype: got float16, needed q's dtype float32"),
    (dict(kv_cache=jnp.ones((PAGE, LORA + ROPE))), r"kv_cache: got \[16, 48\]"),
    (dict(kv_cache=jnp.ones((B * PAGES, PAGE, LORA))), "buffer was reserved for kv_lora_rank=32"),
    (dict(block_table=jnp.zeros((B, PAGES), jnp.int16)), "block_table: got int16"),
    (dict(block_table=jnp.zeros((B + 1, PAGES), jnp.int32)), r"needed int32 \[3, pages_per_seq\]"),
    (dict(seq_lens=jnp.ones((B,), jnp.uint32)), r"seq_lens: got uint32\[3\], needed int32 \[3\]"),
    (dict(seq_lens=jnp.ones((B, 1), jnp.int32)), r"seq_lens: got int32\[3, 1\]"),
    (dict(logits_buffer=jnp.zeros((2, H, 8, LORA + 1))), "reserve with max_num_seqs >= 3"),
    (dict(logits_buffer=jnp.zeros((4, 8, 8, LORA + 1))), "4 heads, but the logits buffer"),
    (dict(logits_buffer=jnp.zeros((4, H, 8, LORA + 1), jnp.bfloat16)),
     r"logits_buffer: got bfloat16\[4, 4, 8, 33\]"),
])
def test_shape_and_dtype_errors(over, message):
    with pytest.raises(ValueError, match=message):
        decode(**over)


def test_max_seq_len_beyond_reservation_names_the_reservation_that_fits():
    # vLLM's rule: the split count grows with the length alone (2048 -> 4, 4096 -> 8).
    buf = mla_jax.reserve_logits_buffer(4, H, 2048, kv_lora_rank=LORA, sm_count=4,
                                        policy="vllm")
    with pytest.raises(ValueError, match="needs 8 KV splits .* holds 4; reserve it with "
                                         "max_model_len >= 4096 .*policy='vllm'"):
        mla_jax.mla_decode(**inputs(logits_buffer=buf), scale=0.1, max_seq_len=4096,
                           sm_count=4, policy="vllm", backend="xla")


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend must be"):
        mla_jax.mla_decode(**inputs(), scale=0.1, sm_count=4, backend="cuda")


def test_donated_buffer_cannot_be_used_again():
    args = inputs()
    mla_jax.mla_decode(**args, scale=0.1, max_seq_len=64, sm_count=4, backend="xla")
    assert args["logits_buffer"].is_deleted()
    with pytest.raises((RuntimeError, ValueError), match="deleted"):
        mla_jax.mla_decode(**args, scale=0.1, max_seq_len=64, sm_count=4, backend="xla")


def test_decode_without_gpu_asks_for_sm_count():
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("a GPU answers the question")
    with pytest.raises(ValueError, match="Pass sm_count"):
        mla_jax.mla_decode(**inputs(), scale=0.1, backend="xla")


def test_validate_flag_stops_bad_pages_before_the_kernel():
    args = inputs()
    bad = np.asarray(args["block_table"]).copy()
    bad[1, 0] = 10_000  # row 1's first page is live (seq_len >= 1)
    args["block_table"] = jnp.asarray(bad)
    with pytest.raises(ValueError, match=r"block_table\[1, 0\] = 10000 is outside \[0, 12\)"):
        mla_jax.mla_decode(**args, scale=0.1, max_seq_len=64, sm_count=4, backend="xla",
                           validate=True)
    assert not args["logits_buffer"].is_deleted()  # nothing ran, nothing was donated
