"""Rainbow deploys with two installed versions: a second copy of megaactors, with
another version, installed into a second virtual environment, runs workers beside
this one's on one database (SQLite and PostgreSQL); runs routed by weight finish on
their own version, a drained version claims nothing new, and ``versions`` compares them."""

from __future__ import annotations

import json
import re
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path
from typing import Any

import pytest

import megaactors
from megaactors import RunSpec, __version__
from megaactors.cli import main
from megaactors.durable import open_store
from megaactors.durable.deploys import route

NEW = "0.2.0-canary"


@pytest.fixture(scope="module")
def second_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The interpreter of a virtual environment holding megaactors ``NEW`` (its
    dependencies are this environment's)."""
    root = tmp_path_factory.mktemp("v2")
    venv.EnvBuilder(with_pip=False).create(root / "venv")
    python = root / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    package = Path(purelib) / "megaactors"
    shutil.copytree(Path(megaactors.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    init = package / "__init__.py"
    init.write_text(re.sub(r'__version__ = "[^"]*"', f'__version__ = "{NEW}"', init.read_text()))
    ours = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    (Path(purelib) / "dependencies.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n")
    out = subprocess.run([str(python), "-c", "import megaactors; print(megaactors.__version__, megaactors.__file__)"],
                         capture_output=True, text=True, check=True, cwd=root)  # fmt: skip
    assert out.stdout.split()[0] == NEW and out.stdout.split()[1].startswith(str(root)), out.stdout
    return str(python)


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "q.db") if request.param == "sqlite" else request.getfixturevalue("postgres_dsn")


def cli(python: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "megaactors", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def wait_for(predicate: Any, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting")
        time.sleep(0.05)


@pytest.mark.slow
def test_two_versions_side_by_side(db: str, second_python: str, tmp_path: Path) -> None:
    with open_store(db, create=True):
        pass
    workers = {
        version: subprocess.Popen([python, "-m", "megaactors", "worker", "--db", db, "--poll", "0.05"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        for version, python in ((__version__, sys.executable), (NEW, second_python))
    }  # fmt: skip
    try:
        with open_store(db, readonly=True) as store:
            wait_for(lambda: set(store.deploys()) == {__version__, NEW})
        out = cli(sys.executable, "submit", "--db", db, "--agents", "30", "--group-size", "5", "--grid",
                  "seed=1,2,3,4,5,6,7,8", "--run-id", "r", "--route", f"{__version__}=50,{NEW}=50",
                  "--route-seed", "7")  # fmt: skip
        assert out.returncode == 0, out.stderr
        routed = dict(line.split(" -> ") for line in out.stdout.splitlines())
        assert set(routed.values()) == {__version__, NEW}  # seed 7 sends runs both ways
        assert list(routed.values()) == route(8, {__version__: 50, NEW: 50}, 7)  # seeded: the same draw every time

        def all_done() -> bool:
            with open_store(db, readonly=True) as s:
                return all(r.status == "done" for r in s.list_runs())

        wait_for(all_done)
        with open_store(db, readonly=True) as store:
            runs = {r.run_id: r for r in store.list_runs()}
        for rid, version in routed.items():
            run = runs[rid]
            assert run.version == version and run.owner.split(":")[1] == str(workers[version].pid), (rid, run.owner)
            result = dict(run.result)
            result.pop("wall_s")
            expected = RunSpec.from_dict(run.params).execute().summary()
            expected.pop("wall_s")
            assert result == expected

        # drain the stable version: its queued runs wait while the canary keeps working
        out = cli(second_python, "drain", "--db", db, "--version", __version__, cwd=tmp_path)
        assert out.returncode == 0 and "draining" in out.stdout, out.stderr
        out = cli(sys.executable, "submit", "--db", db, "--agents", "30", "--group-size", "5", "--grid",
                  "seed=11,12,13,14", "--run-id", "late", "--canary", f"{NEW}=50", "--route-seed", "1")  # fmt: skip
        assert out.returncode == 0, out.stderr
        late = dict(line.split(" -> ") for line in out.stdout.splitlines())
        to_new = [rid for rid, v in late.items() if v == NEW]
        to_old = [rid for rid, v in late.items() if v == __version__]
        assert to_new and to_old

        def canary_done() -> bool:
            with open_store(db, readonly=True) as s:
                return all(s.get_run(rid).status == "done" for rid in to_new)

        wait_for(canary_done)
        time.sleep(0.5)  # the stable workers poll meanwhile and claim nothing
        with open_store(db, readonly=True) as store:
            assert all(store.get_run(rid).status == "queued" for rid in to_old)
        report = {row["version"]: row for row in json.loads(cli(second_python, "versions", "--db", db, "--json",
                                                                cwd=tmp_path).stdout)}  # fmt: skip
        assert report[__version__]["state"] == "draining" and report[NEW]["state"] == "live"
        assert report[__version__]["queued"] == len(to_old)
        done_new = sum(v == NEW for v in routed.values()) + len(to_new)
        assert report[NEW]["done"] == done_new and report[NEW]["mean_messages"] > 0
        out = cli(sys.executable, "drain", "--db", db, "--version", __version__, "--undo")
        assert out.returncode == 0, out.stderr
        wait_for(all_done)
    finally:
        for p in workers.values():
            p.send_signal(signal.SIGTERM)
        logs = {v: p.communicate(timeout=30)[1] for v, p in workers.items()}
    assert "Traceback" not in "".join(logs.values()), logs


def test_bad_routes_and_drains_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "q.db")
    with open_store(db, create=True) as store:
        store.set_deploy("0.0.9", "live")
    base = ("submit", "--db", db, "--agents", "10")
    for args, words in (
        ((*base, "--route", f"{__version__}=60,0.0.9=30"), "add up to 90, not 100"),
        ((*base, "--route", f"{__version__}=50,9.9.9=50"), "version 9.9.9 is unknown to this store"),
        ((*base, "--route", f"{__version__}=fifty"), "whole percent"),
        ((*base, "--canary", f"{__version__}=10"), "is this version already"),
        ((*base, "--canary", "0.0.9=110"), "must be 0 to 100"),
        (("drain", "--db", db, "--version", "7.7.7"), "version '7.7.7' is unknown to this store"),
    ):
        code = main(list(args))
        err = capsys.readouterr().err
        assert code == 2 and len(err.splitlines()) == 1 and words in err, (args, err)
    with open_store(db, readonly=True) as store:
        assert store.list_runs() == []  # nothing queued by a refused submit
    assert main(["drain", "--db", db, "--version", "0.0.9"]) == 0
    assert "it had nothing queued or running" in capsys.readouterr().out
