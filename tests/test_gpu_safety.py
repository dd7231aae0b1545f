"""The input semantics of ``tests/test_safety.py`` through the Triton kernels on a GPU:
lengths and pages clamped into their arrays, NaN never read as an empty row."""

import jax.numpy as jnp
import pytest

import mla_jax
from tests.cases import TINY
from tests.test_safety import CAPACITY, HEADS, SM, check, hazards


@pytest.mark.gpu
@pytest.mark.parametrize("max_seq_len", [None, CAPACITY])
@pytest.mark.parametrize("policy", ["vllm", "occupancy"])
def test_triton_keeps_the_documented_semantics(max_seq_len, policy):
    case, (want_out, want_lse) = hazards()
    buf = mla_jax.reserve_logits_buffer(
        len(case.seq_lens),
        HEADS,
        4 * CAPACITY,
        kv_lora_rank=TINY[0],
        rope_dim=TINY[1],
        sm_count=SM,
        policy=policy,
    )
    out, lse, _ = mla_jax.mla_decode(
        *(jnp.asarray(a) for a in case[:4]),
        buf,
        scale=case.scale,
        max_seq_len=max_seq_len,
        backend="triton",
    )
    check(out, lse, want_out, want_lse, atol=5e-5)
