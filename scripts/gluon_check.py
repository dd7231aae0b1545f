"""Checks and times the Gluon stage 1 kernels (``mla_jax._gluon_kernels``) on a Hopper GPU.

Each case launches the tl stage 1 (``kernels.mla_decode_stage1``), the Gluon one
(``mla_decode_stage1_gluon``) and the seesaw Gluon one
(``mla_decode_stage1_gluon_seesaw``) on the same torch tensors, each into its own
NaN-poisoned buffer, then the same tl stage 2 on each buffer, and checks:
  * out / lse after stage 2 against a float64 torch reference (every path);
  * each Gluon kernel's partials against the tl partials, slot by slot (non-empty
    splits);
  * that neither Gluon kernel wrote into empty splits (their slots stay NaN).
Cases: bf16 and fp16, H in {64, 128}, B in {1, 4, 16, 128}, L in {1024, 4096, 16384};
ragged batches (zero lengths, lengths off the 64 grid, one past the table's capacity,
rows past each length NaN, an out-of-range page index in the table) at several split
counts, H = 96 too. Then times tl vs Gluon vs Gluon-seesaw stage 1, each followed by the
same stage 2, with ``triton.testing.do_bench_cudagraph``. Exits 1 on any mismatch.
Each launch is synchronised and checked before the next one (a seesaw deadlock shows
up as a hang at the case it is in: the line before it is printed).

All cases share one latent pool and one table width (``NUM_PAGES``, ``CAPACITY``)
and a buffer with a fixed split axis, so each kernel compiles once per (dtype, H).

    python scripts/gluon_check.py [--skip-timing] [--skip-checks]
"""

import argparse
import functools
import sys
import time

import torch
import triton
import triton.testing

from mla_jax import _gluon_kernels as gk
from mla_jax import kernels
from mla_jax.splits import occupancy_kv_splits
from mla_jax.tools.bench import SCALE

LORA, ROPE, PAGE = 512, 64, 64
D = LORA + ROPE
PAGES_PER_SEQ = 256  # CAPACITY = 16384 tokens
NUM_PAGES = 128 * PAGES_PER_SEQ  # the largest case's pages
MAX_SPLITS = 128  # the buffer's split axis (occupancy's cap)
OUT_ATOL, OUT_RTOL, LSE_ATOL, PART_ATOL = 2e-2, 2e-2, 2e-3, 2e-2
TIMING = [
    (128, 128, 16384),
    (128, 128, 4096),
    (16, 128, 4096),
    (1, 128, 4096),
    (64, 64, 4096),
    (128, 64, 16384),
]
CROSSOVER = [
    (1, 128, 4096),
    (1, 128, 16384),
    (4, 128, 4096),
    (4, 128, 16384),
    (16, 128, 1024),
    (16, 128, 16384),
    (1, 64, 16384),
    (4, 64, 4096),
    (16, 64, 4096),
]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
PATHS = ("tl", "gluon", "seesaw")  # the stage-1 kernels: tl, Gluon, Gluon seesaw
GLUON_PATHS = PATHS[1:]


class Launch:
    """The stage-1 kernels (``PATHS``) and stage 2 on one problem, each stage 1 into
    its own buffer. ``both(path)`` runs that stage 1 then stage 2 on its buffer and
    leaves ``out``/``lse``."""

    def __init__(self, q, pool, table, lens, splits):
        batch, heads, _ = q.shape
        dev = q.device
        self.buf = {
            name: torch.full((batch, heads, MAX_SPLITS, LORA + 1), float("nan"), device=dev)
            for name in PATHS
        }
        self.out = torch.full((batch, heads, LORA), float("nan"), device=dev, dtype=q.dtype)
        self.lse = torch.full((batch, heads), float("nan"), device=dev)
        self.ns = torch.tensor([splits], dtype=torch.int32, device=dev)
        self.kv_scale = torch.ones(1, device=dev)
        self.args = (q, pool, table, lens)
        geometry = dict(
            batch=batch,
            num_heads=heads,
            num_pages=pool.shape[0],
            page_size=PAGE,
            pages_per_seq=table.shape[1],
            kv_lora_rank=LORA,
            rope_dim=ROPE,
            scale=SCALE,
            grid_splits=splits,
            q_nope_strides=q.stride(),
            q_pe_strides=q.stride(),
            qp_offset=LORA,
            kv_strides=pool.stride(),
            block_table_strides=table.stride(),
            buffer_strides=self.buf["tl"].stride(),
        )
        self.s1, self.s2 = kernels.launch_params(**geometry, float32_inputs=False)
        self.g1 = {
            "gluon": gk.launch_params(**geometry),
            "seesaw": gk.seesaw_launch_params(**geometry),
        }
        assert gk.supports(
            num_heads=heads,
            page_size=PAGE,
            kv_lora_rank=LORA,
            rope_dim=ROPE,
            q_dtype=str(q.dtype).removeprefix("torch."),
            kv_dtype=str(pool.dtype).removeprefix("torch."),
            kv_row_stride=pool.stride(1),
            kv_page_stride=pool.stride(0),
        )
        self.compiled = {}

    def stage1(self, name):
        q, pool, table, lens = self.args
        buf = self.buf[name]
        args = (q, q, pool, table, lens, self.ns, self.kv_scale, buf, buf)
        if name == "tl":
            s1 = self.s1
            kernels.mla_decode_stage1[s1["grid"]](
                *args, num_warps=s1["num_warps"], num_stages=s1["num_stages"], **s1["constexprs"]
            )
        else:
            g1 = self.g1[name]
            kernel = (
                gk.mla_decode_stage1_gluon_seesaw
                if name == "seesaw"
                else gk.mla_decode_stage1_gluon
            )
            self.compiled[name] = kernel[g1["grid"]](
                *args, num_warps=g1["num_warps"], num_stages=g1["num_stages"], **g1["constexprs"]
            )

    def stage2(self, name):
        s2 = self.s2
        kernels.mla_decode_stage2[s2["grid"]](
            self.buf[name],
            self.args[3],
            self.ns,
            self.out,
            self.lse,
            num_warps=s2["num_warps"],
            num_stages=s2["num_stages"],
            **s2["constexprs"],
        )

    def both(self, name):
        self.stage1(name)
        self.stage2(name)


def reference(q, pool, table, lens, scale):
    """float64 dense decode: out [B, H, LORA], lse [B, H] (rows of length 0: 0, -inf).
    Page indices outside the pool read page 0 and lengths are clamped to the table's
    capacity, as the kernels do; rows past a length are zeroed before use (they may hold
    NaN)."""
    batch, heads, _ = q.shape
    cap = table.shape[1] * PAGE
    lens = lens.long().clamp(0, cap)
    n = max(1, int(lens.max()))
    npages = triton.cdiv(n, PAGE)
    out = torch.zeros(batch, heads, LORA, dtype=torch.float64, device=q.device)
    lse = torch.full((batch, heads), float("-inf"), dtype=torch.float64, device=q.device)
    for b0 in range(0, batch, 8):
        b1 = min(batch, b0 + 8)
        pages = table[b0:b1, :npages].long()
        pages = torch.where((pages >= 0) & (pages < pool.shape[0]), pages, 0)
        rows = pool[pages].reshape(b1 - b0, npages * PAGE, D).double()
        live = torch.arange(npages * PAGE, device=q.device)[None, :] < lens[b0:b1, None]
        rows = rows.masked_fill(~live[..., None], 0.0)
        logits = torch.einsum("bhd,bnd->bhn", q[b0:b1].double(), rows) * scale
        logits = logits.masked_fill(~live[:, None, :], float("-inf"))
        m = logits.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(logits - m)
        denom = p.sum(-1)
        acc = torch.einsum("bhn,bnd->bhd", p, rows[..., :LORA])
        out[b0:b1] = acc / denom.clamp_min(1e-300)[..., None]
        lse[b0:b1] = torch.where(denom > 0, m[..., 0] + torch.log(denom), float("-inf"))
    return out, lse


def lse_error(lse, ref):
    both_inf = torch.isinf(ref) & (lse == ref)
    diff = torch.where(both_inf, torch.zeros_like(ref), (lse.double() - ref).abs())
    return float(diff.nan_to_num(float("inf")).max())


def out_error(out, ref):
    """max |out - ref| / (1 + |ref| * OUT_RTOL / OUT_ATOL): <= OUT_ATOL passes."""
    diff = (out.double() - ref).abs() / (1 + ref.abs() * (OUT_RTOL / OUT_ATOL))
    return float(diff.nan_to_num(float("inf")).max())


def live_splits(lens, splits, capacity):
    """[B, MAX_SPLITS] bool: the splits with tokens (kernels._split_range)."""
    lens = lens.long().clamp(0, capacity)
    per = (lens + splits - 1) // splits
    s = torch.arange(MAX_SPLITS, device=lens.device)
    return (s[None, :] < splits) & (per[:, None] * s[None, :] < lens[:, None])


def check(name, q, pool, table, lens, splits):
    """Runs every path on one problem; prints one line; returns whether it passed
    (both Gluon kernels must pass; the tl numbers are for reference)."""
    run = Launch(q, pool, table, lens, splits)
    ref_out, ref_lse = reference(q, pool, table, lens, SCALE)
    errs = {}
    for path in PATHS:
        run.out.fill_(float("nan"))
        run.lse.fill_(float("nan"))
        run.both(path)
        torch.cuda.synchronize()
        errs[path] = (out_error(run.out, ref_out), lse_error(run.lse, ref_lse))
    live = live_splits(lens, splits, table.shape[1] * PAGE)  # [B, S]
    live = live.unsqueeze(1).expand(-1, q.shape[1], -1)
    tl_buf = run.buf["tl"]
    part_err, wrote_dead = {}, {}
    for path in GLUON_PATHS:
        part = (run.buf[path] - tl_buf).abs()[live]
        part_err[path] = float(part.nan_to_num(float("inf")).max()) if part.numel() else 0.0
        wrote_dead[path] = bool((~torch.isnan(run.buf[path][~live])).any())
    ok = {
        path: errs[path][0] <= OUT_ATOL
        and errs[path][1] <= LSE_ATOL
        and part_err[path] <= PART_ATOL
        and not wrote_dead[path]
        for path in GLUON_PATHS
    }
    print(
        f"{'PASS' if all(ok.values()) else 'FAIL'} {name:<44} splits={splits:3d} "
        + " | ".join(
            f"{path}{'' if ok[path] else ' FAIL'} out {errs[path][0]:.1e} lse {errs[path][1]:.1e}"
            f" partials {part_err[path]:.1e}" + (" WROTE EMPTY SPLITS" if wrote_dead[path] else "")
            for path in GLUON_PATHS
        )
        + f" | tl out {errs['tl'][0]:.1e} lse {errs['tl'][1]:.1e}",
        flush=True,
    )
    if name.startswith("uniform") and name.endswith("B=1 L=1024"):
        for path, compiled in run.compiled.items():
            meta = compiled.metadata
            print(
                f"     {path} build: regs={compiled.n_regs} spills={compiled.n_spills} "
                f"shared={meta.shared} global_scratch={meta.global_scratch_size} "
                f"warps={meta.num_warps}",
                flush=True,
            )
    return all(ok.values())


def new_pool(dtype, gen):
    return torch.randn(NUM_PAGES, PAGE, D, generator=gen, device="cuda").to(dtype)


def uniform_problem(pool, batch, heads, length, gen):
    q = torch.randn(batch, heads, D, generator=gen, device="cuda").to(pool.dtype)
    perm = torch.randperm(NUM_PAGES, generator=gen, device="cuda")
    table = perm[: batch * PAGES_PER_SEQ].view(batch, PAGES_PER_SEQ).int().contiguous()
    lens = torch.full((batch,), length, dtype=torch.int32, device="cuda")
    return q, table, lens


def ragged_problem(pool, gen):
    """Lengths 0, 1, 63, 64, 65, 1000, 4097 and one past the capacity (clamped); rows
    past each length NaN (in the pool: made once per pool); unused table entries
    garbage; one used entry out of range (reads page 0, which no row owns)."""
    cap = PAGES_PER_SEQ * PAGE
    lens_list = [0, 1, 63, 64, 65, 1000, 4097, cap + 37]
    batch = len(lens_list)
    perm = torch.randperm(NUM_PAGES - 1, generator=gen, device="cuda") + 1  # never page 0
    table = perm[: batch * PAGES_PER_SEQ].view(batch, PAGES_PER_SEQ).int().contiguous()
    for b, n in enumerate(lens_list):
        n = min(n, cap)
        used = triton.cdiv(n, PAGE)
        table[b, used:] = torch.where(
            torch.arange(PAGES_PER_SEQ - used, device="cuda") % 2 == 0, -7, 10**9
        ).int()
        if n % PAGE:
            pool[table[b, used - 1].long(), n % PAGE :] = float("nan")
    table[5, 3] = NUM_PAGES + 5  # reads page 0
    lens = torch.tensor(lens_list, dtype=torch.int32, device="cuda")
    return table, lens


def run_checks(dtype_name, pool, gen, sm):
    ok = True
    for heads in (64, 128):
        for batch in (1, 4, 16, 128):
            for length in (1024, 4096, 16384):
                q, table, lens = uniform_problem(pool, batch, heads, length, gen)
                splits = occupancy_kv_splits(batch, heads, length, sm)
                ok &= check(
                    f"uniform {dtype_name} H={heads} B={batch} L={length}",
                    q,
                    pool,
                    table,
                    lens,
                    splits,
                )
    return ok


def run_ragged(dtype_name, pool, gen, sm):
    ok = True
    table, lens = ragged_problem(pool, gen)
    for heads in (64, 128, 96):
        q = torch.randn(len(lens), heads, D, generator=gen, device="cuda").to(pool.dtype)
        occ = occupancy_kv_splits(len(lens), heads, PAGES_PER_SEQ * PAGE, sm)
        for splits in sorted({occ, 7, MAX_SPLITS}):
            ok &= check(
                f"ragged {dtype_name} H={heads} B={len(lens)}", q, pool, table, lens, splits
            )
    return ok


def run_timing(pool, gen, sm):
    print("timing (do_bench_cudagraph, median; stage 2 is the same tl kernel):")
    for batch, heads, length in TIMING:
        q, table, lens = uniform_problem(pool, batch, heads, length, gen)
        splits = occupancy_kv_splits(batch, heads, length, sm)
        run = Launch(q, pool, table, lens, splits)
        flops = 2 * batch * heads * length * (D + LORA)
        us = {}
        for path in PATHS:
            run.both(path)
            us[path + " s1"] = 1e3 * triton.testing.do_bench_cudagraph(
                functools.partial(run.stage1, path), rep=100, return_mode="median"
            )
            us[path + " s1+s2"] = 1e3 * triton.testing.do_bench_cudagraph(
                functools.partial(run.both, path), rep=100, return_mode="median"
            )
        print(
            f"  B={batch:3d} H={heads:3d} L={length:5d} splits={splits:3d} | "
            + " | ".join(f"{k} {v:8.1f} us {flops / v / 1e6:5.0f} TFLOP/s" for k, v in us.items())
            + f" | stage-1 speedup vs tl: gluon {us['tl s1'] / us['gluon s1']:.2f}x"
            f" seesaw {us['tl s1'] / us['seesaw s1']:.2f}x"
            f" (seesaw vs gluon {us['gluon s1'] / us['seesaw s1']:.2f}x)",
            flush=True,
        )
        del run, q, table, lens
        torch.cuda.empty_cache()


def run_crossover(pool, gen, sm):
    """Where the Gluon kernels start to win: at shapes whose occupancy splits are
    short, tl at its occupancy split count against each Gluon kernel at that count
    and at fewer, longer splits (both stages, do_bench_cudagraph median)."""
    print("crossover (both stages, us; gluon kernels at split counts occ, occ/2, ...):")
    for batch, heads, length in CROSSOVER:
        q, table, lens = uniform_problem(pool, batch, heads, length, gen)
        occ = occupancy_kv_splits(batch, heads, length, sm)
        counts = [s for s in (occ, occ // 2, occ // 4, occ // 8, occ // 16) if s >= 1]
        times = {}
        for splits in counts:
            run = Launch(q, pool, table, lens, splits)
            for path in PATHS if splits == occ else GLUON_PATHS:
                run.both(path)
                times[path, splits] = 1e3 * triton.testing.do_bench_cudagraph(
                    functools.partial(run.both, path), rep=50, return_mode="median"
                )
            del run
        cells = " | ".join(
            f"{path}@{s} ({length // s} tok) {us:6.1f}" for (path, s), us in times.items()
        )
        print(f"  B={batch:3d} H={heads:3d} L={length:5d} occ={occ:3d} | {cells}", flush=True)
        torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--skip-checks", action="store_true")
    parser.add_argument("--crossover", action="store_true", help="only the crossover timing")
    args = parser.parse_args()
    if args.crossover:
        props = torch.cuda.get_device_properties(0)
        gen = torch.Generator(device="cuda").manual_seed(0)
        run_crossover(new_pool(torch.bfloat16, gen), gen, props.multi_processor_count)
        return
    t0 = time.time()
    props = torch.cuda.get_device_properties(0)
    sm = props.multi_processor_count
    print(f"{props.name}, {sm} SMs, torch {torch.__version__}, triton {triton.__version__}")
    ok = True
    for dtype_name, dtype in DTYPES.items():
        gen = torch.Generator(device="cuda").manual_seed(0)
        pool = new_pool(dtype, gen)
        if not args.skip_checks:
            ok &= run_checks(dtype_name, pool, gen, sm)
        if dtype_name == "bf16" and not args.skip_timing:
            run_timing(pool, gen, sm)
        if not args.skip_checks:
            ok &= run_ragged(dtype_name, pool, gen, sm)  # poisons the pool: last
        del pool
        torch.cuda.empty_cache()
    print(f"{'ALL PASS' if ok else 'SOME CASES FAILED'} in {time.time() - t0:.0f} s")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
