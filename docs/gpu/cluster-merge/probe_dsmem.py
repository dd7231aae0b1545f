"""CPU probe: a Gluon kernel built as one CTA's program (``num_ctas=2`` here only to
declare the cluster) that writes into the other CTA's shared memory with inline PTX:
the dynamic shared memory's base (``global_smem``, Triton's one allocation), ``mapa``
to the other CTA, ``st.shared::cluster``, then ``barrier.cluster`` and a local read.
It builds for sm_90 (printed below); it was not run. Note what ``num_ctas=2`` costs:
every layout needs a ``cga_layout`` and Triton masks a store of a tensor replicated
over the cluster to CTA 0 (see the PTX it writes to /tmp/probe-xchg.ptx).

    python probe_dsmem.py
"""

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

RANK = gl.constexpr("mov.u32 $0, %cluster_ctarank;")
SYNC = gl.constexpr(
    "barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\nmov.u32 $0, 0;"
)
PUT = gl.constexpr("""{
.reg .u32 a;
.reg .u32 r;
mov.u32 a, global_smem;
mad.lo.u32 a, $1, 4, a;
mapa.shared::cluster.u32 r, a, $2;
st.shared::cluster.f32 [r], $3;
mov.u32 $0, 0;
}""")
GET = gl.constexpr("""{
.reg .u32 a;
mov.u32 a, global_smem;
mad.lo.u32 a, $1, 4, a;
ld.shared.f32 $0, [a];
}""")


@gluon.jit
def xchg(x_ptr, o_ptr, pid_ptr):
    pid = gl.program_id(0)
    rank = gl.inline_asm_elementwise(RANK, "=r,r", [pid], dtype=gl.int32, is_pure=True, pack=1)
    L: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0], cga_layout=[[0, 0]])
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, 128, layout=gl.SliceLayout(0, L))
    idx = rows[:, None] * 128 + cols[None, :]
    base = (pid * 2 + rank) * 8192
    x = gl.load(x_ptr + base + idx)
    buf = gl.allocate_shared_memory(
        gl.float32, [64, 128], gl.SwizzledSharedLayout(1, 1, 1, [1, 0], cga_layout=[[0, 0]])
    )
    buf.store(x * 0)  # keeps the 32 KB reserved
    gl.inline_asm_elementwise(SYNC, "=r,r", [pid], dtype=gl.int32, is_pure=False, pack=1)
    peer = 1 - rank
    gl.inline_asm_elementwise(
        PUT, "=r,r,r,f", [idx, peer + idx * 0, x], dtype=gl.int32, is_pure=False, pack=1
    )
    gl.inline_asm_elementwise(SYNC, "=r,r", [pid], dtype=gl.int32, is_pure=False, pack=1)
    y = gl.inline_asm_elementwise(GET, "=f,r", [idx], dtype=gl.float32, is_pure=False, pack=1)
    gl.store(o_ptr + base + idx, x + y)
    gl.store(pid_ptr + pid * 2 + rank, pid)


src = GluonASTSource(xchg, {"x_ptr": "*fp32", "o_ptr": "*fp32", "pid_ptr": "*i32"}, {}, {})
k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_ctas": 2})
print(
    "shared",
    k.metadata.shared,
    "scratch",
    k.metadata.global_scratch_size,
    "num_ctas",
    k.metadata.num_ctas,
    "cluster",
    getattr(k.metadata, "cluster_dims", None),
)
ptx = k.asm["ptx"]
with open("/tmp/probe-xchg.ptx", "w") as f:
    f.write(ptx)
