"""Every notebook in notebooks/ runs top to bottom in a real Jupyter kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_the_notebooks_are_found() -> None:
    names = {p.name for p in NOTEBOOKS}
    assert {"01_quickstart.ipynb", "02_coordination_cost.ipynb"} <= names


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Executes each cell in order (in a scratch directory, with the notebook's inline
    figures); a failing cell or assertion fails the test with the cell's traceback."""
    monkeypatch.delenv("MPLBACKEND", raising=False)
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert all(cell.get("execution_count") for cell in notebook.cells if cell.cell_type == "code")
