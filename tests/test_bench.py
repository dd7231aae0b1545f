"""The benchmark on a CPU: the dry run's outputs, the report, the arithmetic, the loop."""

import json
import re

import jax
import pytest

from mla_jax.tools import bench, bench_report


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    assert bench.main(["--dry-run", "--out", str(root / "benchmarks")]) == 0
    return root


def test_dry_run_writes_json_plots_and_markdown(dry_run):
    out = dry_run / "benchmarks"
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["dry_run"] is True
    assert results["ceilings"]["copy_tbps"] > 0 and results["ceilings"]["matmul_tflops"] > 0
    assert list(results["paths"]) == ["triton", "triton-occupancy", "xla", "dense", "vllm"]
    assert [(s["B"], s["H"], s["L"]) for s in results["shapes"]] == [
        (1, 16, 128), (1, 16, 256), (2, 16, 128), (2, 16, 256)]
    for shape in results["shapes"]:
        paths = shape["paths"]
        assert paths["triton"] == {"skipped": "dry run: lowered for CUDA, not run"}
        for name in ("xla", "dense", "vllm"):
            entry = paths[name]
            assert entry["ms"] > 0 and len(entry["times_ms"]) == 2 and entry["calls"] == 2
            assert entry["pct_of_floor"] == pytest.approx(100 * shape["floor_ms"] / entry["ms"])
            assert entry["speedup_vs_vllm"] == pytest.approx(paths["vllm"]["ms"] / entry["ms"])
            # bf16 outputs of O(1): the paths agree to bf16 rounding, vLLM's plumbing included.
            assert entry["max_abs_err"] < 0.02
    assert sorted(results["plots"]) == ["pct_of_floor.png", "speedup_vs_vllm.png",
                                        "time_vs_len.png"]
    for name in results["plots"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (dry_run / "benchmarks.md").read_text()
    assert page == bench_report.render_markdown(results, image_dir="benchmarks")
    assert "](benchmarks/time_vs_len.png)" in page and "Dry run" in page


def test_report_only_rerenders_into_out(dry_run, tmp_path, capsys):
    results_json = dry_run / "benchmarks" / "results.json"
    out = tmp_path / "docs" / "benchmarks"
    assert bench.main(["--report-only", str(results_json), "--out", str(out)]) == 0
    assert json.loads((out / "results.json").read_text()) == json.loads(results_json.read_text())
    text = (tmp_path / "docs" / "benchmarks.md").read_text()
    assert "| 2 | 16 | 256 |" in text
    links = re.findall(r"\]\(([^)]+\.png)\)", text)
    assert links == [f"benchmarks/{name}" for name in
                     ("time_vs_len.png", "pct_of_floor.png", "speedup_vs_vllm.png")]
    assert all((tmp_path / "docs" / link).is_file() for link in links)
    page = tmp_path / "elsewhere" / "page.md"
    assert bench.main(["--report-only", str(results_json), "--out", str(out),
                       "--markdown", str(page)]) == 0
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
    key = lambda s: (s["B"], s["H"], s["L"])  # noqa: E731
    assert [key(s) for s in merged["shapes"]] == sorted(key(s) for s in shapes)
    assert merged["elapsed_s"] == 5.0 and [p["shapes"] for p in merged["parts"]] == [
        len(shapes) - 1, 1]
    with pytest.raises(ValueError, match="in two parts"):
        bench_report.merge_results([whole, whole])


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
    m = bench_report.path_metrics(2.0, bytes_=4e12 * 1e-3, flops=3e12 * 1e-3, floor=0.5,
                                  vllm_ms=3.0)
    # 4 GB in 2 ms = 2 TB/s; 3 TFLOP in 2 ms = 1.5 PFLOP/s; 0.5 / 2 = 25 %; 3 / 2 = 1.5x.
    assert m == pytest.approx({"tbps": 2.0, "tflops": 1.5, "pct_of_floor": 25.0,
                               "speedup_vs_vllm": 1.5})
    assert bench_report.path_metrics(1.0, bytes_=1, flops=1, floor=1,
                                     vllm_ms=None)["speedup_vs_vllm"] is None


def test_sweep_shapes_calls_and_skips():
    shapes = bench.sweep_shapes(bench.BATCHES, bench.HEADS, bench.LENS)
    assert len(shapes) == 5 * 2 * 3 + 2 * 2
    assert {(b, n) for b, _, n in shapes if n == 65536} == {(1, 65536), (4, 65536)}
    assert bench.calls_for(0.0003) == 20 and bench.calls_for(0.1) == 20
    assert bench.calls_for(5.0) == 5 and bench.calls_for(0.2) == 10
    settings = bench.Settings(dry_run=False, repeats=5, calls=None, page_size=64,
                              sm_count=132, paths=("xla", "vllm"), time_budget_s=100,
                              bytes_budget=4 * 2**30)
    # 128*16384*1152 B of rows + 3*128*128*16384*4 B of logits = 5.25 GiB > 4 GiB.
    assert "5.2 GiB" in bench.skip_reason(settings, "xla", (128, 128, 16384), 0, None)
    assert bench.skip_reason(settings, "xla", (4, 16, 4096), 0, None) is None
    assert bench.skip_reason(settings, "vllm", (4, 16, 4096), 0, "no file") == "no file"
    assert "time budget" in bench.skip_reason(settings, "vllm", (4, 16, 4096), 101, None)


def test_render_markdown_synthetic():
    shape = {"B": 4, "H": 128, "L": 4096, "num_kv_splits": 8, "kv_bytes": 1, "flops": 1,
             "floor_ms": 0.01,
             "paths": {"triton": {"ms": 0.02, "tbps": 1.2, "tflops": 3.4, "pct_of_floor": 50.0,
                                  "speedup_vs_vllm": 2.5, "max_abs_err": 0.002},
                       "xla": {"skipped": "needs ~9 GiB"},
                       "vllm": {"ms": 0.05, "pct_of_floor": 20.0, "speedup_vs_vllm": 1.0}}}
    results = {"what": "synthetic.", "machine": {"device": "NVIDIA H200", "sm_count": 132,
                                                 "jax": "0.11.2"},
               "config": {"repeats": 5, "calls_rule": "K=10 calls", "page_size": 64,
                          "kv_lora_rank": 512, "rope_dim": 64},
               "paths": {"triton": "mla_jax triton", "xla": "mla_jax xla",
                         "vllm": "vLLM triton"},
               "ceilings": {"copy_tbps": 4.22, "matmul_tflops": 790.0},
               "shapes": [shape, {**shape, "L": 16384, "paths": {"vllm": {"ms": 0.2}}}],
               "plots": ["time_vs_len.png"]}
    page = bench_report.render_markdown(results, image_dir="benchmarks")
    assert "NVIDIA H200 (132 SMs)" in page and "4.22 TB/s" in page and "790 TFLOP/s" in page
    assert "| B | H | L | splits | floor | mla_jax triton | vLLM triton |" in page
    assert "| 4 | 128 | 4096 | 8 | 0.01 | 0.02 | 0.05 |" in page
    assert "| 4 | 128 | 16384 | 8 | 0.01 | — | 0.2 |" in page
    assert "| 4 | 128 | 4096 | 50 | 20 | 2.50× |" in page
    assert "| 4 | 128 | 4096 | 1.2 | 3.4 | 0.002 |" in page
    assert "- B=4 H=128 L=4096, mla_jax xla: needs ~9 GiB" in page
    assert "![time_vs_len](benchmarks/time_vs_len.png)" in page
    assert "Dry run" not in page
    table = bench_report.summary_table(results)
    assert table.splitlines()[1].split() == ["4", "128", "4096", "0.0100", "0.0200", "0.0500",
                                             "50", "2.50"]


@pytest.mark.parametrize("path", ["dense", "xla"])
@pytest.mark.parametrize("perturb", [True, False])
def test_every_call_gathers_only_when_perturbed(path, perturb):
    """The timed calls are unrolled and XLA merges identical calls on loop-invariant
    inputs: the XLA paths gather once per call only because each call feeds the block
    table the next one reads. (On the CPU: XLA:GPU fuses gathers differently.)"""
    with jax.default_device(jax.devices("cpu")[0]):
        gathers_in_loop(path, perturb)


def gathers_in_loop(path, perturb):
    inputs = bench.make_inputs(jax.random.key(0), 2, 16, 256, 16)
    if path == "dense":
        def decode(q, kv, bt, sl, buf):
            return *bench.dense_decode(q, kv, bt, sl, scale=0.1), buf
        buf = None
    else:
        from mla_jax import mla_decode, reserve_logits_buffer

        def decode(q, kv, bt, sl, buf):
            return mla_decode(q, kv, bt, sl, buf, scale=0.1, max_seq_len=256, backend="xla")
        buf = reserve_logits_buffer(2, 16, 256, sm_count=132)
    hlo = bench.decode_loop(decode, 3, perturb_table=perturb).lower(
        *inputs, buf).compile().as_text()
    per_call = {"dense": 1, "xla": 2}[path]  # xla: the block table's, then the cache's
    assert len(re.findall(r"= \S+ gather\(", hlo)) == (3 if perturb else 1) * per_call


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


def test_to_torch_falls_back_to_a_host_copy(monkeypatch):
    import numpy as np
    import torch

    x = jax.random.normal(jax.random.key(0), (3, 5), jax.numpy.bfloat16)
    shared = bench._to_torch(x)

    def refuse(_):
        raise BufferError("no DLPack here")

    monkeypatch.setattr(torch, "from_dlpack", refuse)
    copied = bench._to_torch(x)
    assert copied.dtype == shared.dtype == torch.bfloat16
    np.testing.assert_array_equal(copied.float().cpu().numpy(), np.asarray(x, np.float32))
    assert bench._to_torch(jax.numpy.arange(4, dtype=jax.numpy.int32)).tolist() == [0, 1, 2, 3]
