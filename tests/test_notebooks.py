"""Every notebook runs top to bottom in a fresh kernel, and is committed without outputs."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_all_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_compare_with_pytorch.ipynb",
        "03_performance.ipynb",
        "04_deepseek.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_top_to_bottom(path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")  # the kernel inherits it: no display needed
    nb = nbformat.read(path, as_version=4)
    # "python3" resolves to this interpreter, so the kernel sees this venv's mla_jax.
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError naming the cell that failed
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


def test_performance_notebook_is_generated():
    """03 is written by scripts/make_notebook_03.py: the committed file is its output."""
    import importlib.util

    script = Path(__file__).parent.parent / "scripts" / "make_notebook_03.py"
    spec = importlib.util.spec_from_file_location("make_notebook_03", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = nbformat.read(module.NOTEBOOK, as_version=4)
    assert committed == module.build_notebook()
