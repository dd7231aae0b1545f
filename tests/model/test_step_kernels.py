"""What XLA's GPU compiler makes of a decode step for an H100, on the CPU
(scripts/step_kernels.py, through the CUDA PJRT plugin that scripts/dev installs)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "step_kernels.py"


def step_kernels(*args: str) -> str:
    pytest.importorskip("triton")
    if jax.default_backend() == "gpu":  # there step_profile.py counts them on the GPU
        pytest.skip("counts XLA's compile for a card without one")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0 and "no CUDA PJRT plugin" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_batch_one_moe_layer_launches_21_kernels():
    """A V2-Lite MoE layer at B=1 compiles to 21 kernels: the count the B=1 work
    drives down. It was 28 before the zero row and the MoE's one-token path (which
    reads the router's ranking in place); call 24's GPU profile of that tree counted
    763 launches a 27-layer step, as this script did. Another number here means the
    step's kernels changed: say so in docs/performance.md with the new count."""
    out = step_kernels("--layers", "4", "--batch", "1", "--layer")
    assert re.search(r"^a MoE layer \(stage 1 to stage 1\): 21$", out, re.M), out
    layer = out.split("stage 1 to stage 1): 21\n")[1].splitlines()
    # Two attention stages and the two fused MoE kernels, the rest XLA's.
    assert sum(row.split()[0] == "custom-call" for row in layer) == 4, out


def test_drawing_a_v3_layer_needs_little_beside_its_weights():
    """model-bench builds the V3 stack a layer at a time (``init_layer``); drawing the
    experts eight at a time keeps the temporaries under a GiB beside the layer's 21.4
    GiB of weights, where drawing each stack whole needed 24.5 GiB and ran an H100 out
    of memory (device call 23)."""
    out = step_kernels("--model", "v3-stack", "--layers", "1", "--batch", "1", "--memory")
    drawn = re.search(
        r"^drawing a layer: .* outputs ([\d.]+) .* temporaries ([\d.]+) GiB", out, re.M
    )
    assert drawn, out
    weights, temporaries = map(float, drawn.groups())
    assert 21 < weights < 22 and temporaries < 1.0, out
