import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mla_jax
from mla_jax.splits import MAX_SPLITS_PER_SM, TOKENS_PER_SPLIT


def vllm_rule(max_seq_len: int, sm_count: int) -> int:
    """vLLM's TRITON_MLA split count, written independently with floats."""
    n = max(1, max_seq_len // 512)
    return int(min(2 ** int(np.ceil(np.log2(n))), 2 * sm_count))


LENGTHS = np.unique(
    np.concatenate(
        [
            np.arange(0, 70_000, 7),
            np.arange(0, 2**20 + 1, 509),
            [k * 512 + d for k in range(0, 2049, 1) for d in (-1, 0, 1) if k * 512 + d >= 0],
            [2**20],
        ]
    )
).astype(np.int64)


@pytest.mark.parametrize("sm_count", [1, 8, 66, 78, 114, 132])
def test_int_rule_matches_vllm(sm_count):
    assert TOKENS_PER_SPLIT == 512 and MAX_SPLITS_PER_SM == 2
    got = [mla_jax.num_kv_splits(int(n), sm_count) for n in LENGTHS]
    want = [vllm_rule(int(n), sm_count) for n in LENGTHS]
    assert got == want
    assert all(isinstance(g, int) for g in got)


@pytest.mark.parametrize("sm_count", [1, 66, 132])
def test_traced_rule_matches_int_rule(sm_count):
    traced = jax.jit(jax.vmap(lambda n: mla_jax.num_kv_splits(n, sm_count)))(
        jnp.asarray(LENGTHS, jnp.int32)
    )
    assert traced.dtype == jnp.int32
    np.testing.assert_array_equal(
        np.asarray(traced), [mla_jax.num_kv_splits(int(n), sm_count) for n in LENGTHS]
    )


@pytest.mark.parametrize("max_model_len", [1, 511, 512, 4096, 5000, 65536, 163840, 2**20])
@pytest.mark.parametrize("sm_count", [8, 132])
def test_reservation_covers_every_shorter_length(max_model_len, sm_count):
    buf_splits = mla_jax.num_kv_splits(max_model_len, sm_count)
    lengths = LENGTHS[max_model_len >= LENGTHS]
    assert max(mla_jax.num_kv_splits(int(n), sm_count) for n in lengths) <= buf_splits


def test_reserve_logits_buffer_shape_and_dtype():
    buf = mla_jax.reserve_logits_buffer(8, 16, 16384, sm_count=132, policy="vllm")
    assert buf.shape == (8, 16, 32, 513) and buf.data.dtype == jnp.float32
    buf = mla_jax.reserve_logits_buffer(
        2, 4, 1 << 20, kv_lora_rank=32, rope_dim=16, sm_count=4, policy="vllm"
    )
    assert buf.shape == (2, 4, 8, 33)
    # The default, occupancy: batch 1 fills 2 * 132 programs with 16-head tiles, one
    # split per 64 tokens, at most 128: min(256, next_pow2(16384 // 64), 128) = 128.
    buf = mla_jax.reserve_logits_buffer(8, 16, 16384, sm_count=132)
    assert buf.shape == (8, 16, 128, 513)
    # 64-head tiles: one program per SM, so batch 1 fills 132 with 2 tiles: 64 splits.
    assert mla_jax.reserve_logits_buffer(8, 128, 16384, sm_count=132).shape[2] == 64


def test_reserve_without_gpu_asks_for_sm_count():
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("a GPU answers the question")
    with pytest.raises(ValueError, match="Pass sm_count"):
        mla_jax.reserve_logits_buffer(8, 16, 16384)


@pytest.mark.parametrize("bad", [dict(max_num_seqs=0), dict(num_heads=-1), dict(max_model_len=0)])
def test_reserve_rejects_bad_sizes(bad):
    args = dict(max_num_seqs=2, num_heads=4, max_model_len=1024) | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        mla_jax.reserve_logits_buffer(**args, sm_count=4)


def test_split_rule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="sm_count"):
        mla_jax.num_kv_splits(1024, 0)
    with pytest.raises(ValueError, match="max_seq_len"):
        mla_jax.num_kv_splits(-1, 4)


def test_occupancy_policy_values():
    from mla_jax.splits import occupancy_kv_splits as occ

    # One wave of programs on 132 SMs (two 16-head programs fit an SM, one wider),
    # at most one split per 64 tokens, at most 128.
    assert occ(1, 16, 4096, 132) == 64
    assert occ(1, 16, 1024, 132) == 16
    assert occ(64, 16, 4096, 132) == 4
    assert occ(128, 16, 16384, 132) == 2
    assert occ(128, 128, 16384, 132) == 1  # 256 programs of 64-head tiles: over a wave
    assert occ(16, 128, 4096, 132) == 4
    assert occ(4, 128, 4096, 132) == 16
    assert occ(1, 128, 1 << 20, 132) == 64
    assert occ(1, 16, 1 << 20, 132) == 128  # MAX_OCCUPANCY_SPLITS
    assert occ(1, 16, 0, 132) == 1


@pytest.mark.parametrize("policy", ["vllm", "occupancy"])
@pytest.mark.parametrize("num_heads", [1, 16, 20, 128])
def test_max_kv_splits_bounds_every_length(policy, num_heads):
    from mla_jax.splits import kv_splits, max_kv_splits

    for batch in (1, 3, 64, 300):
        most = max_kv_splits(policy, batch=batch, num_heads=num_heads, sm_count=132)
        need = [
            kv_splits(policy, batch=batch, num_heads=num_heads, max_seq_len=int(n), sm_count=132)
            for n in [*LENGTHS, 1 << 30]
        ]
        assert max(need) == most  # reached at some length, never passed


@pytest.mark.parametrize("policy", ["vllm", "occupancy"])
@pytest.mark.parametrize("num_heads", [1, 16, 20, 128])
@pytest.mark.parametrize(
    "max_num_seqs, max_model_len, sm_count",
    [(128, 16384, 132), (7, 3000, 8), (300, 1 << 20, 132), (1, 600, 1)],
)
def test_reservation_covers_every_batch_and_length(
    policy, num_heads, max_num_seqs, max_model_len, sm_count
):
    from mla_jax.splits import kv_splits, reserved_splits

    buf = mla_jax.reserve_logits_buffer(
        max_num_seqs, num_heads, max_model_len, kv_lora_rank=16, sm_count=sm_count, policy=policy
    )
    assert buf.shape[2] == reserved_splits(
        policy, num_heads=num_heads, max_model_len=max_model_len, sm_count=sm_count
    )
    lengths = LENGTHS[max_model_len >= LENGTHS]
    for batch in range(1, max_num_seqs + 1):
        need = [
            kv_splits(
                policy, batch=batch, num_heads=num_heads, max_seq_len=int(n), sm_count=sm_count
            )
            for n in lengths[:: max(1, len(lengths) // 300)]
        ]
        need.append(
            kv_splits(
                policy,
                batch=batch,
                num_heads=num_heads,
                max_seq_len=max_model_len,
                sm_count=sm_count,
            )
        )
        assert max(need) <= buf.shape[2]
        assert all(n & (n - 1) == 0 or n == 2 * sm_count for n in need)  # powers of two or the cap


def test_occupancy_traced_equals_int():
    from mla_jax.splits import occupancy_kv_splits as occ

    for batch, heads in [(1, 16), (5, 128), (128, 16)]:
        traced = jax.jit(jax.vmap(lambda n, batch=batch, heads=heads: occ(batch, heads, n, 132)))(
            jnp.asarray(LENGTHS, jnp.int32)
        )
        np.testing.assert_array_equal(
            np.asarray(traced), [occ(batch, heads, int(n), 132) for n in LENGTHS]
        )


def test_policy_is_checked():
    from mla_jax.splits import kv_splits

    with pytest.raises(ValueError, match="policy must be"):
        kv_splits("sglang", batch=1, num_heads=16, max_seq_len=10, sm_count=132)
