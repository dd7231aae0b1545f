"""Writes notebooks/03_performance.ipynb (committed without outputs) and the section
"Earlier measurements of vLLM's kernel" at the end of docs/benchmarks.md.

    scripts/dev python -m mla_jax bench --report-only docs/benchmarks/results.json \\
        --out docs/benchmarks              # the page, its tables and plots
    scripts/dev python scripts/make_notebook_03.py     # the notebook, then the section

The bench command rewrites docs/benchmarks.md without the section; run this script
after it. Running it twice changes nothing (the section replaces its earlier copy).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "03_performance.ipynb"
PAGE = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "docs" / "benchmarks" / "results.json"
RUN4 = ROOT / "docs" / "benchmarks" / "results-run4-partial.json"
EARLIER_VLLM = ROOT.parent / "shared" / "measurements" / "h200-cuda-graph-2026-11-29.json"
MARKER = "<!-- earlier-vllm: written by scripts/make_notebook_03.py; edit it there -->"

# ----------------------------------------------------------------------- notebook

CELLS = [
    ("md", r"""
# Performance on an H200

What one decode step costs on the GPU, read from the committed benchmark run
`docs/benchmarks/results.json` (`python -m mla_jax bench`; NVIDIA H200, B ∈ {1, 64, 128},
H ∈ {16, 128}, L ∈ {4096, 16384}, bf16, latent 512 + rope 64, pages of 64 tokens, shuffled
block tables). Two of our paths were timed:

- **`triton`**: our Triton kernels with vLLM's split rule (split count from the length only);
- **`triton-occupancy`**: the same kernels with the batch-aware occupancy split rule.

vLLM's own kernel was meant to run side by side in that run but failed to load (a Triton
cache-dir error, since fixed), so **there is no in-run vLLM baseline**. An earlier, separate
measurement of vLLM's kernel on the same H200 is shown near the end, labelled as such.

Everything but the last cell only reads JSON and draws, so the notebook runs anywhere; the
last cell re-measures a few shapes when a CUDA GPU is present. The commentary quotes the
committed run.
"""),
    ("code", r"""
import os

# Set before JAX starts: the live sweep at the end shares the GPU with torch (vLLM).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm, Normalize

from mla_jax import bench_report
from mla_jax.splits import num_kv_splits, occupancy_kv_splits

results = json.loads(Path("../docs/benchmarks/results.json").read_text())
machine, ceil = results["machine"], results["ceilings"]
LABELS = results["paths"]
OURS = [p for p in ("triton", "triton-occupancy") if p in LABELS]


def ms(shape, path):
    # A path's median ms per call at one shape, or None where it was not measured.
    return shape["paths"].get(path, {}).get("ms")


def by_shape(res):
    return {(s["B"], s["H"], s["L"]): s for s in res["shapes"]}


print(f"{machine['device']} ({machine['sm_count']} SMs), jax {machine['jax']}, "
      f"jax_triton {machine['jax_triton']}, triton {machine['triton']}, {machine['date']}")
print(f"ceilings measured in the run: device copy {ceil['copy_tbps']:.2f} TB/s, "
      f"bf16 matmul {ceil['matmul_tflops']:.0f} TFLOP/s; {results['config']['calls_rule']}, "
      f"{results['config']['repeats']} repeats")
print()
print(bench_report.summary_table(results))
"""),
    ("md", r"""
## The floor

A decode step must read every live latent row once (B·L·576 bf16 values) and do
B·H·L·(2·576 + 2·512) flops (q·k over latent + rope, p·v over the 512 latent dims).
Its **floor** is the slower of the two at the ceilings the same run measured:

$$\text{floor} = \max\left(\frac{\text{KV bytes}}{\text{copy bandwidth}},\;
\frac{\text{flops}}{\text{matmul rate}}\right)$$

The copy bandwidth is a device copy in JAX (bytes read + written per second), the matmul
rate a large square bf16 matmul in JAX. A step does 1.89·H flops per byte, so the ridge
point (matmul rate / copy bandwidth, about 207 flop/byte here) sits near H ≈ 110:
**with 16 heads a step is memory-bound, with 128 heads compute-bound.** The floor is an
ideal: no kernel reaches both ceilings, and attention's small dot products are not the
large GEMM that set the matmul rate.
"""),
    ("code", r"""
copy_bps, flop_rate = ceil["copy_tbps"] * 1e12, ceil["matmul_tflops"] * 1e12
ridge = flop_rate / copy_bps
print(f"ridge point {ridge:.0f} flop/byte -> H = {ridge / (2176 / 1152):.0f}\n")
print(f"{'B':>4} {'H':>4} {'L':>6}  {'memory ms':>9} {'compute ms':>10}  {'bound':8} "
      + " ".join(f"{p + ' %':>19}" for p in OURS))
for s in results["shapes"]:
    mem_ms, mm_ms = s["kv_bytes"] / copy_bps * 1e3, s["flops"] / flop_rate * 1e3
    bound = "compute" if mm_ms > mem_ms else "memory"
    pcts = " ".join(f"{bench_report._fmt(s['paths'][p].get('pct_of_floor'), '.0f'):>19}"
                    for p in OURS)
    print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6}  {mem_ms:9.4f} {mm_ms:10.4f}  {bound:8} {pcts}")
"""),
    ("md", r"""
## Time per call against sequence length

One panel per (B, H), a line per path, the floor dashed. Times are device time per call:
K chained calls in one jitted `lax.fori_loop`, timed around `block_until_ready`, divided by K.
"""),
    ("code", r"""
def plot_time_vs_len(res, title):
    shapes = res["shapes"]
    heads, batches = sorted({s["H"] for s in shapes}), sorted({s["B"] for s in shapes})
    paths = [p for p in res["paths"] if any(ms(s, p) is not None for s in shapes)]
    fig, axes = plt.subplots(len(heads), len(batches), squeeze=False,
                             figsize=(3.4 * len(batches), 2.9 * len(heads)),
                             layout="constrained")
    for i, h in enumerate(heads):
        for j, b in enumerate(batches):
            ax = axes[i][j]
            panel = sorted((s for s in shapes if s["B"] == b and s["H"] == h),
                           key=lambda s: s["L"])
            for p in paths:
                pts = [(s["L"], ms(s, p)) for s in panel if ms(s, p) is not None]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=res["paths"][p])
            lens = [s["L"] for s in panel]
            ax.plot(lens, [s["floor_ms"] for s in panel], "k--", label="floor")
            ax.set(xscale="log", yscale="log", title=f"B={b} H={h}", xlabel="L",
                   ylabel="ms per call")
            ax.set_xticks(lens, [f"{n // 1024}k" for n in lens])
            ax.xaxis.set_minor_locator(plt.NullLocator())  # only the 4k, 16k labels
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    plt.show()


plot_time_vs_len(results, f"device time per call, {machine['device']}")
"""),
    ("md", r"""
## How close to the floor

- **H=16, B ≥ 64 (memory-bound): 65–91 % of the floor**, i.e. 2.1–2.9 TB/s of KV reads
  against a 3.18 TB/s device copy. Here the kernels are close to what the memory allows.
- **H=128 (compute-bound): 22–24 % of the floor with vLLM's split rule, 26–31 % with
  occupancy splits** (about 140–160 and 170–205 TFLOP/s against 657). Stage 1 handles
  64 heads per program (a 64-head tile, two programs per row and split at H=128), and its
  dot products run far below the large-GEMM rate. This is the largest gap left.
- **B=1: 2–11 %.** The floor is 1.5–7 µs, while a step costs 0.05–0.12 ms: fixed per-call
  costs (two kernel launches, the merge of the splits and, with this run's K=10 calls per
  timed loop, a share of the host dispatch) set the time, not the work.
"""),
    ("code", r"""
def plot_heatmaps(res, paths, key, title, *, ratio=False):
    shapes = res["shapes"]
    rows, cols = sorted({(s["B"], s["H"]) for s in shapes}), sorted({s["L"] for s in shapes})
    grid = by_shape(res)

    def value(b, h, n, p):
        v = grid.get((b, h, n), {"paths": {}})["paths"].get(p, {}).get(key)
        return np.nan if v is None else v

    mats = [np.array([[value(b, h, n, p) for n in cols] for b, h in rows]) for p in paths]
    finite = np.concatenate([m[np.isfinite(m)] for m in mats])
    if ratio:
        span = max(1.01, float(np.max(np.maximum(finite, 1 / finite))))
        norm = LogNorm(1 / span, span)
    else:
        norm = Normalize(0, max(100.0, float(finite.max())))
    fig, axes = plt.subplots(1, len(paths), squeeze=False, layout="constrained",
                             figsize=(4.2 * len(paths) + 1, 0.45 * len(rows) + 2))
    for ax, p, m in zip(axes[0], paths, mats):
        im = ax.imshow(m, aspect="auto", cmap="RdYlGn", norm=norm)
        ax.set_xticks(range(len(cols)), [f"{n // 1024}k" for n in cols])
        ax.set_yticks(range(len(rows)), [f"B={b} H={h}" for b, h in rows])
        ax.set(xlabel="L", title=res["paths"].get(p, p))
        for (i, j), v in np.ndenumerate(m):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=8)
    fig.colorbar(im, ax=list(axes[0]))
    fig.suptitle(title)
    plt.show()


plot_heatmaps(results, OURS, "pct_of_floor", "% of the roofline floor (100 = at the floor)")
"""),
    ("md", r"""
## Occupancy splits against vLLM's split rule

vLLM's rule picks the split count from the length alone: next_pow2(L / 512), at most 2 per SM,
so 8 splits at 4k and 32 at 16k whatever the batch. The occupancy rule
(`mla_jax.splits.occupancy_kv_splits`) also looks at the batch and the head tiles: enough
(row, head tile, split) programs for one wave of 2 per SM, with at least 128 tokens per split.
At B=1 that means more splits (32–128) to fill the GPU; at B ≥ 64 fewer (1–4), which saves
writing and merging partial results.

In this run the occupancy rule is faster at 11 of the 12 shapes: 1.2–1.3× at H=128 with
B ≥ 64, 1.1–1.45× at three of the four B=1 shapes, 1.02–1.07× at H=16 with B ≥ 64. It is slower
at B=1, H=128, L=16k (0.71×): 128 splits are too many there.
"""),
    ("code", r"""
SM = machine["sm_count"]
for s in results["shapes"]:
    s["occupancy_splits"] = occupancy_kv_splits(s["B"], s["H"], s["L"], SM)
    a, b = ms(s, "triton"), ms(s, "triton-occupancy")
    s["paths"]["triton-occupancy"]["speedup_vs_vllm_rule"] = None if None in (a, b) else a / b

print(f"{'B':>4} {'H':>4} {'L':>6}  {'splits: vLLM rule':>17} {'occupancy':>9}  "
      f"{'ms: vLLM rule':>13} {'occupancy':>9}  {'speed-up':>8}")
for s in results["shapes"]:
    up = s["paths"]["triton-occupancy"]["speedup_vs_vllm_rule"]
    print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6}  {s['num_kv_splits']:>17} "
          f"{s['occupancy_splits']:>9}  {ms(s, 'triton'):>13.4f} {ms(s, 'triton-occupancy'):>9.4f}"
          f"  {bench_report._fmt(up, '.2f', suffix='×'):>8}")

plot_heatmaps(results, ["triton-occupancy"], "speedup_vs_vllm_rule",
              "occupancy splits: speed-up over vLLM's split rule (>1: faster)", ratio=True)
"""),
    ("md", r"""
### Small batches, timed with more calls per loop (run 4)

The committed run timed every shape with K=10 calls per loop, so at B=1 a share of the host
dispatch stays in each call's time. The earlier partial sweep `results-run4-partial.json`
(same H200, same day; K chosen per shape, up to 100 calls; it ran out of time after 14 shapes)
covers B ∈ {1, 4} with our XLA path and plain JAX gather+einsum as well. There the occupancy
rule is **2.1–2.6× faster than vLLM's rule at B ≤ 4 up to L=4k** (all but B=4, H=128, L=4k)
and at B=1, H=16, L=16k, where vLLM's rule (2 or 8 splits) leaves most SMs idle; 1.0–1.3× at
64k and at B=4, H=16, L=16k; and about 5 % slower at B=1, H=128, L=16k and at B=4, H=128, L=4k.
Its B=1 times are lower than the committed run's at the same shapes (1.4–1.7× for vLLM's rule,
2–2.9× for occupancy splits): at this scale the timing method, and the run, matter.
"""),
    ("code", r"""
run4 = json.loads(Path("../docs/benchmarks/results-run4-partial.json").read_text())
shown = [s for s in run4["shapes"] if all(ms(s, p) is not None for p in OURS)]
paths4 = [p for p in run4["paths"] if any(ms(s, p) is not None for s in shown)]
print(f"run 4: {run4['config']['calls_rule']}, {run4['config']['repeats']} repeats; "
      f"{len(shown)} shapes with both of our Triton paths")
print(f"{'B':>4} {'H':>4} {'L':>6} " + " ".join(f"{p:>17}" for p in paths4)
      + f" {'occ. vs vLLM rule':>18}")
for s in shown:
    cells = " ".join(f"{bench_report._fmt(ms(s, p), '.4f'):>17}" for p in paths4)
    print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6} {cells} "
          f"{ms(s, 'triton') / ms(s, 'triton-occupancy'):>17.2f}×")

fig, ax = plt.subplots(figsize=(10, 3.6), layout="constrained")
x, width = np.arange(len(shown)), 0.8 / len(paths4)
for k, p in enumerate(paths4):
    ax.bar(x + (k - (len(paths4) - 1) / 2) * width,
           [ms(s, p) or np.nan for s in shown], width, label=run4["paths"][p])
ax.set_xticks(x, [f"B={s['B']}\nH={s['H']}\nL={s['L'] // 1024}k" for s in shown], fontsize=7)
ax.set(yscale="log", ylabel="ms per call", title="run 4 (partial): small batches, every path")
ax.legend(fontsize=7, ncols=len(paths4))
plt.show()
"""),
    ("md", r"""
## Earlier measurements of vLLM's kernel (a different run)

**vLLM's kernel was not measured in the committed run.** `../shared/measurements` (next to the
repository) holds an earlier, separate measurement on the same H200: vLLM 0.33.0's
`decode_attention_fwd` (`is_mla=True`) with vLLM's split rule, device time per call under a
CUDA graph of 20 calls, median of 10 replays. The plot below shows it next to our times from
the committed run **only as a reference from a different run with a different timing method**;
the ratios are indicative, not a measured speed-up. At B=1 both sides sit at ~0.05 ms of fixed
cost and our K=10 timing carries some host dispatch (see run 4 above), so the ratio there says
little. Where the directory is missing, the cell says so and draws nothing.
"""),
    ("code", r"""
EARLIER = Path("../../shared/measurements/h200-cuda-graph-2026-11-29.json")
if not EARLIER.is_file():
    print(f"{EARLIER} not found: skipped the earlier vLLM measurements")
else:
    earlier = json.loads(EARLIER.read_text())
    ours_by_shape = by_shape(results)
    common = [(r, ours_by_shape[(r["B"], r["H"], r["L"])]) for r in earlier["rows"]
              if (r["B"], r["H"], r["L"]) in ours_by_shape]
    print("earlier run:", earlier["what"][:160], "...\n")
    print(f"{'B':>4} {'H':>4} {'L':>6}  {'vLLM, earlier run':>17}  "
          + "  ".join(f"{p + ', this run':>26} {'vLLM ÷ it':>9}" for p in OURS))
    for r, s in common:
        cells = "  ".join(f"{ms(s, p):>26.4f} {r['vllm_graph_ms'] / ms(s, p):>9.2f}"
                          for p in OURS)
        print(f"{r['B']:>4} {r['H']:>4} {r['L']:>6}  {r['vllm_graph_ms']:>17.4f}  {cells}")
    print("(ms per call; 'vLLM ÷ it' > 1: our time is lower. Different runs: indicative only.)")

    fig, ax = plt.subplots(figsize=(9, 3.6), layout="constrained")
    x, width = np.arange(len(common)), 0.8 / (len(OURS) + 1)
    ax.bar(x - len(OURS) / 2 * width, [r["vllm_graph_ms"] for r, _ in common], width,
           color="0.6", hatch="//", label="vLLM triton, EARLIER SEPARATE RUN (CUDA graph)")
    for k, p in enumerate(OURS):
        ax.bar(x + (k + 1 - len(OURS) / 2) * width, [ms(s, p) for _, s in common], width,
               label=f"{LABELS[p]}, this run")
    ax.scatter(x, [s["floor_ms"] for _, s in common], marker="_", s=400, color="k", zorder=3,
               label="floor, this run")
    ax.set_xticks(x, [f"B={r['B']} H={r['H']} L={r['L'] // 1024}k" for r, _ in common],
                  fontsize=7)
    ax.set(yscale="log", ylabel="ms per call",
           title="vLLM from an earlier, separate run vs ours: not a side-by-side measurement")
    ax.legend(fontsize=7)
    plt.show()
"""),
    ("md", r"""
## Re-measure on this machine

With a CUDA GPU visible to JAX, this runs a small live sweep through `mla_jax.bench.main`
(B ∈ {1, 64}, H ∈ {16, 128}, L ∈ {4k, 16k}; our two Triton paths, and vLLM's kernel side by
side when `mla_jax.vllm_kernel.load()` finds its file, see `docs/vllm_kernel.md`) into a
temporary folder, and draws it like the committed run. Elsewhere it says it skipped.
"""),
    ("code", r"""
import tempfile

import jax

if any(d.platform == "gpu" for d in jax.devices()):
    from mla_jax import bench

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "live"
        bench.main(["--batch", "1,64", "--heads", "16,128", "--lens", "4096,16384",
                    "--paths", "triton,triton-occupancy,vllm", "--repeats", "3",
                    "--time-budget", "240", "--out", str(out)])
        live = json.loads((out / "results.json").read_text())
    plot_time_vs_len(live, f"live sweep, {live['machine']['device']}")
    plot_heatmaps(live, [p for p in live["paths"]
                         if any(ms(s, p) is not None for s in live["shapes"])],
                  "pct_of_floor", "live sweep: % of the roofline floor")
else:
    print(f"no CUDA GPU visible to JAX ({jax.devices()}): skipped the live sweep")
"""),
]


def build_notebook() -> nbformat.NotebookNode:
    cells = []
    for i, (kind, text) in enumerate(CELLS):
        make = new_markdown_cell if kind == "md" else new_code_cell
        cells.append(make(text.strip("\n"), id=f"perf-{i:02d}"))  # stable ids: stable diffs
    nb = new_notebook(cells=cells, metadata={
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}})
    nbformat.validate(nb)
    return nb


# ------------------------------------------------------------- the page's section


def _ms(shape: dict, path: str) -> float | None:
    return shape["paths"].get(path, {}).get("ms")


def earlier_vllm_section(results: dict, earlier: dict, run4: dict | None) -> str:
    """Markdown: vLLM's CUDA-graph times from the earlier file at this run's shapes, and
    the ratio of ours to them, fenced off as a different run."""
    ours = {(s["B"], s["H"], s["L"]): s for s in results["shapes"]}
    common = [r for r in earlier["rows"] if (r["B"], r["H"], r["L"]) in ours]
    missing = [r for r in earlier["rows"] if (r["B"], r["H"], r["L"]) not in ours]
    occ, rule = "triton-occupancy", "triton"
    cfg, ceil = results["config"], results["ceilings"]
    lines = [
        MARKER, "", "---", "",
        "## Earlier measurements of vLLM's kernel (a different run)", "",
        "**vLLM's kernel was not measured in the run above**: it failed to load there "
        "(`Could not create or locate cache dir`, since fixed), so this page has no "
        "side-by-side vLLM baseline and makes no measured claim against vLLM.", "",
        "For reference only, the vLLM times below come from an **earlier, separate "
        "measurement** on the same H200 (`shared/measurements/"
        f"{EARLIER_VLLM.name}`): vLLM 0.33.0 `decode_attention_fwd` (`is_mla=True`) with "
        "vLLM's split rule, device time per call under a CUDA graph of 20 calls, median of "
        "10 replays. Our times are from the run above (K chained calls in one jitted loop, "
        f"{cfg['calls_rule']}, median of {cfg['repeats']}, timed on the host). Different "
        "runs, different timing methods: read the ratios as indicative, not as a speed-up "
        "measured side by side.", "",
    ]
    rows = []
    for r in common:
        s = ours[(r["B"], r["H"], r["L"])]
        vllm = r["vllm_graph_ms"]
        rows.append([str(r["B"]), str(r["H"]), str(r["L"]), f"{vllm:.3g}",
                     f"{_ms(s, occ):.3g}", f"{vllm / _ms(s, occ):.2f}×",
                     f"{_ms(s, rule):.3g}", f"{vllm / _ms(s, rule):.2f}×"])
    header = ["B", "H", "L", "vLLM, earlier run (ms)",
              f"{results['paths'][occ]}, this run (ms)", "earlier vLLM ÷ occupancy",
              f"{results['paths'][rule]}, this run (ms)", "earlier vLLM ÷ vLLM split rule"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", "A ratio above 1 means our time, from the run above, is lower than the "
              "earlier vLLM time.", "", "Notes:", ""]
    small = [r for r in common if r["B"] == 1]
    if small:
        note = ("- At B=1 both sides are at ~0.05 ms of fixed per-call cost (the floor is "
                "1–2 µs), and this run's K=10 calls per timed loop leave a share of the "
                "host dispatch in our times, so the ratio there says little.")
        if run4:
            r4 = {(s["B"], s["H"], s["L"]): s for s in run4["shapes"]}
            got = [(r, r4[k]) for r in small
                   if (k := (r["B"], r["H"], r["L"])) in r4 and _ms(r4[k], occ)]
            if got:
                note += (" The earlier partial sweep [`results-run4-partial.json`]"
                         "(benchmarks/results-run4-partial.json), timed with "
                         f"{got[0][1]['paths'][occ]['calls']} calls per loop at these shapes, "
                         "measured the occupancy path at "
                         + ", ".join(f"{_ms(s, occ):.3g} ms (B={r['B']} H={r['H']} "
                                     f"L={r['L']})" for r, s in got)
                         + "; also a different run from vLLM's.")
        lines.append(note)
    lines += [
        f"- The earlier file's floors use its own ceilings (device copy 4.22 TB/s, "
        f"790 TFLOP/s); the run above measured {ceil['copy_tbps']:.3g} TB/s and "
        f"{ceil['matmul_tflops']:.3g} TFLOP/s in JAX, so % of floor does not carry across "
        "the two.",
        "- The earlier file also holds shapes this run did not measure ("
        + ", ".join(f"B={r['B']} H={r['H']} L={r['L']}" for r in missing)
        + "), left out, and times of a prototype kernel that is not part of this library, "
        "not shown. `h200-anchors-2026-11-29.json` times vLLM eagerly with "
        "`triton.testing.do_bench` (host launch cost included), so it is not used here.",
        "- A side-by-side number needs a new run with the vLLM path working: "
        "`python -m mla_jax bench` (see `docs/vllm_kernel.md`).",
    ]
    return "\n".join(lines) + "\n"


def write_section(page: Path) -> None:
    text = page.read_text()
    text = text.split(MARKER)[0].rstrip("\n") + "\n\n"
    results = json.loads(RESULTS.read_text())
    earlier = json.loads(EARLIER_VLLM.read_text())
    run4 = json.loads(RUN4.read_text()) if RUN4.is_file() else None
    page.write_text(text + earlier_vllm_section(results, earlier, run4))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--skip-page", action="store_true", help="write only the notebook")
    args = p.parse_args()
    nbformat.write(build_notebook(), NOTEBOOK)
    print(f"wrote {NOTEBOOK.relative_to(ROOT)}")
    if not args.skip_page:
        write_section(PAGE)
        print(f"wrote the earlier-vLLM section of {PAGE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
