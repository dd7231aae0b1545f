"""Stage 1's sm_90 build fits the GPU: shared memory within what one SM offers.

A configuration over the limit compiles on a CPU and would fail only at launch on the
GPU (``mla_jax._launch`` refuses it at lowering too), so the build is read here
(``scripts/inspect_kernel.py``, in a child process with a fresh Triton cache)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SM90_SHARED_BYTES = 232448  # 227 KB: the most one block may ask for on an H100/H200


@pytest.mark.parametrize("heads, dtype", [(128, "fp32"), (32, "fp32"), (128, "bf16")])
def test_stage1_fits_sm90_shared_memory(heads, dtype, tmp_path):
    script = Path(__file__).resolve().parents[2] / "scripts" / "inspect_kernel.py"
    env = os.environ | {"TRITON_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(script), "--heads", str(heads), "--dtype", dtype],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    shared = int(re.search(r"\bsmem=(\d+)", proc.stdout).group(1))
    assert 0 < shared <= SM90_SHARED_BYTES, proc.stdout
