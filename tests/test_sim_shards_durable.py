"""Checkpoints of the sharded simulation through the store and the command line: the
same result as the unsharded and the uncheckpointed sharded run, a run SIGKILLed
mid-way resumed on the same number of shards, and one-line refusals of what does
not apply (another number of shards, edits, interrupts), with nothing written."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_durable_cli import files

from megaactors.cli import main
from megaactors.durable import DurableOptions, FencingError, MemoryStore, open_store
from megaactors.durable.checkpointing import Progress, run_durable
from megaactors.errors import ParameterError
from megaactors.experiments.spec import RunSpec

NET = ["--machines", "3", "--net-latency", "intra=0.01,cross=0.05", "--net-jitter", "0.002"]
SMALL = ["-n", "90", "-g", "9", "-r", "2", "--seed", "4", *NET]
SPEC = RunSpec(agents=90, group_size=9, rounds=2, seed=4, machines="3", net_latency="intra=0.01,cross=0.05")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # refused while parsing the options
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def summary(out: str) -> dict[str, Any]:
    s = json.loads(out)
    s.pop("wall_s")
    return s


def test_a_checkpointed_sharded_run_gives_the_unsharded_result(tmp_path: Path, capsys) -> None:
    db = str(tmp_path / "runs.db")
    code, out, err = cli(capsys, "run", *SMALL, "--json")
    plain = summary(out)
    code, out, err = cli(capsys, "run", *SMALL, "--shards", "3", "--json")
    assert code == 0 and summary(out) == plain, err
    code, out, err = cli(capsys, "run", *SMALL, "--shards", "2", "--checkpoint", db, "--run-id", "s",
                         "--checkpoint-every", "30", "--json")  # fmt: skip
    assert code == 0 and summary(out) == plain, err
    with open_store(db, readonly=True) as store:
        run = store.get_run("s")
        checkpoints = store.list("s")
    assert run.status == "done" and run.options["shards"] == 2 and run.options["shard_backend"] == "inprocess"
    steps = [c.step for c in checkpoints]
    assert len(steps) >= 3 and steps == list(range(30, 30 * len(steps) + 1, 30))
    assert {c.kind for c in checkpoints} == {"full"} and {c.meta["shards"] for c in checkpoints} == {2}
    assert [c.parent_step for c in checkpoints] == [None, *steps[:-1]]
    # runs and inspect show it: steps are windows, agents come from every machine's state
    code, out, err = cli(capsys, "runs", "--db", db, "--json")
    (row,) = json.loads(out)
    assert row["steps"] == steps[-1] and row["messages"] == plain["messages"] and row["options"]["shards"] == 2
    code, out, err = cli(capsys, "inspect", "--db", db, "--run-id", "s", "--json")
    seen = json.loads(out)
    assert code == 0 and seen["shards"] == 2 and seen["step"] == steps[-1], err
    assert len(seen["agents"]) == 90 and [a["agent"] for a in seen["agents"]] == list(range(90))
    assert sum(a["llm_calls"] for a in seen["agents"]) > 0 and seen["messages"] <= plain["messages"]
    assert abs(sum(a["cost_usd"] for a in seen["agents"]) - seen["cost_usd"]) < 1e-9
    code, out, err = cli(capsys, "inspect", "--db", db, "--run-id", "s", "--agents", "3")
    assert code == 0 and f"window {steps[-1]} on 2 shard(s)" in out.splitlines()[0], out
    # a finished run's resume prints its stored result
    code, out, err = cli(capsys, "resume", "--checkpoint", db, "--run-id", "s", "--json")
    assert code == 0 and summary(out) == {**plain, "stalled": {}}


def test_resuming_from_any_checkpoint_gives_the_same_result() -> None:
    """Drop every checkpoint after one of them, then resume under a new claim: the
    same result, the windows after it written once each."""
    options = DurableOptions(checkpoint_every=25, shards=3)
    store = MemoryStore()
    lease = store.create_run("whole", SPEC.as_dict(), options.as_dict(), version="t", owner="a", lease_s=60)
    expected = run_durable(store, lease, SPEC, options).summary()
    written = [c.step for c in store.list("whole")]
    for keep in (written[0], written[len(written) // 2]):
        run_id = f"from-{keep}"
        store.fork("whole", keep, run_id)
        progress = Progress()
        resumed = run_durable(store, store.claim(run_id, "b", "t", 60), SPEC, options, progress=progress)
        assert progress.resumed_from == keep and progress.super_steps > written[-1]
        assert {**resumed.summary(), "wall_s": 0} == {**expected, "wall_s": 0}
        assert [c.step for c in store.list(run_id)] == [s for s in written if s >= keep]  # a full one is copied


def test_a_sharded_run_stops_writing_once_its_lease_is_lost() -> None:
    """The heartbeat's word is taken after every window; a cancelled run's next
    checkpoint is refused by the store (fencing)."""
    options = DurableOptions(checkpoint_every=10, shards=2)
    store = MemoryStore()
    seen: list[int] = []

    def lose_at_25(windows: int) -> None:
        seen.append(windows)

    lease = store.create_run("lost", SPEC.as_dict(), options.as_dict(), version="t", owner="a", lease_s=60)
    with pytest.raises(FencingError, match=r"lease lost \(heartbeat\) at window 26"):
        run_durable(store, lease, SPEC, options, lost=lambda: len(seen) >= 25, on_step=lose_at_25)
    assert [c.step for c in store.list("lost")] == [10, 20] and seen[-1] == 25

    def cancel_at_35(windows: int) -> None:
        seen.append(windows)
        if windows == 35:
            store.cancel("cancelled")

    seen.clear()
    lease = store.create_run("cancelled", SPEC.as_dict(), options.as_dict(), version="t", owner="a", lease_s=60)
    with pytest.raises(FencingError, match="the run is cancelled"):
        run_durable(store, lease, SPEC, options, on_step=cancel_at_35)
    assert [c.step for c in store.list("cancelled")] == [10, 20, 30] and seen[-1] == 40


def test_options_a_sharded_run_cannot_take_are_refused() -> None:
    assert "shards" not in DurableOptions().as_dict()  # an unsharded run's options read as in older versions
    assert DurableOptions.from_dict(DurableOptions(shards=2, shard_backend="ray").as_dict()).shard_backend == "ray"
    with pytest.raises(ParameterError, match="interrupts"):
        DurableOptions(shards=2, interrupt_at=3.0)
    with pytest.raises(ParameterError, match="billing"):
        DurableOptions(shards=2, billing_url="http://127.0.0.1:1")
    with pytest.raises(ParameterError, match="goes with a number of shards"):
        DurableOptions(shard_backend="ray")
    with pytest.raises(ParameterError, match="shard backend must be"):
        DurableOptions(shards=2, shard_backend="processes")


BAD_RUNS = [
    (["--shards", "5"], "must not exceed the machines (3)"),
    (["--shards", "2", "--interrupt-at", "3"], "interrupts"),
    (["--shards", "2", "--bill", "http://127.0.0.1:1"], "billing"),
    (["--shards", "2", "--runtime", "asyncio"], "needs --runtime sim"),
    (["--shards", "2", "--shard-backend", "processes"], "unknown shard_backend 'processes'"),
]


@pytest.mark.parametrize(("extra", "message"), BAD_RUNS)
def test_a_sharded_checkpointed_run_refuses_in_one_line(tmp_path: Path, capsys, extra: list[str], message: str) -> None:
    db = tmp_path / "runs.db"
    code, _, err = cli(capsys, "run", *SMALL, "--checkpoint", str(db), "--run-id", "x", *extra)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not db.exists()


def test_resume_refuses_what_does_not_apply_and_writes_nothing(tmp_path: Path, capsys) -> None:
    db = tmp_path / "runs.db"
    ended = subprocess.Popen(["true"])  # its process id names a holder that died
    ended.wait()
    dead = f"{socket.gethostname()}:{ended.pid}:0.00:dead"
    store = open_store(db, create=True)
    try:  # a sharded run and an unsharded one, each stopped after its first checkpoints
        for run_id, options in (("sharded", DurableOptions(checkpoint_every=40, shards=2)),
                                ("plain", DurableOptions(checkpoint_every=5, step_s=0.05))):  # fmt: skip
            lease = store.create_run(run_id, SPEC.as_dict(), options.as_dict(), version=_version(), owner=dead,
                                     lease_s=600)  # fmt: skip

            def stop(step: int) -> None:
                if step >= 80:
                    raise KeyboardInterrupt  # the holder dies here

            with pytest.raises(KeyboardInterrupt):
                run_durable(store, lease, SPEC, options, on_step=stop)
    finally:
        store.close()
    before = files(db)
    d = str(db)
    for argv, message in [
        (["--run-id", "sharded", "--shards", "3"], "checkpointed on 2 shard(s): it resumes on --shards 2, not 3"),
        (["--run-id", "plain", "--shards", "2"], "is not sharded"),
        (["--run-id", "plain", "--shard-backend", "ray"], "is not sharded"),
        (["--run-id", "sharded", "--set-state", "1=[]"], "is sharded: --set-state and --send"),
        (["--run-id", "sharded", "--send", "1=hello"], "is sharded: --set-state and --send"),
        (["--run-id", "sharded", "--shard-backend", "processes"], "unknown shard_backend 'processes'"),
    ]:
        code, out, err = cli(capsys, "resume", "--checkpoint", d, *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, (argv, err)
        assert files(db) == before, argv
    code, out, err = cli(
        capsys,
        "resume",
        "--checkpoint",
        d,
        "--run-id",
        "sharded",
        "--shards",
        "2",
        "--shard-backend",
        "inprocess",
        "--json",
    )
    assert code == 0, err
    code, plain, err = cli(capsys, "run", *SMALL[:-len(NET)], "--machines", "3", "--net-latency",
                           "intra=0.01,cross=0.05", "--json")  # fmt: skip
    assert summary(out) == summary(plain)


def _version() -> str:
    from megaactors import __version__

    return __version__


def _step(db: Path, run_id: str) -> int:
    try:
        with open_store(db, readonly=True) as store:
            return store.get_run(run_id).step or 0
    except Exception:  # not created yet
        return 0


def test_a_sharded_run_killed_mid_way_resumes_to_the_same_result(tmp_path: Path, capsys) -> None:
    db = tmp_path / "kill.db"
    spec = ["-n", "600", "-g", "10", "-r", "3", "--seed", "2", "--machines", "4", "--net-latency",
            "intra=0.01,cross=0.05"]  # fmt: skip
    victim = subprocess.Popen(
        [sys.executable, "-m", "megaactors", "run", *spec, "--shards", "2", "--checkpoint", str(db), "--run-id", "k",
         "--checkpoint-every", "10"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while victim.poll() is None and _step(db, "k") == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.communicate()
    assert victim.returncode == -signal.SIGKILL, "the run ended before it was killed"
    with open_store(db, readonly=True) as store:
        run = store.get_run("k")
        killed_at = [c.step for c in store.list("k")]
    assert run.status == "running" and killed_at, (run.status, killed_at)
    code, out, err = cli(capsys, "resume", "--checkpoint", str(db), "--run-id", "k", "--json")
    assert code == 0, err
    resumed = summary(out)
    code, out, err = cli(capsys, "run", *spec, "--json")
    assert resumed == summary(out)
    with open_store(db, readonly=True) as store:
        run = store.get_run("k")
        steps = [c.step for c in store.list("k")]
    assert run.status == "done" and run.attempts == 2
    assert len(steps) > len(killed_at) and steps[: len(killed_at)] == killed_at  # resumed mid-run, nothing doubled
    assert steps == list(range(10, 10 * len(steps) + 1, 10))


def test_a_sharded_run_checkpoints_in_postgres(postgres_dsn: str, capsys) -> None:
    code, out, err = cli(capsys, "run", *SMALL, "--json")
    plain = summary(out)
    code, out, err = cli(capsys, "run", *SMALL, "--shards", "3", "--checkpoint", postgres_dsn, "--run-id", "pg",
                         "--checkpoint-every", "50", "--json")  # fmt: skip
    assert code == 0 and summary(out) == plain, err
    with open_store(postgres_dsn, readonly=True) as store:
        assert [c.kind for c in store.list("pg")] and {c.meta["shards"] for c in store.list("pg")} == {3}


def test_a_worker_runs_a_queued_sharded_run(tmp_path: Path, capsys) -> None:
    db = str(tmp_path / "queue.db")
    code, _, err = cli(capsys, "submit", "--db", db, *SMALL, "--shards", "4", "--run-id", "q")
    assert code == 2 and "must not exceed the machines (3)" in err and not Path(db).exists(), err
    code, _, err = cli(capsys, "submit", "--db", db, *SMALL, "--shards", "3", "--checkpoint-every", "40",
                       "--run-id", "q")  # fmt: skip
    assert code == 0, err
    code, _, err = cli(capsys, "worker", "--db", db, "--exit-when-idle")
    assert code == 0, err
    code, out, err = cli(capsys, "run", *SMALL, "--json")
    with open_store(db, readonly=True) as store:
        run = store.get_run("q")
        kinds = {(c.kind, c.meta["shards"]) for c in store.list("q")}
    assert run.status == "done" and run.options["shards"] == 3 and kinds == {("full", 3)}
    assert {**run.result, "wall_s": 0} == {**summary(out), "wall_s": 0, "stalled": {}}
