"""Zero-copy conversion between ``jax.Array`` and ``torch.Tensor`` through DLPack.

Both directions share memory (CPU and CUDA, every dtype both sides have, bfloat16
included). ``copy=None`` copies only where a copy is unavoidable, ``copy=False``
raises ``BufferError`` there instead, ``copy=True`` always copies.

Where ``to_jax`` cannot avoid a copy:

* strides that are not a dense buffer in some dimension order: a slice with a step
  or of part of an inner dimension, ``expand``/broadcast views. JAX imports only
  dense buffers, so the tensor goes through ``.contiguous()`` first.
* on CPU, a data pointer not 64-byte aligned (XLA:CPU's requirement), e.g. the view
  ``t[1:]`` of a float32 ``[n, 8]`` tensor (32 bytes in); torch allocates aligned.
* 64-bit dtypes (int64, uint64, float64, complex128) while ``jax_enable_x64`` is
  off: JAX narrows them to 32 bits.
* a ``device`` other than the tensor's. A CUDA tensor also needs a CUDA jaxlib;
  on a CPU-only one move it with ``t.cpu()`` (a copy) first.

``to_jax`` never copies a permuted (e.g. transposed) dense tensor: the array keeps
that layout and XLA relayouts it inside the first computation that needs its own.
``to_torch`` never needs a copy for an array on one device; a sharded array has no
single buffer, so export ``x.addressable_shards[i].data`` instead.

Ownership caveats of shared memory:

* writing the torch tensor in place changes a JAX array, which JAX assumes
  immutable (a jit may have cached or folded its old value): pass ``copy=True``
  when torch will write.
* donation: while a tensor exported from ``x`` is alive, JAX cannot donate ``x``; a
  jit with ``donate_argnums`` (``mla_decode``'s ``logits_buffer``) then writes a new
  buffer and leaves ``x`` alive on CPU, and raises ("Donation requested for buffer
  with external reference") on a GPU. ``del`` the tensor before the call.
* lifetime: each side keeps the shared buffer alive, so the tensor stays valid
  after ``x.delete()`` or ``x`` being donated, and the array after the tensor is
  freed. Donating an array imported from torch never writes torch's memory: JAX
  allocates the output and only the array is deleted.
* CUDA streams: DLPack's stream handshake makes the consumer's stream wait for the
  producer's pending work, so no host synchronisation is needed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

_NARROWED_WITHOUT_X64 = (torch.int64, torch.uint64, torch.float64, torch.complex128)


def to_torch(x: jax.Array, *, copy: bool | None = None) -> torch.Tensor:
    """The tensor sharing ``x``'s buffer (same shape, dtype and device).

    ``copy=True`` returns an independent tensor; ``None`` and ``False`` never copy.
    """
    if len(x.devices()) != 1:
        raise BufferError(
            f"to_torch needs a single-device array; x is on {x.devices()}: "
            "convert x.addressable_shards[i].data"
        )
    t = torch.from_dlpack(x)
    return t.clone() if copy else t


def _is_dense(t: torch.Tensor) -> bool:
    """Whether the strides cover one dense buffer in some dimension order."""
    expected = 1
    for stride, size in sorted((s, n) for s, n in zip(t.stride(), t.shape) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def to_jax(
    t: torch.Tensor, *, device: jax.Device | None = None, copy: bool | None = None
) -> jax.Array:
    """The array sharing ``t``'s memory where possible (see the module docstring).

    ``t`` is detached first (no copy). ``device`` defaults to ``t``'s device.
    Raises ``BufferError`` for ``copy=False`` when a copy is unavoidable.
    """
    t = t.detach()
    if copy:
        # Copied on torch's side: jax 0.10's from_dlpack(copy=True) shares on CPU.
        return jnp.from_dlpack(t.clone(memory_format=torch.contiguous_format), device=device)
    if not _is_dense(t):
        if copy is False:
            raise BufferError(
                f"to_jax: strides {t.stride()} of shape {list(t.shape)} are "
                "not a dense buffer; JAX needs a copy (t.contiguous())"
            )
        t = t.contiguous()
    if copy is False and t.dtype in _NARROWED_WITHOUT_X64 and not jax.config.read("jax_enable_x64"):
        raise BufferError(
            f"to_jax: {t.dtype} is narrowed to 32 bits (a copy) while jax_enable_x64 is off"
        )
    try:
        return jnp.from_dlpack(t, device=device, copy=copy)
    except ValueError as e:  # JAX's refusal to copy: misaligned data or another device
        if copy is False:
            raise BufferError(f"to_jax: {e}") from e
        raise
