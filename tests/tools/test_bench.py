"""The benchmark: the dry run's outputs (the same on a CPU and a GPU), the report, the
arithmetic, the timed chain (every call's work kept), the CLI's guards."""

import json
import re

import jax
import jax.numpy as jnp
import pytest

import mla_jax
from mla_jax.tools import bench, bench_report, chain_calls

# Two shapes cover every code path (and a merge of two parts); the dry run's default
# sweep has four, which only costs more compiles.
DRY_SHAPES = [(1, 16, 256), (2, 16, 256)]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    assert (
        bench.main(
            ["--dry-run", "--batch", "1,2", "--lens", "256", "--out", str(root / "benchmarks")]
        )
        == 0
    )
    return root


def test_dry_run_writes_json_plots_and_markdown(dry_run):
    out = dry_run / "benchmarks"
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["dry_run"] is True
    # The versions that matter to the Triton path; jax-triton is no longer one of them.
    assert {"jax", "jaxlib", "triton", "torch"} <= set(results["machine"])
    assert "jax_triton" not in results["machine"]
    assert results["ceilings"]["copy_tbps"] > 0 and results["ceilings"]["matmul_tflops"] > 0
    assert list(results["paths"]) == ["triton", "triton-occupancy", "xla", "dense", "vllm"]
    assert [(s["B"], s["H"], s["L"]) for s in results["shapes"]] == DRY_SHAPES
    for shape in results["shapes"]:
        paths = shape["paths"]
        splits = {
            policy: mla_jax.kv_splits(
                policy, batch=shape["B"], num_heads=shape["H"], max_seq_len=shape["L"], sm_count=132
            )
            for policy in ("vllm", "occupancy")
        }
        assert splits["occupancy"] > splits["vllm"]  # so a shared column would show
        # Lowered for CUDA, 2 calls a chain: stage 1 and stage 2 of each reach the outputs,
        # or stage 1 alone where the grid has one split (vLLM's rule at L=256).
        assert splits["vllm"] == 1
        for name, policy in (("triton", "vllm"), ("triton-occupancy", "occupancy")):
            assert paths[name] == {
                "skipped": "dry run: lowered for CUDA, not run",
                "num_kv_splits": splits[policy],
                "triton_kernel_calls": 2 * (1 if splits[policy] == 1 else 2),
            }
        assert "num_kv_splits" not in paths["dense"]
        for name in ("xla", "dense", "vllm"):
            entry = paths[name]
            assert entry["ms"] > 0 and len(entry["times_ms"]) == 2 and entry["calls"] == 2
            assert entry.get("num_kv_splits", splits["vllm"]) == splits["vllm"]
            assert entry["pct_of_floor"] == pytest.approx(100 * shape["floor_ms"] / entry["ms"])
            assert entry["speedup_vs_vllm"] == pytest.approx(paths["vllm"]["ms"] / entry["ms"])
            # bf16 outputs of O(1): the paths agree to bf16 rounding, vLLM's plumbing included.
            assert entry["max_abs_err"] < 0.02
    assert sorted(results["plots"]) == [
        "pct_of_floor.png",
        "speedup_vs_vllm.png",
        "time_vs_len.png",
    ]
    for name in results["plots"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (dry_run / "benchmarks.md").read_text()
    assert page == bench_report.render_markdown(results, image_dir="benchmarks")
    assert "](benchmarks/time_vs_len.png)" in page and "Dry run" in page
    # Each path's own split count: triton, triton-occupancy, xla, vLLM.
    assert "| 2 | 16 | 256 | 1 | 4 | 1 | 1 |" in page.split("## KV splits per call")[1]


def test_report_only_rerenders_into_out(dry_run, tmp_path, capsys):
    results_json = dry_run / "benchmarks" / "results.json"
    out = tmp_path / "docs" / "benchmarks"
    assert bench.main(["--report-only", str(results_json), "--out", str(out)]) == 0
    assert json.loads((out / "results.json").read_text()) == json.loads(results_json.read_text())
    text = (tmp_path / "docs" / "benchmarks.md").read_text()
    assert "| 2 | 16 | 256 |" in text
    links = re.findall(r"\]\(([^)]+\.png)\)", text)
    assert links == [
        f"benchmarks/{name}"
        for name in ("time_vs_len.png", "pct_of_floor.png", "speedup_vs_vllm.png")
    ]
    assert all((tmp_path / "docs" / link).is_file() for link in links)
    page = tmp_path / "elsewhere" / "page.md"
    assert (
        bench.main(["--report-only", str(results_json), "--out", str(out), "--markdown", str(page)])
        == 0
    )
    assert "](../docs/benchmarks/time_vs_len.png)" in page.read_text()
    assert "B    H      L" in capsys.readouterr().out


def test_report_only_merges_a_sweep_run_in_parts(dry_run, tmp_path):
    whole = json.loads((dry_run / "benchmarks" / "results.json").read_text())
    shapes = whole["shapes"]
    assert len(shapes) >= 2
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({**whole, "shapes": shapes[1:], "elapsed_s": 2.0}))
    second.write_text(json.dumps({**whole, "shapes": shapes[:1], "elapsed_s": 3.0}))
    out = tmp_path / "merged"
    assert bench.main(["--report-only", str(first), str(second), "--out", str(out)]) == 0
    merged = json.loads((out / "results.json").read_text())
    key = lambda s: (s["B"], s["H"], s["L"])
    assert [key(s) for s in merged["shapes"]] == sorted(key(s) for s in shapes)
    assert merged["elapsed_s"] == 5.0 and [p["shapes"] for p in merged["parts"]] == [
        len(shapes) - 1,
        1,
    ]
    with pytest.raises(ValueError, match="in two parts"):
        bench_report.merge_results([whole, whole])


def test_merge_keeps_the_part_that_measured_a_shape_whole(dry_run):
    """A shape one part left incomplete (its time budget ran out) and another part
    measured whole: the whole one is kept, in either order; two parts that timed as
    many of its paths are an error."""
    whole = json.loads((dry_run / "benchmarks" / "results.json").read_text())
    shape = whole["shapes"][-1]
    cut = {**shape, "paths": {p: {"skipped": "time budget (1 s) spent"} for p in shape["paths"]}}
    incomplete = {**whole, "shapes": whole["shapes"][:-1] + [cut]}
    tail = {**whole, "shapes": [shape]}
    for parts in ([incomplete, tail], [tail, incomplete]):
        merged = bench_report.merge_results(parts)
        assert merged["shapes"] == sorted(whole["shapes"], key=lambda s: (s["B"], s["H"], s["L"]))
    with pytest.raises(ValueError, match="in two parts"):
        bench_report.merge_results([incomplete, {**whole, "shapes": [cut]}])


def test_merge_unions_parts_that_timed_disjoint_paths(dry_run):
    """A new run of some paths merged with an earlier run of the others: each shape
    holds both parts' entries as they were, and says which part timed which path;
    parts that timed a path in common stay an error."""
    whole = json.loads((dry_run / "benchmarks" / "results.json").read_text())
    timed = [p for p in whole["paths"] if "ms" in whole["shapes"][0]["paths"][p]]
    assert len(timed) >= 2
    first, rest = timed[:1], timed[1:]

    def only(paths):
        return {
            **whole,
            "paths": {p: whole["paths"][p] for p in paths},
            "shapes": [{**s, "paths": {p: s["paths"][p] for p in paths}} for s in whole["shapes"]],
        }

    merged = bench_report.merge_results([only(rest), only(first)])
    assert list(merged["paths"]) == [p for p in whole["paths"] if p in timed]
    for got, want in zip(merged["shapes"], whole["shapes"], strict=True):
        assert got["paths"] == {p: want["paths"][p] for p in timed}
        assert list(got["paths"]) == timed  # the labels' order, whichever part came first
        assert got["path_parts"] == {**dict.fromkeys(rest, 0), **dict.fromkeys(first, 1)}
    page = bench_report.render_markdown(merged)
    assert f"At {len(whole['shapes'])} shapes the paths come from different parts" in page
    with pytest.raises(ValueError, match="in two parts"):
        bench_report.merge_results([only(first), only(first)])


def test_report_only_takes_some_paths_of_a_part(dry_run, tmp_path, capsys):
    """``FILE:PATHS`` merges only those paths of a part (an earlier run's XLA paths
    beside a new run of the others); a path the file lacks, or a file that is not
    there, is an error naming it, with nothing written."""
    results_json = dry_run / "benchmarks" / "results.json"
    whole = json.loads(results_json.read_text())
    timed = [p for p in whole["paths"] if "ms" in whole["shapes"][0]["paths"][p]]
    assert len(timed) >= 2
    first, rest = timed[:1], timed[1:]
    out = tmp_path / "merged"
    args = [f"{results_json}:{','.join(rest)}", f"{results_json}:{first[0]}"]
    assert bench.main(["--report-only", *args, "--out", str(out)]) == 0
    merged = json.loads((out / "results.json").read_text())
    for got, want in zip(merged["shapes"], whole["shapes"], strict=True):
        assert got["paths"] == {p: want["paths"][p] for p in timed}
        assert got["path_parts"] == {**dict.fromkeys(rest, 0), **dict.fromkeys(first, 1)}
    assert set(merged["paths"]) == set(timed)
    bad = tmp_path / "bad"
    assert bench.main(["--report-only", f"{results_json}:nope", "--out", str(bad)]) == 2
    assert "paths nope are not in these results; they hold" in capsys.readouterr().err
    missing = tmp_path / "missing.json"
    assert bench.main(["--report-only", f"{missing}:xla", "--out", str(bad)]) == 2
    assert f"there is no file '{missing}'" in capsys.readouterr().err
    assert not bad.exists()


def test_floor_and_metrics_by_hand():
    # B=128, H=16, L=16384: 128*16384*576*2 = 2_415_919_104 bytes, bandwidth-bound.
    nbytes = bench_report.kv_bytes(128, 16384)
    flops = bench_report.attention_flops(128, 16, 16384)
    assert nbytes == 2_415_919_104
    assert flops == 128 * 16 * 16384 * 2176 == 73_014_444_032
    floor = bench_report.floor_ms(nbytes, flops, copy_tbps=4.22, matmul_tflops=790)
    assert floor == pytest.approx(2_415_919_104 / 4.22e12 * 1e3)  # 0.57249 ms
    assert floor == pytest.approx(0.5724926786729858)  # shared/measurements' floor_ms
    # B=128, H=128, L=16384: 584_115_552_256 flops at 790 TFLOP/s is the slower one.
    flops = bench_report.attention_flops(128, 128, 16384)
    floor = bench_report.floor_ms(nbytes, flops, copy_tbps=4.22, matmul_tflops=790)
    assert floor == pytest.approx(584_115_552_256 / 790e12 * 1e3)  # 0.73939 ms
    m = bench_report.path_metrics(
        2.0, bytes_=4e12 * 1e-3, flops=3e12 * 1e-3, floor=0.5, vllm_ms=3.0
    )
    # 4 GB in 2 ms = 2 TB/s; 3 TFLOP in 2 ms = 1.5 PFLOP/s; 0.5 / 2 = 25 %; 3 / 2 = 1.5x.
    assert m == pytest.approx(
        {"tbps": 2.0, "tflops": 1.5, "pct_of_floor": 25.0, "speedup_vs_vllm": 1.5}
    )
    assert (
        bench_report.path_metrics(1.0, bytes_=1, flops=1, floor=1, vllm_ms=None)["speedup_vs_vllm"]
        is None
    )


def test_sweep_shapes_calls_and_skips():
    shapes = bench.sweep_shapes(bench.BATCHES, bench.HEADS, bench.LENS)
    assert len(shapes) == 5 * 4 * 3 + 2 * 4
    assert {(b, n) for b, _, n in shapes if n == 65536} == {(1, 65536), (4, 65536)}
    assert {h for _, h, _ in shapes} == {16, 32, 64, 128}
    assert bench.calls_for(0.0003) == 20 and bench.calls_for(0.1) == 20
    assert bench.calls_for(5.0) == 5 and bench.calls_for(0.2) == 10
    settings = bench.Settings(
        dry_run=False,
        repeats=5,
        calls=None,
        page_size=64,
        sm_count=132,
        paths=("xla", "vllm"),
        time_budget_s=100,
        bytes_budget=4 * 2**30,
    )
    # 128*16384*1152 B of rows + 3*128*128*16384*4 B of logits = 5.25 GiB > 4 GiB.
    assert "5.2 GiB" in bench.skip_reason(settings, "xla", (128, 128, 16384), 0, None)
    assert bench.skip_reason(settings, "xla", (4, 16, 4096), 0, None) is None
    assert bench.skip_reason(settings, "vllm", (4, 16, 4096), 0, "no file") == "no file"
    assert "time budget" in bench.skip_reason(settings, "vllm", (4, 16, 4096), 101, None)


def test_render_markdown_synthetic():
    shape = {
        "B": 4,
        "H": 128,
        "L": 4096,
        "num_kv_splits": 8,
        "kv_bytes": 1,
        "flops": 1,
        "floor_ms": 0.01,
        "paths": {
            "triton": {
                "ms": 0.02,
                "tbps": 1.2,
                "tflops": 3.4,
                "pct_of_floor": 50.0,
                "speedup_vs_vllm": 2.5,
                "max_abs_err": 0.002,
            },
            "triton-occupancy": {"skipped": "error: OOM", "num_kv_splits": 64},
            "xla": {"skipped": "needs ~9 GiB"},
            "vllm": {"ms": 0.05, "pct_of_floor": 20.0, "speedup_vs_vllm": 1.0},
        },
    }
    results = {
        "what": "synthetic.",
        "machine": {"device": "NVIDIA H200", "sm_count": 132, "jax": "0.11.2"},
        "config": {
            "repeats": 5,
            "calls_rule": "K=10 calls",
            "page_size": 64,
            "kv_lora_rank": 512,
            "rope_dim": 64,
        },
        "paths": {
            "triton": "mla_jax triton",
            "triton-occupancy": "mla_jax occupancy",
            "xla": "mla_jax xla",
            "dense": "dense",
            "vllm": "vLLM triton",
        },
        "ceilings": {"copy_tbps": 4.22, "matmul_tflops": 790.0},
        "shapes": [shape, {**shape, "L": 16384, "paths": {"vllm": {"ms": 0.2}}}],
        "plots": ["time_vs_len.png"],
    }
    page = bench_report.render_markdown(results, image_dir="benchmarks")
    assert "NVIDIA H200 (132 SMs)" in page and "4.22 TB/s" in page and "790 TFLOP/s" in page
    assert "| B | H | L | floor | mla_jax triton | vLLM triton |" in page
    assert "| 4 | 128 | 4096 | 0.01 | 0.02 | 0.05 |" in page
    assert "| 4 | 128 | 16384 | 0.01 | — | 0.2 |" in page
    # Each path's own split count; entries without one (results written before paths
    # recorded theirs) fall back to the shape's vLLM count on vLLM's rule only.
    splits = page.split("## KV splits per call")[1].split("##")[0]
    assert (
        "| B | H | L | mla_jax triton | mla_jax occupancy | mla_jax xla | vLLM triton |" in splits
    )
    assert "| 4 | 128 | 4096 | 8 | 64 | 8 | 8 |" in splits
    assert "| 4 | 128 | 16384 | 8 | — | 8 | 8 |" in splits
    assert "| 4 | 128 | 4096 | 50 | 20 | 2.50× |" in page
    assert "| 4 | 128 | 4096 | 1.2 | 3.4 | 0.002 |" in page
    assert "- B=4 H=128 L=4096, mla_jax xla: needs ~9 GiB" in page
    assert "- B=4 H=128 L=4096, mla_jax occupancy: error: OOM" in page
    assert "![time_vs_len](benchmarks/time_vs_len.png)" in page
    assert "Dry run" not in page
    assert "(132 SMs); jax 0.11.2; " in page  # the versions the file has, no others
    # Results written while the kernels went through jax-triton record its version.
    old = {**results, "machine": {**results["machine"], "jax_triton": "0.3.1", "triton": "3.6.0"}}
    old_page = bench_report.render_markdown(old, image_dir="benchmarks")
    assert "(132 SMs); jax 0.11.2, jax_triton 0.3.1, triton 3.6.0; " in old_page
    # The terminal table's last columns are the default path's (here: not measured).
    row = bench_report.summary_table(results).splitlines()[1].split()
    assert row == ["4", "128", "4096", "0.0100", "0.0200", "0.0500", "—", "—", "—", "—"]
    measured = {**shape["paths"], "triton-occupancy": shape["paths"]["triton"]}
    table = bench_report.summary_table({**results, "shapes": [{**shape, "paths": measured}]})
    assert table.splitlines()[1].split()[3:] == [
        "0.0100",
        "0.0200",
        "0.0200",
        "0.0500",
        "50",
        "2.50",
        "—",  # no kernel time in these results
        "—",
    ]


def test_public_helpers_and_figures():
    """What notebooks/03_performance.ipynb draws with: the helpers, and the figures
    write_plots saves, from a metric name or a function of (shape, path)."""
    from matplotlib.colors import LogNorm

    def shape(length, times):
        return {
            "B": 1,
            "H": 16,
            "L": length,
            "floor_ms": 0.001,
            "paths": {p: {"ms": ms, "pct_of_floor": 0.1 / ms} for p, ms in times.items()},
        }

    results = {
        "paths": {"triton": "vLLM's rule", "triton-occupancy": "occupancy", "vllm": "vLLM"},
        "shapes": [
            shape(1024, {"triton": 0.02, "triton-occupancy": 0.01}),
            shape(4096, {"triton": 0.04, "triton-occupancy": 0.05}),
        ],
    }
    first = results["shapes"][0]
    assert bench_report.timed_paths(results) == ["triton", "triton-occupancy"]
    assert bench_report.metric(first, "triton", "ms") == 0.02
    assert bench_report.metric(first, "vllm", "ms") is None
    assert bench_report.speedup(first, "triton-occupancy", over="triton") == 2.0
    assert bench_report.speedup(first, "triton", over="vllm") is None
    assert bench_report.fmt(None) == "—" and bench_report.fmt(2.0, ".2f", suffix="×") == "2.00×"

    fig = bench_report.time_vs_len_figure(results, ["triton", "triton-occupancy"], title="t")
    assert fig.get_suptitle() == "t"
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.get_lines()] == ["vLLM's rule", "occupancy", "floor"]

    fig = bench_report.heatmap_figure(
        results,
        ["triton-occupancy"],
        lambda s, p: bench_report.speedup(s, p, over="triton"),
        "split rules",
        ratio=True,
    )
    ax = fig.axes[0]
    assert ax.get_title() == "occupancy"
    assert [t.get_text() for t in ax.texts] == ["2", "0.8"]
    assert isinstance(ax.images[0].norm, LogNorm) and ax.images[0].norm.vmax == 2.0
    fig = bench_report.heatmap_figure(results, ["triton"], "pct_of_floor", "%", ratio=False)
    assert [t.get_text() for t in fig.axes[0].texts] == ["5", "2.5"]
    with pytest.raises(ValueError, match="at least one path"):
        bench_report.heatmap_figure(results, [], "ms", "none", ratio=False)


@pytest.mark.parametrize("path", ["dense", "xla"])
@pytest.mark.parametrize("perturb", [True, False])
def test_every_call_does_its_work_only_when_perturbed_and_kept(path, perturb):
    """The timed calls are unrolled and XLA merges identical calls on loop-invariant
    inputs: the XLA paths gather once per call only because each call feeds the block
    table the next one reads; and they compute out (a dot) in every call only because
    every out is an output. (On the CPU: XLA:GPU fuses gathers differently.)"""
    with jax.default_device(jax.devices("cpu")[0]):
        gathers, dots = ops_in_chain(path, perturb, keep_outs=True)
        # xla: gathers of the block table, then of the cache; dots: q.k_nope, q.k_pe, p.v
        per_call = {"dense": (1, 2), "xla": (2, 3)}[path]
        assert (gathers, dots) == tuple((3 if perturb else 1) * n for n in per_call)
        if perturb:  # without every out kept, XLA deletes all but the last call's p.v
            assert ops_in_chain(path, perturb, keep_outs=False)[1] < 3 * per_call[1]


def ops_in_chain(path, perturb, *, keep_outs):
    inputs = bench.make_inputs(jax.random.key(0), 2, 16, 256, 16)
    if path == "dense":

        def decode(q, kv, bt, sl, buf):
            return *bench.dense_decode(q, kv, bt, sl, scale=0.1), buf

        buf = None
    else:

        def decode(q, kv, bt, sl, buf):
            return mla_jax.mla_decode(q, kv, bt, sl, buf, scale=0.1, max_seq_len=256, backend="xla")

        buf = mla_jax.reserve_logits_buffer(2, 16, 256, sm_count=132)
    hlo = (
        bench.timed_chain(decode, 3, perturb_table=perturb, keep_outs=keep_outs)
        .lower(*inputs, buf)
        .compile()
        .as_text()
    )
    return len(re.findall(r"= \S+ gather\(", hlo)), len(re.findall(r"= \S+ dot\(", hlo))


def triton_decode(q, kv, bt, sl, buf):
    # The bench's scale: the dry run's Triton kernels, already compiled, serve this too.
    return mla_jax.mla_decode(
        q,
        kv,
        bt,
        sl,
        buf,
        scale=bench.SCALE,
        max_seq_len=256,
        backend="triton",
        compute_capability=90,
    )


def last_call_only(calls):
    """The chain as a rolled-up loop would time it: only the last call's results out."""

    def run(q, kv, bt, sl, buf):
        def body(_, carry):
            buf, _, _ = carry
            return triton_decode(q, kv, bt, sl, buf)[::-1]  # (buf, lse, out)

        init = (buf, jnp.zeros(q.shape[:2], jnp.float32), jnp.zeros((*q.shape[:2], 512), q.dtype))
        buf, lse, out = jax.lax.fori_loop(0, calls, body, init, unroll=True)
        return (out,), (lse,), buf

    return jax.jit(run, donate_argnums=4)


def test_lowered_chain_keeps_both_stages_of_every_call():
    """The CI half of the bench's guard: the Triton chain lowered for CUDA holds 2 K
    custom calls, each reaching the module's outputs; a loop that returns only its last
    call's results fails the same check (XLA would delete K - 1 stage-2 calls)."""
    inputs = bench.make_inputs(jax.random.key(0), 2, 16, 256, 16)
    # The occupancy rule's 4 splits (vLLM's rule has one here: stage 1 alone).
    buf = mla_jax.reserve_logits_buffer(2, 16, 256, sm_count=132, policy="occupancy")
    lower = lambda chain: chain.trace(*inputs, buf).lower(lowering_platforms=("cuda",)).as_text()
    calls = 3
    good = chain_calls.stablehlo_custom_calls(
        lower(bench.timed_chain(triton_decode, calls, perturb_table=False, keep_outs=False))
    )
    assert good == (2 * calls, 2 * calls)
    chain_calls.check_chain_calls("triton", good.reaching_return, calls, 2, "in the lowered module")

    # The unrolled fori_loop shares one body function over K call sites: its text has
    # 2 custom calls, its call sites 2 K, of which only the last stage 2 is used.
    bad = chain_calls.stablehlo_custom_calls(lower(last_call_only(calls)))
    assert bad == (2 * calls, calls + 1)
    with pytest.raises(
        chain_calls.ChainCheckError,
        match=r"has 4 live kernel launches .* in the lowered module, not 6",
    ):
        chain_calls.check_chain_calls(
            "triton", bad.reaching_return, calls, 2, "in the lowered module"
        )


def test_custom_call_walk_on_a_handwritten_module():
    """Result k of a call is the callee's returned value k; ops with regions take what
    their regions return; strings never count as operands."""
    module = """module @m {
  func.func public @main(%arg0: tensor<f32>) -> (tensor<f32>) {
    %0:2 = call @pair(%arg0) : (tensor<f32>) -> (tensor<f32>, tensor<f32>)
    %1 = stablehlo.custom_call @t(%arg0) {backend_config = "%0#1"} : (tensor<f32>) -> tensor<f32>
    %2 = stablehlo.while(%iterArg = %arg0) : tensor<f32>
    cond {
      %c = stablehlo.constant dense<true> : tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %3 = stablehlo.custom_call @t(%iterArg) : (tensor<f32>) -> tensor<f32>
      stablehlo.return %3 : tensor<f32>
    }
    return %0#0, %2 : tensor<f32>, tensor<f32>
  }
  func.func private @pair(%arg0: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
    %0 = stablehlo.custom_call @t(%arg0) : (tensor<f32>) -> tensor<f32>
    %1 = stablehlo.custom_call @t(%arg0) : (tensor<f32>) -> tensor<f32>
    return %0, %1 : tensor<f32>, tensor<f32>
  }
}"""
    # Live: @pair's first (returned as %0#0) and the while body's; dead: @pair's second
    # (%0#1 is unused) and %1 (named only inside a string).
    assert chain_calls.stablehlo_custom_calls(module, targets=["t"]) == (4, 2)
    compiled = (
        'x = f32[] custom-call(y), custom_call_target="t", z = custom-call(), '
        'custom_call_target="u"'
    )
    assert chain_calls.compiled_custom_calls(compiled, targets=["t"]) == 1


def test_time_loop_threads_the_state_and_time_wall_counts_calls():
    calls = []

    def fn():
        calls.append(1)
        return "out", "lse"

    times, out = bench.time_wall(fn, calls=3, repeats=2)
    assert len(times) == 2 and out == "out" and len(calls) == 1 + 3 * 2
    step = jax.jit(lambda x: x + 1, donate_argnums=0)
    times, state = bench.time_loop(step, jax.numpy.zeros(2), calls=4, repeats=3, runs=5)
    assert len(times) == 3 and all(t > 0 for t in times) and state.tolist() == [16, 16]


@pytest.mark.parametrize("batch_invariant, kernels", [(True, 1), (False, 2)])
def test_kernels_per_call_counts_one_calls_lowering(batch_invariant, kernels):
    """One split (batch-invariant mode) lowers stage 1 alone, 8 splits (vLLM's rule at
    L=4096) both stages: the count the chain's check expects a call."""
    spec = jax.ShapeDtypeStruct
    inputs = (
        spec((4, 16, 576), jnp.bfloat16),
        spec((256, 64, 576), jnp.bfloat16),
        spec((4, 64), jnp.int32),
        spec((4,), jnp.int32),
    )
    buf = mla_jax.reserve_logits_buffer(4, 16, 4096, sm_count=132, policy="vllm")

    def decode(q, kv, bt, sl, buf):
        return mla_jax.mla_decode(
            q,
            kv,
            bt,
            sl,
            buf,
            scale=0.1,
            max_seq_len=4096,
            batch_invariant=batch_invariant,
            backend="triton",
            compute_capability=90,
        )

    assert bench.kernels_per_call(decode, inputs, buf) == kernels


def test_path_splits_follow_each_paths_policy():
    args = dict(batch=4, num_heads=16, max_seq_len=4096, sm_count=132)
    vllm, occupancy = (mla_jax.kv_splits(p, **args) for p in ("vllm", "occupancy"))
    assert (vllm, occupancy) == (8, 64)
    splits = {p: bench.path_splits(p, 4, 16, 4096, 132) for p in bench_report.PATH_LABELS}
    assert splits == {
        "triton": vllm,
        "triton-occupancy": occupancy,
        "triton-fp8": occupancy,
        "triton-fp8-mma": occupancy,
        "xla": vllm,
        "dense": None,
        "vllm": vllm,
    }


# ----------------------------------------------------------------------------- CLI


def gpu_results(tmp_path, name="benchmarks"):
    """A folder holding a results.json measured on a GPU, and its page beside it."""
    out = tmp_path / "docs" / name
    out.mkdir(parents=True)
    (out / "results.json").write_text(
        json.dumps({"machine": {"platform": "gpu", "device": "NVIDIA H200", "date": "then"}})
    )
    (tmp_path / "docs" / f"{name}.md").write_text("the H200 page\n")
    return out


def test_dry_run_defaults_to_build_and_leaves_committed_results(
    dry_run, tmp_path, monkeypatch, capsys
):
    committed = gpu_results(tmp_path)
    before = (committed / "results.json").read_text()
    monkeypatch.chdir(tmp_path)
    # The sweep itself is the fixture's; this checks where its outputs land.
    results = json.loads((dry_run / "benchmarks" / "results.json").read_text())
    monkeypatch.setattr(bench, "run_sweep", lambda *_, **__: dict(results))
    monkeypatch.setattr(bench_report, "write_plots", lambda *_: [])
    assert bench.main(["--dry-run"]) == 0
    assert (committed / "results.json").read_text() == before
    assert (tmp_path / "docs" / "benchmarks.md").read_text() == "the H200 page\n"
    assert (
        json.loads((tmp_path / "build/bench-dry-run/results.json").read_text())["config"]["dry_run"]
        is True
    )
    assert "Dry run" in (tmp_path / "build/bench-dry-run.md").read_text()
    assert "build/bench-dry-run/results.json" in capsys.readouterr().out
    assert "with --dry-run, build/bench-dry-run" in " ".join(bench._parser().format_help().split())


def test_no_run_off_a_gpu_replaces_gpu_results(dry_run, tmp_path, capsys):
    out = gpu_results(tmp_path)
    before = (out / "results.json").read_text()
    assert bench.main(["--dry-run", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "measured on a GPU (NVIDIA H200, then)" in err and "--out" in err
    dry = dry_run / "benchmarks" / "results.json"
    assert bench.main(["--report-only", str(dry), "--out", str(out)]) == 2
    assert "--out" in capsys.readouterr().err
    assert (out / "results.json").read_text() == before
    # Nor a dry run on a GPU; but GPU results may replace GPU results (re-rendering a
    # sweep, say), and anything may replace a dry run's.
    assert "a dry run's results would replace" in bench.replace_refusal(out, "gpu", dry_run=True)
    assert bench.replace_refusal(out, "gpu") is None
    assert bench.replace_refusal(dry.parent, "cpu", dry_run=True) is None
    gpu = json.loads(dry.read_text())
    gpu["machine"]["platform"] = "gpu"
    gpu["config"]["dry_run"] = False
    (tmp_path / "gpu.json").write_text(json.dumps(gpu))
    assert bench.main(["--report-only", str(tmp_path / "gpu.json"), "--out", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["machine"]["platform"] == "gpu"


def _plane(name, lines):
    from types import SimpleNamespace as NS

    return NS(
        name=name,
        lines=[
            NS(name=line, events=[NS(name=k, start_ns=a, end_ns=b) for k, a, b in events])
            for line, events in lines.items()
        ],
    )


def test_kernel_time_is_the_union_of_the_gpu_streams_kernels():
    planes = [
        _plane("/host:CPU", {"python": [("f", 0, 10_000)]}),
        _plane(
            "/device:GPU:0",
            {
                # Two streams overlapping for 5 ns, a gap of 20, a kernel inside another.
                "Stream #13(Compute)": [("stage1", 100, 160), ("stage2", 180, 200)],
                "Stream #14": [("stage1", 155, 175), ("stage2", 185, 190)],
                "XLA Ops": [("fusion", 0, 1_000)],  # an annotation line, not a kernel
            },
        ),
    ]
    traced = bench.kernel_time(planes)
    assert traced == bench.KernelTime(60 + 15 + 20, {"stage1": 2, "stage2": 2})
    assert traced.per_call(2) == (95 / 2e6, {"stage1": 1.0, "stage2": 1.0})
    assert bench.kernel_facts(traced, 2) == {
        "device_ms": 95 / 2e6,
        "kernels_per_call": {"stage1": 1.0, "stage2": 1.0},
    }
    # No GPU plane: no kernel time, no facts (the CPU's dry run).
    assert bench.kernel_time(planes[:1]).per_call(1) is None
    assert bench.kernel_facts(bench.kernel_time(planes[:1]), 1) == {}


def test_trace_kernels_returns_runs_result_and_sees_kernels_only_on_a_gpu():
    f = jax.jit(lambda x: x @ x)
    traced, out = bench.trace_kernels(lambda: jax.block_until_ready(f(jnp.ones((8, 8)))))
    assert out.tolist() == [[8.0] * 8] * 8 and traced.error is None
    if jax.default_backend() == "gpu":
        assert traced.busy_ns > 0 and sum(traced.launches.values()) >= 1
    else:
        assert traced == bench.KernelTime(0, {})


def test_trace_kernels_runs_untraced_when_the_profiler_does_not_start(monkeypatch):
    def refuse(folder):
        raise RuntimeError("Profile has already been started")

    monkeypatch.setattr(jax.profiler, "start_trace", refuse)
    traced, out = bench.trace_kernels(lambda: "ran")
    assert out == "ran" and traced.launches == {} and "already been started" in traced.error
    assert bench.kernel_facts(traced, 3) == {
        "kernel_time_error": "RuntimeError: Profile has already been started"
    }


def test_report_has_kernel_times_where_the_trace_saw_kernels(dry_run):
    results = json.loads((dry_run / "benchmarks" / "results.json").read_text())
    assert "## Kernel time per call" not in bench_report.render_markdown(results)
    shape = results["shapes"][0]
    for path, ms in (("xla", 0.5), ("vllm", 1.0)):
        shape["paths"][path]["device_ms"] = ms
        shape["paths"][path].update(
            bench_report.device_metrics(ms, floor=shape["floor_ms"], vllm_ms=1.0)
        )
    page = bench_report.render_markdown(results)
    table = page.split("## Kernel time per call (ms), from a profiler trace")[1].split("##")[0]
    floor = bench_report.fmt(shape["floor_ms"], ".3g")
    pct = bench_report.fmt(100 * shape["floor_ms"] / 0.5, ".0f")
    assert f"| 1 | 16 | 256 | {floor} | 0.5 | 1 | {pct} | 2.00× |" in table
    assert "| 2 | 16 | 256 | " in table and table.count("—") == 4


def test_plots_show_kernel_time_where_it_was_traced(dry_run, tmp_path, monkeypatch):
    results = json.loads((dry_run / "benchmarks" / "results.json").read_text())
    for shape in results["shapes"]:
        for path, ms in (("xla", 0.5), ("vllm", 1.0)):
            shape["paths"][path]["device_ms"] = ms
            shape["paths"][path].update(
                bench_report.device_metrics(ms, floor=shape["floor_ms"], vllm_ms=1.0)
            )
    drawn = []
    original = bench_report.heatmap_figure
    monkeypatch.setattr(
        bench_report,
        "heatmap_figure",
        lambda results, paths, key, title, **kw: (
            drawn.append((paths, key)) or original(results, paths, key, title, **kw)
        ),
    )
    assert sorted(bench_report.write_plots(results, tmp_path)) == [
        "pct_of_floor.png",
        "speedup_vs_vllm.png",
        "time_vs_len.png",
    ]
    # Only the traced paths, in kernel time.
    assert drawn == [
        (["xla", "vllm"], "device_pct_of_floor"),
        (["xla"], "device_speedup_vs_vllm"),
    ]
