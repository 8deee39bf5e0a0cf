"""The leased run queue with real worker processes: kill -9 a worker and another
resumes its run from the last checkpoint once the lease expires; a paused worker
is fenced out; failing runs are dead-lettered; workers claim only their version."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from megaactors import RunSpec, __version__
from megaactors.durable import RunQueue, open_store

SPECS = [RunSpec(topology="two-tier", agents=1200, group_size=12, rounds=4, seed=s) for s in (1, 2)] + [
    RunSpec(topology="hierarchy", agents=400, fanout=4, rounds=6, seed=3)
]


def worker(db: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "megaactors", "worker", "--db", db, "--poll", "0.05", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def reference(spec: RunSpec) -> dict[str, Any]:
    s = spec.execute().summary()
    s.pop("wall_s")
    return s


def wait_for(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting")
        time.sleep(0.02)


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "q.db") if request.param == "sqlite" else request.getfixturevalue("postgres_dsn")


def test_a_killed_worker_s_run_is_resumed_by_another(db: str) -> None:
    with open_store(db, create=True) as store:
        queue = RunQueue(store)
        ids = [queue.submit(s, {"step_s": 0.25}) for s in SPECS]
    victim = worker(db, "--lease", "5", "--max-runs", "1")  # renewed in time on a loaded machine

    def checkpointed() -> bool:
        with open_store(db, readonly=True) as s:
            return any((r.step or 0) >= 3 and r.status == "running" for r in s.list_runs())

    wait_for(checkpointed)
    victim.send_signal(signal.SIGKILL)
    victim_log = victim.communicate()[1]
    with open_store(db, readonly=True) as s:
        (killed,) = [r for r in s.list_runs() if r.status == "running"]
        killed_step = killed.step
    rescuers = [worker(db, "--lease", "5", "--exit-when-idle") for _ in range(2)]
    logs = [p.communicate(timeout=180)[1] for p in rescuers]
    assert all(p.returncode == 0 for p in rescuers), logs
    with open_store(db, readonly=True) as s:
        runs = {r.run_id: r for r in s.list_runs()}
        history = s.list(killed.run_id)
    for run_id, spec in zip(ids, SPECS, strict=True):
        run = runs[run_id]
        assert run.status == "done", (run_id, run.error)
        result = dict(run.result)
        result.pop("wall_s")
        assert result == reference(spec), run_id
    assert runs[killed.run_id].attempts == 2 and runs[killed.run_id].fence == 2, (victim_log, logs)
    assert f"claimed run {killed.run_id!r} (fence 2)" in "".join(logs)
    steps = [c.step for c in history]
    assert steps == list(range(steps[-1] + 1)) and killed_step in steps  # one line of super-steps, no gap


def test_a_paused_worker_is_fenced_out(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    spec = SPECS[0]
    with open_store(db, create=True) as store:
        run_id = RunQueue(store).submit(spec, {"step_s": 0.25})
    paused = worker(db, "--lease", "0.5", "--exit-when-idle")

    def checkpointed() -> bool:
        with open_store(db, readonly=True) as s:
            return (s.get_run(run_id).step or 0) >= 2

    wait_for(checkpointed)
    paused.send_signal(signal.SIGSTOP)
    time.sleep(0.8)  # its lease expires on the database clock meanwhile
    rescuer = worker(db, "--lease", "5", "--exit-when-idle")
    # wake the paused worker while the rescuer runs: had it been frozen inside an SQLite
    # write transaction, nobody could write until it moves on (SQLite has one writer)
    time.sleep(2.0)
    paused.send_signal(signal.SIGCONT)
    _, log = rescuer.communicate(timeout=180)
    _, paused_log = paused.communicate(timeout=60)
    assert rescuer.returncode == 0 and paused.returncode == 0, log + paused_log
    assert "lease lost" in paused_log, paused_log
    with open_store(db, readonly=True) as s:
        run = s.get_run(run_id)
    result = dict(run.result)
    result.pop("wall_s")
    assert run.status == "done" and run.fence == 2 and result == reference(spec)


def test_failing_runs_are_dead_lettered_and_versions_are_kept_apart(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    with open_store(db, create=True) as store:
        store.create_run("broken", {"agents": 10, "colour": "red"}, {}, version=__version__, max_attempts=2)
        store.create_run("later", RunSpec(agents=10).as_dict(), {}, version="99.0", max_attempts=2)
        good = RunQueue(store).submit(RunSpec(agents=20, group_size=5))
    out = worker(db, "--lease", "5", "--exit-when-idle")
    _, log = out.communicate(timeout=120)
    assert out.returncode == 0, log
    listed = json.loads(
        subprocess.run(
            [sys.executable, "-m", "megaactors", "runs", "--db", db, "--json"], capture_output=True, text=True
        ).stdout
    )
    by_id = {r["run"]: r for r in listed}
    assert by_id["broken"]["status"] == "dead" and by_id["broken"]["attempts"] == 1  # it can never succeed
    assert "unknown parameter(s) colour" in by_id["broken"]["error"]
    assert by_id["later"]["status"] == "queued" and by_id["later"]["attempts"] == 0
    assert by_id[good]["status"] == "done"
    table = subprocess.run(
        [sys.executable, "-m", "megaactors", "runs", "--db", db], capture_output=True, text=True
    ).stdout
    assert "dead" in table and "1/2" in table and "unknown parameter" in table


def test_a_sweep_submitted_as_a_grid_survives_a_crash(tmp_path: Path) -> None:
    db = str(tmp_path / "sweep.db")
    out = subprocess.run(
        [sys.executable, "-m", "megaactors", "submit", "--db", db, "--agents", "600", "--group-size", "10",
         "--grid", "seed=1,2,3", "--grid", "rounds=2,3", "--run-id", "sw", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    ids = json.loads(out.stdout)
    assert len(ids) == 6
    first = [worker(db, "--lease", "0.5") for _ in range(2)]

    def done() -> int:
        with open_store(db, readonly=True) as s:
            return sum(r.status == "done" for r in s.list_runs())

    wait_for(lambda: done() >= 1)
    for p in first:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert done() < 6
    second = worker(db, "--lease", "5", "--jobs", "2", "--exit-when-idle")
    _, log = second.communicate(timeout=180)
    assert second.returncode == 0, log
    with open_store(db, readonly=True) as s:
        runs = {r.run_id: r for r in s.list_runs()}
    assert all(r.status == "done" for r in runs.values())
    for i, run_id in enumerate(ids):
        spec = RunSpec(agents=600, group_size=10, seed=1 + i // 2, rounds=2 + i % 2)
        result = dict(runs[run_id].result)
        result.pop("wall_s")
        assert result == reference(spec)


def test_a_queued_run_takes_a_network_faults_and_provider_limits(tmp_path: Path, capsys: Any) -> None:
    """``submit`` accepts latency, faults and the provider's limits, failures and
    timeouts; a worker's result is the plain run's."""
    from megaactors.cli import main
    from megaactors.durable.worker import work

    db = str(tmp_path / "q.db")
    net = {"net_latency": "intra=0.05,admin=0.2", "net_jitter": 0.05, "faults": "drop=0.05,duplicate=0.05,crash=0.02",
           "rpm": 120.0, "tpm": 200000.0, "llm_failure_rate": 0.1, "llm_timeout_s": 3.0}  # fmt: skip
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in net.items()]
    assert (
        main(["submit", "--db", db, "--agents", "60", "--group-size", "6", "--seed", "3", *flags, "--run-id", "n"]) == 0
    )
    capsys.readouterr()
    with open_store(db) as store:
        assert work(store, exit_when_idle=True, poll_s=0.01, log=lambda line: None) == 1  # one run done
        run = store.get_run("n")
    assert run.status == "done" and run.params["faults"] == net["faults"] and run.params["rpm"] == 120
    result = dict(run.result)
    expected = RunSpec(agents=60, group_size=6, seed=3, **net).execute().summary()
    for summary in (result, expected):
        summary.pop("wall_s")
    assert result == json.loads(json.dumps(expected))
    assert result["faults"]["drop"] and result["failed_llm_calls"] and result["rate_limited"]
