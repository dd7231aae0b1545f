"""Every notebook is committed executed, with its plots, and runs top to bottom in a
fresh kernel.

scripts/execute_notebooks.py writes the committed outputs (on a CPU).
"""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
INLINE = "module://matplotlib_inline.backend_inline"


def test_all_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_compare_with_pytorch.ipynb",
        "03_performance.ipynb",
        "04_deepseek.ipynb",
    ]


def outputs(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def images(nb):
    return [o for o in outputs(nb) if "image/png" in o.get("data", {})]


def draws(nb):
    """Whether the notebook plots (its code uses matplotlib or bench_report's figures)."""
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return "matplotlib" in code or "_figure(" in code


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_with_outputs(path):
    """Executed, every code cell run in order, no errors; the plots stored as PNG."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and [c.execution_count for c in code] == list(range(1, len(code) + 1)), (
        f"{path.name} is not committed executed: scripts/dev python scripts/execute_notebooks.py"
    )
    assert outputs(nb)
    assert not [o for o in outputs(nb) if o.output_type == "error"]
    if draws(nb):
        assert images(nb), f"{path.name} draws, but holds no image/png output"
    # Small enough for the repository: no printed arrays of thousands of values.
    assert path.stat().st_size < 400_000


def test_notebooks_that_draw():
    assert [p.stem for p in NOTEBOOKS if draws(nbformat.read(p, as_version=4))] == [
        "01_quickstart",
        "02_compare_with_pytorch",
        "03_performance",
        "04_deepseek",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_top_to_bottom(path, monkeypatch):
    # The kernel inherits it: figures become image/png outputs, no display needed.
    monkeypatch.setenv("MPLBACKEND", INLINE)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # a copy, run from scratch
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    # "python3" resolves to this interpreter, so the kernel sees this venv's mla_jax.
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError naming the cell that failed
    assert not [o for o in outputs(nb) if o.output_type == "error"]
    if draws(nb):
        assert images(nb)
