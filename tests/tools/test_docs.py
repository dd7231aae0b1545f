"""The README's and the docs' Python snippets run as written.

Every ```python block of README.md and docs/*.md (not docs/gpu/ or docs/benchmarks/,
which hold logs) is run: a file's blocks in order, concatenated into one script, in a
fresh Python process on the CPU with 8 simulated devices (what docs/sharding.md's
meshes need). A block that cannot run there belongs in a ```bash block (the command
that runs it) or in prose, not in a ```python block.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# An opening fence (possibly indented, inside a list), the code, the closing fence at
# the same indentation.
BLOCK = re.compile(r"^([ \t]*)```python[ \t]*\n(.*?)^\1```[ \t]*$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of a markdown text, their fence's indentation removed."""
    blocks = []
    for match in BLOCK.finditer(text):
        indent, code = match.group(1), match.group(2)
        lines = code.splitlines()
        blocks.append("\n".join(line.removeprefix(indent) for line in lines))
    return blocks


def script(path: Path) -> str:
    """The file's blocks as one script, each headed by a comment naming it."""
    parts = [
        f"# --- {path.relative_to(ROOT)}, python block {i}\n{code}\n"
        for i, code in enumerate(python_blocks(path.read_text()), 1)
    ]
    return "\n".join(parts)


def test_blocks_are_found():
    text = "a\n```python\nx = 1\n```\n- item\n\n  ```python\n  y = x\n  ```\n```bash\nls\n```\n"
    assert python_blocks(text) == ["x = 1", "y = x"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_snippets_run(path, tmp_path):
    code = script(path)
    if not code:
        pytest.skip(f"{path.name} has no python block")
    env = dict(os.environ)
    env.update(
        JAX_PLATFORMS="cpu",
        # The checkout, and nothing the test run added (scripts/dev's CUDA lowering
        # plugin would have every process look for a driver).
        PYTHONPATH=str(ROOT),
        # The flags the suite runs with (conftest: XLA:CPU at -O0) and 8 CPU devices.
        XLA_FLAGS=" ".join(
            filter(None, [env.get("XLA_FLAGS"), "--xla_force_host_platform_device_count=8"])
        ),
        MPLBACKEND="Agg",
    )
    file = tmp_path / f"{path.stem}_snippets.py"
    file.write_text(code)
    # From the repository root, where a reader of a checkout runs them.
    run = subprocess.run(
        [sys.executable, str(file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    numbered = "\n".join(f"{i:4d} {line}" for i, line in enumerate(code.splitlines(), 1))
    assert run.returncode == 0, (
        f"{path.relative_to(ROOT)}'s python blocks failed (exit {run.returncode}).\n"
        f"--- script\n{numbered}\n--- stdout\n{run.stdout[-5000:]}\n"
        f"--- stderr\n{run.stderr[-10000:]}"
    )
