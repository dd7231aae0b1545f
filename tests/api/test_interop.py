"""DLPack conversion: values, dtypes, shapes, and no copy where none should happen."""

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from mla_jax import mla_decode, reserve_logits_buffer
from mla_jax.interop import to_jax, to_torch
from mla_jax.tools.problem import make_problem

DTYPES = [
    ("float32", torch.float32),
    ("bfloat16", torch.bfloat16),
    ("float16", torch.float16),
    ("int32", torch.int32),
    ("int8", torch.int8),
    ("uint8", torch.uint8),
    ("bool", torch.bool),
]
SHAPES = [(), (7,), (3, 4, 5), (0, 3), (2, 1, 576)]


def jax_random(shape, dtype, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape) * 10
    return jnp.asarray(x > 0 if dtype == "bool" else x.astype(np.float32)).astype(dtype)


def pointer(x: jax.Array) -> int:
    return x.unsafe_buffer_pointer()


def same_values(x: jax.Array, t: torch.Tensor) -> bool:
    """Compares through float64 (bool/int/bf16 included), shapes too."""
    return tuple(t.shape) == x.shape and np.array_equal(
        t.to(torch.float64).cpu().numpy(), np.asarray(x.astype(jnp.float32)).astype(np.float64)
    )


@pytest.mark.parametrize("dtype, torch_dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_without_copy(dtype, torch_dtype, shape):
    x = jax_random(shape, dtype)
    t = to_torch(x)
    assert t.dtype == torch_dtype and same_values(x, t)
    y = to_jax(t)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert np.array_equal(np.asarray(y), np.asarray(x))
    if x.size:  # an empty array has no buffer to share
        assert t.data_ptr() == pointer(x) == pointer(y)


@pytest.mark.parametrize("dtype, torch_dtype", DTYPES)
def test_torch_tensor_to_jax_without_copy(dtype, torch_dtype):
    t = to_torch(jax_random((4, 9), dtype, seed=1)).clone()  # torch-owned memory
    y = to_jax(t)
    assert pointer(y) == t.data_ptr() and same_values(y, t)


def test_shared_memory_is_aliased_both_ways():
    t = torch.randn(16)
    y = to_jax(t)
    t += 1  # the caveat the docstring names: the JAX array changes too
    assert same_values(y, t)


def test_transposed_tensor_is_not_copied():
    t = torch.randn(6, 10).t()
    y = to_jax(t, copy=False)
    assert pointer(y) == t.data_ptr() and same_values(y, t)
    assert same_values(jax.jit(lambda a: a * 2)(y), t * 2)


@pytest.mark.parametrize(
    "view",
    [
        lambda t: t[:, ::2],  # step
        lambda t: t[:, 1:5],  # part of the inner dimension
        lambda t: t[:1].expand(8, 8),  # broadcast
        lambda t: t[1:],  # 32 bytes in: not 64-byte aligned for XLA:CPU
    ],
    ids=["step", "inner-slice", "expand", "misaligned"],
)
def test_views_that_need_a_copy(view):
    t = view(torch.randn(8, 8))
    y = to_jax(t)
    assert pointer(y) != t.data_ptr() and same_values(y, t)
    with pytest.raises(BufferError):
        to_jax(t, copy=False)


def test_int64_is_narrowed_by_a_copy_without_x64():
    t = torch.arange(10, dtype=torch.int64) * 3
    y = to_jax(t)
    assert y.dtype == jnp.int32 and same_values(y, t)
    with pytest.raises(BufferError):
        to_jax(t, copy=False)


def test_copy_true_copies():
    x = jax_random((5, 6), "bfloat16")
    t = to_torch(x, copy=True)
    assert t.data_ptr() != pointer(x) and same_values(x, t)
    u = torch.randn(5, 6)
    y = to_jax(u, copy=True)
    assert pointer(y) != u.data_ptr() and same_values(y, u)


def test_requires_grad_tensor_is_detached_not_copied():
    t = torch.randn(3, 4, requires_grad=True)
    assert pointer(to_jax(t, copy=False)) == t.data_ptr()


def test_lifetimes():
    x = jax_random((1 << 16,), "float32", seed=2)
    t = to_torch(x)
    want = np.asarray(x).copy()
    x.delete()
    assert np.array_equal(t.cpu().numpy(), want)  # the tensor keeps the buffer alive
    u = torch.randn(1 << 16)
    y, want = to_jax(u), u.numpy().copy()
    del u
    gc.collect()
    assert np.array_equal(np.asarray(y), want)  # and the array the torch storage


def test_torch_view_of_logits_buffer_blocks_donation():
    p = make_problem(
        batch=2,
        num_heads=4,
        seq_lens=[40, 0],
        page_size=16,
        dtype="float32",
        kv_lora_rank=32,
        rope_dim=16,
        seed=5,
    ).as_jax()
    step = lambda buf: mla_decode(
        p.q,
        p.kv_cache,
        p.block_table,
        p.seq_lens,
        buf,
        scale=p.scale,
        max_seq_len=40,
        backend="xla",
    )[2]
    buf = reserve_logits_buffer(2, 4, 64, kv_lora_rank=32, rope_dim=16, sm_count=4)
    ptr = pointer(buf.data)
    view = to_torch(buf.data)
    if buf.data.devices().pop().platform == "gpu":
        # The GPU client refuses outright instead of copying.
        with pytest.raises(
            Exception, match="Donation requested for buffer with external reference"
        ):
            step(buf)
        del view
        new = step(buf)
        assert buf.data.is_deleted() and pointer(new.data) == ptr
        return
    new = step(buf)  # XLA:CPU cannot donate while the tensor holds the buffer: a new one
    assert not buf.data.is_deleted() and pointer(new.data) != ptr
    del view
    new_ptr = pointer(new.data)
    newer = step(new)  # nothing holds it now: updated in place
    assert new.data.is_deleted() and pointer(newer.data) == new_ptr


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_cuda_round_trip_without_copy(dtype):
    x = jax_random((64, 576), dtype)  # on the GPU
    t = to_torch(x)
    assert t.is_cuda and t.data_ptr() == pointer(x) and same_values(x, t)
    doubled = t * 2  # written on torch's stream; DLPack orders JAX after it
    y = to_jax(doubled, copy=False)
    assert pointer(y) == doubled.data_ptr() and same_values(y, doubled)
