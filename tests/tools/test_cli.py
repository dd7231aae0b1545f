"""The command line and the import, on a machine without a GPU: quiet and clear."""

import os
import subprocess
import sys

import jax
import pytest

from mla_jax.tools import bench, cli, compare, demo, model_bench


def run(*args: str) -> subprocess.CompletedProcess:
    # Without the CUDA plugin the tests lower with (scripts/dev puts it on PYTHONPATH
    # for the tests alone), as a user's CPU install has it.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL")}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.mark.parametrize(
    "args",
    [
        ("-c", "import mla_jax"),
        ("-m", "mla_jax", "--help"),
        ("-m", "mla_jax", "demo", "--help"),
        ("-m", "mla_jax", "compare", "--help"),
        ("-m", "mla_jax", "model-bench", "--help"),
    ],
)
def test_no_log_noise(args):
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr


# A bad value for every flag of every command: (argv, the flag the error must name).
# ``{tmp}`` holds a plain file ``file``, a folder ``folder``, ``list.json`` (JSON, not
# a results file) and ``garbage.json`` (not JSON); ``missing*`` do not exist.
HUGE = str(10**15)
# Refused only without a GPU (with one, the command runs).
WITHOUT_A_GPU = [["bench", "--out", "{tmp}/o"], ["model-bench", "--out", "{tmp}/o"]]
BAD_FLAGS = [
    (["demo", "--backend", "cuda"], "--backend"),
    (["demo", "--config", "deepseek-v9"], "--config"),
    (["demo", "--layers", "0"], "--layers"),
    (["demo", "--layers", HUGE, "--steps", "1"], "--layers"),  # past the memory
    (["demo", "--batch", "-1"], "--batch"),
    (["demo", "--batch", "1000000000", "--steps", "1"], "--batch"),  # int32 pages
    (["demo", "--batch", "20000000", "--steps", "1"], "--batch"),  # past the memory
    (["demo", "--steps", "x"], "--steps"),
    (["demo", "--steps", HUGE], "--steps"),
    (["demo", "--prompt-len", "0"], "--prompt-len"),
    (["demo", "--prompt-len", "1.5"], "--prompt-len"),
    (["demo", "--policy", "fastest"], "--policy"),
    (["demo", "--page-size", "0"], "--page-size"),
    (["demo", "--dtype", "int8"], "--dtype"),
    (["demo", "--sm-count", "0"], "--sm-count"),
    (["demo", "--seed", "-1"], "--seed"),
    (["demo", "--seed", str(2**70)], "--seed"),  # past jax.random.key's int64
    (["demo", "--nope"], "--nope"),
    (["demo", "--batch"], "--batch"),
    (["compare", "--batch", "0"], "--batch"),
    (["compare", "--batch", "two"], "--batch"),
    (["compare", "--batch", "1000000000"], "--batch"),
    (["compare", "--heads", "0"], "--heads"),
    (["compare", "--heads", "1000000000"], "--heads"),
    (["compare", "--max-len", "0"], "--max-len"),
    (["compare", "--max-len", HUGE], "--max-len"),
    (["compare", "--page-size", "0"], "--page-size"),
    (["compare", "--dtype", "float64"], "--dtype"),
    (["compare", "--kv-lora-rank", "0"], "--kv-lora-rank"),
    (["compare", "--kv-lora-rank", "1000000000"], "--kv-lora-rank"),
    (["compare", "--rope-dim", "-64"], "--rope-dim"),
    (["compare", "--seed", "-1"], "--seed"),
    (["compare", "--ground-truth", "gpu"], "--ground-truth"),
    (["compare", "--json=yes"], "--json"),
    (["compare", "--sm-count", "0"], "--sm-count"),
    (["compare", "--vllm-kernel", "{tmp}/missing.py"], "--vllm-kernel"),
    (["compare", "--vllm-kernel", "{tmp}/folder"], "--vllm-kernel"),
    (["compare", "--inject", "jax-xla=nan"], "--inject"),
    (["compare", "--inject", "gpu=0.1"], "--inject"),
    (["bench", "--batch", "0"], "--batch"),
    (["bench", "--batch", "1,-2"], "--batch"),
    (["bench", "--batch", ","], "--batch"),
    (["bench", "--heads", "x"], "--heads"),
    (["bench", "--lens", "0"], "--lens"),
    (["bench", "--paths", "nope"], "--paths"),
    (["bench", "--paths", ""], "--paths"),
    (["bench", "--dry-run", "--out", "{tmp}/file/out"], "--out"),
    (["bench", "--dry-run", "--out", "{tmp}/o", "--markdown", "{tmp}/folder"], "--markdown"),
    (["bench", "--dry-run", "--out", "{tmp}/o", "--markdown", "{tmp}/file/x.md"], "--markdown"),
    (["bench", "--quick=1"], "--quick"),
    (["bench", "--dry-run=1"], "--dry-run"),
    (WITHOUT_A_GPU[0], "--dry-run"),
    (["bench", "--repeats", "0"], "--repeats"),
    (["bench", "--kernel-time=1"], "--kernel-time"),
    (["bench", "--calls", "0"], "--calls"),
    (["bench", "--page-size", "0"], "--page-size"),
    (["bench", "--sm-count", "0"], "--sm-count"),
    (["bench", "--time-budget", "nan"], "--time-budget"),
    (["bench", "--time-budget", "inf"], "--time-budget"),
    (["bench", "--bytes-budget-gib", "-1"], "--bytes-budget-gib"),
    (["bench", "--report-only"], "--report-only"),
    (["bench", "--report-only", "{tmp}/missing.json", "--out", "{tmp}/o"], "--report-only"),
    (["bench", "--report-only", "{tmp}/missing.json:xla", "--out", "{tmp}/o"], "--report-only"),
    (["bench", "--report-only", "{tmp}/list.json", "--out", "{tmp}/o"], "--report-only"),
    (["bench", "--report-only", "{tmp}/garbage.json", "--out", "{tmp}/o"], "--report-only"),
    (["model-bench", "--model", "v4"], "--model"),
    (["model-bench", "--layers", "0"], "--layers"),
    (["model-bench", "--batch", "1,0"], "--batch"),
    (["model-bench", "--contexts", "x"], "--contexts"),
    (["model-bench", "--steps", "0"], "--steps"),
    (["model-bench", "--repeats", "-3"], "--repeats"),
    (["model-bench", "--prefill-len", "0"], "--prefill-len"),
    (["model-bench", "--torch=1"], "--torch"),
    (["model-bench", "--split=no"], "--split"),
    (["model-bench", "--hbm-tbps", "0"], "--hbm-tbps"),
    (["model-bench", "--tflops", "nan"], "--tflops"),
    (["model-bench", "--memory-gib", "-1"], "--memory-gib"),
    (["model-bench", "--memory-gib", "40", "--dry-run"], "--memory-gib"),  # v2-lite
    (["model-bench", "--dry-run", "--out", "{tmp}/file/out"], "--out"),
    (["model-bench", "--dry-run=1"], "--dry-run"),
    (WITHOUT_A_GPU[1], "--dry-run"),
    (["model-bench", "--time-budget", "-1"], "--time-budget"),
    ([], "command"),
    (["nope"], "command"),
]


def _exit_status(argv: list[str]) -> int:
    """``cli.main``'s status, whether a command returned it or its parser exited."""
    try:
        return cli.main(argv)
    except SystemExit as e:
        assert isinstance(e.code, int)
        return e.code


@pytest.mark.parametrize(
    "argv, flag", BAD_FLAGS, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_a_bad_flag_is_one_line_and_exit_2(argv, flag, tmp_path, capsys):
    if argv in WITHOUT_A_GPU and any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("with a GPU the command runs")
    (tmp_path / "file").write_text("")
    (tmp_path / "folder").mkdir()
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "garbage.json").write_text("{not json")
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert _exit_status(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    command = f"mla_jax {argv[0]}" if argv and argv[0] in cli.COMMANDS else "mla_jax"
    assert err.startswith(f"{command}: error: ") and flag in err, err
    assert not (tmp_path / "o").exists()  # nothing written


def test_the_one_line_reads_got_and_needed(capsys):
    assert _exit_status(["demo", "--batch", "-1"]) == 2
    assert capsys.readouterr().err == "mla_jax demo: error: --batch: got -1, needed an int >= 1\n"
    assert _exit_status(["compare", "--dtype", "int8"]) == 2
    assert capsys.readouterr().err == (
        "mla_jax compare: error: --dtype: got 'int8', needed one of "
        "'float32', 'float16', 'bfloat16'\n"
    )


@pytest.mark.parametrize(
    "name, parser",
    [
        ("demo", demo._parser),
        ("compare", compare._parser),
        ("bench", bench._parser),
        ("model-bench", model_bench._parser),
    ],
)
def test_every_flag_has_a_bad_value_above(name, parser):
    flags = {
        action.option_strings[0]
        for action in parser()._actions
        if action.option_strings and action.option_strings[0] != "-h"
    }
    tested = {flag for argv, flag in BAD_FLAGS if argv[:1] == [name]}
    assert flags <= tested, f"{name}: no bad value for {sorted(flags - tested)}"


def test_a_bad_flag_from_the_shell_is_one_line():
    """The same through ``python -m``: no traceback, usage block or log line either."""
    proc = run("-m", "mla_jax", "demo", "--seed", "-1")
    assert proc.returncode == 2
    assert proc.stderr == (
        "mla_jax demo: error: --seed: got -1, needed an int in [0, 9223372036854775807]\n"
    )
