"""``compare``: every path agrees, a planted mismatch is caught, the CLI's outputs."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mla_jax.tools import compare as cmp
from mla_jax.tools import vllm_kernel
from mla_jax.tools.problem import make_problem

# Small enough for a CPU; 1100 tokens give 2 KV splits.
SMALL = ["--batch", "3", "--heads", "8", "--max-len", "1100", "--seed", "4"]
ON_CPU = {"jax-xla", "jax-reference", "torch-dense", "torch-split-kv"}
AVAILABLE = ON_CPU | ({"mla_jax-triton"} if jax.default_backend() == "gpu" else set())


@pytest.fixture(autouse=True)
def no_vllm_kernel_file(monkeypatch):
    monkeypatch.delenv("MLA_JAX_VLLM_KERNEL", raising=False)


def problem(dtype="float32", seed=1):
    return make_problem(
        batch=3, num_heads=8, seq_lens=1100, page_size=16, dtype=dtype, seed=seed, empty_rows=1
    )


def by_path(report):
    return {s.path: s for s in report.scores}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_path_on_this_machine_passes(dtype):
    report = cmp.compare(problem(dtype))
    scores = by_path(report)
    assert report.ground_truth == "numpy-f64" and "numpy-f64" not in scores
    assert {p for p, s in scores.items() if s.available} == AVAILABLE
    assert scores["jax-xla"].num_splits == scores["torch-split-kv"].num_splits == 2
    assert report.passed, cmp.format_table(report)
    assert all(s.rel_err < report.tolerance for p, s in scores.items() if p in AVAILABLE)


@pytest.mark.parametrize("path", ["jax-xla", "torch-split-kv", "torch-dense"])
def test_injected_scale_error_is_caught(path):
    report = cmp.compare(problem(seed=2), inject=(path, 1e-3))
    scores = by_path(report)
    assert not report.passed and scores[path].passed is False
    assert all(s.passed for p, s in scores.items() if p in AVAILABLE - {path})
    assert "FAIL" in cmp.format_table(report)


def test_main_exits_nonzero_on_a_mismatch(capsys):
    assert cmp.main([*SMALL, "--dtype", "float32"]) == 0
    assert cmp.main([*SMALL, "--dtype", "float32", "--inject", "jax-xla=1e-3"]) == 1
    table = capsys.readouterr().out
    assert "jax-xla" in table and "FAIL" in table


def test_json_output_parses(capsys):
    assert cmp.main([*SMALL, "--dtype", "float16", "--json", "--page-size", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is True and data["ground_truth"] == "numpy-f64"
    assert data["problem"]["seq_lens"][0] == 1100 and 0 in data["problem"]["seq_lens"]
    assert data["problem"]["page_size"] == 1 and data["tolerance"] == cmp.TOLERANCE["float16"]
    paths = {p["path"]: p for p in data["paths"]}
    assert set(paths) == set(cmp.PATHS) - {"numpy-f64"}
    assert paths["vllm"]["available"] is False and paths["vllm"]["note"]
    assert paths["torch-split-kv"]["num_splits"] == 2 and paths["torch-split-kv"]["passed"]


def test_other_ground_truth_and_bad_ones(capsys):
    report = cmp.compare(problem(seed=3), ground_truth="torch-split-kv")
    assert report.passed and by_path(report)["numpy-f64"].passed
    if jax.default_backend() == "gpu":  # the triton path runs there
        assert cmp.compare(problem(), ground_truth="mla_jax-triton").passed
    else:
        with pytest.raises(ValueError, match="mla_jax-triton gave no result"):
            cmp.compare(problem(), ground_truth="mla_jax-triton")
    with pytest.raises(ValueError, match="ground_truth must be one of"):
        cmp.compare(problem(), ground_truth="nope")
    # vLLM's kernel gives a result only where its file is carried and torch sees a GPU.
    import torch

    vllm_runs = torch.cuda.is_available() and vllm_kernel.load() is not None
    assert cmp.main([*SMALL, "--ground-truth", "vllm"]) == (0 if vllm_runs else 2)


def test_vllm_path_dry_run_scores_non_empty_rows():
    # vLLM's own stage 2 (and this dense stand-in) gives NaN on rows without tokens.
    report = cmp.compare(problem(seed=5), vllm_kernel=vllm_kernel.torch_reference_module())
    vllm = by_path(report)["vllm"]
    assert vllm.available and vllm.passed and vllm.note == "1 empty rows not scored"
    assert vllm.num_splits == 2
    against_vllm = cmp.compare(
        problem(seed=5), ground_truth="vllm", vllm_kernel=vllm_kernel.torch_reference_module()
    )
    assert against_vllm.passed, cmp.format_table(against_vllm)
    assert {s.note for s in against_vllm.scores if s.available} == {"1 empty rows not scored"}


def test_a_path_that_raises_fails_the_run(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("kernel exploded\nsecond line")

    monkeypatch.setitem(cmp.RUNNERS, "jax-reference", broken)
    report = cmp.compare(problem(seed=6))
    ref = by_path(report)["jax-reference"]
    assert not report.passed and ref.passed is False
    assert ref.note == "RuntimeError: kernel exploded"


def test_problem_is_seeded_ragged_and_scattered():
    p = make_problem(
        batch=6, num_heads=4, seq_lens=300, page_size=16, dtype="bfloat16", seed=9, empty_rows=2
    )
    again = make_problem(
        batch=6, num_heads=4, seq_lens=300, page_size=16, dtype="bfloat16", seed=9, empty_rows=2
    )
    assert all(np.array_equal(a, b) for a, b in zip(p[:4], again[:4]))
    assert p.seq_lens[0] == p.max_seq_len == 300 and (p.seq_lens == 0).sum() == 2
    assert p.q.dtype == p.kv_cache.dtype == jnp.bfloat16 and p.block_table.dtype == np.int32
    assert (p.q != 0).all() and (p.kv_cache != 0).all()
    used = np.concatenate([p.block_table[b, : -(-n // 16)] for b, n in enumerate(p.seq_lens)])
    assert len(set(used)) == len(used) == p.kv_cache.shape[0] - 3  # 3 spare pages by default
    assert not np.array_equal(used, np.sort(used))  # shuffled over the pool
