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
    # Also at 4096 tokens, where a static step at batch 1 plans 16-head tiles at 32
    # splits: the reservation holds a run-time step's 64.
    assert mla_jax.reserve_logits_buffer(8, 128, 4096, sm_count=132).shape[2] == 64


def test_reserve_without_gpu_plans_for_132_sms():
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("a GPU answers the question")
    planned = mla_jax.reserve_logits_buffer(8, 16, 16384)
    assert (
        planned.describe() == mla_jax.reserve_logits_buffer(8, 16, 16384, sm_count=132).describe()
    )


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
    # A static length whose batch holds at most SMALL_BATCH_TOKENS tokens plans for
    # 16-head tiles (two programs an SM, 8 tiles a row at H=128): 264 // 8 -> 32.
    assert occ(1, 128, 4096, 132) == 32
    assert occ(1, 128, 1024, 132) == 16  # one split per 64 tokens
    assert occ(2, 128, 2048, 132) == 16
    assert occ(4, 128, 1024, 132) == 8
    assert occ(1, 128, 4097, 132) == 64  # one token past: 64-head tiles
    assert occ(2, 128, 4096, 132) == 32


def test_small_batch_tile_rule():
    from mla_jax._tiling import SMALL_BATCH_TOKENS, head_tile, head_tiles, programs_per_sm

    assert SMALL_BATCH_TOKENS == 4096
    for heads, default in [(1, 16), (16, 16), (20, 32), (32, 32), (33, 64), (128, 64)]:
        assert head_tile(heads) == default  # length known only at run time
        assert head_tile(heads, SMALL_BATCH_TOKENS + 1) == default
        assert head_tile(heads, SMALL_BATCH_TOKENS) == 16
        assert head_tile(heads, 0) == 16
    assert (head_tiles(128), programs_per_sm(128)) == (2, 1)
    assert (head_tiles(128, 4096), programs_per_sm(128, 4096)) == (8, 2)


@pytest.mark.parametrize("heads", [16, 32, 128])
def test_small_batch_tile_only_with_a_static_length(heads):
    """An array length (run time) keeps the default tile's count; an int length the
    tile its batch's tokens pick; the two differ only where that tile is 16 heads."""
    from mla_jax._tiling import head_tile
    from mla_jax.splits import occupancy_kv_splits as occ

    for batch, length in [(1, 1024), (1, 4096), (2, 2048), (4, 1024), (3, 1365), (1, 8192)]:
        static = occ(batch, heads, length, 132)
        run_time = int(occ(batch, heads, jnp.int32(length), 132))
        if head_tile(heads, batch * length) == head_tile(heads):
            assert static == run_time
        else:
            assert static <= run_time
    assert (occ(1, 128, 4096, 132), int(occ(1, 128, jnp.int32(4096), 132))) == (32, 64)


@pytest.mark.parametrize("sm_count", [1, 7, 66, 78, 114, 132, 264])
def test_small_batch_tile_never_asks_for_more_splits(sm_count):
    """At every shape, the 16-head grid's count is at most the default tile's: what
    lets a reservation sized with the default tile hold every static step."""
    from mla_jax.splits import _occupancy_splits

    for heads in [*range(1, 80), 96, 127, 128, 129, 192, 256]:
        for batch in [1, 2, 3, 4, 5, 8, 13, 64, 300]:
            for n in [0, 1, 63, 64, 100, 1024, 1365, 2048, 4096, 1 << 20]:
                narrow = _occupancy_splits(batch, heads, n, sm_count, batch_tokens=0)
                default = _occupancy_splits(batch, heads, n, sm_count, batch_tokens=None)
                assert narrow <= default, (heads, batch, n)


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
@pytest.mark.parametrize("num_heads", [1, 16, 20, 64, 128])
@pytest.mark.parametrize(
    "max_num_seqs, max_model_len, sm_count",
    [(128, 16384, 132), (7, 3000, 8), (300, 1 << 20, 132), (1, 600, 1), (8, 4096, 132)],
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
        # A length known only at run time (the default tile) fits too, up to the
        # reservation's own length.
        run_time = kv_splits(
            policy,
            batch=batch,
            num_heads=num_heads,
            max_seq_len=jnp.int32(max_model_len),
            sm_count=sm_count,
        )
        assert int(run_time) <= buf.shape[2]
    if policy == "occupancy":  # reached by a run-time step at batch 1
        assert buf.shape[2] == int(
            kv_splits(
                policy,
                batch=1,
                num_heads=num_heads,
                max_seq_len=jnp.int32(max_model_len),
                sm_count=sm_count,
            )
        )


def test_occupancy_traced_equals_int():
    """A traced length gives the int rule's count with the default tile: the int
    rule's own count wherever the batch holds more than SMALL_BATCH_TOKENS tokens."""
    from mla_jax._tiling import SMALL_BATCH_TOKENS
    from mla_jax.splits import _occupancy_splits
    from mla_jax.splits import occupancy_kv_splits as occ

    for batch, heads in [(1, 16), (5, 128), (128, 16), (1, 128)]:
        traced = jax.jit(jax.vmap(lambda n, batch=batch, heads=heads: occ(batch, heads, n, 132)))(
            jnp.asarray(LENGTHS, jnp.int32)
        )
        np.testing.assert_array_equal(
            np.asarray(traced),
            [_occupancy_splits(batch, heads, int(n), 132, batch_tokens=None) for n in LENGTHS],
        )
        large = batch * LENGTHS > SMALL_BATCH_TOKENS
        np.testing.assert_array_equal(
            np.asarray(traced)[large], [occ(batch, heads, int(n), 132) for n in LENGTHS[large]]
        )


def test_policy_is_checked():
    from mla_jax.splits import kv_splits

    with pytest.raises(ValueError, match="policy must be"):
        kv_splits("sglang", batch=1, num_heads=16, max_seq_len=10, sm_count=132)
