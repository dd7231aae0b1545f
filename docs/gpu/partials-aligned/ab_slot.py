"""A/B of the buffer's slot (a split's partial and lse, then padding): 513 floats
(rows 4-byte aligned) against 516 (16-byte) and 544 (128-byte). With an aligned slot
the seesaw stores its staged partials in 16-byte vectors. Both stages and stage 1
alone under CUDA graphs, rounds 513/516/544/544/516/513, outputs compared bit for bit
with the 513 slot's. Run from the repository root with scripts/ on PYTHONPATH."""

import sys

import gluon_check as gc
import torch

from mla_jax.splits import occupancy_kv_splits

SLOTS = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "513,516,544").split(",")]
# (batch, heads, length, path): the seesaw's small-batch shapes, #21's open rows among
# them, and tl shapes at 16 heads.
SHAPES = [
    (64, 64, 1024, "gluon"),
    (16, 64, 4096, "gluon"),
    (16, 64, 1024, "gluon"),
    (16, 32, 1024, "gluon"),
    (16, 128, 4096, "gluon"),
    (64, 64, 4096, "gluon"),
    (4, 128, 4096, "gluon"),
    (1, 128, 4096, "gluon"),
    (64, 32, 1024, "gluon"),
    (64, 16, 4096, "tl"),
    (128, 16, 16384, "tl"),
    (16, 16, 4096, "tl"),
]


def main():
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(5)
    pool = gc.new_pool(torch.bfloat16, gen)
    order = SLOTS + SLOTS[::-1]
    for batch, heads, length, path in SHAPES:
        q, table, lens = gc.uniform_problem(pool, batch, heads, length, gen, torch.bfloat16)
        splits = occupancy_kv_splits(batch, heads, length, sm)
        runs = {
            s: gc.Launch(q, pool, table, lens, splits, gluon=path == "gluon", slot=s) for s in SLOTS
        }
        outs = {}
        for s, run in runs.items():
            run.both(path)
            torch.cuda.synchronize()
            outs[s] = (run.out.clone(), run.lse.clone())
        base = outs[SLOTS[0]]
        same = all(torch.equal(o, base[0]) and torch.equal(l_, base[1]) for o, l_ in outs.values())
        both = {s: [] for s in SLOTS}
        one = {s: [] for s in SLOTS}
        for s in order:
            both[s].append(runs[s].time_us(runs[s].both, path))
            one[s].append(runs[s].time_us(runs[s].stage1, path))
        line = f"{batch}/{heads}/{length} {path} splits={splits} identical={same} |"
        for s in SLOTS:
            b = ", ".join(f"{x:.2f}" for x in both[s])
            o = ", ".join(f"{x:.2f}" for x in one[s])
            line += f" slot {s}: both {b}; stage 1 {o} |"
        print(line, flush=True)
        del runs, q, table, lens
        torch.cuda.empty_cache()


if __name__ == "__main__":
    gc.give_triton_scratch()
    main()
