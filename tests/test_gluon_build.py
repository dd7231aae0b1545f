"""The Gluon stage 1 kernels (``mla_jax._gluon_kernels``: ``mla_decode_stage1_gluon``
and the seesaw ``mla_decode_stage1_gluon_seesaw``) build for sm_90 on a CPU, and each
build is what its design needs: warpgroup MMAs (HGMMA), cp.async loads, no register
spills (no local memory), shared memory within one SM's 227 KB, no global scratch
(JAX's launch passes none). The seesaw build is also checked for its schedule: two
partitions of one warpgroup each, no CTA-wide barrier in the main loops (only
128-thread named barriers and mbarriers), and a warpgroup MMA left in flight across an
mbarrier wait (the overlap the schedule exists for).

The build is made in a child process with its own Triton cache, so it is compiled
here rather than read from a cache another test filled."""

import itertools
import json
import os
import re
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import pytest

SM90_SHARED_BYTES = 232448  # 227 KB: the most one block may ask for on an H100/H200


KERNELS = ("mla_decode_stage1_gluon", "mla_decode_stage1_gluon_seesaw")


def compile_sm90(heads=128, dtype="bf16", kernel="mla_decode_stage1_gluon"):
    """The sm_90 build of a Gluon stage 1 for a B=128, page-64 problem."""
    from mla_jax import _gluon_kernels as gk
    from mla_jax import _launch

    pages = 128 * 256
    params = gk.seesaw_launch_params if kernel.endswith("seesaw") else gk.launch_params
    stage1 = params(
        batch=128,
        num_heads=heads,
        num_pages=pages,
        page_size=64,
        pages_per_seq=256,
        kv_lora_rank=512,
        rope_dim=64,
        scale=0.1,
        grid_splits=4,
        q_nope_strides=(heads * 576, 576, 1),
        q_pe_strides=(heads * 576, 576, 1),
        qp_offset=512,
        kv_strides=(64 * 576, 576, 1),
        block_table_strides=(256, 1),
        buffer_strides=(heads * 4 * 513, 4 * 513, 513, 1),
    )
    runtime = [f"*{dtype}"] * 3 + ["*i32"] * 3 + ["*fp32"] * 3  # q, q_pe, kv; ints; f32s
    spec = _launch.kernel_spec(
        getattr(gk, kernel),
        runtime,
        stage1["constexprs"],
        num_warps=stage1["num_warps"],
        num_stages=stage1["num_stages"],
    )
    return _launch.compile_kernel(spec, 90)  # what mla_decode's lowering builds


def _tool(name):
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def _mma_in_flight_across_wait(ptx):
    """Whether some warpgroup MMA group is committed and, before the next
    ``wgmma.wait_group``, an mbarrier wait runs: the MMA is left on the tensor cores
    while the warpgroup waits for the other one (straight-line PTX only)."""
    ops = re.findall(r"wgmma\.commit_group|wgmma\.wait_group|mbarrier\.try_wait", ptx)
    pairs = itertools.pairwise(ops)
    return any(a == "wgmma.commit_group" and b == "mbarrier.try_wait" for a, b in pairs)


def _cta_barriers_in_loops(ptx):
    """CTA-wide barriers (``bar.sync``/``barrier.sync`` without a thread count, other
    than the warp-specialize start/stop barrier 1) between the first and last warpgroup
    MMA: each partition should synchronise only itself (named 128-thread barriers)
    and the other through mbarriers."""
    first, last = ptx.find("wgmma.mma_async"), ptx.rfind("wgmma.wait_group")
    body = ptx[first:last]
    return len(re.findall(r"\b(?:bar|barrier)\.sync\s+(?!1;)\d+;", body))


def build_report(heads=128, dtype="bf16", kernel="mla_decode_stage1_gluon"):
    """Counts read from the build: registers and spills (ptxas -v), SASS opcodes,
    shared memory and global scratch from the metadata, and the PTX's barriers and
    warpgroup MMA waits."""
    compiled = compile_sm90(heads, dtype, kernel)
    ptx = compiled.asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        ptx_path = os.path.join(tmp, "k.ptx")
        cubin_path = os.path.join(tmp, "k.cubin")
        with open(ptx_path, "w") as f:
            f.write(ptx)
        with open(cubin_path, "wb") as f:
            f.write(compiled.asm["cubin"])
        log = subprocess.run(
            [_tool("ptxas"), "-v", "--gpu-name", "sm_90a", "-o", os.devnull, ptx_path],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        sass = subprocess.run(
            [_tool("cuobjdump"), "-sass", cubin_path], capture_output=True, text=True, check=True
        ).stdout
    count = lambda pat, text: len(re.findall(pat, text))
    return {
        "registers": int(re.search(r"Used (\d+) registers", log).group(1)),
        "spill_stores": int(re.search(r"(\d+) bytes spill stores", log).group(1)),
        "spill_loads": int(re.search(r"(\d+) bytes spill loads", log).group(1)),
        # ptxas's C7515: it serialised the warpgroup MMAs (a wait after each).
        "wgmma_serialized": "C7515" in log,
        "shared": compiled.metadata.shared,
        "global_scratch_size": compiled.metadata.global_scratch_size,
        "num_warps": compiled.metadata.num_warps,
        "hgmma": count(r"HGMMA", sass),
        "hmma": count(r" HMMA", sass),
        "ldgsts": count(r"LDGSTS", sass),
        "local": count(r" (?:STL|LDL)\b", sass),
        "bar_sync": count(r"BAR\.SYNC", sass),
        "ptx_wgmma": count(r"wgmma\.mma_async", ptx),
        "ptx_local": count(r"\b(?:ld|st)\.local", ptx),
        # wgmma.wait_group N: N > 0 keeps N groups in flight past the wait.
        "wgmma_waits": sorted(
            {int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx)}
        ),
        "setmaxnreg": count(r"setmaxnreg", ptx),
        "mbarrier_waits": count(r"mbarrier\.try_wait", ptx),
        "named_barriers_128": count(r"\bbar\.sync\s+\d+,\s*128;", ptx),
        "cta_barriers_in_loops": _cta_barriers_in_loops(ptx),
        "mma_in_flight_across_wait": _mma_in_flight_across_wait(ptx),
    }


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("heads, dtype", [(128, "bf16"), (64, "fp16"), (96, "bf16")])
def test_gluon_stage1_sm90_build(heads, dtype, kernel, tmp_path):
    env = os.environ | {"TRITON_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, __file__, str(heads), dtype, kernel],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["hgmma"] > 0 and r["hmma"] == 0, r  # warpgroup MMA, not mma.sync
    assert r["ldgsts"] > 0, r  # cp.async
    assert not r["wgmma_serialized"], r
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
    assert r["local"] == 0 and r["ptx_local"] == 0, r
    assert 0 < r["shared"] <= SM90_SHARED_BYTES, r
    assert r["global_scratch_size"] == 0, r
    assert r["num_warps"] == 8, r  # the seesaw's: 4 (default partition) + 4 (worker)
    if kernel.endswith("seesaw"):
        assert r["setmaxnreg"] > 0, r  # warp-specialised: one partition per warpgroup
        assert r["cta_barriers_in_loops"] == 0, r  # vs 5 CTA barriers a block before
        assert r["named_barriers_128"] > 0 and r["mbarrier_waits"] > 0, r
        assert r["mma_in_flight_across_wait"], r


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(json.dumps(build_report(int(sys.argv[1]), sys.argv[2], *sys.argv[3:])))


@pytest.mark.parametrize(
    "batch, heads, length, cc, dtype, kernel",
    [
        (16, 128, 4096, 90, jnp.bfloat16, "mla_decode_stage1_gluon"),  # 4 splits of 1024
        (128, 64, 4096, 90, jnp.float16, "mla_decode_stage1_gluon"),  # 1 split
        (16, 128, 1024, 90, jnp.bfloat16, "mla_decode_stage1"),  # 4 splits of 256
        (1, 128, 4096, 90, jnp.bfloat16, "mla_decode_stage1"),  # 64 splits of one block
        (16, 128, 4096, 80, jnp.bfloat16, "mla_decode_stage1"),  # not Hopper
        (16, 16, 4096, 90, jnp.bfloat16, "mla_decode_stage1"),  # under a 64-head tile
        (16, 128, 4096, 90, jnp.float32, "mla_decode_stage1"),
    ],
)
def test_stage1_is_the_gluon_kernel_where_it_wins(batch, heads, length, cc, dtype, kernel):
    """``mla_decode`` lowers stage 1 to the Gluon kernel on sm_90 for a problem it
    supports whose splits hold at least 1024 tokens (``_triton_backend.use_gluon``),
    else to the tl kernel; stage 2 is the same either way."""
    import mla_jax
    from tests.cases import buffer_spec
    from tests.test_kernel_cache import custom_calls, kernel_call

    page = 64

    def step(q, kv, bt, sl, buf):
        return mla_jax.mla_decode(
            q,
            kv,
            bt,
            sl,
            buf,
            scale=0.1,
            max_seq_len=length,
            backend="triton",
            compute_capability=cc,
        )

    args = (
        jax.ShapeDtypeStruct((batch, heads, 576), dtype),
        jax.ShapeDtypeStruct((batch * length // page, page, 576), dtype),
        jax.ShapeDtypeStruct((batch, length // page), jnp.int32),
        jax.ShapeDtypeStruct((batch,), jnp.int32),
        buffer_spec(batch, heads, 64, policy="occupancy"),
    )
    text = jax.jit(step, donate_argnums=4).trace(*args).lower(lowering_platforms=("cuda",))
    stage1, stage2 = (kernel_call(line) for line in custom_calls(text.as_text()))
    assert (stage1["kernel_name"], stage2["kernel_name"]) == (kernel, "mla_decode_stage2")
