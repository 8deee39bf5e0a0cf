#!/usr/bin/env python3
"""Execute the notebooks top to bottom and store them with their outputs.

    python3 tasks.py notebooks                          # every notebook in notebooks/
    .venv/bin/python notebooks/refresh.py notebooks/04_explorer.ipynb

Each notebook runs in a real Jupyter kernel in a scratch directory (so whatever it
writes lands there), and is stored with its outputs so it can be read on a repository
page without running it: execution timings are dropped, absolute paths of the scratch
directory are replaced by ``.``, and widget state is not stored. The test suite runs
the same :func:`execute` and compares its text outputs with the stored ones.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
TEXT_KINDS = ("text/plain", "text/markdown", "text/html")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def execute(path: Path, workdir: Path, timeout: int = 600) -> Any:
    """``path`` executed in a fresh kernel with ``workdir`` as its working directory,
    cleaned (see :func:`clean`); a failing cell raises ``CellExecutionError``."""
    notebook = nbformat.read(path, as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # the notebook's inline backend
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    )
    client.execute(env=env)
    return clean(notebook, workdir)


def clean(notebook: Any, workdir: Path) -> Any:
    """Drop timings and widget state; write ``workdir`` (absolute) as ``.``; store
    images with a 256-colour palette (a third of the size, the same to the eye)."""
    notebook.metadata.pop("widgets", None)
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data:
                data["image/png"] = _palette_png(data["image/png"])
            if output.get("output_type") == "stream":
                output["text"] = _relative(output["text"], workdir)
            for kind in TEXT_KINDS:
                data = output.get("data", {})
                if kind in data:
                    data[kind] = _relative(data[kind], workdir)
    return notebook


def _palette_png(encoded: str) -> str:
    from PIL import Image

    image = Image.open(io.BytesIO(base64.b64decode(encoded))).convert("RGB").quantize(colors=256)
    out = io.BytesIO()
    image.save(out, format="png", optimize=True)
    return base64.b64encode(out.getvalue()).decode("ascii")


def _relative(text: str | list[str], workdir: Path) -> str:
    joined = "".join(text) if isinstance(text, list) else text
    for form in {str(workdir), os.path.realpath(workdir)}:
        joined = joined.replace(form, ".")
    return joined


def text_outputs(notebook: Any) -> list[list[str]]:
    """Per code cell, its text outputs (stdout, plain text, Markdown) with object
    addresses blanked: what a reader of the stored notebook sees, minus images."""
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        texts: list[str] = []
        streaming = False  # consecutive stdout chunks are one text: the kernel splits them at will
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                chunk = _ADDRESS.sub(" at 0x…", "".join(output["text"]))
                if streaming:
                    texts[-1] += chunk
                else:
                    texts.append(chunk)
                streaming = True
                continue
            streaming = False
            data = output.get("data", {})
            for kind in ("text/plain", "text/markdown"):
                if kind in data:
                    texts.append(_ADDRESS.sub(" at 0x…", "".join(data[kind])))
        cells.append(texts)
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: every one in notebooks/)")
    args = parser.parse_args(argv)
    paths = args.paths or sorted(HERE.glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"refresh: error: no such notebook: {', '.join(missing)}", file=sys.stderr)
        return 2
    for path in paths:
        with tempfile.TemporaryDirectory(prefix="notebook-") as scratch:
            notebook = execute(path, Path(scratch))
        tmp = path.with_name(f".{path.name}.partial")
        nbformat.write(notebook, tmp)
        tmp.replace(path)
        print(f"refreshed {path} ({path.stat().st_size / 1024:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
