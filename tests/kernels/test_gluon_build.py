"""The Gluon stage 1 kernels (``mla_jax.gluon``: the seesaw, on 16-bit and fp8
caches, and the 16-head fp8 kernel) build for sm_90 on a CPU, and each build is what
its design needs: warpgroup MMAs (HGMMA), cp.async loads of the latent tile, no
register spills (no local memory), shared memory within one SM's 227 KB, global
scratch only for the TMA descriptors a kernel makes (the 16-bit seesaw's two). The
seesaw builds are also checked for their schedule: two partitions of one warpgroup
each, no CTA-wide barrier in the main loops (only 128-thread named barriers and
mbarriers), a warpgroup MMA left in flight across an mbarrier wait (the overlap the
schedule exists for), and a split's partials staged through shared memory.

The build is made in a child process with its own Triton cache, so it is compiled
here rather than read from a cache another test filled."""

import itertools
import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

# The repository, two folders up: the child builds run there and import from it.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SM90_SHARED_BYTES = 232448  # 227 KB: the most one block may ask for on an H100/H200


def geometry(batch, heads, splits):
    """``launch_params``' problem arguments: ``batch`` rows of DeepSeek's dims in pages
    of 64 tokens, 256 pages a row, contiguous q, cache and buffer."""
    return dict(
        batch=batch,
        num_heads=heads,
        num_pages=batch * 256,
        page_size=64,
        pages_per_seq=256,
        kv_lora_rank=512,
        rope_dim=64,
        scale=0.1,
        grid_splits=splits,
        q_nope_strides=(heads * 576, 576, 1),
        q_pe_strides=(heads * 576, 576, 1),
        qp_offset=512,
        kv_strides=(64 * 576, 576, 1),
        block_table_strides=(256, 1),
        buffer_strides=(heads * splits * 513, splits * 513, 513, 1),
    )


def sass(compiled):
    """The SASS of a build (``cuobjdump``)."""
    # Imported here: a child build runs this file as a script, before its __main__
    # puts the repository on the path.
    from tests.kernel_calls import sass as cubin_sass

    return cubin_sass(compiled.asm["cubin"])


def gluon_launch(*, batch_tokens=None, **keywords):
    """The Gluon stage 1's launch (``plan.gluon_stage1``) of ``Problem.on_sm90``'s."""
    from mla_jax import plan

    problem = plan.Problem.on_sm90(batch_tokens=batch_tokens, **keywords)
    return plan.gluon_stage1(problem, problem.grid_splits, batch_tokens)


def compile_sm90(heads=128, dtype="bf16", kv="same", splits=4, merge=True, batch_tokens=None):
    """The sm_90 build of the Gluon stage 1 for a B=128, page-64 problem: q in
    ``dtype``, the cache in ``dtype`` (``kv="same"``) or fp8 (``kv="fp8"``: the fp8
    kernel); ``splits=1``: the one-split build, which writes the output itself, as
    does a cluster's build (``launch_params``' ``cluster_merge=merge``);
    ``batch_tokens`` as ``launch_params`` takes it (the step's tokens, which pick the
    kernel and its tile at 32 heads)."""
    from mla_jax import _launch, kernels
    from mla_jax import plan as gk

    fp8 = kv in ("fp8", "fp8mma")
    stage1 = gluon_launch(
        q_dtype={"bf16": "bfloat16", "fp16": "float16"}[dtype],
        kv_dtype=gk.FP8 if fp8 else None,
        fp8_mma=kv == "fp8mma",
        cluster_merge=merge,
        batch_tokens=batch_tokens,
        **geometry(128, heads, splits),
    )
    one_kernel = splits == 1 or stage1["cluster"] > 1
    kv_type = "fp8e4nv" if fp8 else dtype
    runtime = [f"*{dtype}"] * 2 + [f"*{kv_type}"] + ["*i32"] * 3 + ["*fp32"] * 3
    # Then, where no stage 2 runs, the output and lse.
    runtime += [f"*{dtype}", "*fp32"] if one_kernel else []
    spec = _launch.kernel_spec(
        gk.gluon_kernel(
            gk.FP8 if fp8 else {"bf16": "bfloat16", "fp16": "float16"}[dtype],
            heads,
            fp8_mma=kv == "fp8mma",
            batch_tokens=batch_tokens,
        ),
        runtime,
        stage1["constexprs"] | kernels.stage1_absent(one_kernel),
        num_warps=stage1["num_warps"],
        num_stages=stage1["num_stages"],
    )
    return _launch.compile_kernel(spec, 90)  # what mla_decode's lowering builds


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


def build_report(heads=128, dtype="bf16", kv="same", splits=4, batch_tokens=None):
    """Counts read from the build (``compile_sm90``'s arguments): registers and spills
    (ptxas -v), SASS opcodes, shared memory and global scratch from the metadata, and
    the PTX's barriers and warpgroup MMA waits."""
    tokens = None if batch_tokens is None else int(batch_tokens)
    return compiled_report(compile_sm90(heads, dtype, kv, int(splits), batch_tokens=tokens))


def compiled_report(compiled):
    """``build_report``'s counts for any sm_90 build (a ``CompiledKernel``)."""
    from tests.kernel_calls import ptxas_log  # see ``sass``

    ptx = compiled.asm["ptx"]
    log = ptxas_log(ptx)
    code = sass(compiled)
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
        "hgmma": count(r"HGMMA", code),
        # Warpgroup MMAs whose A operand is registers (SASS: "HGMMA... Rd, Ra, gdesc").
        "hgmma_register_a": count(r"HGMMA\.\S+ R\d+, R\d+, gdesc", code),
        # The same on e4m3 operands (QGMMA), by shape.
        "qgmma_64x32": count(r"QGMMA\.64x32x32\.F32\.E4M3\.E4M3", code),
        "qgmma_64x64": count(r"QGMMA\.64x64x32\.F32\.E4M3\.E4M3", code),
        "qgmma_register_a": count(r"QGMMA\.\S+ R\d+, R\d+, gdesc", code),
        "hmma": count(r" HMMA", code),
        "ldgsts": count(r"LDGSTS", code),
        "utmaldg": count(r"UTMALDG", code),
        "local": count(r" (?:STL|LDL)\b", code),
        "bar_sync": count(r"BAR\.SYNC", code),
        "ptx_wgmma": count(r"wgmma\.mma_async", ptx),
        "ptx_local": count(r"\b(?:ld|st)\.local", ptx),
        # Global loads but the cluster merge's (``ld.global.cg``: LDG.E.STRONG.GPU).
        "ldg": count(r"\bLDG\b(?!\.E\.STRONG\.GPU)", code),
        "ldg_merge": count(r"\bLDG\.E\.STRONG\.GPU\b", code),
        "ldg128": count(r"LDG\.E\.128", code),
        "lds64": count(r"\bLDS\.64\b", code),
        "lds128": count(r"\bLDS\.128\b", code),
        "sts128": count(r"\bSTS\.128\b", code),
        "sts64": count(r"\bSTS\.64\b", code),
        "stg32": count(r"\bSTG\.E\s", code),
        # The fp8 tile's widening: the bit sequence (HMUL2.BF16 / HMUL2), the e4m3 cvt
        # (F2FP.*.E4M3), the scalar f16 -> bf16 conversion (F2F.BF16.F16).
        "hmul2": count(r"HMUL2\b", code),
        "f2fp_e4m3": count(r"F2FP\.F16\.E4M3", code),
        "f2f_bf16_f16": count(r"F2F\.BF16\.F16", code),
        "cp_async_waits": sorted(set(re.findall(r"cp\.async\.wait_group\s+(\d+)", ptx))),
        "setmaxnreg": count(r"setmaxnreg", ptx),
        "mbarrier_waits": count(r"mbarrier\.try_wait", ptx),
        "named_barriers_128": count(r"\bbar\.sync\s+\d+,\s*128;", ptx),
        "cta_barriers_in_loops": _cta_barriers_in_loops(ptx),
        "bar_red_or": count(r"\bbar\.red\.or\.pred\b", ptx),
        "vote_any": count(r"\bvote\.sync\.any\.pred\b", ptx),
        "mma_in_flight_across_wait": _mma_in_flight_across_wait(ptx),
    }


def child_build_report(tmp_path, heads, dtype, kv="same", splits=4, batch_tokens=None):
    """``build_report`` in a child process with an empty Triton cache."""
    env = os.environ | {"TRITON_CACHE_DIR": str(tmp_path)}
    tokens = [] if batch_tokens is None else [str(batch_tokens)]
    proc = subprocess.run(
        [sys.executable, __file__, str(heads), dtype, kv, str(splits), *tokens],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_common(r, num_warps=8, descriptors=0):
    """What every Gluon build shares (the latent comes by cp.async: the seesaw's at a
    split's first and last blocks); ``descriptors``: the TMA descriptors it makes on the
    device, 128 bytes of global scratch each."""
    qgmma = r["qgmma_64x32"] + r["qgmma_64x64"]
    assert r["hgmma"] + qgmma > 0 and r["hmma"] == 0, r  # warpgroup MMA, not mma.sync
    assert r["ldgsts"] > 0, r
    assert not r["wgmma_serialized"], r
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
    assert r["local"] == 0 and r["ptx_local"] == 0, r
    assert 0 < r["shared"] <= SM90_SHARED_BYTES, r
    assert r["global_scratch_size"] == 128 * descriptors, r
    assert (r["utmaldg"] > 0) == (descriptors > 0), r
    assert r["num_warps"] == num_warps, r  # the seesaw's 8: 4 (default partition) + 4 (worker)


# Each kernel's one-split build (which writes the output itself) at one of its cases.
@pytest.mark.parametrize(
    "heads, dtype, splits", [(128, "bf16", 1), (64, "fp16", 4), (96, "bf16", 4)]
)
def test_gluon_seesaw_stage1_sm90_build(heads, dtype, splits, tmp_path):
    """The 16-bit kernel's schedule: warp-specialised (one partition per warpgroup),
    no CTA-wide barrier in its loops, an MMA in flight across an mbarrier wait, each
    of the 4 accumulator rescales behind a warp vote (``_rescale_rows``)."""
    r = child_build_report(tmp_path, heads, dtype, splits=splits)
    check_common(r, descriptors=2)  # a block's latent and rope columns by TMA
    # Four copy sites (the first two blocks, the two refills in the loop), each a
    # latent block in eight 64-column boxes, two from each of the 4 warps' one
    # elected thread, and its rope columns in one box.
    assert r["utmaldg"] == 4 * (2 + 1), r
    assert r["setmaxnreg"] > 0, r
    assert r["cta_barriers_in_loops"] == 0, r
    assert r["named_barriers_128"] > 0 and r["mbarrier_waits"] > 0, r
    assert r["mma_in_flight_across_wait"], r
    assert r["vote_any"] == 4 and r["bar_red_or"] == 0, r
    # A split's partials go out through shared memory (_store_tile): each warpgroup's
    # 64 x 256 float32 staged in 8-byte stores, 64 a thread, then stored by rows, 128
    # a thread; for a bf16 q in bf16 (bf16_partials), two values a 4-byte store, 64
    # a thread; the one-split output neither. Two more stores: the lse.
    half = splits > 1 and dtype == "bf16"
    assert (r["sts64"] >= 2 * 64) == (splits > 1 and not half), r
    if splits > 1:
        assert r["stg32"] == 2 * (64 if half else 128) + 2, r


# cp.async copies of 16 bytes a thread (one warpgroup copies): Q (64 x 576 16-bit) is
# 36, an fp8 block (64 x 576 bytes) 18, copied at four sites (the first two blocks,
# the two refills in the loop); each of the three widening sites (warpgroup 0's first
# block before its loop and its later ones in it, warpgroup 1's in its loop) converts
# 288 values a thread, 2 a cvt.
Q_COPIES, FP8_BLOCK_COPIES, FP8_WIDEN_CVT = 36, 18, 144


@pytest.mark.parametrize(
    "heads, dtype, splits", [(128, "bf16", 1), (64, "fp16", 4), (96, "bf16", 4)]
)
def test_gluon_seesaw_fp8_stage1_sm90_build(heads, dtype, splits, tmp_path):
    """The seesaw on an fp8 cache: the 16-bit build's schedule (warp-specialised, no
    CTA-wide barrier in its loops, the four rescale votes, an MMA in flight across an
    mbarrier wait: warpgroup 0's P1 V1_L across the next even block's waits and
    widening); every block by cp.async (no TMA, no global scratch), none by global
    loads; widened in place by the e4m3 cvt to fp16 in both warpgroups, for bf16 q too
    (no bit sequence, no scalar f16 -> bf16 conversion)."""
    r = child_build_report(tmp_path, heads, dtype, "fp8", splits)
    check_common(r)
    assert r["setmaxnreg"] > 0 and r["cta_barriers_in_loops"] == 0, r
    assert r["mma_in_flight_across_wait"] and r["vote_any"] == 4, r
    assert r["ldgsts"] >= Q_COPIES + 4 * FP8_BLOCK_COPIES, r
    assert r["ldg"] <= 8, r  # scalars and block-table entries only, never a block
    assert r["f2fp_e4m3"] == 3 * FP8_WIDEN_CVT, r
    assert r["hmul2"] == 0 and r["f2f_bf16_f16"] == 0, r


# The 16-head fp8 kernel, a block (64 tokens): S^T is 36 m64n16k16 MMAs (576 deep),
# O^T 32 (8 M-tiles of 64 latent dims x 4 of 16 tokens); the fp8 block is 18 16-byte
# cp.async a thread (16 latent, 2 rope); Q (16 x 576 16-bit) is 9 16-byte shared stores
# a thread, each latent pair's partials 4. Two CTAs an SM: 228 KB of shared memory an
# SM (1 KB of it reserved a CTA) and 64K registers.
H16_S_HGMMA, H16_PV_HGMMA, H16_BLOCK_COPIES, H16_Q_STORES, H16_PAIR_STORES = 36, 32, 18, 9, 4
SM90_SHARED_PER_SM, CTA_RESERVED_SHARED, SM90_REGISTERS = 233472, 1024, 65536


@pytest.mark.parametrize(
    "heads, dtype, splits", [(16, "bf16", 4), (16, "fp16", 1), (20, "bf16", 4), (32, "fp16", 4)]
)
def test_gluon_fp8_h16_stage1_sm90_build(heads, dtype, splits, tmp_path):
    """The 16-head fp8 kernel: one warpgroup; tokens on the warpgroup MMA's M (68 HGMMA
    a block, none padded), all with their A operand in registers (K and V^T read from
    the cp.async ring as words and widened; no 16-bit copy of the block in shared
    memory); the block by 16-byte cp.async (the first block, then one a loop; all landed
    before a block is read, ``wait_group 0``), no global loads of it; the K chunks by
    16-byte shared loads; the only 16-byte shared stores Q's and the partials' (staged
    through the dead ring); fp16 MMAs whatever q's dtype, so the widening is the e4m3
    cvt alone (K's 144 values and V^T's 128 a thread); no spills; two CTAs an SM by
    shared memory and registers; the softmax's CTA vote."""
    r = child_build_report(tmp_path, heads, dtype, "fp8", splits)
    check_common(r, num_warps=4)
    assert r["hgmma"] == r["hgmma_register_a"] == H16_S_HGMMA + H16_PV_HGMMA, r
    assert r["ldgsts"] == 2 * H16_BLOCK_COPIES, r
    assert r["cp_async_waits"] == ["0"], r
    assert r["ldg128"] == 0, r
    assert r["lds128"] >= 2 * 9, r
    assert r["sts128"] == H16_Q_STORES + 4 * H16_PAIR_STORES, r  # 4 latent pairs
    # The ring's stage free and landed; P^T published (the column max and P again only
    # when the vote says so).
    assert r["cta_barriers_in_loops"] <= 3, r
    assert r["bar_red_or"] == 1, r  # the softmax's CTA vote (_cta_any)
    assert 2 * (r["shared"] + CTA_RESERVED_SHARED) <= SM90_SHARED_PER_SM, r
    assert 2 * 128 * r["registers"] <= SM90_REGISTERS, r
    assert r["f2fp_e4m3"] >= 144 + 128 and r["hmul2"] == 0 and r["f2f_bf16_f16"] == 0, r


# The 16-bit 16-head kernel: Q is 9 16-byte cp.async a thread (8 latent, 1 rope), a
# block 36 (32 latent, 4 rope), copied at two sites (the first block, one a loop).
H16_BF16_Q_COPIES, H16_BF16_BLOCK_COPIES = 9, 36


@pytest.mark.parametrize(
    "heads, dtype, splits, batch_tokens, tile, divisor",
    [
        (16, "bf16", 4, None, 16, 2),
        (16, "fp16", 4, None, 16, 2),
        (16, "bf16", 1, None, 16, 2),
        (32, "bf16", 4, 65536, 32, 1),  # one 32-head tile a row
        (32, "fp16", 1, 65536, 32, 1),
        (128, "bf16", 4, 4096, 32, 1),  # four 32-head tiles a row
    ],
)
def test_gluon_h16_stage1_sm90_build(heads, dtype, splits, batch_tokens, tile, divisor, tmp_path):
    """The 16-head kernel for a 16-bit cache, at its 16-head tile and at the 32-head
    one (``plan.narrow_tile``): one warpgroup; tokens on the warpgroup MMA's M, the fp8
    kernel's 68 HGMMA a block (N the tile's heads), all from shared memory (no register
    A: nothing to widen); Q and the blocks by 16-byte cp.async, all landed before a
    block is read (``wait_group 0``), no global loads of them; the softmax's CTA vote;
    no spills, no global scratch; one CTA an SM by shared memory, which the split count
    it takes assumes (``split_divisor``: half the rule's at 16 heads, which it counts
    two 16-head programs an SM; the rule's at one 32-head tile a row, which it counts
    one, and at four in a small step, where it counts eight 16-head programs, two an
    SM), two by registers."""
    from mla_jax import plan as gk

    r = child_build_report(tmp_path, heads, dtype, "same", splits, batch_tokens)
    assert gk.narrow_tile("bfloat16", heads, batch_tokens) == tile
    check_common(r, num_warps=4)
    assert r["hgmma"] == H16_S_HGMMA + H16_PV_HGMMA and r["hgmma_register_a"] == 0, r
    q_copies = H16_BF16_Q_COPIES * tile // gk.SMALL_BLOCK_H
    assert r["ldgsts"] == q_copies + 2 * H16_BF16_BLOCK_COPIES, r
    assert r["cp_async_waits"] == ["0"], r
    assert r["ldg128"] == 0, r
    assert r["cta_barriers_in_loops"] <= 3 and r["bar_red_or"] == 1, r
    assert 2 * (r["shared"] + CTA_RESERVED_SHARED) > SM90_SHARED_PER_SM, r
    assert gk.split_divisor("bfloat16", heads, batch_tokens) == divisor
    assert 2 * 128 * r["registers"] <= SM90_REGISTERS, r


# The fp8-MMA kernel, a block (64 tokens): S is 18 m64n32k32 e4m3 MMAs a warpgroup
# (576 deep; the warpgroups take 32 tokens each), O^T 8 m64n64k32 (4 tiles of 128 dims,
# 64 rows a warpgroup, 2 steps of 32 tokens), those with their A operand (V^T) in
# registers; the block is 9 16-byte cp.async a thread (8 latent, 1 rope), copied
# FP8_MMA_STAGES - 1 blocks ahead (the first blocks, then one a loop); V's words 16
# 8-byte shared loads a thread.
FP8_MMA_S_QGMMA, FP8_MMA_PV_QGMMA, FP8_MMA_BLOCK_COPIES, FP8_MMA_WORD_LOADS = 18, 8, 9, 16


@pytest.mark.parametrize(
    "heads, dtype, splits", [(128, "bf16", 4), (128, "bf16", 1), (96, "fp16", 4)]
)
def test_gluon_fp8_mma_stage1_sm90_build(heads, dtype, splits, tmp_path):
    """The fp8-MMA kernel: e4m3 warpgroup MMAs only (no 16-bit ones), S's operands
    both from shared memory and O^T's A (V^T) from registers; the ring filled by 16-byte
    cp.async ``FP8_MMA_STAGES - 2`` blocks deep (``wait_group``); V^T by 8-byte shared
    loads; the softmax's CTA vote; no spills, no global scratch, within one CTA's
    shared memory."""
    from mla_jax.gluon.fp8_mma import FP8_MMA_STAGES

    r = child_build_report(tmp_path, heads, dtype, "fp8mma", splits)
    check_common(r)
    assert r["hgmma"] == 0, r
    assert r["qgmma_64x32"] == FP8_MMA_S_QGMMA and r["qgmma_64x64"] == FP8_MMA_PV_QGMMA, r
    assert r["qgmma_register_a"] == FP8_MMA_PV_QGMMA, r
    stages = FP8_MMA_STAGES.value
    assert r["ldgsts"] == stages * FP8_MMA_BLOCK_COPIES, r
    assert r["cp_async_waits"] == sorted(["0", str(stages - 2)]), r
    assert r["lds64"] == FP8_MMA_WORD_LOADS, r
    assert r["bar_red_or"] == 1 and r["cta_barriers_in_loops"] <= 3, r


def test_supports_and_gluon_kernel():
    """The cache dtype rule: q 16-bit, the cache of q's dtype or float8_e4m3fn, each
    latent row 16-byte aligned (8 16-bit elements, 16 fp8 ones); ``plan.gluon_kernel`` picks
    the kernel by the cache's dtype."""
    from mla_jax import plan as gk

    def ok(
        q="bfloat16",
        kv="bfloat16",
        row=576,
        page=64 * 576,
        heads=128,
        page_size=64,
    ):
        problem = geometry(1, heads, 1) | dict(page_size=page_size, kv_strides=(page, row, 1))
        return gk.supports(gk.Problem.on_sm90(q_dtype=q, kv_dtype=kv, **problem))

    assert ok() and ok(q="float16", kv="float16")
    assert ok(kv="float8_e4m3fn") and ok(q="float16", kv="float8_e4m3fn")
    assert not ok(q="float8_e4m3fn", kv="float8_e4m3fn")
    assert not ok(kv="float8_e5m2") and not ok(q="float32", kv="float8_e4m3fn")
    assert not ok(q="float16", kv="bfloat16")
    assert ok(row=584, page=64 * 584) and not ok(kv="float8_e4m3fn", row=584, page=64 * 584)
    assert ok(kv="float8_e4m3fn", row=592, page=64 * 592)
    # Pages with a gap between them: fp8 blocks come by cp.async, which takes them;
    # the 16-bit seesaw's TMA (the cache as rows of tokens) does not.
    assert ok(kv="float8_e4m3fn", page=65 * 576) and not ok(page=65 * 576)
    assert not ok(kv="float8_e4m3fn", page_size=32)
    # fp8 caches from 16 heads (the 16-head fp8 kernel under 64); 16-bit ones at 16
    # (the 16-bit 16-head kernel) and from 32 (the seesaw's 64-head tile, half of it
    # masked at 32), not in between (the tl kernel's 32-head tile).
    assert ok(kv="float8_e4m3fn", heads=16) and ok(kv="float8_e4m3fn", heads=20)
    assert not ok(kv="float8_e4m3fn", heads=8) and not ok(heads=8) and not ok(heads=15)
    assert ok(heads=16) and not ok(heads=17) and not ok(heads=31)
    assert ok(heads=32) and ok(heads=63)
    assert gk.gluon_kernel("float8_e4m3fn", 16) is gk.gluon_kernel("float8_e4m3fn", 63)
    assert gk.gluon_kernel("float8_e4m3fn", 16) is gk.gluon_family_kernel("fp8_narrow")
    for kv in ("bfloat16", "float16", None):
        assert (
            gk.gluon_kernel(kv, 16) is gk.gluon_kernel(kv, 31) is gk.gluon_family_kernel("narrow")
        )
        assert gk.gluon_kernel(kv, 32) is gk.gluon_family_kernel("seesaw")
    # Half the occupancy rule's splits for the 16-bit 16-head kernel (one CTA an SM).
    assert [gk.split_divisor(kv, h) for kv in (None, gk.FP8) for h in (16, 31, 32, 64)] == [
        2, 2, 1, 1, 1, 1, 1, 1
    ]  # fmt: skip
    for kv in ("bfloat16", "float16", "float8_e4m3fn"):
        assert gk.gluon_kernel(kv) is gk.gluon_kernel(kv, 64) is gk.gluon_family_kernel("seesaw")
    # At exactly 32 heads on a 16-bit cache with the step's tokens known, the 16-bit
    # 16-head kernel: at 16-head tiles (halving) in a step of at most
    # SMALL_HEADS_BATCH_TOKENS tokens, at one 32-head tile (the rule's count) in a larger
    # one; with the count unknown, the seesaw. At 64 heads two 32-head tiles up to
    # SMALL_HEADS_BATCH_TOKENS, at 128 four up to WIDE_HEADS_BATCH_TOKENS: at the rule's
    # count where it plans 16-head tiles (up to _tiling.SMALL_BATCH_TOKENS tokens, two
    # an SM, as many a row as two 32-head tiles make one), at half where it plans one
    # 64-head tile; the seesaw above and at other head counts.
    small, large = gk.NARROW_BATCH_TOKENS, gk.NARROW_BATCH_TOKENS + 1
    wide = gk.NARROW_128_HEADS_BATCH_TOKENS
    for kv in ("bfloat16", "float16", None):
        for heads, tokens in ((32, small), (32, large), (64, 1), (64, small), (128, wide)):
            kernel = gk.gluon_kernel(kv, heads, batch_tokens=tokens)
            assert kernel is gk.gluon_family_kernel("narrow"), (heads, tokens)
        assert gk.narrow_tile(kv, 32, small) == 16 and gk.narrow_tile(kv, 32, large) == 32
        assert gk.narrow_tile(kv, 64, small) == gk.narrow_tile(kv, 128, wide) == 32
        for heads, tokens in ((32, None), (33, 1), (64, None), (64, large), (96, 1)):
            kernel = gk.gluon_kernel(kv, heads, batch_tokens=tokens)
            assert kernel is gk.gluon_family_kernel("seesaw"), (heads, tokens)
        assert gk.gluon_kernel(kv, 128, batch_tokens=wide + 1) is gk.gluon_family_kernel("seesaw")
        assert gk.split_divisor(kv, 32, small) == 2 and gk.split_divisor(kv, 32, large) == 1
        assert gk.split_divisor(kv, 64, 4096) == 1 and gk.split_divisor(kv, 64, 4097) == 2
        assert gk.split_divisor(kv, 64, small) == 2 and gk.split_divisor(kv, 128, wide) == 1
        assert gk.split_divisor(kv, 64, large) == gk.split_divisor(kv, 128, wide + 1) == 1
        assert gk.narrow_tile(kv, 16, large) == gk.narrow_tile(kv, 31, large) == 16
    assert gk.narrow_tile(gk.FP8, 32, large) == gk.narrow_tile(gk.FP8, 64, 1) == 16
    assert gk.gluon_kernel(gk.FP8, 32, batch_tokens=small) is gk.gluon_family_kernel("fp8_narrow")
    assert gk.gluon_kernel(gk.FP8, 64, batch_tokens=1) is gk.gluon_family_kernel("seesaw")
    assert gk.split_divisor(gk.FP8, 32, small) == 1
    # fp8 MMAs where asked, on an fp8 cache from 64 heads; elsewhere the flag changes
    # nothing.
    assert gk.gluon_kernel(gk.FP8, 64, fp8_mma=True) is gk.gluon_family_kernel("fp8_mma")
    assert gk.gluon_kernel(gk.FP8, 63, fp8_mma=True) is gk.gluon_family_kernel("fp8_narrow")
    assert gk.gluon_kernel("bfloat16", 128, fp8_mma=True) is gk.gluon_family_kernel("seesaw")
    lp = dict(
        batch=2,
        num_heads=64,
        num_pages=8,
        page_size=64,
        pages_per_seq=4,
        kv_lora_rank=512,
        rope_dim=64,
        scale=0.1,
        grid_splits=1,
        q_nope_strides=(64 * 576, 576, 1),
        q_pe_strides=(64 * 576, 576, 1),
        qp_offset=512,
        kv_strides=(64 * 576, 576, 1),
        block_table_strides=(4, 1),
        buffer_strides=(64 * 513, 513, 513, 1),
    )
    lp["q_dtype"] = "bfloat16"
    sixteen, fp8 = gluon_launch(**lp), gluon_launch(kv_dtype=gk.FP8, **lp)
    assert fp8 == sixteen and sixteen["num_warps"] == gk.SEESAW_NUM_WARPS
    fp8_mma = gluon_launch(kv_dtype=gk.FP8, fp8_mma=True, **lp)
    assert fp8_mma["num_warps"] == gk.FP8_MMA_NUM_WARPS == 8
    assert gluon_launch(fp8_mma=True, **lp) == sixteen
    # The same problem constexprs; the seesaw's cluster size (1: one split) and
    # partials' dtype (float32: one split) its own.
    assert fp8_mma["grid"] == sixteen["grid"] and sixteen["constexprs"].pop("CLUSTER") == 1
    assert sixteen["constexprs"].pop("BF16_PARTIALS") is False
    assert fp8_mma["constexprs"] == sixteen["constexprs"]
    small = gluon_launch(kv_dtype=gk.FP8, **(lp | dict(num_heads=20)))
    assert small["grid"] == (2, 2, 1) and small["num_warps"] == gk.NARROW_NUM_WARPS
    assert small["constexprs"]["BLOCK_H"] == gk.SMALL_BLOCK_H
    small16 = gluon_launch(**(lp | dict(num_heads=20)))
    assert small16["grid"] == (2, 2, 1) and small16["num_warps"] == gk.NARROW_NUM_WARPS
    assert small16["cluster"] == 1 and "CLUSTER" not in small16["constexprs"]
    assert small16["constexprs"].pop("BF16_PARTIALS") is False  # one split
    assert small16["constexprs"] == small["constexprs"]
    # 32 heads in a small step: two 16-head tiles a row, bf16 partials at 2 splits.
    two_tiles = gluon_launch(batch_tokens=512, **(lp | dict(num_heads=32, grid_splits=2)))
    assert two_tiles["grid"] == (2, 2, 2) and two_tiles["num_warps"] == gk.NARROW_NUM_WARPS
    assert two_tiles["cluster"] == 1 and two_tiles["bf16_partials"]
    assert two_tiles["constexprs"]["BLOCK_H"] == gk.SMALL_BLOCK_H
    # In a larger step: one 32-head tile a row.
    one_tile = gluon_launch(batch_tokens=65536, **(lp | dict(num_heads=32, grid_splits=2)))
    assert one_tile["grid"] == (1, 2, 2) and one_tile["num_warps"] == gk.NARROW_NUM_WARPS
    assert one_tile["cluster"] == 1 and one_tile["bf16_partials"]
    assert one_tile["constexprs"]["BLOCK_H"] == 32
    seesaw = gluon_launch(**(lp | dict(num_heads=32, grid_splits=2)))
    assert seesaw["grid"] == (2, 2, 1) and seesaw["cluster"] == 2


def test_cluster_size_is_two_for_a_seesaw_row_of_two_splits():
    """``cluster_size``: on the seesaw (either cache) a row of 2 splits is one cluster;
    other counts, the 16-head fp8 and the fp8-MMA kernels, and ``merge=False`` make
    none. ``launch_params`` then puts a cluster's CTAs along x, one program a split,
    and tells the kernel (``CLUSTER``)."""
    from mla_jax import plan as gk

    assert [gk.cluster_size(gk.gluon_kernel(None, 64), s) for s in (1, 2, 3, 4, 8, 16)] == [
        1, 2, 1, 1, 1, 1
    ]  # fmt: skip
    assert gk.cluster_size(gk.gluon_kernel(gk.FP8, 64), 2) == 2
    assert gk.cluster_size(gk.gluon_kernel(gk.FP8, 64, True), 2) == 1  # fp8 MMAs
    assert gk.cluster_size(gk.gluon_kernel(gk.FP8, 32), 2) == 1  # the 16-head fp8 kernel
    assert gk.cluster_size(gk.gluon_kernel(None, 16), 2) == 1  # the 16-bit 16-head kernel
    assert gk.cluster_size(gk.gluon_kernel(None, 128), 2, merge=False) == 1
    merged = gluon_launch(q_dtype="bfloat16", **geometry(16, 128, 2))
    assert (merged["grid"], merged["cluster"]) == ((2 * 2, 16, 1), 2)
    assert merged["constexprs"]["CLUSTER"] == 2
    staged = gluon_launch(q_dtype="bfloat16", cluster_merge=False, **geometry(16, 128, 2))
    assert (staged["grid"], staged["cluster"], staged["constexprs"]["CLUSTER"]) == (
        (2, 16, 2),
        1,
        1,
    )
    small = gluon_launch(q_dtype="bfloat16", kv_dtype=gk.FP8, **geometry(16, 32, 2))
    assert small["cluster"] == 1 and "CLUSTER" not in small["constexprs"]


def test_bf16_partials_for_a_bf16_q_where_stage_2_merges():
    """``kernels.bf16_partials``: a bf16 q with more than one split, the tl stage 1's
    and stage 2's ``BF16_PARTIALS`` (``kernels.launch_params``). ``plan.gluon_bf16_partials``
    narrows it to the seesaw (16-bit or fp8 cache) and the 16-bit 16-head kernel (not
    the fp8-MMA or fp8 16-head kernels) without a cluster; ``gluon_launch`` tells
    those kernels and ``stage2_params`` stage 2, which it drops where the cluster
    merges (and with one split)."""
    from mla_jax import kernels
    from mla_jax import plan as gk

    bf16, fp16 = "bfloat16", "float16"
    assert kernels.bf16_partials(bf16, 2)
    assert not kernels.bf16_partials(bf16, 1)  # stage 1 writes the output
    assert not kernels.bf16_partials(fp16, 8)  # fp16's three more bits
    assert not kernels.bf16_partials("float32", 8)
    assert gk.gluon_bf16_partials(bf16, gk.gluon_kernel(None, 64), 8, 1)
    assert gk.gluon_bf16_partials(bf16, gk.gluon_kernel(gk.FP8, 128), 4, 1)
    assert not gk.gluon_bf16_partials(fp16, gk.gluon_kernel(None, 64), 8, 1)
    assert not gk.gluon_bf16_partials(fp16, gk.gluon_kernel(gk.FP8, 64), 8, 1)
    assert not gk.gluon_bf16_partials(bf16, gk.gluon_kernel(None, 64), 1, 1)
    assert not gk.gluon_bf16_partials(bf16, gk.gluon_kernel(None, 64), 2, 2)  # the cluster merges
    assert not gk.gluon_bf16_partials(bf16, gk.gluon_kernel(gk.FP8, 64, True), 8, 1)  # fp8 MMAs
    assert not gk.gluon_bf16_partials(bf16, gk.gluon_kernel(gk.FP8, 32), 8, 1)  # 16-head fp8 kernel
    assert gk.gluon_bf16_partials(
        bf16, gk.gluon_kernel(None, 16), 2, 1
    )  # the 16-bit 16-head kernel
    assert not gk.gluon_bf16_partials(fp16, gk.gluon_kernel(None, 16), 2, 1)
    for q_dtype, kv_dtype, heads, splits, merge, want in [
        (bf16, None, 64, 8, True, True),
        (fp16, None, 64, 8, True, False),
        (bf16, None, 64, 2, False, True),
        (bf16, gk.FP8, 32, 8, True, False),  # the 16-head fp8 kernel's float32
        (bf16, None, 16, 4, True, True),  # the 16-bit 16-head kernel's bf16
        (fp16, None, 20, 4, True, False),
    ]:
        problem = geometry(16, heads, splits)
        stage1 = gluon_launch(q_dtype=q_dtype, kv_dtype=kv_dtype, cluster_merge=merge, **problem)
        assert stage1["bf16_partials"] is want
        assert stage1["constexprs"].get("BF16_PARTIALS", False) is want
        tl_stage1, stage2 = kernels.launch_params(**problem, q_dtype=q_dtype)
        tl_half = q_dtype == bf16
        assert tl_stage1["constexprs"]["BF16_PARTIALS"] is tl_half
        assert stage2["constexprs"]["BF16_PARTIALS"] is tl_half
        adapted = gk.gluon_stage2(stage2, stage1)
        assert adapted == stage2 | {"constexprs": stage2["constexprs"] | {"BF16_PARTIALS": want}}
    problem = geometry(16, 64, 2)
    stage1 = gluon_launch(q_dtype=bf16, **problem)  # a cluster: no stage 2
    assert gk.gluon_stage2(kernels.launch_params(**problem, q_dtype=bf16)[1], stage1) is None
    assert gk.gluon_stage2(None, stage1) is None


def test_cluster_build_syncs_its_cluster_once_on_every_path():
    """The seesaw build for a cluster (2 splits) has the cluster barrier on each of its
    four ends (each partition's merge and store paths; ``UCGABAR_ARV``/``UCGABAR_WAIT``:
    arrive, then wait), reads the other split's partial with ``ld.global.cg`` (L2,
    never a stale L1 line) and spills nothing; the build for stage 2 has none of it."""
    merged, staged = sass(compile_sm90(64, splits=2)), sass(compile_sm90(64, splits=2, merge=False))
    assert len(re.findall(r"UCGABAR_ARV\b", merged)) == 4
    assert len(re.findall(r"UCGABAR_WAIT\b", merged)) == 4
    assert "UCGABAR" not in staged
    assert "LDG.E.STRONG.GPU" in merged and "LDG.E.STRONG.GPU" not in staged
    assert "STL" not in merged and "LDL" not in merged


BF16, FP8 = jnp.bfloat16, jnp.float8_e4m3fn
SEESAW, TL = "mla_decode_stage1_gluon_seesaw", "mla_decode_stage1"
FP8_H16 = "mla_decode_stage1_gluon_fp8_h16"
H16 = "mla_decode_stage1_gluon_h16"


@pytest.mark.parametrize(
    "batch, heads, length, cc, dtype, kv_dtype, kernel",
    [
        (16, 128, 4096, 90, BF16, None, SEESAW),  # 4 splits of 1024
        (128, 64, 4096, 90, jnp.float16, None, SEESAW),  # 1 split
        (16, 128, 4096, 90, BF16, FP8, SEESAW),
        (16, 128, 1024, 90, BF16, None, SEESAW),  # 4 splits of 256
        (16, 128, 1024, 90, BF16, FP8, SEESAW),  # 4 splits of 256
        (4, 64, 4096, 90, BF16, FP8, SEESAW),  # 32 splits of 128
        (1, 128, 1024, 90, BF16, FP8, TL),  # 16 splits of 64
        (16, 64, 4096, 90, BF16, FP8, SEESAW),  # 8 splits of 512
        (1, 128, 4096, 90, BF16, None, H16),  # four 32-head tiles, 32 splits of 128
        # 16 splits of 64 where the tl kernel's 16-head programs have an SM each:
        (1, 128, 1024, 90, BF16, None, TL),
        (1, 64, 1024, 90, BF16, None, TL),
        (2, 128, 4096, 90, BF16, None, SEESAW),  # 8192 tokens, 32 splits of 128
        (16, 128, 4096, 80, BF16, None, TL),  # not Hopper
        (16, 16, 4096, 90, BF16, None, H16),  # 8 splits of 512 (half the rule's 16)
        (64, 16, 4096, 90, BF16, None, H16),  # 2 splits of 2048
        (128, 16, 16384, 90, jnp.float16, None, H16),  # 1 split (the rule's 2)
        (16, 20, 4096, 90, BF16, None, TL),  # the tl kernel's 32-head tile
        (16, 16, 1024, 90, BF16, None, H16),  # 8 splits of 128 (half the rule's 16)
        (4, 16, 4096, 90, BF16, None, H16),  # 32 splits of 128 (half the rule's 64)
        (1, 16, 16384, 90, BF16, None, H16),  # the rule's 128 splits: one wave already
        (1, 16, 4096, 90, BF16, None, TL),  # 64 splits of 64
        (256, 16, 4096, 90, BF16, None, TL),  # the rule's 1 split: nothing to halve
        (16, 32, 16384, 90, BF16, None, H16),  # one 32-head tile, 8 splits of 2048
        (128, 48, 4096, 90, jnp.float16, None, SEESAW),
        (16, 64, 4096, 90, BF16, None, SEESAW),  # 8 splits of 512
        # 64 heads in a step of at most 16384 tokens: two 32-head tiles a row.
        (4, 64, 1024, 90, BF16, None, H16),  # 16 splits of 64 (the rule's count)
        (8, 64, 2048, 90, jnp.float16, None, H16),  # 8 splits of 256 (half the rule's 16)
        (1, 64, 16384, 90, BF16, None, H16),  # 64 splits of 256 (half the rule's 128)
        (2, 64, 16384, 90, BF16, None, SEESAW),  # 32768 tokens
        # 32 heads in a step of at most 16384 tokens: two 16-head tiles a row.
        (16, 32, 1024, 90, BF16, None, H16),  # 4 splits of 256 (half the rule's 8)
        (1, 32, 1024, 90, BF16, None, H16),  # 16 splits of 64: one wave already
        (4, 32, 4096, 90, jnp.float16, None, H16),  # 16 splits of 256 (the rule's 32)
        (1, 32, 16384, 90, BF16, None, H16),  # 64 splits of 256 (the rule's 128)
        # 32 heads in a larger step: one 32-head tile a row, at the rule's count.
        (4, 32, 16384, 90, BF16, None, H16),  # 65536 tokens, 32 splits of 512
        (64, 32, 1024, 90, BF16, None, H16),  # 65536 tokens, 2 splits of 512
        (128, 32, 4096, 90, jnp.float16, None, H16),  # 1 split
        (16, 16, 4096, 90, BF16, FP8, FP8_H16),  # 16 splits of 256
        (64, 32, 4096, 90, jnp.float16, FP8, FP8_H16),  # 2 splits of 2048
        (4, 16, 4096, 90, BF16, FP8, FP8_H16),  # 64 splits of 64
        # Ada: e4m3 but no warpgroup MMA. fp16 q: Triton 3.6 picks its e4m3 -> bf16
        # conversion for the first capability a process builds it for, so after an
        # sm_90 build (another case here, in the same worker) bf16 q would get sm_90's
        # cvt.bf16.f16, which ptxas rejects for sm_89.
        (16, 16, 4096, 89, jnp.float16, FP8, TL),
        (16, 128, 4096, 90, jnp.float32, None, TL),
    ],
)
def test_stage1_is_the_gluon_kernel_where_it_wins(
    batch, heads, length, cc, dtype, kv_dtype, kernel
):
    """``mla_decode`` lowers stage 1 to a Gluon kernel on sm_90 for a problem they
    support whose splits hold at least 128 tokens (64 for the 16-head fp8 kernel;
    ``plan.gluon_split_divisor``): the seesaw, on a 16-bit or an fp8 cache
    (the 16-head fp8 kernel on an fp8 cache under 64 heads; the 16-bit 16-head kernel
    on a 16-bit one at 16 heads, and at 32 in a step of at most 16384 tokens, at half
    the occupancy rule's splits where its grid would hold more than a program an SM,
    with splits of at least 128 tokens at 16 heads, 64 at 32; at 32 heads in a larger
    step the same kernel at one 32-head tile, at the rule's count, from 128 tokens a
    split; at 64 heads up to 16384 tokens and at 128 up to 4096 at 32-head tiles, from
    64 tokens a split, but not where the tl kernel's 16-head grid holds no more programs
    than SMs);
    else to the tl kernel. Stage 2 is the same either way, and absent where the grid
    has one split."""
    assert lowered_kernels(batch, heads, length, cc, dtype, kv_dtype) == expected_calls(
        kernel, batch, heads, length
    )


FP8_MMA = "mla_decode_stage1_gluon_fp8_mma"


@pytest.mark.parametrize(
    "batch, heads, length, cc, kernel",
    [
        (16, 128, 4096, 90, FP8_MMA),  # 4 splits of 1024
        (128, 64, 4096, 90, FP8_MMA),  # 1 split
        (4, 96, 4096, 90, FP8_MMA),  # a tile and a half-masked one
        (16, 32, 4096, 90, FP8_H16),  # under 64 heads: the 16-head kernel, fp16 MMAs
        (1, 128, 1024, 90, TL),  # 16 splits of 64
    ],
)
def test_fp8_mma_is_the_stage1_where_asked(batch, heads, length, cc, kernel):
    """With ``fp8_mma=True`` an fp8 cache's stage 1 is the fp8-MMA kernel wherever the
    seesaw would run (sm_90, at least 64 heads, splits of at least 128 tokens); the
    routing is otherwise the default's."""
    calls = lowered_kernels(batch, heads, length, cc, BF16, FP8, fp8_mma=True)
    assert calls == expected_calls(kernel, batch, heads, length)


def expected_calls(kernel, batch, heads, length):
    """Stage 1's kernel, then stage 2 where the occupancy grid has more than one split
    (with one, stage 1 writes the output; the 16-bit 16-head kernel takes half the
    rule's where its grid would hold more than a program an SM), but on the seesaw at 2
    splits (a cluster merges them)."""
    import mla_jax

    splits = mla_jax.kv_splits(
        "occupancy", batch=batch, num_heads=heads, max_seq_len=length, sm_count=132
    )
    # The 16-head tile under 32 heads and at 32 in a small step, else the 32-head one.
    tile = 16 if heads < 32 or (heads == 32 and batch * length <= 16384) else 32
    if kernel == H16 and batch * -(-heads // tile) * splits > 132:
        splits //= 2
    merged = splits == 1 or (kernel == SEESAW and splits == 2)
    return [kernel] + ([] if merged else ["mla_decode_stage2"])


def test_h16_kernel_only_on_the_occupancy_rules_splits():
    """Under vLLM's split rule (whose partition is vLLM's kernel's) a 16-bit cache at
    16 heads stays with the tl kernel, at the rule's count (at 32 heads in a small step
    with the seesaw), and so does batch-invariant mode (one split, whose kernel must
    not depend on the batch): the 16-bit 16-head kernel runs only on an occupancy count
    it may take as planned or halve."""
    stage2 = "mla_decode_stage2"
    assert lowered_kernels(64, 16, 4096, 90, BF16, None) == [H16, stage2]
    assert lowered_kernels(64, 16, 4096, 90, BF16, None, policy="vllm") == [TL, stage2]
    assert lowered_kernels(64, 16, 4096, 90, BF16, None, batch_invariant=True) == [TL]
    # At 32 heads in a small step: the seesaw under vLLM's rule (its two splits a
    # cluster, no stage 2) and in batch-invariant mode (one split of 1024 tokens).
    assert lowered_kernels(16, 32, 1024, 90, BF16, None) == [H16, stage2]
    assert lowered_kernels(16, 32, 1024, 90, BF16, None, policy="vllm") == [SEESAW]
    assert lowered_kernels(16, 32, 1024, 90, BF16, None, batch_invariant=True) == [SEESAW]


def lowered_kernels(batch, heads, length, cc, dtype, kv_dtype, policy="occupancy", **options):
    """The kernels of ``mla_decode``'s CUDA lowering for capability ``cc`` (static
    ``max_seq_len``, pages of 64, a buffer of ``policy`` for 132 SMs), in order."""
    import mla_jax
    from tests.cases import buffer_spec
    from tests.kernel_calls import kernel_calls

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
            k_scale=None if kv_dtype is None else 0.5,
            **options,
        )

    args = (
        jax.ShapeDtypeStruct((batch, heads, 576), dtype),
        jax.ShapeDtypeStruct((batch * length // page, page, 576), kv_dtype or dtype),
        jax.ShapeDtypeStruct((batch, length // page), jnp.int32),
        jax.ShapeDtypeStruct((batch,), jnp.int32),
        buffer_spec(batch, heads, 128, policy=policy),
    )
    text = jax.jit(step, donate_argnums=4).trace(*args).lower(lowering_platforms=("cuda",))
    return [c.kernel_name for c in kernel_calls(text.as_text())]


def loads_before_branch(kernel, runtime, launch, constexprs, branch):
    """How many global loads (``LDG``) the sm_90 SASS of ``kernel`` (a tl kernel of
    ``kernels``, built with ``launch``'s options and ``constexprs``) issues before its
    first instruction matching ``branch``."""
    from mla_jax import _launch

    spec = _launch.kernel_spec(
        kernel,
        runtime,
        constexprs,
        num_warps=launch["num_warps"],
        num_stages=launch["num_stages"],
    )
    code = sass(_launch.compile_kernel(spec, 90))
    return len(re.findall(r"\bLDG\b", re.split(branch, code, maxsplit=1)[0]))


def test_tl_stage1_loads_split_count_and_length_before_branching():
    """The tl stage 1 (16-head tile, four splits) issues the split-count and length
    loads before its first branch: one memory round trip before a split's bounds are
    known, where a branch between them made two."""
    from mla_jax import kernels

    stage1, _ = kernels.launch_params(
        **geometry(64, 16, 4), q_dtype="bfloat16", batch_tokens=64 * 4096
    )
    runtime = ["*bf16"] * 3 + ["*i32"] * 3 + ["*fp32"] * 3
    constexprs = stage1["constexprs"] | kernels.stage1_absent(False)
    branch = r"\b(?:EXIT|BRA)\b"
    assert loads_before_branch(kernels.mla_decode_stage1, runtime, stage1, constexprs, branch) >= 2


def test_stage2_loads_first_partials_before_branching():
    """Stage 2 (8 splits, 64 heads, 16 rows) issues its first block of partial loads
    before its first branch, so they do not wait for the row's length: the length and
    the split count alone were loaded before it when the merge loop held them."""
    from mla_jax import kernels

    _, stage2 = kernels.launch_params(**geometry(16, 64, 8), q_dtype="bfloat16")
    runtime = ["*fp32", "*i32", "*i32", "*bf16", "*fp32"]
    loads = loads_before_branch(
        kernels.mla_decode_stage2, runtime, stage2, stage2["constexprs"], r"\bBRA\b"
    )
    assert loads > 2


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    print(json.dumps(build_report(int(sys.argv[1]), *sys.argv[2:])))
