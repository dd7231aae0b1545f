"""The PyTorch references against the float64 numpy one, and their partials against JAX's."""

import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from mla_jax import mla_decode, reserve_logits_buffer
from mla_jax.reference import mla_decode_reference_np
from mla_jax.splits import num_kv_splits
from mla_jax.tools.problem import make_problem
from mla_jax.torch_ref import (
    mla_decode_dense_torch,
    mla_decode_split_kv_torch,
    split_kv_stage1,
    split_kv_stage2,
)

# Ragged, with empty rows, rows shorter than a page and than the split count, and
# one past 2048 tokens so the split rule gives 4 splits.
LENGTHS = [2100, 3, 0, 513, 1, 64, 0]
SM_COUNT = 132
# Relative error bound on out (rounded to the input dtype at the end) per dtype.
OUT_RTOL = {"float32": 1e-5, "float16": 1e-3}


def torch_inputs(p):
    return [
        torch.from_numpy(np.ascontiguousarray(a))
        for a in (p.q, p.kv_cache, p.block_table, p.seq_lens)
    ]


def assert_matches_f64(out, lse, p, dtype):
    want_out, want_lse = mla_decode_reference_np(
        p.q, p.kv_cache, p.block_table, p.seq_lens, scale=p.scale, kv_lora_rank=p.kv_lora_rank
    )
    assert out.dtype == getattr(torch, dtype) and lse.dtype == torch.float32
    got = out.double().numpy()
    rel = np.linalg.norm(got - want_out) / np.linalg.norm(want_out)
    assert rel < OUT_RTOL[dtype], rel
    empty = p.seq_lens == 0
    assert (got[empty] == 0).all() and np.isneginf(lse.numpy()[empty]).all()
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_dense_and_split_kv_match_float64(dtype, page_size):
    p = make_problem(
        batch=len(LENGTHS),
        num_heads=8,
        seq_lens=LENGTHS,
        page_size=page_size,
        dtype=dtype,
        seed=page_size,
    )
    args = torch_inputs(p)
    assert_matches_f64(
        *mla_decode_dense_torch(*args, scale=p.scale, kv_lora_rank=p.kv_lora_rank), p, dtype
    )
    splits = num_kv_splits(p.max_seq_len, SM_COUNT)
    assert splits == 4
    for k in (splits, 1, 3, 16):  # 3 and 16: not the rule's, the partition still holds
        out, lse = mla_decode_split_kv_torch(
            *args, scale=p.scale, kv_lora_rank=p.kv_lora_rank, num_kv_splits=k
        )
        assert_matches_f64(out, lse, p, dtype)


def test_unshuffled_table_and_spare_pages():
    p = make_problem(
        batch=3,
        num_heads=4,
        seq_lens=[40, 0, 17],
        page_size=16,
        dtype="float32",
        seed=7,
        shuffle=False,
        extra_pages=0,
    )
    assert p.kv_cache.shape[0] == 3 + 2  # exactly the pages the rows read
    assert_matches_f64(
        *mla_decode_dense_torch(*torch_inputs(p), scale=p.scale, kv_lora_rank=p.kv_lora_rank),
        p,
        "float32",
    )


def live_slots(seq_lens, k):
    """bool [B, k]: split s of row b holds tokens (s * cdiv(len, k) < len)."""
    per = -(-seq_lens // k)
    return np.arange(k)[None, :] * per[:, None] < seq_lens[:, None]


@pytest.mark.parametrize("dtype, rtol", [("float32", 1e-5), ("float16", 2e-3)])
def test_stage1_partials_match_jax_xla_buffer(dtype, rtol):
    p = make_problem(
        batch=len(LENGTHS), num_heads=16, seq_lens=LENGTHS, page_size=16, dtype=dtype, seed=11
    )
    buf = reserve_logits_buffer(8, 16, 4096, sm_count=SM_COUNT, policy="vllm")
    _, _, buf = mla_decode(
        jnp.asarray(p.q),
        jnp.asarray(p.kv_cache),
        jnp.asarray(p.block_table),
        jnp.asarray(p.seq_lens),
        buf,
        scale=p.scale,
        max_seq_len=p.max_seq_len,
        backend="xla",
    )
    k = num_kv_splits(p.max_seq_len, SM_COUNT)
    partials = split_kv_stage1(
        *torch_inputs(p), scale=p.scale, kv_lora_rank=p.kv_lora_rank, num_kv_splits=k
    ).numpy()
    assert partials.shape == (len(LENGTHS), 16, k, p.kv_lora_rank + 1)
    live = live_slots(p.seq_lens, k)
    assert live.sum() > len(LENGTHS)  # several rows really are split
    jax_slots = np.asarray(buf.data)[: len(LENGTHS), :, :k].transpose(0, 2, 1, 3)[live]
    torch_slots = partials.transpose(0, 2, 1, 3)[live]  # [live slots, H, lora + 1]
    np.testing.assert_allclose(torch_slots[..., -1], jax_slots[..., -1], rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(
        torch_slots[..., :-1],
        jax_slots[..., :-1],
        rtol=rtol,
        atol=rtol * np.abs(jax_slots[..., :-1]).max(),
    )


def test_stage2_never_reads_dead_slots():
    p = make_problem(
        batch=len(LENGTHS), num_heads=4, seq_lens=LENGTHS, page_size=16, dtype="float32", seed=3
    )
    k = 8
    partials = split_kv_stage1(
        *torch_inputs(p), scale=p.scale, kv_lora_rank=p.kv_lora_rank, num_kv_splits=k
    )
    # As the Triton kernels leave them: slots without tokens are never written.
    dead = torch.from_numpy(~live_slots(p.seq_lens, k))[:, None, :, None]
    poisoned = partials.masked_fill(dead, float("nan"))
    seq_lens = torch.from_numpy(p.seq_lens)
    want = split_kv_stage2(partials, seq_lens, num_kv_splits=k)
    got = split_kv_stage2(poisoned, seq_lens, num_kv_splits=k)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_import_mla_jax_does_not_import_torch():
    code = (
        "import sys, mla_jax, mla_jax.tools.compare, mla_jax.tools.problem; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
