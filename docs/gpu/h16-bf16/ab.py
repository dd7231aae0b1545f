"""The 16-bit 16-head Gluon stage 1 (``mla_decode_stage1_gluon_h16``) against the tl
stage 1, both stages under CUDA graphs (``gluon_check.Launch.time_us``), each at the
occupancy split count and half of it, in two rounds (tl first, then Gluon first); each
Gluon output against the tl one at the occupancy count and against float64 (µs; the
errors in brackets)."""

import gluon_check as gc
import torch

from mla_jax.splits import occupancy_kv_splits

SHAPES = [(64, 16, 4096), (128, 16, 16384), (128, 16, 4096), (16, 16, 16384), (16, 16, 4096)]
SHAPES += [(4, 16, 16384), (64, 16, 1024), (32, 16, 8192), (128, 16, 1024), (4, 16, 65536)]
# Where half the occupancy count leaves splits of 128-256 tokens.
SHAPES += [(1, 16, 16384), (1, 16, 4096), (4, 16, 4096), (16, 16, 1024), (1, 16, 65536)]


def main():
    gc.give_triton_scratch()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.bfloat16, torch.float16):
        pool = gc.new_pool(dtype, gen)
        for batch, heads, length in SHAPES if dtype == torch.bfloat16 else SHAPES[:2]:
            q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen)
            occ = occupancy_kv_splits(batch, heads, length, sm)
            ref_out, _ = gc.reference(q, pool, table, lens, gc.SCALE)
            counts = sorted({occ, max(1, occ // 2)}, reverse=True)
            runs = {s: gc.Launch(q, pool, table, lens, s) for s in counts}
            runs[occ].both("tl")
            torch.cuda.synchronize()
            want = runs[occ].out.float().clone()
            tl_ref = float((want.double() - ref_out).abs().max())
            errs = {}
            for s, run in runs.items():
                run.out.fill_(float("nan"))
                run.both("gluon")
                torch.cuda.synchronize()
                got = run.out.float()
                errs[s] = (
                    float((got - want).abs().max()),
                    float((got.double() - ref_out).abs().max()),
                )
            cells = {}
            for order in (("tl", "gluon"), ("gluon", "tl")):
                for s, run in runs.items():
                    for path in order:
                        cells.setdefault((path, s), []).append(run.time_us(run.both, path, rep=50))
            text = " | ".join(
                f"{p}@{s} "
                + "/".join(f"{t:6.1f}" for t in ts)
                + (f" ({errs[s][0]:.0e} vs tl, {errs[s][1]:.0e} vs f64)" if p == "gluon" else "")
                for (p, s), ts in sorted(cells.items(), key=lambda kv: (-kv[0][1], kv[0][0]))
            )
            name = f"{str(dtype)[6:]} B={batch:3d} H={heads} L={length:5d} occ={occ:3d}"
            print(f"{name} tl f64 {tl_ref:.0e} | {text}", flush=True)
            del runs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
