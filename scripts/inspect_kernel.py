"""What Triton 3.6 makes of stage 1 for sm_90, read on the CPU (no GPU needed).

For each configuration: registers, spills, shared memory; counts of the
instructions that matter in the SASS (warpgroup MMA HGMMA, mma.sync HMMA, CTA
barriers, local-memory spill traffic, async copies), the KV loop's instruction mix
and its longest chain of dependent mma.sync, and in the PTX (cp.async / TMA loads,
plain global loads, and the warpgroup-MMA waits: a wait with 0 pending right after a
dot means nothing overlaps it); and whether the TTGIR pipelines the latent loads.
    scripts/dev python scripts/inspect_kernel.py --heads 128 --block-n 64 --warps 8
"""

import argparse
import collections
import os
import re
import subprocess
import tempfile

import triton

from mla_jax import _launch, kernels


def compile_stage1(heads, page, dtype, kv_dtype, config):
    stage1, _ = kernels.launch_params(
        batch=128,
        num_heads=heads,
        num_pages=128 * 256,
        page_size=page,
        pages_per_seq=256,
        kv_lora_rank=512,
        rope_dim=64,
        scale=0.1,
        grid_splits=4,
        q_nope_strides=(heads * 576, 576, 1),
        q_pe_strides=(heads * 576, 576, 1),
        qp_offset=512,
        kv_strides=(page * 576, 576, 1),
        block_table_strides=(256, 1),
        buffer_strides=(heads * 4 * 513, 4 * 513, 513, 1),
        q_dtype={"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[dtype],
        config=config,
    )
    # Triton types of the run-time arguments: q_nope, q_pe, kv, block table, seq_lens,
    # num_splits, kv_scale, the buffer in, the buffer out.
    runtime = [f"*{dtype}", f"*{dtype}", f"*{kv_dtype}", "*i32", "*i32", "*i32", "*fp32"]
    runtime += ["*fp32", "*fp32"]
    # The build the launch route makes (its alignment hints, options and target), from
    # the same Triton cache.
    spec = _launch.kernel_spec(
        kernels.mla_decode_stage1,
        runtime,
        stage1["constexprs"] | kernels.stage1_absent(False),
        num_warps=stage1["num_warps"],
        num_stages=stage1["num_stages"],
    )
    return _launch.compile_kernel(spec, 90)


def run_tool(name, data, suffix, *args):
    """Run one of the CUDA tools bundled with Triton on ``data`` written to a temp file;
    returns (stdout, stderr)."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k" + suffix)
        with open(path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        done = subprocess.run([tool, *args, path], capture_output=True, text=True, check=True)
        return done.stdout, done.stderr


def ptxas_usage(ptx):
    """Registers and spill bytes, from ptxas -v."""
    _, log = run_tool("ptxas", ptx, ".ptx", "-v", "--gpu-name", "sm_90a", "-o", os.devnull)
    regs = re.search(r"Used (\d+) registers", log).group(1)
    spills = re.search(r"(\d+) bytes spill stores", log).group(1)
    return regs, spills


INTEGER_OPS = (
    "IMAD",
    "LEA",
    "ISETP",
    "SHF",
    "IADD3",
    "VIADD",
    "SEL",
    "LOP3",
    "SGXT",
    "IMNMX",
    "UIADD3",
    "ULEA",
    "USEL",
    "UISETP",
)


def loop_body(code):
    """The SASS instructions of the longest loop (stage 1's KV loop)."""
    ins = [
        (int(m.group(1), 16), m.group(2).strip())
        for m in re.finditer(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", code, re.MULTILINE)
    ]
    index = {a: i for i, (a, _) in enumerate(ins)}
    loops = [
        (index[int(m.group(1), 16)], i)
        for i, (a, t) in enumerate(ins)
        if (m := re.search(r"BRA\s+0x([0-9a-f]+)", t))
        and int(m.group(1), 16) < a
        and int(m.group(1), 16) in index
    ]
    first, last = max(loops, key=lambda loop: loop[1] - loop[0])
    return [re.sub(r"^@!?U?P\w+\s+", "", t) for _, t in ins[first : last + 1]]


def opcode_counts(body):
    return collections.Counter(t.split()[0].split(".")[0] for t in body)


def longest_mma_chain(body):
    """The longest run of mma.sync (HMMA) in ``body`` each accumulating onto the last
    one's result: its latency is paid in full, one HMMA after the other."""
    depth = {}
    for t in body:
        if m := re.match(r"HMMA\.\S+\s+(R\d+),\s*R\d+,\s*R\d+,\s*(R\d+|RZ)", t):
            depth[m.group(1)] = depth.get(m.group(2), 0) + 1
    return max(depth.values(), default=0)


WAIT_NONE = r"wgmma.wait_group.sync.aligned\s+0;"
WAIT_SOME = r"wgmma.wait_group.sync.aligned\s+[1-9]"


def report(compiled):
    ptx, ttgir = compiled.asm["ptx"], compiled.asm["ttgir"]
    count = lambda pat, text: len(re.findall(pat, text))
    regs, spills = ptxas_usage(ptx)
    code, _ = run_tool("cuobjdump", compiled.asm["cubin"], ".cubin", "-sass")
    loop = loop_body(code)
    body = opcode_counts(loop)
    # SASS, what runs: warpgroup MMA (HGMMA) vs mma.sync (HMMA), CTA barriers, and
    # local-memory traffic (spills).
    return (
        f"regs={regs} spill_stores={spills}B smem={compiled.metadata.shared} "
        f"SASS: HGMMA={count(r'HGMMA', code)} HMMA={count(r' HMMA', code)} "
        f"BAR.SYNC={count(r'BAR.SYNC', code)} STL={count(r' STL', code)} "
        f"LDL={count(r' LDL', code)} LDGSTS={count(r'LDGSTS', code)}; KV loop body: "
        f"{sum(body.values())} instructions, {sum(body[op] for op in INTEGER_OPS)} integer, "
        f"{body['LDG']} LDG, longest HMMA chain {longest_mma_chain(loop)} | PTX: "
        f"wgmma={count(r'wgmma.mma_async', ptx)} mma.sync={count(r'mma.sync', ptx)} "
        f"cp.async={count(r'cp.async.cg|cp.async.ca', ptx)} tma={count(r'cp.async.bulk', ptx)} "
        f"ld.global={count(r'ld.global', ptx)} "
        f"wgmma.wait_group: pending 0 x{count(WAIT_NONE, ptx)}, "
        f"pending > 0 x{count(WAIT_SOME, ptx)} "
        f"ttgir_async_copy={count(r'async_copy_global_to_local', ttgir)}"
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--heads", type=int, default=128)
    p.add_argument("--page", type=int, default=64)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--kv-dtype", default=None)
    p.add_argument("--block-h", type=int)
    p.add_argument("--block-n", type=int)
    p.add_argument("--warps", type=int)
    p.add_argument("--stages", type=int)
    p.add_argument("--chunks", type=int, help="LORA_CHUNKS")
    p.add_argument("--dump", help="write the TTGIR to this file")
    a = p.parse_args()
    config = {
        k: v
        for k, v in dict(
            BLOCK_H=a.block_h,
            BLOCK_N=a.block_n,
            num_warps=a.warps,
            num_stages=a.stages,
            LORA_CHUNKS=a.chunks,
        ).items()
        if v is not None
    }
    compiled = compile_stage1(a.heads, a.page, a.dtype, a.kv_dtype or a.dtype, config)
    print(kernels.stage1_config(a.heads, a.dtype == "fp32") | config, report(compiled))
    if a.dump:
        with open(a.dump, "w") as f:
            f.write(compiled.asm["ttgir"])


if __name__ == "__main__":
    main()
