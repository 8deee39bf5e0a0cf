#!/usr/bin/env python3
"""Set-up and the everyday jobs, on a machine that has only python3.

    python3 tasks.py run        # the main job: a coordination-cost experiment -> CSV + PNG
    python3 tasks.py test       # the whole test suite
    python3 tasks.py notebooks  # execute the notebooks and store them with their outputs
    python3 tasks.py lab        # JupyterLab on the notebooks (the explorer, the walkthroughs)

Each creates ``.venv`` beside this file on first use and installs the project into it
(again only when pyproject.toml changes). Extra arguments go to the job.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
EXTRAS = "dev,notebooks,data,postgres,fast,ray,otel"


def ensure_env() -> None:
    stamp = VENV / ".installed"
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + EXTRAS.encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == want and PYTHON.exists():
        return
    if not PYTHON.exists():
        print(f"creating a virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("installing megaactors and its dependencies (first run only)", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[{EXTRAS}]"], check=True)
    stamp.write_text(want)


def compile_bytecode() -> None:
    """Compile the package's modules to bytecode ahead of the job (only those changed
    since the last time), so that the processes a job starts (command lines, workers,
    notebook kernels) load them rather than each compiling them from source again,
    as they do where ``PYTHONDONTWRITEBYTECODE`` is set. Not a condition of the job: a
    module that does not compile, or a read-only checkout, leaves it to the job to say."""
    subprocess.run([str(PYTHON), "-m", "compileall", "-q", str(ROOT / "megaactors")], stdout=subprocess.DEVNULL)


def main(argv: list[str]) -> int:
    is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    jobs = {
        "run": [str(PYTHON), str(ROOT / "experiments" / "coordination_cost.py")],
        "test": [str(PYTHON), "-m", "pytest"],
        "notebooks": [str(PYTHON), str(ROOT / "notebooks" / "refresh.py")],
        "lab": [str(VENV / "bin" / "jupyter"), "lab", str(ROOT / "notebooks"), *(["--allow-root"] if is_root else [])],
    }
    if not argv or argv[0] not in jobs:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    job, rest = argv[0], argv[1:]
    if job == "test" and not any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in rest):
        rest = ["-n", str(min(os.cpu_count() or 1, 4)), *rest]  # pytest-xdist: one test process per core
    ensure_env()
    compile_bytecode()
    env = dict(os.environ, MPLBACKEND="Agg") if job in ("run", "test") else dict(os.environ)
    return subprocess.call([*jobs[job], *rest], cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
