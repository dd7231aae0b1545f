"""``python -m mla_jax demo``: in-process and as the README runs it, with its facts;
and ``scripts/step_timing.py --dry-run``, the GPU timing script on tiny CPU shapes."""

import json
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from mla_jax.tools import demo

# Tiny and short; the longest prompt goes 1085 -> 1092 tokens, across 1088, where the
# occupancy policy (at batch <= 4 of 4 heads) goes from 16 to 32 splits.
SMALL = [
    "--backend",
    "xla",
    "--config",
    "tiny",
    "--layers",
    "1",
    "--steps",
    "8",
    "--prompt-len",
    "1084",
    "--dtype",
    "float32",
]
# vLLM's rule at batch 2: the longest prompt goes 1021 -> 1028 tokens, across 1024.
VLLM = [*SMALL, "--batch", "2", "--policy", "vllm", "--prompt-len", "1020"]
FACTS = (
    "steps/s: ",
    "attention error: ",
    "pointer unchanged: yes",
    "compilations: 1 ",
    "split count: ",
    "one executable across it",
    "outputs finite: yes",
)


def assert_facts(text: str) -> None:
    for fact in FACTS:
        assert fact in text, f"{fact!r} missing from:\n{text}"
    assert text.rstrip().endswith("PASS"), text


def test_main_in_process(capsys):
    assert demo.main([*SMALL, "--batch", "3"]) == 0
    out = capsys.readouterr().out
    assert_facts(out)
    assert "split count: 16 -> 32 " in out
    # Reserved for 1092 tokens at batch 1: next_pow2(1092 // 64) = 32 splits.
    assert "logits buffer: float32[3, 4, 32, 33]" in out
    assert out.count("timed step") == 4 and "timed step 8/8" in out


def test_vllm_policy_crosses_at_1024(capsys):
    """vLLM's rule: 1 split below 1024 tokens, 2 from there (1021 -> 1028 tokens)."""
    assert demo.main(VLLM) == 0
    out = capsys.readouterr().out
    assert "split count: 1 -> 2 (one executable across it)" in out
    assert "logits buffer: float32[2, 4, 2, 33]" in out


def test_error_over_tolerance_exits_1(capsys, monkeypatch):
    monkeypatch.setitem(demo.TOLERANCE, "float32", 0.0)
    # Any rounding fails a tolerance of 0. The vllm test's run: the module's tests
    # share one process (tests/conftest.py), so both take the same compilations.
    assert demo.main(VLLM) == 1
    assert capsys.readouterr().out.rstrip().endswith("FAIL")


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="asks for triton without a GPU")
def test_triton_without_a_gpu_exits_2(capsys):
    assert demo.main(["--backend", "triton"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_cli_defaults():
    proc = subprocess.run(
        [sys.executable, "-m", "mla_jax", "demo"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_facts(proc.stdout)


def test_step_timing_dry_run(tmp_path):
    out = tmp_path / "timing.json"
    script = Path(__file__).resolve().parents[2] / "scripts" / "step_timing.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--dry-run", "--steps", "4", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "speedup vs (b)" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [(r["batch"], r["variant"]) for r in rows] == [(b, v) for b in (1, 4) for v in "abcd"]
    assert all(r["max_abs_diff_vs_a"] < 1e-5 and r["median_us"] > 0 for r in rows)
    assert [r["buffer_pointer_unchanged"] for r in rows if r["variant"] != "b"] == [True] * 6
