"""No orphans: the processes of ``worker --jobs`` and of a sweep's pool end when their
parent dies — killed with SIGKILL, or told to stop with SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from megaactors.durable import RunQueue, open_store
from megaactors.experiments.spec import RunSpec


def children_of(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] != "Z"


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting")
        time.sleep(0.05)


def gone_within(pids: set[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def queued_work(db: Path, runs: int = 6) -> None:
    with open_store(db, create=True) as store:
        for seed in range(runs):
            RunQueue(store).submit(RunSpec(agents=3000, group_size=12, rounds=30, seed=seed), {"step_s": 0.5})


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_worker_jobs_end_with_their_parent(how: signal.Signals, tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    queued_work(db)
    parent = subprocess.Popen(
        [sys.executable, "-m", "megaactors", "worker", "--db", str(db), "--jobs", "2", "--lease", "60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: len(children_of(parent.pid)) >= 2)

        def claimed() -> int:
            with open_store(db, readonly=True) as store:
                return sum(r.status == "running" for r in store.list_runs())

        wait_for(lambda: claimed() >= 2)  # both children are working
        children = children_of(parent.pid)
        parent.send_signal(how)
        assert parent.wait(30) == (-signal.SIGKILL if how == signal.SIGKILL else 128 + signal.SIGTERM)
        assert gone_within(children, 5), [p for p in children if alive(p)]
    finally:
        parent.kill()
        parent.wait()


def test_a_killed_sweep_leaves_no_pool_workers_and_frees_its_directory(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    args = [sys.executable, "-m", "megaactors", "sweep", "--agents", "30000", "--rounds", "4", "--seed", "1,2,3,4",
            "--workers", "2", "--out", str(out), "-q", "--no-plots"]  # fmt: skip
    parent = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(children_of(parent.pid)) >= 2)
        workers = children_of(parent.pid)
        time.sleep(0.5)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert gone_within(workers, 5), [p for p in workers if alive(p)]
    finally:
        parent.kill()
        parent.wait()
    # the lock died with its holders: the directory takes another sweep at once
    smaller = [a if a != "30000" else "50" for a in args]
    again = subprocess.run(smaller, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr


def test_without_the_kernel_a_watching_thread_ends_the_orphan(tmp_path: Path) -> None:
    """The fallback where ``prctl`` is not available: the child notices it was re-parented."""
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from megaactors.child_processes import die_with_parent
        parent = os.getpid()
        child = os.fork()
        if child == 0:
            die_with_parent(parent, kernel=False)
            time.sleep(60)
            os._exit(0)
        open({str(tmp_path / "child")!r}, "w").write(str(child))
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_for(lambda: (tmp_path / "child").exists() and (tmp_path / "child").read_text() != "")
        child = int((tmp_path / "child").read_text())
        assert alive(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert gone_within({child}, 5)
    finally:
        parent.kill()
        parent.wait()
