"""Picks the custom call mla_jax's kernels launch through in this process, for A/Bs:
``use("ffi")`` leaves the library's choice (its FFI handler, which launches the
cubin), ``use("jaxlib")`` lowers every launch to jaxlib's ``triton_kernel_call``, as
on a machine without a C++ compiler. Clears JAX's caches, so a module lowered before
is lowered again."""

import jax

from mla_jax import _launch

LIBRARY_CHOICE = _launch.kernel_call_target


def use(route: str) -> None:
    if route == "jaxlib":
        _launch.kernel_call_target = lambda: _launch.JAXLIB_TARGET
    elif route == "ffi":
        _launch.kernel_call_target = LIBRARY_CHOICE
        if LIBRARY_CHOICE() != _launch.FFI_TARGET:
            raise SystemExit("the FFI handler did not build here (see the warning)")
    else:
        raise SystemExit(f"route {route!r}: ffi or jaxlib")
    jax.clear_caches()
