"""The command line and the import, on a machine without a GPU: quiet and clear."""

import os
import subprocess
import sys

import pytest


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
    ],
)
def test_no_log_noise(args):
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
