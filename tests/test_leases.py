"""Leases that free themselves: a holder that is a dead process of this host is taken
over at once (pid and start time, so a reused pid is not mistaken), dead-lettered runs
are requeued from the command line, and a worker rides out a locked database."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from megaactors import RunSpec, __version__
from megaactors.cli.run import with_status
from megaactors.durable import RunQueue, open_store
from megaactors.durable.holders import holder_is_dead, owner_id, process_start
from megaactors.durable.sqlite import SQLiteStore
from megaactors.durable.worker import work
from megaactors.errors import StoreBusyError

SPEC = RunSpec(topology="two-tier", agents=1500, group_size=12, rounds=5, seed=4)
RUN = ["--agents", "1500", "--group-size", "12", "--rounds", "5", "--seed", "4"]


def megaactors(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=timeout)


def reference(spec: RunSpec) -> dict[str, Any]:
    s = spec.execute().summary()
    s.pop("wall_s")
    return s


def without_wall(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "wall_s"}


def wait_for_step(db: str, run_id: str, step: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open_store(db, readonly=True) as s:
                if (s.get_run(run_id).step or 0) >= step:
                    return
        except Exception:  # not created yet
            pass
        time.sleep(0.05)
    pytest.fail(f"run {run_id!r} never reached super-step {step}")


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "runs.db") if request.param == "sqlite" else request.getfixturevalue("postgres_dsn")


def test_a_holder_is_judged_by_pid_and_start_time() -> None:
    me = owner_id()
    host, pid, started, _ = me.split(":")
    assert (host, int(pid)) == (socket.gethostname(), os.getpid()) and not holder_is_dead(me)
    assert holder_is_dead(f"{host}:{pid}:{float(started) - 100:.2f}:ab")  # the pid was reused
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert process_start(gone.pid) is None and holder_is_dead(f"{host}:{gone.pid}:1.00:ab")
    assert not holder_is_dead(f"elsewhere:{gone.pid}:1.00:ab")  # another host: its lease expires instead
    assert not holder_is_dead(f"{host}:{gone.pid}:ab")  # a name in another form is never judged
    assert not holder_is_dead(None)


def test_resume_right_after_kill_9_takes_the_run_over_at_once(db: str) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-m", "megaactors", "run", *RUN, "--checkpoint", db, "--run-id", "r",
         "--step-seconds", "0.25", "--lease", "600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    wait_for_step(db, "r", 2)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    started = time.monotonic()
    out = megaactors("resume", "--checkpoint", db, "--run-id", "r", "--json")
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - started < 60  # not the 600 s lease
    assert without_wall(json.loads(out.stdout)) == with_status(reference(SPEC))  # as the command line prints it
    with open_store(db, readonly=True) as s:
        run = s.get_run("r")
    assert (run.status, run.fence, run.attempts) == ("done", 2, 2)


def test_a_worker_takes_over_the_runs_of_a_killed_worker_at_once(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    with open_store(db, create=True) as store:
        rid = RunQueue(store).submit(SPEC, {"step_s": 0.25})
    victim = subprocess.Popen(
        [sys.executable, "-m", "megaactors", "worker", "--db", db, "--lease", "600", "--poll", "0.05"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    wait_for_step(db, rid, 2)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    out = megaactors("worker", "--db", db, "--exit-when-idle", "--poll", "0.05", timeout=120)
    assert out.returncode == 0, out.stderr
    with open_store(db, readonly=True) as s:
        run = s.get_run(rid)
    assert run.status == "done" and without_wall(run.result) == reference(SPEC)
    assert run.fence == 2


def test_requeue_puts_dead_runs_back(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    spec = RunSpec(topology="star", agents=40, seed=2)
    with open_store(db, create=True) as store:
        store.create_run("dead1", spec.as_dict(), {}, version=__version__, max_attempts=1)
        store.create_run("dead2", spec.as_dict(), {}, version=__version__, max_attempts=1)
        store.create_run("fine", spec.as_dict(), {}, version=__version__)
        for _ in range(2):
            lease = store.claim_next("w", __version__, 30)
            assert lease is not None and store.fail(lease, "the disk was full") == "dead"
    out = megaactors("requeue", "--db", db, "--run-id", "fine")
    assert out.returncode == 2 and "only dead runs" in out.stderr and len(out.stderr.splitlines()) == 1
    out = megaactors("requeue", "--db", db, "--run-id", "nope")
    assert out.returncode == 2 and "no run 'nope'" in out.stderr
    out = megaactors("requeue", "--db", db, "--run-id", "dead1")
    assert out.returncode == 0 and out.stdout.strip() == "requeued dead1", out.stderr
    out = megaactors("requeue", "--db", db, "--dead", "--max-attempts", "2", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == ["dead2"], out.stderr
    out = megaactors("requeue", "--db", db, "--dead")
    assert out.returncode == 0 and out.stdout.strip() == "no dead runs"
    out = megaactors("worker", "--db", db, "--exit-when-idle", "--poll", "0.05")
    assert out.returncode == 0, out.stderr
    with open_store(db, readonly=True) as s:
        runs = {r.run_id: r for r in s.list_runs()}
    assert {r.status for r in runs.values()} == {"done"}
    assert (runs["dead1"].attempts, runs["dead2"].max_attempts) == (1, 2)
    assert without_wall(runs["dead1"].result) == reference(spec)


def test_a_worker_rides_out_a_locked_database(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    spec = RunSpec(topology="star", agents=50, seed=1)
    with open_store(db, create=True) as store:
        rid = RunQueue(store).submit(spec)
    locker = sqlite3.connect(db, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    with SQLiteStore(db, busy_timeout_s=0.02) as store, pytest.raises(StoreBusyError, match="locked"):
        store.claim_next("w", __version__, 30)
    lines: list[str] = []

    def work_on_a_busy_database() -> None:
        with SQLiteStore(db, busy_timeout_s=0.02) as store:
            work(store, exit_when_idle=True, poll_s=0.01, log=lines.append)

    worker = threading.Thread(target=work_on_a_busy_database)
    worker.start()
    time.sleep(1.0)
    locker.execute("COMMIT")
    locker.close()
    worker.join(120)
    assert not worker.is_alive()
    assert any("database busy" in line for line in lines), lines
    with open_store(db, readonly=True) as store:
        run = store.get_run(rid)
    assert run.status == "done" and without_wall(run.result) == reference(spec)
