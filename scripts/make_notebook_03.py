"""Writes notebooks/03_performance.ipynb (committed without outputs).

    scripts/dev python -m mla_jax bench --report-only docs/benchmarks/parts/small.json \\
        docs/benchmarks/parts/large.json --out docs/benchmarks   # results.json, page, plots
    scripts/dev python scripts/make_notebook_03.py                # then the notebook

The commentary quotes docs/benchmarks/results.json; the code cells print the numbers it
quotes, so after a new sweep run the notebook and check the text against them. The figures
and the helpers that read the results are mla_jax.tools.bench_report's (the same code
writes the sweep's PNGs); this script holds only the notebook's prose and tables.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "03_performance.ipynb"

CELLS = [
    (
        "md",
        r"""
# Performance on an H200

What one decode step costs on the GPU, read from the current sweep in
`docs/benchmarks/results.json` (`python -m mla_jax bench`): NVIDIA H200, 34 shapes with
B ∈ {1, 4, 16, 64, 128}, H ∈ {16, 128}, L ∈ {1k, 4k, 16k} and L = 64k for B ≤ 4; bf16,
latent 512 + rope 64, pages of 64 tokens, shuffled block tables. Five paths, timed in the
same process on the same inputs:

- **`triton-occupancy`**: our Triton kernels with the occupancy split rule, the library's
  default policy;
- **`triton`**: the same kernels with vLLM's split rule;
- **`xla`**: the same two-stage algorithm in plain jnp; **`dense`**: plain JAX
  gather + einsum;
- **`vllm`**: vLLM's own `decode_attention_fwd` kernel (see `docs/vllm_kernel.md`).

Timing: the JAX paths run K chained calls in one jitted function, ten such runs
dispatched back to back per host sync, the total divided by 10·K; vLLM's kernel runs as a
CUDA graph of K calls replayed between CUDA events. K is 5–20 (about 2 ms a run), median
of 3 repeats. The sweep ran in two parts (B ≤ 4, then B ≥ 16), each measuring its own
ceilings. Ten runs a sync puts the JAX times within 6% of CUDA-graph device time at the
large shapes (`docs/performance.md`, "The bench (`python -m mla_jax bench`)").

**The small shapes flatter the JAX paths.** This sweep's JAX timings were taken before
the bench consumed every call's outputs: XLA then dropped every call's stage 2 but the
last one's, so at shapes below about 30 µs a call, where stage 2 is a visible share of
the time, the JAX numbers (and their speed-ups over vLLM's kernel) are lower than the full
work would take. Read them as optimistic until a new sweep.

Shapes that take less than about 22 µs a call are also not stable from run to run: a
second run of the same build read them −23% to +75% apart, the plain JAX path too, while
vLLM's CUDA graph stayed within 2% (`docs/performance.md`, "The bench's A/A spread below
about 22 µs"). `docs/performance.md` therefore compares kernel builds in device time
("Device time A/B", `scripts/ab_kernels.py`).

Every cell but the last only reads JSON and draws, so the notebook runs anywhere; the last
re-measures a few shapes when a CUDA GPU is present. The figures are drawn by
`mla_jax.tools.bench_report`, the same functions that write the sweep's PNGs.
""",
    ),
    (
        "code",
        r"""
%matplotlib inline
import os

# Set before JAX starts: the live sweep at the end shares the GPU with torch (vLLM).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import json
from pathlib import Path

from IPython.display import display

from mla_jax.splits import occupancy_kv_splits
from mla_jax.tools.bench_report import (MACHINE_VERSIONS, fmt, heatmap_figure, metric,
                                        speedup, time_vs_len_figure, timed_paths)

results = json.loads(Path("../docs/benchmarks/results.json").read_text())
machine, config = results["machine"], results["config"]
OURS = [p for p in ("triton-occupancy", "triton") if p in results["paths"]]
PARTS = results.get("parts") or [{"ceilings": results["ceilings"],
                                  "shapes": len(results["shapes"])}]


def span(values, spec=".2f"):
    return f"{min(values):{spec}}–{max(values):{spec}}"


# The versions this results file records (jax_triton only in older ones).
versions = ", ".join(f"{k} {machine[k]}" for k in MACHINE_VERSIONS if machine.get(k))
print(f"{machine['device']} ({machine['sm_count']} SMs), {versions}, {machine['date']}")
print(f"{len(results['shapes'])} shapes, {config['calls_rule']}, {config['repeats']} repeats")
print(f"timing, as the sweep records it: {results['what']}")
for i, part in enumerate(PARTS, 1):
    c = part["ceilings"]
    print(f"part {i}: {part['shapes']} shapes; device copy {c['copy_tbps']:.2f} TB/s, "
          f"bf16 matmul {c['matmul_tflops']:.0f} TFLOP/s, empty JAX loop step "
          f"{c['jax_loop_step_ms'] * 1e3:.1f} µs")
print()
paths = timed_paths(results)
print(f"{'B':>4} {'H':>4} {'L':>6} {'floor':>8} " + " ".join(f"{p:>16}" for p in paths)
      + "   (ms per call)")
for s in results["shapes"]:
    print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6} {s['floor_ms']:>8.4f} "
          + " ".join(f"{fmt(metric(s, p, 'ms'), '.4f'):>16}" for p in paths))
""",
    ),
    (
        "md",
        r"""
## The floor

A decode step must read every live latent row once (B·L·576 bf16 values) and do
B·H·L·(2·576 + 2·512) flops (q·k over latent + rope, p·v over the 512 latent dims).
Its **floor** is the slower of the two at the ceilings its part of the sweep measured:

$$\text{floor} = \max\left(\frac{\text{KV bytes}}{\text{copy bandwidth}},\;
\frac{\text{flops}}{\text{matmul rate}}\right)$$

The copy bandwidth is a device copy in JAX (bytes read + written per second), the matmul
rate a large square bf16 matmul in JAX. A step does 1.89·H flops per byte, so the ridge
point (matmul rate / copy bandwidth: 201 flop/byte in both parts) sits near
H ≈ 106–107: **with 16 heads a step is memory-bound, with 128 heads compute-bound.** The
floor is an ideal: no kernel reaches both ceilings, and attention's small dot products are
not the large GEMM that set the matmul rate.
""",
    ),
    (
        "code",
        r"""
def part_ceilings(s):
    # The part whose ceilings reproduce this shape's recorded floor.
    def floor(c):
        return max(s["kv_bytes"] / (c["copy_tbps"] * 1e12),
                   s["flops"] / (c["matmul_tflops"] * 1e12)) * 1e3
    return min((p["ceilings"] for p in PARTS), key=lambda c: abs(floor(c) - s["floor_ms"]))


for i, part in enumerate(PARTS, 1):
    ridge = part["ceilings"]["matmul_tflops"] / part["ceilings"]["copy_tbps"]
    print(f"part {i}: ridge point {ridge:.0f} flop/byte -> H = {ridge / (2176 / 1152):.0f}")
print()
print(f"{'B':>4} {'H':>4} {'L':>6}  {'memory ms':>9} {'compute ms':>10}  {'bound':8} "
      + " ".join(f"{p + ' %':>18}" for p in paths))
for s in results["shapes"]:
    c = part_ceilings(s)
    mem_ms = s["kv_bytes"] / (c["copy_tbps"] * 1e12) * 1e3
    mm_ms = s["flops"] / (c["matmul_tflops"] * 1e12) * 1e3
    bound = "compute" if mm_ms > mem_ms else "memory"
    pcts = " ".join(f"{fmt(metric(s, p, 'pct_of_floor'), '.0f'):>18}" for p in paths)
    print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6}  {mem_ms:9.4f} {mm_ms:10.4f}  {bound:8} {pcts}")
""",
    ),
    (
        "md",
        r"""
## Time per call against sequence length

One panel per (B, H), a line per path, the floor dashed.
""",
    ),
    (
        "code",
        r"""
display(time_vs_len_figure(results, paths, title=f"device time per call, {machine['device']}"))
""",
    ),
    (
        "md",
        r"""
## How close to the floor

- **H=16 (memory-bound), B ≥ 64, L ≥ 4k: 107–125 % of the floor with occupancy splits,
  98–108 % with vLLM's split rule, 50–53 % for vLLM's kernel.** The best, 125 % at B=128,
  L=16k, is 4.17 TB/s of KV reads against the 3.34 TB/s device copy the bench measured
  (bytes read and written), a pessimistic ceiling for a kernel that only reads; it is
  close to the 4.22 TB/s reference copy rate (`docs/performance.md`, "Hardware floors").
- **H=128 (compute-bound): at most 41 % with occupancy splits and 29 % with vLLM's rule;
  vLLM's kernel at most 9 %.** At the H=128 shapes with B·L ≥ 256k tokens, occupancy
  splits give 38–41 % (257–275 TFLOP/s), vLLM's rule 28–29 % (191–194 TFLOP/s), against a
  672–673 TFLOP/s matmul. Stage 1 handles 64 heads per program
  (two programs per row and split at H=128), one program per SM (its 64 × 512 accumulator
  takes all the registers), and each KV block's work runs in series inside it
  (`docs/performance.md`, "Why H=128 is not at FlashMLA's rate"). This is the largest gap
  left. vLLM's kernel groups 16 heads per program (`BLOCK_H = 16`), so at H=128 eight
  programs each load the same KV tiles.
- **Small shapes (B ≤ 4, L ≤ 4k): a fixed cost, not the work.** The floor there is
  0.4–6.8 µs. The occupancy path sits at 10–34 µs, the other JAX paths at 14–54 µs,
  vLLM's kernel (CUDA graph) at 52–79 µs. At B=1, H=128, L=4k the two stages take
  22.9–23.3 µs of device time under a CUDA graph (`docs/performance.md`, "Each stage's
  device time (CUDA graphs)"), each of the 128 stage-1 programs handling one 64-token
  block and writing 131 KB of partials; one such 64-head program costs about 13 µs even
  alone ("Hardware counters (Nsight Compute, stage 1)"), so that is stage 1's floor there
  whatever the split count.
- The XLA paths (`xla`, `dense`) gather the rows into a dense copy before their einsums;
  at H=16, B ≥ 64, L ≥ 4k they reach 15–29 % of the floor.
""",
    ),
    (
        "code",
        r"""
groups = [("H=16, B>=64, L>=4k", "tbps", "TB/s",
           lambda s: s["H"] == 16 and s["B"] >= 64 and s["L"] >= 4096),
          ("H=128", "tflops", "TFLOP/s", lambda s: s["H"] == 128),
          ("H=128, B*L>=256k", "tflops", "TFLOP/s",
           lambda s: s["H"] == 128 and s["B"] * s["L"] >= 2**18)]
for name, rate, unit, pick in groups:
    sel = [s for s in results["shapes"] if pick(s)]
    print(f"{name}: % of floor (and {unit}): " + "; ".join(
        f"{p} {span([metric(s, p, 'pct_of_floor') for s in sel], '.0f')} "
        f"({span([metric(s, p, rate) for s in sel], '.3g')})"
        for p in OURS + ["vllm"] if p in paths))
small = [s for s in results["shapes"] if s["B"] <= 4 and s["L"] <= 4096]
print(f"B<=4, L<=4k: floor {span([s['floor_ms'] * 1e3 for s in small], '.1f')} µs; "
      + ", ".join(f"{p} {span([metric(s, p, 'ms') * 1e3 for s in small], '.0f')} µs"
                  for p in paths))
print()
display(heatmap_figure(results, paths, "pct_of_floor",
                       "% of the roofline floor (100 = at the floor)", ratio=False))
""",
    ),
    (
        "md",
        r"""
## Against vLLM's kernel

Speed-up = vLLM's time / ours, at the same shape in the same sweep (> 1: ours is faster).
JAX times are K chained calls in one jitted function, ten runs per host sync; vLLM's are
a CUDA graph of K calls between CUDA events.

- **Occupancy splits (the default) are faster than vLLM's kernel at all 34 shapes**:
  1.93–4.41× at H=16 and 2.25–4.55× at H=128 for B ≥ 16, 2.34–4.98× at B ≤ 4.
- **The closest, B=128, H=16, L=1k: 0.0506 ms against vLLM's 0.0977 ms (1.93×).**
- With vLLM's split rule our kernels are faster than vLLM's at all 34 shapes, 1.25–3.68×;
  the closest are the smallest H=128 shapes (B=1 and B=4 at L=1k, 1.25× and 1.30×).
- At H=128 with B ≥ 16, vLLM's kernel is at 8–9 % of the floor; even plain JAX
  gather + einsum is 2.03–3.07× faster there.
""",
    ),
    (
        "code",
        r"""
if "vllm" not in paths:
    print("vLLM's kernel was not timed in this sweep")
else:
    rivals = [p for p in paths if p != "vllm"]
    print(f"{'B':>4} {'H':>4} {'L':>6} {'vLLM ms':>9} " + " ".join(f"{p:>16}" for p in rivals)
          + "   (speed-up over vLLM's kernel)")
    for s in results["shapes"]:
        print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6} {metric(s, 'vllm', 'ms'):>9.4f} "
              + " ".join(f"{fmt(metric(s, p, 'speedup_vs_vllm'), '.2f', suffix='×'):>16}"
                         for p in rivals))
    print()
    for p in OURS:
        ups = [(s, metric(s, p, "speedup_vs_vllm")) for s in results["shapes"]]
        ups = [(s, u) for s, u in ups if u is not None]
        print(f"{p}: faster than vLLM's kernel at {sum(u > 1 for _, u in ups)} of {len(ups)} "
              f"shapes; B>=16: {span([u for s, u in ups if s['B'] >= 16])}×; not faster at: "
              + ", ".join(f"B={s['B']} H={s['H']} L={s['L']} {u:.2f}×" for s, u in ups if u <= 1))
    ups = [(s, metric(s, "triton-occupancy", "speedup_vs_vllm")) for s in results["shapes"]]
    print("triton-occupancy, B<=4, below 1.5×: " + ", ".join(
        f"B={s['B']} H={s['H']} L={s['L']} {u:.2f}×"
        for s, u in ups if u is not None and s["B"] <= 4 and u < 1.5))
    h128 = [s for s in results["shapes"] if s["H"] == 128 and s["B"] >= 16]
    if "dense" in rivals:
        print(f"H=128, B>=16: vLLM's kernel at "
              f"{span([metric(s, 'vllm', 'pct_of_floor') for s in h128], '.0f')} % of the floor, "
              f"dense {span([metric(s, 'dense', 'speedup_vs_vllm') for s in h128])}× faster")
    display(heatmap_figure(results, rivals, "speedup_vs_vllm",
                           "speed-up over vLLM's kernel (>1: faster)", ratio=True))
""",
    ),
    (
        "md",
        r"""
## Occupancy splits against vLLM's split rule

Both paths run our kernels; only the split count differs. vLLM's rule picks it from the
length alone: next_pow2(L / 512), at most 2 per SM, so 2 splits at 1k and 32 at 16k whatever
the batch. The occupancy rule (`mla_jax.splits.occupancy_kv_splits`) also looks at the batch
and the head tiles: enough (row, head tile, split) programs for one wave (two per SM with
16-head tiles, one with 64-head tiles), about 64 tokens per split at least, 128 splits at
most. At B ≤ 4 that gives 16–128 splits where vLLM's rule gives 2–128, to fill the GPU; at
B ≥ 64 it gives 1–4, which saves writing and merging partial outputs.

**Occupancy splits are faster at 32 of the 34 shapes.** The rules pick the same split count
at 2 shapes; there the ratio is 0.98–1.00×, the same work. Where the counts differ,
occupancy splits are faster at all 32 shapes, by 1.00–2.61×; the smallest margin is at
B=16, H=16, L=4k (0.0311 against 0.0312 ms).
""",
    ),
    (
        "code",
        r"""
SM = machine["sm_count"]
rule, occ = "triton", "triton-occupancy"


def over_vllm_rule(s, p):
    # Speed-up of path p over our kernels on vLLM's split rule (> 1: p is faster).
    return speedup(s, p, over=rule)


rows = [(s, occupancy_kv_splits(s["B"], s["H"], s["L"], SM), over_vllm_rule(s, occ))
        for s in results["shapes"]]
print(f"{'B':>4} {'H':>4} {'L':>6}  {'splits: vLLM rule':>17} {'occupancy':>9}  "
      f"{'ms: vLLM rule':>13} {'occupancy':>9}  {'speed-up':>8}")
for s, splits, up in rows:
    print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6}  {s['num_kv_splits']:>17} {splits:>9}  "
          f"{fmt(metric(s, rule, 'ms'), '.4f'):>13} {fmt(metric(s, occ, 'ms'), '.4f'):>9}"
          f"  {fmt(up, '.2f', suffix='×'):>8}")
rows = [r for r in rows if r[2] is not None]
same = [up for s, n, up in rows if n == s["num_kv_splits"]]
diff = [(s, up) for s, n, up in rows if n != s["num_kv_splits"]]
print(f"\noccupancy faster at {sum(up > 1 for _, _, up in rows)} of {len(rows)} shapes; "
      f"same split count at {len(same)} ({span(same)}×); where they differ, faster at "
      f"{sum(up > 1 for _, up in diff)} of {len(diff)} "
      f"({span([up for _, up in diff if up > 1])}×), slower at "
      + ", ".join(f"B={s['B']} H={s['H']} L={s['L']} ({up:.2f}×)" for s, up in diff if up <= 1))

# Same split count, same work: do the two paths' repeats overlap?
overlap = [s for s, n, _ in rows if n == s["num_kv_splits"]
           and min(s["paths"][rule]["times_ms"]) <= max(s["paths"][occ]["times_ms"])
           and min(s["paths"][occ]["times_ms"]) <= max(s["paths"][rule]["times_ms"])]
print(f"same split count: the repeats' ranges overlap at {len(overlap)} of {len(same)}")

display(heatmap_figure(results, [occ], over_vllm_rule,
                       "occupancy splits: speed-up over vLLM's split rule (>1: faster)",
                       ratio=True))
""",
    ),
    (
        "md",
        r"""
## Re-measure on this machine

With a CUDA GPU visible to JAX, this runs a small live sweep through `mla_jax.tools.bench.main`
(B ∈ {1, 64}, H ∈ {16, 128}, L ∈ {4k, 16k}; our two Triton paths, and vLLM's kernel side by
side when `mla_jax.tools.vllm_kernel.load()` finds its file, see `docs/vllm_kernel.md`) into a
temporary folder, and draws it like the committed sweep. Elsewhere it says it skipped.
""",
    ),
    (
        "code",
        r"""
import tempfile

import jax

if any(d.platform == "gpu" for d in jax.devices()):
    from mla_jax.tools import bench

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "live"
        bench.main(["--batch", "1,64", "--heads", "16,128", "--lens", "4096,16384",
                    "--paths", "triton,triton-occupancy,vllm", "--repeats", "3",
                    "--time-budget", "240", "--out", str(out)])
        live = json.loads((out / "results.json").read_text())
    live_paths = timed_paths(live)
    if not live_paths:
        print("the live sweep timed no path")
    else:
        display(time_vs_len_figure(live, live_paths,
                                   title=f"live sweep, {live['machine']['device']}"))
        display(heatmap_figure(live, live_paths, "pct_of_floor",
                               "live sweep: % of the roofline floor", ratio=False))
        if "vllm" in live_paths and len(live_paths) > 1:
            display(heatmap_figure(live, [p for p in live_paths if p != "vllm"],
                                   "speedup_vs_vllm",
                                   "live sweep: speed-up over vLLM's kernel (>1: faster)",
                                   ratio=True))
else:
    print(f"no CUDA GPU visible to JAX ({jax.devices()}): skipped the live sweep")
""",
    ),
]


def build_notebook() -> nbformat.NotebookNode:
    cells = []
    for i, (kind, text) in enumerate(CELLS):
        make = new_markdown_cell if kind == "md" else new_code_cell
        cells.append(make(text.strip("\n"), id=f"perf-{i:02d}"))  # stable ids: stable diffs
    nb = new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
    )
    nbformat.validate(nb)
    return nb


def main() -> None:
    nbformat.write(build_notebook(), NOTEBOOK)
    print(f"wrote {NOTEBOOK.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
