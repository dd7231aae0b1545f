"""Checks and times the Gluon stage 1 kernels (``mla_jax.gluon``) on a Hopper GPU.

Each case launches the tl stage 1 (``kernels.mla_decode_stage1``) and the Gluon one
for the cache's dtype (``plan.gluon_kernel``: the seesaw kernel for a 16-bit cache, the fp8
kernel for an fp8 one) on the same torch tensors, each into its own NaN-poisoned
buffer, then the same tl stage 2 on each buffer, and checks:
  * out / lse after stage 2 against a float64 torch reference (both paths);
  * the Gluon partials against the tl partials, slot by slot (non-empty splits; bf16
    ones, ``kernels.bf16_partials``, unpacked and allowed their rounding);
  * that the Gluon kernel wrote nothing into empty splits (their slots stay NaN).
With one split stage 1 writes out / lse itself (no stage 2): the Gluon output is
compared with the tl one, and the buffer must stay NaN.
Cases: bf16 and fp16, H in {16, 32, 64, 128} (each with the kernel ``mla_decode`` picks
for the problem's tokens: at 32 heads the 16-head kernel's two 16-head tiles or one
32-head tile, at 64 and 128 in small steps its 32-head tiles, ``plan.narrow_tile``), B in
{1, 4, 16, 128}, L in {1024, 4096, 16384}; ragged batches (zero lengths, lengths off
the 64 grid, one past the table's capacity, rows past each length NaN, an out-of-range
page index in the table) at several split counts, H = 96 too. Then times tl vs Gluon
stage 1, each followed by the same stage 2, with ``triton.testing.do_bench_cudagraph``.

fp8 (``float8_e4m3fn``) cache, after the 16-bit dtypes: a bf16 pool quantised with
one scale as ``mla_jax.cache.quantize_fp8`` does (amax / 448), the scale passed as
``kv_scale``; the reference is float64 on the dequantised values (fp8 * scale), and
the partials are compared against the tl kernel's fp8 path. The same uniform grid
with bf16 q, a subset with fp16 q (and a partial head tile), bf16 q whose heads span
2^-12 to 2^3 with NaN or inf in two heads (the kernel rewrites bf16 q as fp16, each
head scaled on its own), and the ragged cases with bf16 q. Then, last in the log,
timing: tl and Gluon fp8 and, on the bf16 pool it was quantised from, tl and Gluon
bf16 (``FP8_TIMING``). Exits 1 on any mismatch. ``--skip-fp8``: the 16-bit caches
alone.

``--only-fp8-h16`` alone: the 16-head fp8 kernel (``mla_decode_stage1_gluon_fp8_h16``, the
one ``plan.gluon_kernel`` picks for an fp8 cache under 64 heads): the same checks on an fp8
pool (H 16, 20, 32; bf16 and fp16 q; B 1/4/16/128, L 1024/4096/16384; the ragged
cases), then its timing against the tl kernel on the fp8
pool and on the bf16 pool it was quantised from (``H16_TIMING``; there is no Gluon
16-bit kernel under 64 heads).

``--heads 32,48`` alone: the seesaw kernel at those head counts on a bf16 cache, whether
or not ``supports`` routes them to it (the evidence a routing change needs): the uniform
grid, the ragged cases, then its timing against the tl kernel at each head count and at
64 heads (``HEADS_TIMING``: B and L).

``--crossover`` alone: where the Gluon kernel starts to win, at shapes whose
occupancy splits are short: tl at its occupancy split count against the Gluon kernel
at that count and at fewer, longer splits, on a bf16 cache (``CROSSOVER``: the seesaw)
and on the fp8 cache quantised from it (``CROSSOVER_FP8``: the seesaw on fp8).

All cases share one latent pool and one table width (``NUM_PAGES``, ``CAPACITY``)
and a buffer with a fixed split axis, so each kernel compiles once per (dtype, H).

    python scripts/gluon_check.py [--skip-timing] [--skip-checks] [--skip-fp8]
        [--only-fp8 | --only-fp8-h16 | --heads H,... | --crossover]
"""

import argparse
import dataclasses
import functools
import sys
import time

import torch
import triton
import triton.testing

from mla_jax import kernels
from mla_jax import plan as gk
from mla_jax.splits import occupancy_kv_splits
from mla_jax.tools.bench import SCALE

LORA, ROPE, PAGE = 512, 64, 64
D = LORA + ROPE
PAGES_PER_SEQ = 256  # CAPACITY = 16384 tokens
NUM_PAGES = 128 * PAGES_PER_SEQ  # the largest case's pages
MAX_SPLITS = 128  # the buffer's split axis (occupancy's cap)
OUT_ATOL, OUT_RTOL, LSE_ATOL, PART_ATOL = 2e-2, 2e-2, 2e-3, 2e-2
# Where either path stores bf16 partials, their difference may exceed PART_ATOL by
# this much of the value.
PART_BF16_RTOL = 2 * 2**-8
TIMING = [
    (128, 128, 16384),
    (128, 128, 4096),
    (16, 128, 4096),
    (1, 128, 4096),
    (64, 64, 4096),
    (128, 64, 16384),
]
# fp8 against bf16: the shapes (B, H, L).
FP8_TIMING = [(128, 128, 16384), (128, 128, 4096), (64, 64, 4096), (16, 128, 4096)]
# The 16-head fp8 kernel against tl fp8 and tl bf16: (B, H, L).
H16_TIMING = [
    (128, 16, 16384),
    (64, 16, 4096),
    (16, 16, 16384),
    (4, 16, 16384),
    (64, 32, 4096),
    # Short splits, where the rule in _triton_backend keeps the tl kernel (64-128 tokens):
    (16, 16, 1024),
    (1, 16, 4096),
    (4, 16, 4096),
]
H16_HEADS = (16, 20, 32)
# ``--heads``: (B, L) at each head count asked for, and at 64 heads for reference.
HEADS_TIMING = [(128, 16384), (64, 16384), (128, 4096), (64, 4096), (16, 16384), (16, 4096)]
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
    (16, 32, 1024),
    (16, 64, 1024),
    (64, 64, 1024),
]
# ``--crossover`` on an fp8 cache: the seesaw at 128-1024 tokens a split,
# around its bound (``plan.SEESAW_MIN_SPLIT_TOKENS``, 128).
CROSSOVER_FP8 = [
    (1, 128, 4096),
    (4, 128, 4096),
    (16, 128, 1024),
    (1, 64, 16384),
    (4, 64, 4096),
    (16, 64, 4096),
    (64, 64, 1024),
    (16, 128, 4096),
]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# A 16-bit cache's checks: the 16-bit 16-head kernel (at 32 heads two 16-head tiles a row
# or one 32-head tile; at 64 and 128 in small steps two and four 32-head tiles), the
# seesaw (its tile, two).
SIXTEEN_BIT_HEADS = (16, 32, 64, 128)
FP8_MAX = 448.0  # mla_jax.cache.FP8_MAX


class Launch:
    """Both stage-1 kernels and stage 2 on one problem, each stage 1 into its own
    buffer. ``tl()`` / ``gluon()`` run stage 1 then stage 2 on that buffer and leave
    ``out``/``lse``."""

    def __init__(
        self,
        q,
        pool,
        table,
        lens,
        splits,
        kv_scale=1.0,
        gluon=True,
        routed=True,
        fp8_mma=False,
        slot=LORA + 1,
    ):
        """``kv_scale``: the cache's dequantisation scale (fp8); ``gluon=False``: the tl path only
        (a problem no Gluon kernel supports); ``routed=False``: the Gluon kernel also
        where ``supports`` would not send the problem to it (``--heads``); ``fp8_mma``:
        the Gluon kernel ``mla_decode(..., fp8_mma=True)`` picks; ``slot``: the buffer's
        last axis (a split's partial and lse, padding after)."""
        batch, heads, _ = q.shape
        dev = q.device
        self.buf = {
            name: torch.full((batch, heads, MAX_SPLITS, slot), float("nan"), device=dev)
            for name in ("tl", "gluon")
        }
        self.out = torch.full((batch, heads, LORA), float("nan"), device=dev, dtype=q.dtype)
        self.lse = torch.full((batch, heads), float("nan"), device=dev)
        self.ns = torch.tensor([splits], dtype=torch.int32, device=dev)
        self.kv_scale = torch.tensor([float(kv_scale)], dtype=torch.float32, device=dev)
        kv_name = str(pool.dtype).removeprefix("torch.")
        q_dtype = str(q.dtype).removeprefix("torch.")
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
        self.geometry = geometry  # the tl kernel's launch problem, less q's dtype
        self.s1, self.s2 = kernels.launch_params(**geometry, q_dtype=q_dtype)
        fp8 = kv_name == gk.FP8
        # The Gluon kernel mla_decode picks with a static max_seq_len of the longest row.
        batch_tokens = batch * int(lens.max())
        # Triton's launcher makes no clusters: the build whose partials stage 2 merges
        # (mla_decode merges a seesaw row's two splits in a cluster instead).
        problem = gk.Problem.on_sm90(
            q_dtype=q_dtype,
            kv_dtype=kv_name if fp8 else None,
            fp8_mma=fp8_mma,
            cluster_merge=False,
            batch_tokens=batch_tokens,
            **geometry,
        )
        self.g1 = gk.gluon_stage1(problem, problem.grid_splits, batch_tokens)
        # Stage 2 for the Gluon partials (bf16 where the seesaw writes them so).
        self.g2 = gk.gluon_stage2(self.s2, self.g1)
        self.gluon_kernel = (
            gk.gluon_kernel(kv_name, heads, fp8_mma, batch_tokens) if gluon else None
        )
        assert not (gluon and routed) or gk.supports(dataclasses.replace(problem, kv_dtype=kv_name))
        self.compiled = None

    def stage1(self, name):
        """Stage 1 into path ``name``'s buffer, or with one split into ``out``/``lse``."""
        q, pool, table, lens = self.args
        pointers = kernels.stage1_pointers(self.s2 is None, self.buf[name], self.out, self.lse)
        args = (q, q, pool, table, lens, self.ns, self.kv_scale)
        if name == "tl":
            s1 = self.s1
            kernels.mla_decode_stage1[s1["grid"]](
                *args,
                **pointers,
                num_warps=s1["num_warps"],
                num_stages=s1["num_stages"],
                **s1["constexprs"],
            )
        else:
            g1 = self.g1
            self.compiled = self.gluon_kernel[g1["grid"]](
                *args,
                **pointers,
                num_warps=g1["num_warps"],
                num_stages=g1["num_stages"],
                **g1["constexprs"],
            )

    def stage2_launch(self, name):
        """Path ``name``'s stage 2 launch parameters; None with one split."""
        return self.g2 if name == "gluon" else self.s2

    def bf16_partials(self, name):
        """Whether path ``name`` stores bf16 partials (``kernels.bf16_partials``,
        ``gk.gluon_bf16_partials``)."""
        s2 = self.stage2_launch(name)
        return s2 is not None and s2["constexprs"]["BF16_PARTIALS"]

    def stage2(self, name):
        """Stage 2 on path ``name``'s buffer; nothing with one split."""
        s2 = self.stage2_launch(name)
        if s2 is None:
            return
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

    def partials(self, name):
        """Path ``name``'s buffer with its partials as float32 (bf16 ones unpacked:
        ``bf16_partials``), the lse in slot ``LORA``; NaN past it."""
        buf = self.buf[name]
        if not self.bf16_partials(name):
            return buf
        unpacked = torch.full_like(buf, float("nan"))
        unpacked[..., :LORA] = buf[..., : LORA // 2].contiguous().view(torch.bfloat16).float()
        unpacked[..., LORA] = buf[..., LORA]
        return unpacked

    def both(self, name):
        self.stage1(name)
        self.stage2(name)

    def time_us(self, stages, name, rep=100):
        """Median µs of ``stages`` (``self.stage1`` or ``self.both``) for path ``name``
        under a CUDA graph (``do_bench_cudagraph``)."""
        fn = functools.partial(stages, name)
        return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median")


def gather_pages(pool, pages):
    """``pool[pages]``, fp8 pools through their bytes (indexing need not support fp8)."""
    if pool.dtype == torch.float8_e4m3fn:
        return pool.view(torch.uint8)[pages].view(torch.float8_e4m3fn)
    return pool[pages]


def reference(q, pool, table, lens, scale, kv_scale=1.0):
    """float64 dense decode: out [B, H, LORA], lse [B, H] (rows of length 0: 0, -inf).
    Page indices outside the pool read page 0 and lengths are clamped to the table's
    capacity, as the kernels do; rows past a length are zeroed before use (they may hold
    NaN). The cache's values are ``pool * kv_scale`` (fp8: dequantised)."""
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
        rows = gather_pages(pool, pages).reshape(b1 - b0, npages * PAGE, D).double() * kv_scale
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


def check(name, q, pool, table, lens, splits, kv_scale=1.0, routed=True):
    """Runs both paths on one problem; prints one line; returns whether it passed."""
    run = Launch(q, pool, table, lens, splits, kv_scale, routed=routed)
    ref_out, ref_lse = reference(q, pool, table, lens, SCALE, kv_scale)
    errs, outs = {}, {}
    for path in ("tl", "gluon"):
        run.out.fill_(float("nan"))
        run.lse.fill_(float("nan"))
        run.both(path)
        torch.cuda.synchronize()
        errs[path] = (out_error(run.out, ref_out), lse_error(run.lse, ref_lse))
        if splits == 1:  # the outputs stand in for the partials below
            outs[path] = run.out.float().clone()
    live = live_splits(lens, splits, table.shape[1] * PAGE)  # [B, S]
    gl_buf = run.buf["gluon"]
    if splits == 1:
        # Stage 1 wrote the outputs, and no buffer slot: "partials" are the outputs.
        part = (outs["gluon"] - outs["tl"]).abs()
        dead = torch.ones_like(gl_buf, dtype=torch.bool)
    else:
        live_slots = live.unsqueeze(1).expand(-1, q.shape[1], -1)
        tl_part = run.partials("tl")[live_slots]
        part = (run.partials("gluon")[live_slots] - tl_part).abs()
        if run.bf16_partials("tl") or run.bf16_partials("gluon"):
            # Each side's bf16 rounding (half an ulp, at most 2^-8 of the value).
            part = part - PART_BF16_RTOL * tl_part.abs()
        dead = ~live_slots
    part_err = float(part.nan_to_num(float("inf")).max()) if part.numel() else 0.0
    wrote_dead = bool((~torch.isnan(gl_buf[dead])).any())
    ok = (
        errs["gluon"][0] <= OUT_ATOL
        and errs["gluon"][1] <= LSE_ATOL
        and part_err <= PART_ATOL
        and not wrote_dead
    )
    print(
        f"{'PASS' if ok else 'FAIL'} {name:<44} splits={splits:3d} "
        f"gluon out {errs['gluon'][0]:.1e} lse {errs['gluon'][1]:.1e} | "
        f"tl out {errs['tl'][0]:.1e} lse {errs['tl'][1]:.1e} | "
        f"partials {part_err:.1e}" + (" | WROTE EMPTY SPLITS" if wrote_dead else ""),
        flush=True,
    )
    if run.compiled is not None and name.startswith("uniform") and "B=1 L=1024" in name:
        meta = run.compiled.metadata
        print(
            f"     gluon build: regs={run.compiled.n_regs} spills={run.compiled.n_spills} "
            f"shared={meta.shared} global_scratch={meta.global_scratch_size}",
            flush=True,
        )
    return ok


def new_pool(dtype, gen):
    return torch.randn(NUM_PAGES, PAGE, D, generator=gen, device="cuda").to(dtype)


def quantize_fp8(pool):
    """``mla_jax.cache.quantize_fp8`` in torch: one scale, amax / 448, for the whole
    pool; returns ``(pool_fp8, scale)`` with ``pool ~= pool_fp8 * scale``."""
    amax = float(pool.abs().amax().float())
    scale = max(amax, torch.finfo(torch.float32).tiny) / FP8_MAX
    scale = float(torch.tensor(scale, dtype=torch.float32))  # as kv_scale holds it
    out = torch.empty(pool.shape, dtype=torch.float8_e4m3fn, device=pool.device)
    for p0 in range(0, pool.shape[0], 4096):
        chunk = pool[p0 : p0 + 4096].float() / scale
        out[p0 : p0 + 4096] = chunk.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return out, scale


def uniform_problem(pool, batch, heads, length, gen, q_dtype=None):
    q_dtype = pool.dtype if q_dtype is None else q_dtype
    q = torch.randn(batch, heads, D, generator=gen, device="cuda").to(q_dtype)
    perm = torch.randperm(NUM_PAGES, generator=gen, device="cuda")
    table = perm[: batch * PAGES_PER_SEQ].view(batch, PAGES_PER_SEQ).int().contiguous()
    lens = torch.full((batch,), length, dtype=torch.int32, device="cuda")
    return q, table, lens


def ragged_problem(pool, gen):
    """Lengths 0, 1, 63, 64, 65, 1000, 4097 and one past the capacity (clamped); rows
    past each length NaN (written into ``pool``); unused table entries
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
            page = table[b, used - 1].long()
            if pool.dtype == torch.float8_e4m3fn:
                pool.view(torch.uint8)[page, n % PAGE :] = 0x7F  # e4m3fn's NaN
            else:
                pool[page, n % PAGE :] = float("nan")
    table[5, 3] = NUM_PAGES + 5  # reads page 0
    lens = torch.tensor(lens_list, dtype=torch.int32, device="cuda")
    return table, lens


def run_checks(
    dtype_name,
    pool,
    gen,
    sm,
    q_dtype=None,
    kv_scale=1.0,
    heads_list=(64, 128),
    batches=(1, 4, 16, 128),
    lengths=(1024, 4096, 16384),
    routed=True,
):
    ok = True
    for heads in heads_list:
        for batch in batches:
            for length in lengths:
                q, table, lens = uniform_problem(pool, batch, heads, length, gen, q_dtype)
                splits = occupancy_kv_splits(batch, heads, length, sm)
                ok &= check(
                    f"uniform {dtype_name} H={heads} B={batch} L={length}",
                    q,
                    pool,
                    table,
                    lens,
                    splits,
                    kv_scale,
                    routed,
                )
    return ok


def run_ragged(
    dtype_name,
    pool,
    gen,
    sm,
    q_dtype=None,
    kv_scale=1.0,
    heads_list=(64, 128, 96),
    routed=True,
):
    ok = True
    # ragged_problem poisons the rows past its lengths, in pages a later table may
    # hand a row as full ones: a copy, so that the caller's pool stays clean.
    pool = pool.clone()
    table, lens = ragged_problem(pool, gen)
    q_dtype = pool.dtype if q_dtype is None else q_dtype
    for heads in heads_list:
        q = torch.randn(len(lens), heads, D, generator=gen, device="cuda").to(q_dtype)
        occ = occupancy_kv_splits(len(lens), heads, PAGES_PER_SEQ * PAGE, sm)
        for splits in sorted({occ, 1, 7, MAX_SPLITS}):  # 1: stage 1 writes the output
            ok &= check(
                f"ragged {dtype_name} H={heads} B={len(lens)}",
                q,
                pool,
                table,
                lens,
                splits,
                kv_scale,
                routed=routed,
            )
    return ok


def run_fp8_checks(pool8, scale, gen, sm):
    """The fp8 cache: bf16 q on the whole uniform grid, fp16 q on a subset and on a
    partial head tile, then bf16 q's heads at many magnitudes (``run_head_magnitudes``)."""
    ok = run_checks("fp8/bf16", pool8, gen, sm, torch.bfloat16, scale)
    ok &= run_checks(
        "fp8/fp16", pool8, gen, sm, torch.float16, scale, batches=(1, 16), lengths=(4096,)
    )
    ok &= run_checks(
        "fp8/fp16",
        pool8,
        gen,
        sm,
        torch.float16,
        scale,
        heads_list=(96,),
        batches=(4,),
        lengths=(1024, 16384),
    )
    ok &= run_head_magnitudes(pool8, scale, gen, sm, (64, 96))
    return ok


def run_timing(pool, gen, sm, shapes=TIMING, routed=True):
    print("timing (do_bench_cudagraph, median; stage 2 is the same tl kernel):")
    for batch, heads, length in shapes:
        q, table, lens = uniform_problem(pool, batch, heads, length, gen)
        splits = occupancy_kv_splits(batch, heads, length, sm)
        run = Launch(q, pool, table, lens, splits, routed=routed)
        flops = 2 * batch * heads * length * (D + LORA)
        us = {}
        for path in ("tl", "gluon"):
            run.both(path)
            us[path + " s1"] = run.time_us(run.stage1, path)
            us[path + " s1+s2"] = run.time_us(run.both, path)
        print(
            f"  B={batch:3d} H={heads:3d} L={length:5d} splits={splits:3d} | "
            + " | ".join(f"{k} {v:8.1f} us {flops / v / 1e6:5.0f} TFLOP/s" for k, v in us.items())
            + f" | stage-1 speedup {us['tl s1'] / us['gluon s1']:.2f}x",
            flush=True,
        )
        del run, q, table, lens
        torch.cuda.empty_cache()


def time_fp8_paths(pool16, pool8, scale, q, table, lens, splits, gluon16, both):
    """Stage 1 µs of tl on the bf16 pool (and Gluon where ``gluon16``: the 64-head
    kernels), and of tl and Gluon on the fp8 pool quantised from it (the 64-head
    kernel), same q, table and lengths; both
    stages too for the keys in ``both`` (``"<key> s1+s2"``)."""
    runs = {
        "bf16": Launch(q, pool16, table, lens, splits, gluon=gluon16),
        "fp8": Launch(q, pool8, table, lens, splits, scale),
    }
    paths = [("tl bf16", "bf16", "tl")]
    if gluon16:
        paths.append(("gluon bf16", "bf16", "gluon"))
    paths += [("tl fp8", "fp8", "tl"), ("gluon fp8", "fp8", "gluon")]
    us = {}
    for key, run_key, path in paths:
        run = runs[run_key]
        run.both(path)
        us[key] = run.time_us(run.stage1, path)
        if key in both:
            us[key + " s1+s2"] = run.time_us(run.both, path)
    return us


def run_fp8_timing(pool16, pool8, scale, gen, sm):
    """tl and Gluon stage 1 on the fp8 pool and on the bf16
    pool it was quantised from, same q, table and lengths; ``fp8 TB/s``: the fp8
    latent bytes read once a row (576 a token) over the Gluon fp8 stage 1's time."""
    print("fp8 timing (do_bench_cudagraph, median, us; stage 2 is the same tl kernel):")
    for batch, heads, length in FP8_TIMING:
        q, table, lens = uniform_problem(pool16, batch, heads, length, gen)
        splits = occupancy_kv_splits(batch, heads, length, sm)
        us = time_fp8_paths(
            pool16,
            pool8,
            scale,
            q,
            table,
            lens,
            splits,
            True,
            ("tl fp8", "gluon fp8", "gluon bf16"),
        )
        fp8_bytes = batch * length * D
        print(
            f"  B={batch:3d} H={heads:3d} L={length:5d} splits={splits:3d} | "
            + " | ".join(f"{k} {v:7.1f}" for k, v in us.items())
            + f" | gluon fp8 {fp8_bytes / us['gluon fp8'] / 1e6:.2f} TB/s"
            + f" | gluon fp8 / gluon bf16 {us['gluon fp8'] / us['gluon bf16']:.2f}"
            + f" | tl fp8 / gluon fp8 {us['tl fp8'] / us['gluon fp8']:.2f}x",
            flush=True,
        )
        del q, table, lens
        torch.cuda.empty_cache()


def run_fp8(args, sm):
    """The fp8-cache section: checks, the ragged cases, then the timing, last so that it
    ends the log."""
    ok = True
    gen = torch.Generator(device="cuda").manual_seed(1)
    pool16 = new_pool(torch.bfloat16, gen)
    pool8, scale = quantize_fp8(pool16)
    print(f"fp8 pool: scale {scale:.6g} (amax / {FP8_MAX:g})", flush=True)
    if not args.skip_checks:
        ok &= run_fp8_checks(pool8, scale, gen, sm)
        ok &= run_ragged("fp8/bf16", pool8, gen, sm, torch.bfloat16, scale)
    if not args.skip_timing:
        run_fp8_timing(pool16, pool8, scale, gen, sm)
    del pool16, pool8
    torch.cuda.empty_cache()
    return ok


def run_fp8_h16_checks(pool8, scale, gen, sm):
    """The 16-head fp8 kernel: the uniform grid with bf16 and fp16 q at H 16, 20 (a
    partial second tile) and 32 (two tiles); heads of q at magnitudes 2^-12 to 2^3 and
    NaN or inf in two heads (the kernel scales each head of bf16 q on its own); then the
    ragged cases."""
    ok = True
    for q_name, q_dtype in DTYPES.items():
        ok &= run_checks(f"fp8-h16/{q_name}", pool8, gen, sm, q_dtype, scale, heads_list=H16_HEADS)
    ok &= run_head_magnitudes(pool8, scale, gen, sm, (16, 20))
    for q_name, q_dtype in DTYPES.items():
        ok &= run_ragged(f"fp8-h16/{q_name}", pool8, gen, sm, q_dtype, scale, H16_HEADS)
    return ok


def run_head_magnitudes(pool8, scale, gen, sm, heads_list, batch=4, length=4096):
    """bf16 q whose head h is scaled by 2^(h % 16 - 12), checked as the uniform grid;
    then one NaN in head 3 and one inf in head 5 (rope part): the other heads must match
    float64 as usual, and the two heads' out must be NaN exactly where the tl kernel's
    is. (Both Gluon fp8 kernels scale each head of bf16 q on its own.)"""
    ok = True
    for heads in heads_list:
        q, table, lens = uniform_problem(pool8, batch, heads, length, gen, torch.bfloat16)
        factors = 2.0 ** (torch.arange(heads, device="cuda") % 16 - 12)
        q = (q.float() * factors[None, :, None]).to(torch.bfloat16)
        splits = occupancy_kv_splits(batch, heads, length, sm)
        name = f"magnitudes fp8/bf16 H={heads} B={batch} L={length}"
        ok &= check(name, q, pool8, table, lens, splits, scale)
        q[:, 3, 10] = float("nan")
        q[:, 5, LORA + 7] = float("inf")
        run = Launch(q, pool8, table, lens, splits, scale)
        ref_out, ref_lse = reference(q, pool8, table, lens, SCALE, scale)
        bad = torch.zeros(heads, dtype=torch.bool, device="cuda")
        bad[[3, 5]] = True
        outs = {}
        for path in ("tl", "gluon"):
            run.out.fill_(0.0)
            run.both(path)
            torch.cuda.synchronize()
            outs[path] = run.out.clone()
        errs = (
            out_error(outs["gluon"][:, ~bad], ref_out[:, ~bad]),
            lse_error(run.lse[:, ~bad], ref_lse[:, ~bad]),
        )
        same_nan = torch.equal(outs["gluon"][:, bad].isnan(), outs["tl"][:, bad].isnan())
        all_nan = bool(outs["gluon"][:, bad].isnan().all())
        case_ok = errs[0] <= OUT_ATOL and errs[1] <= LSE_ATOL and same_nan
        ok &= case_ok
        print(
            f"{'PASS' if case_ok else 'FAIL'} {'nonfinite ' + name[11:]:<44} splits={splits:3d} "
            f"gluon out {errs[0]:.1e} lse {errs[1]:.1e} on the finite heads | NaN heads as "
            f"tl's: {same_nan} (all NaN: {all_nan})",
            flush=True,
        )
    return ok


def run_fp8_h16_timing(pool16, pool8, scale, gen, sm):
    """tl and the 16-head Gluon stage 1 on the fp8 pool, and tl on the
    bf16 pool it was quantised from, same q, table and lengths; ``TB/s``: the fp8 latent
    bytes read once a row (576 a token) over the Gluon stage 1's time."""
    print("fp8 16-head timing (do_bench_cudagraph, median, us; stage 2 is the same tl kernel):")
    for batch, heads, length in H16_TIMING:
        q, table, lens = uniform_problem(pool16, batch, heads, length, gen)
        splits = occupancy_kv_splits(batch, heads, length, sm)
        us = time_fp8_paths(
            pool16, pool8, scale, q, table, lens, splits, False, ("tl bf16", "tl fp8", "gluon fp8")
        )
        fp8_bytes = batch * length * D
        print(
            f"  B={batch:3d} H={heads:3d} L={length:5d} splits={splits:3d} | "
            + " | ".join(f"{k} {v:7.1f}" for k, v in us.items())
            + f" | gluon fp8 {fp8_bytes / us['gluon fp8'] / 1e6:.2f} TB/s"
            + f" | tl fp8 / gluon fp8 {us['tl fp8'] / us['gluon fp8']:.2f}x"
            + f" | tl bf16 / gluon fp8 {us['tl bf16'] / us['gluon fp8']:.2f}x",
            flush=True,
        )
        del q, table, lens
        torch.cuda.empty_cache()


def run_fp8_h16(args, sm):
    """The 16-head fp8 section: checks, then the timing."""
    ok = True
    gen = torch.Generator(device="cuda").manual_seed(2)
    pool16 = new_pool(torch.bfloat16, gen)
    pool8, scale = quantize_fp8(pool16)
    print(f"fp8 pool (16-head kernel): scale {scale:.6g} (amax / {FP8_MAX:g})", flush=True)
    if not args.skip_checks:
        ok &= run_fp8_h16_checks(pool8, scale, gen, sm)
    if not args.skip_timing:
        run_fp8_h16_timing(pool16, pool8, scale, gen, sm)
    del pool16, pool8
    torch.cuda.empty_cache()
    return ok


def run_heads(args, sm):
    """``--heads``: the seesaw kernel at ``args.heads`` (a bf16 cache), routed or not."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = new_pool(torch.bfloat16, gen)
    ok = True
    if not args.skip_checks:
        ok &= run_checks("bf16", pool, gen, sm, heads_list=args.heads, routed=False)
    if not args.skip_timing:
        shapes = [(b, h, n) for h in sorted({*args.heads, 64}) for b, n in HEADS_TIMING]
        run_timing(pool, gen, sm, shapes, routed=False)
    if not args.skip_checks:
        ok &= run_ragged("bf16", pool, gen, sm, heads_list=args.heads, routed=False)
    return ok


def run_crossover(pool, gen, sm, shapes, kv_scale=1.0):
    """tl at the occupancy split count against the Gluon kernel ``plan.gluon_kernel`` picks at
    that count and at fewer, longer splits, on ``pool`` (bf16, or fp8 with its scale;
    bf16 q either way)."""
    kv_name = str(pool.dtype).removeprefix("torch.")
    print(
        f"crossover, {kv_name} cache (both stages, us; the Gluon kernel at split counts "
        "occ, occ/2, ...):"
    )
    for batch, heads, length in shapes:
        q, table, lens = uniform_problem(pool, batch, heads, length, gen, torch.bfloat16)
        occ = occupancy_kv_splits(batch, heads, length, sm)
        times = {}
        for splits in [s for s in (occ, occ // 2, occ // 4, occ // 8, occ // 16) if s >= 1]:
            run = Launch(q, pool, table, lens, splits, kv_scale)
            for path in ("tl", "gluon") if splits == occ else ("gluon",):
                run.both(path)
                times[path, splits] = run.time_us(run.both, path, rep=50)
            del run
        cells = " | ".join(
            f"{path}@{s} ({length // s} tok) {us:6.1f}" for (path, s), us in times.items()
        )
        print(f"  B={batch:3d} H={heads:3d} L={length:5d} occ={occ:3d} | {cells}", flush=True)
        torch.cuda.empty_cache()


def give_triton_scratch() -> None:
    """Lets Triton's own launcher allocate the global scratch of kernels that make
    TMA descriptors on the device (the seesaw), from torch's CUDA memory."""
    triton.set_allocator(
        lambda size, _align, _stream: torch.empty(size, dtype=torch.int8, device="cuda")
    )


def main():
    give_triton_scratch()
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--skip-checks", action="store_true")
    parser.add_argument(
        "--only-fp8", action="store_true", help="the fp8-cache section alone (checks, timing)"
    )
    parser.add_argument(
        "--only-fp8-h16",
        action="store_true",
        help="the 16-head fp8 kernel's section alone (checks, timing)",
    )
    parser.add_argument(
        "--heads",
        type=lambda text: tuple(int(h) for h in text.split(",")),
        help="the seesaw kernel's section alone at these head counts (bf16), routed or not",
    )
    parser.add_argument("--crossover", action="store_true", help="the crossover timing alone")
    parser.add_argument("--skip-fp8", action="store_true", help="the 16-bit caches alone")
    args = parser.parse_args()
    t0 = time.time()
    props = torch.cuda.get_device_properties(0)
    sm = props.multi_processor_count
    print(f"{props.name}, {sm} SMs, torch {torch.__version__}, triton {triton.__version__}")
    if args.crossover:
        gen = torch.Generator(device="cuda").manual_seed(0)
        pool = new_pool(torch.bfloat16, gen)
        run_crossover(pool, gen, sm, CROSSOVER)
        pool8, scale = quantize_fp8(pool)
        del pool
        torch.cuda.empty_cache()
        run_crossover(pool8, gen, sm, CROSSOVER_FP8, scale)
        return
    section = run_heads if args.heads else run_fp8_h16 if args.only_fp8_h16 else None
    if section is not None:
        ok = section(args, sm)
        print(f"{'ALL PASS' if ok else 'SOME CASES FAILED'} in {time.time() - t0:.0f} s")
        sys.exit(0 if ok else 1)
    ok = True
    for dtype_name, dtype in () if args.only_fp8 else DTYPES.items():
        gen = torch.Generator(device="cuda").manual_seed(0)
        pool = new_pool(dtype, gen)
        if not args.skip_checks:
            ok &= run_checks(dtype_name, pool, gen, sm, heads_list=SIXTEEN_BIT_HEADS)
        if dtype_name == "bf16" and not args.skip_timing:
            run_timing(pool, gen, sm)
        if not args.skip_checks:
            ok &= run_ragged(dtype_name, pool, gen, sm, heads_list=SIXTEEN_BIT_HEADS + (96,))
        del pool
        torch.cuda.empty_cache()
    if not args.skip_fp8:
        ok &= run_fp8(args, sm)
    print(f"{'ALL PASS' if ok else 'SOME CASES FAILED'} in {time.time() - t0:.0f} s")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
