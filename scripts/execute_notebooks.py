"""Executes the notebooks in place, so they are committed with their outputs and plots.

    scripts/dev python scripts/execute_notebooks.py               # all of notebooks/
    scripts/dev python scripts/execute_notebooks.py notebooks/01_quickstart.ipynb

Each runs top to bottom in a fresh kernel of this interpreter ("python3"), from
notebooks/, with matplotlib's inline backend, so every figure is stored as an
image/png output. To keep the repository light the figures are drawn at 72 dpi (a
matplotlibrc for the run) and stored as 256-colour palette PNGs. Run it on a machine without a
GPU: the committed outputs are the CPU's (XLA backend), which anyone can reproduce.
tests/tools/test_notebooks.py checks that the committed notebooks have outputs and plots.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def execute(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        record_timing=False,  # no timestamps in the committed file
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                output.data["image/png"] = palette_png(output.data["image/png"])
    nbformat.validate(nb)
    nbformat.write(nb, path)
    size = path.stat().st_size
    images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    print(f"{path.relative_to(ROOT)}: {size / 1024:.0f} KiB, {images} image(s)")


def palette_png(data: str) -> str:
    """A base64 PNG as a 256-colour palette PNG (plots have few colours: a third of
    the bytes), base64 again."""
    from PIL import Image

    image = Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
    out = io.BytesIO()
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, "PNG", optimize=True)
    return base64.b64encode(out.getvalue()).decode() + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Execute notebooks in place (CPU, inline backend, 72 dpi palette PNGs)."
    )
    parser.add_argument("notebooks", nargs="*", help="the .ipynb files (default: notebooks/)")
    args = parser.parse_args(argv)
    # The kernel inherits the environment: the inline backend stores each figure as PNG.
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    rc = Path(tempfile.mkdtemp()) / "matplotlibrc"
    rc.write_text("figure.dpi: 72\n")
    os.environ["MATPLOTLIBRC"] = str(rc)
    paths = [Path(a).resolve() for a in args.notebooks]
    paths = paths or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in paths:
        execute(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
