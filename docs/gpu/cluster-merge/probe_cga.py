"""CPU probe: does Gluon (triton 3.6) lower a tensor tiled across a 2-CTA cluster
(``cga_layout``, ``num_ctas=2``)? ``sum``: a reduction over the CTA-split axis;
``convert``: a layout conversion that moves the split to another axis (the data
crosses CTAs, through distributed shared memory). Neither builds for sm_90 (see
README.md): the reduction asserts ``isReduceWithinCTA``, the conversion emits an
``nvvm.mapa`` whose result LLVM's verifier rejects (address space 3, where it wants
0 or 7).

    python probe_cga.py sum|convert
"""

import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource


@gluon.jit
def cross_cta(x_ptr, o_ptr, MODE: gl.constexpr):
    # x: [2, 64, 128]; CTA c holds slice c of axis 0.
    split0: gl.constexpr = gl.BlockedLayout(
        [1, 1, 4], [1, 1, 32], [1, 4, 1], [2, 1, 0], cga_layout=[[1, 0, 0]]
    )
    a = gl.arange(0, 2, layout=gl.SliceLayout(1, gl.SliceLayout(2, split0)))
    b = gl.arange(0, 64, layout=gl.SliceLayout(0, gl.SliceLayout(2, split0)))
    c = gl.arange(0, 128, layout=gl.SliceLayout(0, gl.SliceLayout(1, split0)))
    x = gl.load(x_ptr + a[:, None, None] * 8192 + b[None, :, None] * 128 + c[None, None, :])
    if MODE == "convert":
        split1: gl.constexpr = gl.BlockedLayout(
            [1, 1, 4], [1, 1, 32], [1, 4, 1], [2, 1, 0], cga_layout=[[0, 1, 0]]
        )
        x = gl.convert_layout(x, split1)
    s = gl.sum(x, axis=0)
    out: gl.constexpr = s.type.layout
    b2 = gl.arange(0, 64, layout=gl.SliceLayout(1, out))
    c2 = gl.arange(0, 128, layout=gl.SliceLayout(0, out))
    gl.store(o_ptr + b2[:, None] * 128 + c2[None, :], s)


if __name__ == "__main__":
    mode = sys.argv[1]
    source = GluonASTSource(
        cross_cta, {"x_ptr": "*fp32", "o_ptr": "*fp32", "MODE": "constexpr"}, {"MODE": mode}, {}
    )
    k = triton.compile(
        source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_ctas": 2}
    )
    print("built:", k.metadata.name, "shared", k.metadata.shared)
