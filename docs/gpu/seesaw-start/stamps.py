"""Where a seesaw CTA's time goes, stamped (GPU): ``stamps.patch`` writes
``%globaltimer`` at thirteen points of every CTA into the buffer's split slots 64 on
(unused at these shapes), and this driver prints, per shape, the mean / min / max
over CTAs of each interval (µs). Stage 1 alone, bf16, the build for stage 2
(``cluster_merge=False``), one stamped launch after warm-ups; beside it the CUDA-graph
time of stage 1 for the stamped copy and for the tree's kernel.

``--patches a.patch+b.patch`` stamps another variant (its last patch the stamps):
then each slot's time from the CTA's entry is printed instead of the intervals (a
variant may stamp its points in another order).

    python docs/gpu/seesaw-start/stamps.py [--patches P] [BxHxL ...]
"""

import sys
import tempfile

import ab_seesaw
import gluon_check as gc
import torch

from mla_jax.splits import occupancy_kv_splits

SHAPES = ["16x64x1024", "16x32x1024", "64x64x1024", "16x64x4096", "16x128x4096", "128x128x4096"]
# (label, from slot, to slot); slots: 0 entry, 1 SM, 2 descriptors made, 3 Q issued,
# 4 pages read, 5 blocks issued, 6 wg0 start, 7 wg1 start, 8 first block in (wg0),
# 9 wg0 loop end, 10 wg0 partials out, 11 wg1 loop end, 12 wg1 partials out.
INTERVALS = [
    ("entry -> descriptors made", 0, 2),
    ("descriptors -> Q issued", 2, 3),
    ("Q issued -> pages read", 3, 4),
    ("pages read -> blocks issued", 4, 5),
    ("blocks issued -> wg0 start", 5, 6),
    ("entry -> wg1 start", 0, 7),
    ("wg0 start -> first block in", 6, 8),
    ("first block -> wg0 loop end", 8, 9),
    ("wg0 loop end -> wg1 loop end", 9, 11),
    ("wg0 loop end -> wg0 out", 9, 10),
    ("wg1 loop end -> wg1 out", 11, 12),
]


def stats(x: torch.Tensor) -> str:
    return f"mean {x.mean().item():6.2f} min {x.min().item():6.2f} max {x.max().item():6.2f}"


def main() -> None:
    args = sys.argv[1:]
    patches = ["docs/gpu/seesaw-start/stamps.patch"]
    timeline = args[:1] == ["--patches"]
    if timeline:
        patches = args[1].split("+")
        args = args[2:]
    shapes = [tuple(int(v) for v in s.split("x")) for s in (args or SHAPES)]
    with tempfile.TemporaryDirectory() as folder:
        module = ab_seesaw.load_variant("stamps", patches, folder)
        gc.give_triton_scratch()
        sm = torch.cuda.get_device_properties(0).multi_processor_count
        gen = torch.Generator(device="cuda").manual_seed(2)
        pool = gc.new_pool(torch.bfloat16, gen)
        for batch, heads, length in shapes:
            q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen, torch.bfloat16)
            splits = occupancy_kv_splits(batch, heads, length, sm)
            plain = gc.Launch(q, pool, table, lens, splits)
            run = gc.Launch(q, pool, table, lens, splits)
            run.gluon_kernel = module.mla_decode_stage1_gluon_seesaw
            ncta = (heads + 63) // 64 * batch * splits
            for _ in range(4):
                run.stage1("gluon")
                plain.stage1("gluon")
            torch.cuda.synchronize()
            t_plain = plain.time_us(plain.stage1, "gluon")
            t_stamped = run.time_us(run.stage1, "gluon")
            run.stage1("gluon")
            torch.cuda.synchronize()
            flat = run.buf["gluon"][0, 0, 64:, :].contiguous().flatten().view(torch.int64)
            st = flat[: ncta * 16].view(ncta, 16).cpu()
            t0 = st[:, 0].min()
            rel = (st - t0).double() / 1000.0
            steps = torch.diff(torch.sort(st[:, 0]).values)
            print(
                f"B={batch} H={heads} L={length} splits={splits} CTAs={ncta} | stage 1 "
                f"{t_plain:.1f} us (stamped copy {t_stamped:.1f}) | stamped span "
                f"{rel[:, [10, 12]].max().item():.1f} us | SMs {len(st[:, 1].unique())} | "
                f"entries spread {rel[:, 0].max().item():.2f} us, smallest step "
                f"{steps[steps > 0].min().item() if (steps > 0).any() else 0} ns",
                flush=True,
            )
            if timeline:
                # Slots 13-15 where a variant stamps them (otherwise the buffer's NaN).
                used = [k for k in range(13, 16) if ((st[:, k] - t0).abs() < 10**9).all()]
                for k in [0, *range(2, 13), *used]:
                    label = f"slot {k} from entry"
                    print(f"  {label:30s} {stats(rel[:, k] - rel[:, 0])}")
            else:
                for label, a, b in INTERVALS:
                    print(f"  {label:30s} {stats(rel[:, b] - rel[:, a])}")
            end = torch.maximum(rel[:, 10], rel[:, 12])
            print(f"  {'whole CTA':30s} {stats(end - rel[:, 0])}")
            print(f"  {'CTA ends (from first entry)':30s} {stats(end)}", flush=True)
            del run, plain, q, table, lens
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
