"""The custom call every kernel of the ``"triton"`` backend lowers to, apart from the
launch (``mla_jax._launch``, which needs Triton and jax-triton) so that the public API
names it without them."""

KERNEL_CALL_TARGET = "triton_kernel_call_ffi"
"""jaxlib's typed-FFI Triton call, one a kernel launch. Count them in a compiled
module's HLO to see that XLA kept every kernel of a chain of calls: it deletes a
custom call whose outputs nobody reads."""
