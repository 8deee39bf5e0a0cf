"""Every notebook in notebooks/ runs top to bottom in a real Jupyter kernel, and is
stored with the outputs it gives (refreshed by ``python3 tasks.py notebooks``)."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
_spec = importlib.util.spec_from_file_location("refresh", ROOT / "notebooks" / "refresh.py")
refresh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(refresh)
STALE = "stored outputs differ from a fresh run: refresh them with `python3 tasks.py notebooks`"


def test_the_notebooks_are_found() -> None:
    names = {p.name for p in NOTEBOOKS}
    assert {"01_quickstart.ipynb", "02_coordination_cost.ipynb", "04_explorer.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_with_small_portable_outputs(path: Path) -> None:
    """Readable on a repository page: every code cell ran and kept its outputs, images
    are modest, and nothing names this machine or times this run."""
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), STALE
    assert sum(1 for cell in code if cell.outputs) >= len(code) // 2
    text = path.read_text()
    for machine in ("/tmp/", "/work/", "/home/", "/root/", "/Users/"):
        assert machine not in text, f"{path.name} names a machine path ({machine}…)"
    assert "widgets" not in notebook.metadata and not any("execution" in c.metadata for c in code)
    images = [o.data["image/png"] for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert images, "a notebook without a figure"
    assert max(len(base64.b64decode(i)) for i in images) < 120_000
    assert path.stat().st_size < 400_000
    streams = [o for c in code for o in c.outputs if o.output_type == "stream"]
    assert not [o for o in streams if o.name == "stderr"], "a progress bar or warning in the stored copy"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom_and_gives_its_stored_outputs(path: Path, tmp_path: Path) -> None:
    """Executes each cell in order (in a scratch directory, with the notebook's inline
    figures); a failing cell or assertion fails the test with the cell's traceback.
    Its text outputs must be those stored (the simulation is deterministic)."""
    fresh = refresh.execute(path, tmp_path)
    outputs = [o for cell in fresh.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    stored = nbformat.read(path, as_version=4)
    mismatched = [
        (i, json.dumps(a)[:300], json.dumps(b)[:300])
        for i, (a, b) in enumerate(zip(refresh.text_outputs(stored), refresh.text_outputs(fresh), strict=True))
        if a != b
    ]
    assert not mismatched, f"{STALE}; first differing code cell: {mismatched[0]}"


def test_jupyter_lab_serves_the_notebooks_with_the_widget_extension(tmp_path: Path) -> None:
    """``jupyter lab`` from the environment: a real server on 127.0.0.1 lists the
    notebooks, serves the Lab page and has the ipywidgets extension (for the explorer)."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    jupyter = Path(sys.executable).with_name("jupyter")
    server = subprocess.Popen(
        [str(jupyter), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--IdentityProvider.token=t0k",
         f"--ServerApp.root_dir={ROOT / 'notebooks'}", "--ServerApp.open_browser=False", "--allow-root"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path)},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/contents?token=t0k", timeout=5) as reply:
                    listing = json.load(reply)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "jupyter lab did not start"
                time.sleep(0.3)
        assert {p.name for p in NOTEBOOKS} <= {item["name"] for item in listing["content"]}
        with urllib.request.urlopen(f"{base}/lab?token=t0k", timeout=10) as reply:
            page = reply.read().decode()
        assert reply.status == 200 and "@jupyter-widgets/jupyterlab-manager" in page
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_stdout_split_into_chunks_compares_as_the_text_it_prints() -> None:
    """The kernel flushes stdout whenever it likes: the same prints may be stored as one
    stream output or several, and must compare equal; a different text must not."""

    def notebook(*chunks: str, plain: str = "42") -> nbformat.NotebookNode:
        outputs = [nbformat.v4.new_output("stream", name="stdout", text=c) for c in chunks]
        outputs.append(nbformat.v4.new_output("execute_result", data={"text/plain": plain}, execution_count=1))
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print()", outputs=outputs)])

    whole = refresh.text_outputs(notebook("a line\nanother\n"))
    assert whole == [["a line\nanother\n", "42"]]
    assert refresh.text_outputs(notebook("a line", "\n", "another\n")) == whole
    assert refresh.text_outputs(notebook("a line\n", "other\n")) != whole
    assert refresh.text_outputs(notebook("a line\nanother\n", plain="43")) != whole
