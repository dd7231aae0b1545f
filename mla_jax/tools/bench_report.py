"""The benchmark's arithmetic and its outputs: metrics, markdown, plots, a text table.

Pure Python (matplotlib for the plots), no JAX: ``python -m mla_jax bench
--report-only results.json`` re-renders a finished run anywhere. ``results`` is the
dict ``mla_jax.tools.bench`` writes as ``results.json``:

    {"what", "machine": {...}, "config": {...}, "paths": {key: label},
     "ceilings": {"copy_tbps", "matmul_tflops", "jax_loop_step_ms", ...},
     "shapes": [{"B", "H", "L", "num_kv_splits", "kv_bytes", "flops", "floor_ms",
                 "paths": {key: {"ms", "times_ms", "calls", "tbps", "tflops",
                                 "pct_of_floor", "speedup_vs_vllm", "max_abs_err",
                                 "num_kv_splits", "triton_kernel_calls",
                                 "device_ms", "kernels_per_call",
                                 "device_pct_of_floor", "device_speedup_vs_vllm"}
                             or {"skipped": reason, "num_kv_splits", ...}}}],
     "plots": [file names in the results folder]}

A shape's ``num_kv_splits`` is vLLM's split count there (the baseline's); each path's
entry has its own (none for the dense path). ``triton_kernel_calls``: the Triton
custom calls in the JAX path's timed chain (2 per call on the Triton paths).
``device_ms`` (GPU runs only): the path's kernel time per call from a profiler trace,
``kernels_per_call`` the kernels it saw with their launches per call;
``kernel_time_error`` instead where the profiler did not start.

The helpers that read it (``metric``, ``speedup``, ``timed_paths``, ``fmt``) and the
figures (``time_vs_len_figure``, ``heatmap_figure``, matplotlib ``Figure``s that
``write_plots`` saves as PNGs) are public: notebooks/03_performance.ipynb draws with them.
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # matplotlib is imported only when a figure is drawn
    from matplotlib.figure import Figure

# Path keys in display order, and their labels.
PATH_LABELS = {
    "triton": "mla_jax triton, vLLM's splits",
    "triton-occupancy": "mla_jax triton, occupancy splits (default)",
    "triton-fp8": "mla_jax triton, fp8 cache, occupancy splits (default)",
    "triton-fp8-mma": "mla_jax triton, fp8 cache, fp8_mma=True, occupancy splits",
    "xla": "mla_jax xla",
    "dense": "JAX gather+einsum",
    "vllm": "vLLM triton",
}
BASELINE = "vllm"
# What mla_decode runs by default (the occupancy split rule, a 16-bit cache).
DEFAULT_PATH = "triton-occupancy"
# The split rule each path runs (mla_jax.kv_splits' policy); the dense path has none.
SPLIT_POLICY: dict[str, Literal["vllm", "occupancy"] | None] = {
    "triton": "vllm",
    "triton-occupancy": "occupancy",
    "triton-fp8": "occupancy",
    "triton-fp8-mma": "occupancy",
    "xla": "vllm",
    "dense": None,
    "vllm": "vllm",
}
# The versions the page lists from results["machine"], those a results file has.
# jax_triton is in files written while mla_jax launched its kernels through
# jax-triton (bench no longer records it).
MACHINE_VERSIONS = ("jax", "jaxlib", "jax_triton", "triton", "torch")


def kv_bytes(batch: int, seq_len: int, *, latent_dim: int = 576, itemsize: int = 2) -> int:
    """Latent cache bytes one decode step must read: every live row once."""
    return batch * seq_len * latent_dim * itemsize


def attention_flops(
    batch: int, heads: int, seq_len: int, *, latent_dim: int = 576, kv_lora_rank: int = 512
) -> int:
    """Matmul flops of one step: q.k over the latent+rope dims, then p.v over kv_c."""
    return batch * heads * seq_len * (2 * latent_dim + 2 * kv_lora_rank)


def floor_ms(bytes_: float, flops: float, *, copy_tbps: float, matmul_tflops: float) -> float:
    """The roofline floor: the slower of streaming the bytes and doing the flops."""
    return max(bytes_ / (copy_tbps * 1e12), flops / (matmul_tflops * 1e12)) * 1e3


def path_metrics(
    ms: float, *, bytes_: float, flops: float, floor: float, vllm_ms: float | None
) -> dict[str, float | None]:
    """Achieved bandwidth and flop rate, % of the floor and speed-up over vLLM."""
    seconds = ms * 1e-3
    return {
        "tbps": bytes_ / seconds / 1e12,
        "tflops": flops / seconds / 1e12,
        "pct_of_floor": 100.0 * floor / ms,
        "speedup_vs_vllm": None if vllm_ms is None else vllm_ms / ms,
    }


def device_metrics(
    device_ms: float, *, floor: float, vllm_ms: float | None
) -> dict[str, float | None]:
    """% of the floor and speed-up over vLLM in kernel time (``device_ms`` of both)."""
    return {
        "device_pct_of_floor": 100.0 * floor / device_ms,
        "device_speedup_vs_vllm": None if vllm_ms is None else vllm_ms / device_ms,
    }


def metric(shape: dict, path: str, key: str) -> float | None:
    """``path``'s ``key`` (``"ms"``, ``"pct_of_floor"``, ...) at ``shape``, or None where
    the path was not measured there."""
    return shape["paths"].get(path, {}).get(key)


def speedup(shape: dict, path: str, over: str) -> float | None:
    """``over``'s time / ``path``'s at ``shape`` (> 1: ``path`` is faster), or None where
    either was not measured. ``speedup(s, p, "vllm")`` is the recorded speedup_vs_vllm."""
    mine, theirs = metric(shape, path, "ms"), metric(shape, over, "ms")
    return None if mine is None or theirs is None else theirs / mine


def fmt(value: float | None, spec: str = ".3g", *, suffix: str = "") -> str:
    """``value`` in ``spec`` with ``suffix``, or an em dash for a missing value."""
    return "—" if value is None else f"{value:{spec}}{suffix}"


def _splits(shape: dict, path: str) -> int | None:
    """``path``'s split count at ``shape``. Results written before paths recorded their
    own give vLLM's shape-level count to the paths on vLLM's rule, else nothing."""
    entry = shape["paths"].get(path, {})
    if "num_kv_splits" in entry:
        return entry["num_kv_splits"]
    return shape.get("num_kv_splits") if SPLIT_POLICY.get(path) == "vllm" else None


def timed_paths(results: dict) -> list[str]:
    """Paths with at least one time, in display order."""
    return [
        p
        for p in results["paths"]
        if any(metric(s, p, "ms") is not None for s in results["shapes"])
    ]


def traced_paths(results: dict) -> list[str]:
    """Timed paths with a kernel time (``device_ms``) at one shape or more, in display
    order."""
    return [
        p
        for p in timed_paths(results)
        if any(metric(s, p, "device_ms") is not None for s in results["shapes"])
    ]


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _timed(shape: dict) -> set[str]:
    """The paths timed at ``shape``."""
    return {p for p, entry in shape["paths"].items() if "ms" in entry}


def select_paths(results: dict, keep: Sequence[str]) -> dict:
    """``results`` with only the paths in ``keep``, in its header and at every shape: a
    part whose other paths a later run replaced, merged for the paths it still holds
    (``bench --report-only results.json:xla,dense``)."""
    unknown = [p for p in keep if p not in results["paths"]]
    if unknown:
        raise ValueError(
            f"paths {', '.join(unknown)} are not in these results; they hold "
            f"{', '.join(results['paths'])}"
        )
    return {
        **results,
        "paths": {p: label for p, label in results["paths"].items() if p in keep},
        "shapes": [
            {**s, "paths": {p: e for p, e in s["paths"].items() if p in keep}}
            for s in results["shapes"]
        ],
    }


def merge_results(parts: list[dict]) -> dict:
    """One results dict from sweeps run in parts (say, one device call per batch range).

    Shapes are concatenated in (B, H, L) order. A shape may be in two parts when one
    part timed more of its paths than the other (the other's time budget ran out
    first): that part's is kept. It may also be in parts that timed disjoint sets of
    its paths (a new run of some paths beside an earlier run of the others): then
    the shape holds every part's timed paths, each as its own part measured it (its
    floor, its vLLM ratio), the shape's own fields come from the first such part, and
    ``"path_parts"`` names each path's part (an index into ``"parts"``). Any other
    shape in two parts is an error. The first part's header stays; each part's
    ceilings and elapsed time are kept under ``"parts"``, since every shape's floor was
    taken from its own part's ceilings.
    """
    if len(parts) == 1:
        return parts[0]
    kept: dict[tuple[int, int, int], tuple[dict, int]] = {}  # the shape, its part
    for index, part in enumerate(parts):
        for shape in part["shapes"]:
            key = (shape["B"], shape["H"], shape["L"])
            if key not in kept:
                kept[key] = (shape, index)
                continue
            other, origin = kept[key]
            mine, theirs = _timed(shape), _timed(other)
            if mine and theirs and not mine & theirs:
                sources = dict(other.get("path_parts") or dict.fromkeys(sorted(theirs), origin))
                sources.update(dict.fromkeys(sorted(mine), index))
                # In the labels' display order, not a set's (which varies by process).
                both = mine | theirs
                order = [p for p in PATH_LABELS if p in both] + sorted(both - PATH_LABELS.keys())
                paths = {p: (shape if p in mine else other)["paths"][p] for p in order}
                kept[key] = ({**other, "paths": paths, "path_parts": sources}, origin)
            elif len(mine) == len(theirs):
                raise ValueError(
                    f"shape B={key[0]} H={key[1]} L={key[2]} is in two parts; merge sweeps "
                    "over disjoint shapes or disjoint paths, or re-measure a shape one part "
                    "left incomplete"
                )
            elif len(mine) > len(theirs):
                kept[key] = (shape, index)
    merged = {k: v for k, v in parts[0].items() if k not in ("shapes", "elapsed_s", "plots")}
    merged["shapes"] = [kept[key][0] for key in sorted(kept)]
    # Every part's paths, in the display order the labels define (PATH_LABELS).
    labels = {p: label for part in parts for p, label in part["paths"].items()}
    merged["paths"] = {p: labels[p] for p in PATH_LABELS if p in labels}
    merged["parts"] = [
        {"ceilings": p["ceilings"], "elapsed_s": p.get("elapsed_s"), "shapes": len(p["shapes"])}
        for p in parts
    ]
    merged["elapsed_s"] = sum(p.get("elapsed_s") or 0.0 for p in parts)
    return merged


def render_markdown(results: dict, image_dir: str = "") -> str:
    """The benchmark page: setup, ceilings, tables, skips and plots, from ``results``.

    ``image_dir`` is the results folder relative to where the page is written.
    """
    labels = results["paths"]
    timed = timed_paths(results)
    ours = [p for p in timed if p != BASELINE]
    machine, ceil, cfg = results["machine"], results["ceilings"], results["config"]
    lines = [
        "# MLA decode benchmark",
        "",
        f"_Generated by `python -m mla_jax bench` from `results.json`; {results['what']}_",
        "",
        f"- Device: {machine.get('device', '?')} ({machine.get('sm_count', '?')} SMs); "
        + ", ".join(f"{k} {machine[k]}" for k in MACHINE_VERSIONS if machine.get(k))
        + f"; {machine.get('date', '')}",
        f"- Ceilings measured in {'the first part' if results.get('parts') else 'this run'}: "
        f"device copy {ceil['copy_tbps']:.3g} TB/s, "
        f"bf16 matmul {ceil['matmul_tflops']:.3g} TFLOP/s. Floor = max(KV bytes / copy, "
        "flops / matmul); KV bytes = B·L·576·2, flops = B·H·L·(2·576 + 2·512).",
        f"- An almost empty iteration of a rolled JAX `fori_loop` takes "
        f"{fmt(ceil.get('jax_loop_step_ms'), '.3g')} ms. The decode paths' loops are "
        "unrolled, so this is not part of their times; it is what a rolled loop would add.",
        f"- bf16, kv_lora_rank {cfg['kv_lora_rank']} + rope {cfg['rope_dim']}, page size "
        f"{cfg['page_size']}, shuffled block tables, every row of length L; "
        f"{cfg['repeats']} repeats of {cfg['calls_rule']}; times are medians per call.",
    ]
    if results.get("parts"):
        lines.append(
            f"- Run in {len(results['parts'])} parts (merged by `--report-only`); each "
            "shape's floor uses its own part's ceilings: "
            + "; ".join(
                f"{p['shapes']} shapes, copy {p['ceilings']['copy_tbps']:.3g} TB/s, matmul "
                f"{p['ceilings']['matmul_tflops']:.3g} TFLOP/s"
                for p in results["parts"]
            )
            + "."
        )
        mixed = [s for s in results["shapes"] if s.get("path_parts")]
        if mixed:
            by_part: dict[int, set[str]] = {}
            for s in mixed:
                for path, part in s["path_parts"].items():
                    by_part.setdefault(part, set()).add(path)
            lines.append(
                f"- At {len(mixed)} shapes the paths come from different parts, each timed "
                "with its own part's ceilings and vLLM run: "
                + "; ".join(
                    f"part {part + 1}: {', '.join(f'`{p}`' for p in sorted(paths))}"
                    for part, paths in sorted(by_part.items())
                )
                + "."
            )
    if cfg.get("dry_run"):
        lines.append("- **Dry run**: CPU, tiny shapes, wall-clock times; the numbers mean nothing.")

    lines += [
        "",
        "## Wall time per call (ms)",
        "",
        "JAX paths: chained calls in one jit, ten runs a sync; vLLM: a CUDA graph between "
        "CUDA events. Under about 40 µs a call the host, not the GPU, sets the JAX paths' "
        "wall time.",
        "",
    ]
    rows = []
    for s in results["shapes"]:
        row = [str(s["B"]), str(s["H"]), str(s["L"]), fmt(s["floor_ms"], ".3g")]
        rows.append(row + [fmt(metric(s, p, "ms"), ".3g") for p in timed])
    lines += _table(["B", "H", "L", "floor"] + [labels[p] for p in timed], rows)

    traced = traced_paths(results)
    if traced:
        lines += [
            "",
            "## Kernel time per call (ms), from a profiler trace",
            "",
            "The time some kernel of the path was running, per call, from one more run of "
            "the same chain (or CUDA graph) under `jax.profiler.trace`: one instrument for "
            "every path, without the launch gaps between kernels. "
            + ("×vLLM compares kernel times." if BASELINE in traced else ""),
            "",
        ]
        ours_traced = [p for p in traced if p != BASELINE]
        header = ["B", "H", "L", "floor"] + [labels[p] for p in traced]
        header += [f"{labels[p]} %" for p in ours_traced]
        header += [f"{labels[p]} ×vLLM" for p in ours_traced] if BASELINE in traced else []
        rows = []
        for s in results["shapes"]:
            row = [str(s["B"]), str(s["H"]), str(s["L"]), fmt(s["floor_ms"], ".3g")]
            row += [fmt(metric(s, p, "device_ms"), ".3g") for p in traced]
            row += [fmt(metric(s, p, "device_pct_of_floor"), ".0f") for p in ours_traced]
            if BASELINE in traced:
                row += [
                    fmt(metric(s, p, "device_speedup_vs_vllm"), ".2f", suffix="×")
                    for p in ours_traced
                ]
            rows.append(row)
        lines += _table(header, rows)

    split = [
        p
        for p in labels
        if SPLIT_POLICY.get(p) and any(_splits(s, p) is not None for s in results["shapes"])
    ]
    if split:
        lines += ["", "## KV splits per call", ""]
        rows = [
            [str(s["B"]), str(s["H"]), str(s["L"])] + [fmt(_splits(s, p), "d") for p in split]
            for s in results["shapes"]
        ]
        lines += _table(["B", "H", "L"] + [labels[p] for p in split], rows)

    lines += ["", "## % of floor" + (", and speed-up over vLLM" if BASELINE in timed else ""), ""]
    header = ["B", "H", "L"] + [f"{labels[p]} %" for p in timed]
    header += [f"{labels[p]} ×vLLM" for p in ours] if BASELINE in timed else []
    rows = []
    for s in results["shapes"]:
        row = [str(s["B"]), str(s["H"]), str(s["L"])]
        row += [fmt(metric(s, p, "pct_of_floor"), ".0f") for p in timed]
        if BASELINE in timed:
            row += [fmt(metric(s, p, "speedup_vs_vllm"), ".2f", suffix="×") for p in ours]
        rows.append(row)
    lines += _table(header, rows)

    if "triton" in timed:
        lines += ["", f"## {labels['triton']}: achieved rates", ""]
        rows = [
            [
                str(s["B"]),
                str(s["H"]),
                str(s["L"]),
                fmt(metric(s, "triton", "tbps"), ".3g"),
                fmt(metric(s, "triton", "tflops"), ".3g"),
                fmt(metric(s, "triton", "max_abs_err"), ".2g"),
            ]
            for s in results["shapes"]
        ]
        lines += _table(["B", "H", "L", "TB/s", "TFLOP/s", "max |err| vs dense"], rows)

    skipped = [
        f"- B={s['B']} H={s['H']} L={s['L']}, {labels[p]}: {r['skipped']}"
        for s in results["shapes"]
        for p, r in s["paths"].items()
        if "skipped" in r
    ]
    if skipped:
        lines += ["", "## Not measured", "", *skipped]
    if results.get("plots"):
        lines += ["", "## Plots", ""]
        prefix = f"{image_dir.rstrip('/')}/" if image_dir else ""
        lines += [f"![{Path(name).stem}]({prefix}{name})" for name in results["plots"]]
    return "\n".join(lines) + "\n"


def summary_table(results: dict) -> str:
    """A short plain-text table for the terminal: ms per path, and the default path's
    (``DEFAULT_PATH``) % of floor and speed-up over vLLM."""
    timed = timed_paths(results)
    header = (
        f"{'B':>4} {'H':>4} {'L':>6} {'floor':>8} "
        + " ".join(f"{p:>8}" for p in timed)
        + f" {'def %fl':>8} {'def ×vL':>8} {'def dev':>8} {'dev ×vL':>8}"
    )
    lines = [header]
    for s in results["shapes"]:
        cells = [fmt(metric(s, p, "ms"), ".4f") for p in timed]
        lines.append(
            f"{s['B']:>4} {s['H']:>4} {s['L']:>6} {s['floor_ms']:>8.4f} "
            + " ".join(f"{c:>8}" for c in cells)
            + f" {fmt(metric(s, DEFAULT_PATH, 'pct_of_floor'), '.0f'):>8}"
            + f" {fmt(metric(s, DEFAULT_PATH, 'speedup_vs_vllm'), '.2f'):>8}"
            + f" {fmt(metric(s, DEFAULT_PATH, 'device_ms'), '.4f'):>8}"
            + f" {fmt(metric(s, DEFAULT_PATH, 'device_speedup_vs_vllm'), '.2f'):>8}"
        )
    skips = collections.Counter(
        (p, r["skipped"])
        for s in results["shapes"]
        for p, r in s["paths"].items()
        if "skipped" in r
    )
    lines += [f"{p} not measured at {n} shape(s): {why}" for (p, why), n in skips.items()]
    return "\n".join(lines)


def _len_label(seq_len: int) -> str:
    return f"{seq_len // 1024}k" if seq_len % 1024 == 0 else str(seq_len)


# A metric of (shape, path): a key of the path's entry ("ms", "pct_of_floor", ...) or a
# function computing one (say, ``lambda s, p: speedup(s, p, over="triton")``).
Metric = str | Callable[[dict, str], float | None]


def _value(shape: dict, path: str, key: Metric) -> float | None:
    return metric(shape, path, key) if isinstance(key, str) else key(shape, path)


def _grid(results: dict, path: str, key: Metric):
    """(row labels "B= H=", column Ls, matrix with NaN where missing) of one metric."""
    shapes = results["shapes"]
    rows = sorted({(s["B"], s["H"]) for s in shapes})
    cols = sorted({s["L"] for s in shapes})
    value = {(s["B"], s["H"], s["L"]): _value(s, path, key) for s in shapes}
    matrix = [
        [math.nan if value.get((b, h, n)) is None else value[(b, h, n)] for n in cols]
        for b, h in rows
    ]
    return [f"B={b} H={h}" for b, h in rows], cols, matrix


def heatmap_figure(
    results: dict, paths: list[str], key: Metric, title: str, *, ratio: bool
) -> Figure:
    """One heat map per path of ``key`` over (B, H) x L, values written in the cells.

    ``key``: a metric of the paths' entries, or a function ``(shape, path) -> value``.
    ``ratio``: a log colour scale symmetric about 1 (red slower, green faster);
    else a linear one from 0 to at least 100 (a percentage).
    """
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.figure import Figure

    if not paths:
        raise ValueError("heatmap_figure needs at least one path")
    grids = [_grid(results, path, key) for path in paths]
    finite = [v for _, _, matrix in grids for row in matrix for v in row if not math.isnan(v)]
    norm: Normalize
    if ratio:
        span = max([1.01] + [max(v, 1 / v) for v in finite if v > 0])
        norm = LogNorm(vmin=1 / span, vmax=span)
    else:
        norm = Normalize(vmin=0, vmax=max([100.0, *finite]))
    row_labels = grids[0][0]
    fig = Figure(figsize=(4.2 * len(paths) + 1, 0.45 * len(row_labels) + 2), layout="constrained")
    axes = fig.subplots(1, len(paths), squeeze=False)[0]
    for ax, path, (_, cols, matrix) in zip(axes, paths, grids, strict=True):
        image = ax.imshow(matrix, aspect="auto", cmap="RdYlGn", norm=norm)
        ax.set_xticks(range(len(cols)), [_len_label(n) for n in cols])
        ax.set_yticks(range(len(row_labels)), row_labels)
        ax.set_xlabel("L")
        ax.set_title(results["paths"].get(path, path), fontsize=9)
        for i, row in enumerate(matrix):
            for j, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=8)
    fig.colorbar(image, ax=list(axes))
    fig.suptitle(title)
    return fig


def time_vs_len_figure(
    results: dict,
    paths: list[str],
    title: str = "Time per call vs sequence length",
    *,
    key: str = "ms",
) -> Figure:
    """Time per call (``key``: ``"ms"``, wall time, or ``"device_ms"``, kernel time)
    against L, one panel per (H, B), a line per path plus the floor."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    shapes = results["shapes"]
    heads = sorted({s["H"] for s in shapes})
    batches = sorted({s["B"] for s in shapes})
    fig = Figure(figsize=(3.2 * len(batches) + 1, 2.8 * len(heads) + 1), layout="constrained")
    axes = fig.subplots(len(heads), len(batches), squeeze=False)
    for (i, h), (j, b) in itertools.product(enumerate(heads), enumerate(batches)):
        ax = axes[i][j]
        panel = sorted((s for s in shapes if s["B"] == b and s["H"] == h), key=lambda s: s["L"])
        for path in paths:
            points = [
                (s["L"], metric(s, path, key)) for s in panel if metric(s, path, key) is not None
            ]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=results["paths"][path])
        lens = [s["L"] for s in panel]
        ax.plot(lens, [s["floor_ms"] for s in panel], "k--", label="floor")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(lens, [_len_label(n) for n in lens])
        ax.xaxis.set_minor_locator(NullLocator())  # label only the measured L
        ax.set_title(f"B={b} H={h}", fontsize=9)
        ax.set_xlabel("L")
        ax.set_ylabel("ms per call")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    return fig


def write_plots(results: dict, out_dir: str | Path) -> list[str]:
    """Writes the PNG plots into ``out_dir``; returns their file names ([] without
    matplotlib or without any times)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return []
    timed = timed_paths(results)
    if not timed:
        return []
    # Kernel time where the run traced it (GPU runs), else wall time.
    traced = traced_paths(results)
    kernel = bool(traced)
    paths, prefix = (traced, "device_") if kernel else (timed, "")
    what = "kernel time" if kernel else "wall time"
    figures = {
        "time_vs_len.png": time_vs_len_figure(
            results,
            paths,
            f"{what.capitalize()} per call vs sequence length",
            key=f"{prefix}ms",
        ),
        "pct_of_floor.png": heatmap_figure(
            results,
            paths,
            f"{prefix}pct_of_floor",
            f"% of the roofline floor ({what})",
            ratio=False,
        ),
    }
    ours = [p for p in paths if p != BASELINE]
    if BASELINE in paths and ours:
        figures["speedup_vs_vllm.png"] = heatmap_figure(
            results,
            ours,
            f"{prefix}speedup_vs_vllm",
            f"Speed-up over vLLM (>1: faster; {what})",
            ratio=True,
        )
    for name, fig in figures.items():
        fig.savefig(Path(out_dir) / name, dpi=110)
    return list(figures)
