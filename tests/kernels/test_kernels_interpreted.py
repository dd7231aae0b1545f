"""The Triton kernels under the Triton interpreter (fp16/fp32) vs the float64 reference."""

import numpy as np
import pytest

from mla_jax import kernels
from mla_jax.reference import mla_decode_reference_np
from tests.cases import (
    DEEPSEEK,
    TINY,
    edge_lengths,
    pack_bf16_partials,
    random_case,
    tolerance,
    unpack_bf16_partials,
)
from tests.interpreted import run

POISON = np.nan
pytestmark = pytest.mark.interpreter


def check(
    pool, case, *, num_splits, grid_splits, buffer_rows, dtype, config=None, batch_tokens=None
):
    heads = case.q.shape[1]
    buffer = np.full(
        (buffer_rows, heads, grid_splits + 1, case.kv_lora_rank + 1), POISON, np.float32
    )
    out, lse, buf = pool.apply(
        run,
        (case.q, case.kv_cache, case.block_table, case.seq_lens, buffer),
        dict(
            scale=case.scale,
            num_splits=num_splits,
            grid_splits=grid_splits,
            config=config,
            batch_tokens=batch_tokens,
        ),
    )
    ref_out, ref_lse = mla_decode_reference_np(
        case.q,
        case.kv_cache,
        case.block_table,
        case.seq_lens,
        scale=case.scale,
        kv_lora_rank=case.kv_lora_rank,
    )
    np.testing.assert_allclose(out, ref_out, atol=tolerance(dtype), rtol=0)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)
    empty = case.seq_lens == 0
    assert np.all(out[empty] == 0) and np.all(lse[empty] == -np.inf)
    # Only live rows and the first num_splits splits may be written; none with one
    # split in the grid (stage 1 writes the output itself).
    batch = case.q.shape[0]
    assert np.isnan(buf[batch:]).all() and np.isnan(buf[:, :, num_splits:]).all()
    assert grid_splits > 1 or np.isnan(buf).all()
    return buf


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_tiny_dims_edge_lengths(pool, dtype, page_size, rng):
    pages = max(2, 1100 // page_size // 8)
    capacity = pages * page_size
    for heads, num_splits, grid_splits in [(4, 1, 1), (4, 1, 3), (16, 4, 6), (20, 3, 5)]:
        lens = edge_lengths(page_size, capacity)
        case = random_case(
            rng,
            batch=len(lens),
            heads=heads,
            dims=TINY,
            page_size=page_size,
            pages_per_seq=pages,
            dtype=dtype,
            seq_lens=rng.permutation(lens),
        )
        check(
            pool,
            case,
            num_splits=num_splits,
            grid_splits=grid_splits,
            buffer_rows=len(lens) + 3,
            dtype=dtype,
        )


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("heads", [16, 128])
def test_deepseek_dims(pool, dtype, heads, rng):
    case = random_case(
        rng,
        batch=3,
        heads=heads,
        dims=DEEPSEEK,
        page_size=64,
        pages_per_seq=20,
        dtype=dtype,
        seq_lens=[0, int(rng.integers(1, 1280)), 1280],
    )
    check(pool, case, num_splits=2, grid_splits=2, buffer_rows=4, dtype=dtype)


@pytest.mark.parametrize(
    "dtype, batch, length, want_splits", [(np.float16, 1, 2048, 32), (np.float32, 2, 1024, 16)]
)
def test_small_batch_tile_at_h128(pool, dtype, batch, length, want_splits, rng):
    """What a static step at B * L <= 4096 tokens launches at H=128: 16-head tiles (8
    a row) on the occupancy rule's split grid (32 splits at batch 1 from 2048 tokens
    on, 1/128/4096 included); the second row of a batch of two shorter than the first."""
    from mla_jax.splits import occupancy_kv_splits

    heads, page = 128, 64
    splits = occupancy_kv_splits(batch, heads, length, 132)
    assert splits == want_splits
    assert kernels.stage1_config(heads, batch_tokens=batch * length)["BLOCK_H"] == 16
    case = random_case(
        rng,
        batch=batch,
        heads=heads,
        dims=DEEPSEEK,
        page_size=page,
        pages_per_seq=length // page,
        dtype=dtype,
        seq_lens=[length, int(rng.integers(1, length))][:batch],
    )
    check(
        pool,
        case,
        num_splits=splits,
        grid_splits=splits,
        buffer_rows=batch + 1,
        dtype=dtype,
        batch_tokens=batch * length,
    )


@pytest.mark.parametrize(
    "num_splits", [kernels.MAX_SPLIT_BLOCK + 1, 2 * kernels.MAX_SPLIT_BLOCK + 7]
)
def test_many_splits_merge_in_blocks(pool, num_splits, rng):
    """Stage 2 merges MAX_SPLIT_BLOCK splits at a time: counts past one block, rows
    whose live splits end inside a block."""
    case = random_case(
        rng,
        batch=3,
        heads=4,
        dims=TINY,
        page_size=4,
        pages_per_seq=50,
        dtype=np.float32,
        seq_lens=[200, int(rng.integers(1, 200)), int(rng.integers(1, num_splits))],
    )
    check(
        pool,
        case,
        num_splits=num_splits,
        grid_splits=num_splits + 3,
        buffer_rows=4,
        dtype=np.float32,
    )


def test_stage2_head_blocks(pool, rng):
    """A large batch with few splits: stage 2 merges several heads a program, the last
    block of heads partly past H (20 heads in blocks of 16), empty rows among them."""
    batch, heads, splits = 128, 20, 3
    tiles = kernels.stage2_tiling(splits, heads, TINY[0], batch)
    assert tiles["HEAD_BLOCK"] > 1 and heads % tiles["HEAD_BLOCK"], tiles
    lens = rng.integers(1, 65, batch)
    lens[::17] = 0
    case = random_case(
        rng, batch=batch, heads=heads, dims=TINY, page_size=16, pages_per_seq=4, seq_lens=lens
    )
    check(
        pool, case, num_splits=splits, grid_splits=splits, buffer_rows=batch + 2, dtype=np.float32
    )


def test_random_batches(pool, rng):
    for _ in range(4):
        batch = int(rng.integers(1, 7))
        page_size = int(rng.choice([1, 3, 16, 32]))
        case = random_case(
            rng,
            batch=batch,
            heads=int(rng.integers(1, 40)),
            dims=TINY,
            page_size=page_size,
            pages_per_seq=int(rng.integers(1, 200 // page_size + 2)),
        )
        splits = int(rng.integers(1, 9))
        check(
            pool,
            case,
            num_splits=splits,
            grid_splits=splits,
            buffer_rows=batch + 1,
            dtype=np.float32,
        )


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_fp8_cache(pool, dtype, rng):
    import ml_dtypes

    case = random_case(
        rng,
        batch=3,
        heads=16,
        dims=TINY,
        page_size=16,
        pages_per_seq=40,
        dtype=dtype,
        seq_lens=[0, 300, 640],
    )
    kv_scale = 0.02
    kv8 = np.clip(case.kv_cache.astype(np.float32) / kv_scale, -448, 448).astype(
        ml_dtypes.float8_e4m3fn
    )
    dequant = kv8.astype(np.float64) * kv_scale
    buffer = np.full((4, 16, 4, TINY[0] + 1), POISON, np.float32)
    out, lse, _ = pool.apply(
        run,
        (case.q, kv8, case.block_table, case.seq_lens, buffer),
        dict(scale=case.scale, num_splits=3, kv_scale=kv_scale),
    )
    ref_out, ref_lse = mla_decode_reference_np(
        case.q, dequant, case.block_table, case.seq_lens, scale=case.scale, kv_lora_rank=TINY[0]
    )
    np.testing.assert_allclose(out, ref_out, atol=tolerance(dtype) * 3, rtol=0)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=1e-4)


def test_stage1_stores_bf16_partials_two_to_a_slot(pool, rng):
    """Stage 1 with ``BF16_PARTIALS`` (``kernels.bf16_partials``; an fp16 q here, the
    interpreter's bf16 dots being wrong): each live split's partial is the float32
    build's in bf16, two to a float32 slot from the slot's start, its lse in
    slot ``LORA`` the float32 build's; the rest of the slot and dead splits unwritten;
    both stages' output within the bf16 rounding of the float64 reference."""
    lora, grid, splits = 512, 5, 4
    case = random_case(
        rng,
        batch=3,
        heads=16,
        dims=DEEPSEEK,
        page_size=64,
        pages_per_seq=4,
        dtype=np.float16,
        seq_lens=[0, int(rng.integers(1, 256)), 256],
    )
    buffer = np.full((4, 16, grid, lora + 1), POISON, np.float32)
    args = (case.q, case.kv_cache, case.block_table, case.seq_lens, buffer)
    kw = dict(scale=case.scale, num_splits=splits, grid_splits=grid)
    (out32, _, buf32), (out, lse, buf) = (
        pool.apply(run, args, kw | dict(bf16_partials=half)) for half in (False, True)
    )
    live = ~np.isnan(buf32[..., lora])  # [rows, H, S]
    assert live[1:3].any() and not live[0].any() and not live[3].any()
    halves = unpack_bf16_partials(buf)[..., :lora][live]
    want = buf32[..., :lora][live]
    # One bf16 ulp at most (2^-7 of the value): the interpreter's conversion rounds
    # toward zero, the GPU's (cvt.rn) to nearest.
    err = np.abs(halves - want)
    assert (err <= 2**-7 * np.abs(want)).all() and err.max() > 0
    np.testing.assert_array_equal(buf[..., lora][live], buf32[..., lora][live])
    assert np.isnan(buf[..., lora // 2 : lora][live]).all() and np.isnan(buf[~live]).all()
    ref_out, ref_lse = mla_decode_reference_np(
        case.q,
        case.kv_cache,
        case.block_table,
        case.seq_lens,
        scale=case.scale,
        kv_lora_rank=lora,
    )
    # bf16 partials round to 2^-8 of their size (|out| < 4 here) before the merge.
    np.testing.assert_allclose(out, ref_out, atol=tolerance(np.float16) + 4 * 2**-8, rtol=0)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)
    assert np.abs(out - out32).max() > 0  # the bf16 build did round


@pytest.mark.parametrize("bf16_partials", [False, True])
def test_stage2_merges_float32_and_bf16_partials(pool, bf16_partials, rng):
    """Stage 2 alone on partials written as stage 1 leaves them, float32 or bf16 two to
    a float32 slot (``BF16_PARTIALS``, ``kernels.bf16_partials``), against a
    float64 merge of the same values: live splits only (dead slots NaN), an empty row,
    rows whose live splits end early."""
    import ml_dtypes

    from tests.interpreted import run_stage2

    batch, heads, lora, grid, splits = 5, 6, 32, 5, 4
    lens = np.array([0, 1, 3, 40, 64], np.int32)
    part = rng.standard_normal((batch, heads, grid, lora)) * 3
    lse = rng.standard_normal((batch, heads, grid)) * 4
    if bf16_partials:
        part = part.astype(ml_dtypes.bfloat16).astype(np.float64)  # what stage 1 stores
    per = np.maximum(-(-lens // splits), 1)
    live = np.arange(grid)[None, :] * per[:, None] < lens[:, None]  # [B, S]
    buffer = np.full((batch, heads, grid, lora + 1), np.nan, np.float32)
    for b, s in zip(*np.nonzero(live), strict=True):
        if bf16_partials:
            buffer[b, :, s, : lora // 2] = pack_bf16_partials(part[b, :, s])
        else:
            buffer[b, :, s, :lora] = part[b, :, s]
        buffer[b, :, s, lora] = lse[b, :, s]
    out, out_lse = pool.apply(
        run_stage2, (buffer, lens, splits), dict(grid_splits=grid, bf16_partials=bf16_partials)
    )
    for b in range(batch):
        w = np.where(live[b][None, :], lse[b], -np.inf)  # [H, S]
        if not live[b].any():
            assert np.all(out[b] == 0) and np.all(out_lse[b] == -np.inf)
            continue
        m = w.max(1, keepdims=True)
        e = np.exp(w - m)
        want = (e[:, :, None] * np.nan_to_num(part[b])).sum(1) / e.sum(1, keepdims=True)
        np.testing.assert_allclose(out[b], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out_lse[b], m[:, 0] + np.log(e.sum(1)), rtol=1e-6, atol=1e-5)
