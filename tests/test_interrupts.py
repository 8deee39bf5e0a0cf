"""A human in the loop: a checkpointed run stopped at a virtual time or on a ledger
condition is ``interrupted``, ``inspect`` shows its agents, and ``resume`` continues
it to the very result of a run that never stopped; workers stop such runs too and
never continue them on their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from megaactors import RunSpec
from megaactors.cli import main
from megaactors.cli.run import with_status
from megaactors.durable import DurableOptions, MemoryStore, RunQueue, open_store
from megaactors.durable.metrics import WorkerMetrics
from megaactors.durable.worker import execute_claimed, work

RUN = ["--topology", "two-tier", "--agents", "120", "--group-size", "10", "--rounds", "3", "--seed", "2"]
SPEC = RunSpec(topology="two-tier", agents=120, group_size=10, rounds=3, seed=2)


def without_wall(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "wall_s"}


def call(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("trigger", [("--interrupt-at", "4"), ("--interrupt-when", "cost_usd>0.02")])
def test_interrupt_inspect_resume_gives_the_uninterrupted_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], trigger: tuple[str, str]
) -> None:
    db = str(tmp_path / "h.db")
    code, out, err = call(capsys, "run", *RUN, "--checkpoint", db, "--run-id", "h", *trigger, "--step-seconds", "0.5")
    assert code == 0 and "interrupted" in out and "megaactors resume" in out, err
    with open_store(db, readonly=True) as store:
        run = store.get_run("h")
        assert run.status == "interrupted" and run.options[trigger[0][2:].replace("-", "_")] is None
        stopped_at = store.latest("h")
    assert stopped_at is not None and stopped_at.step == run.step
    code, out, err = call(capsys, "inspect", "--db", db, "--run-id", "h", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["status"] == "interrupted" and len(shown["agents"]) == 120, err
    if trigger[0] == "--interrupt-at":
        assert shown["virtual_time_s"] < 4
    else:
        assert shown["cost_usd"] > 0.02
    assert {a["phase"] for a in shown["agents"]} <= {"IDLE", "PROCESSING", "RESPONSE"}
    assert sum(a["cost_usd"] for a in shown["agents"]) == pytest.approx(shown["cost_usd"])
    code, out, _ = call(capsys, "inspect", "--db", db, "--run-id", "h", "--agents", "3")
    assert code == 0 and "117 more agents" in out and len(out.splitlines()) == 6
    code, out, err = call(capsys, "resume", "--checkpoint", db, "--run-id", "h", "--json")
    assert code == 0, err
    reference = SPEC.execute().summary()
    assert without_wall(json.loads(out)) == without_wall(json.loads(json.dumps(with_status(reference))))


def test_workers_stop_interrupted_runs_and_leave_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "q.db")
    code, out, err = call(capsys, "submit", "--db", db, *RUN, "--run-id", "q", "--interrupt-at", "3")
    assert code == 0, err
    lines: list[str] = []
    with open_store(db) as store:
        assert work(store, exit_when_idle=True, poll_s=0.01, log=lines.append) == 0
        assert store.get_run("q").status == "interrupted"
        assert RunQueue(store).claim_next("w") is None  # only a resume continues it
    assert any("interrupted at 3 s" in line for line in lines), lines
    code, out, err = call(capsys, "resume", "--checkpoint", db, "--run-id", "q", "--json")
    assert code == 0, err
    assert without_wall(json.loads(out)) == without_wall(json.loads(json.dumps(with_status(SPEC.execute().summary()))))


def test_bad_interrupts_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "h.db")
    code, _, err = call(capsys, "run", "--agents", "20", "--checkpoint", db, "--run-id", "a", "--interrupt-at", "900")
    assert code == 2 and "before --interrupt-at 900 s" in err and len(err.splitlines()) == 1
    with open_store(db, readonly=True) as store:
        assert store.get_run("a").status == "done"  # the run itself went well: its result is kept
    for condition, words in (("dollars>1", "not a ledger total"), ("cost_usd>>1", "NAME OP NUMBER")):
        code, _, err = call(capsys, "run", "--agents", "20", "--checkpoint", db, "--run-id", "b",
                            "--interrupt-when", condition)  # fmt: skip
        assert code == 2 and words in err and len(err.splitlines()) == 1, err
    with open_store(db, readonly=True) as store:
        assert [r.run_id for r in store.list_runs()] == ["a"]  # refused before anything was written
    code, _, err = call(capsys, "inspect", "--db", db, "--run-id", "nope")
    assert code == 2 and "no run 'nope'" in err


def test_an_edit_is_recorded_and_replayed_by_a_later_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from megaactors import __version__
    from megaactors.durable import DurableOptions, FencingError, run_durable
    from megaactors.durable.interrupts import HumanEdits

    db, twin = tmp_path / "h.db", tmp_path / "twin.db"
    code, _, err = call(capsys, "run", *RUN, "--checkpoint", str(db), "--run-id", "h", "--interrupt-at", "4",
                        "--step-seconds", "0.5")  # fmt: skip
    assert code == 0, err
    shutil.copy(db, twin)
    agent3 = json.loads(call(capsys, "inspect", "--db", str(db), "--run-id", "h", "--json")[1])["agents"][3]["state"]
    for bad, words in (("3=[0,1]", "has 6 items, not 2"), ("300=[0]", "no agent 300"), ("3={", "not JSON")):
        code, _, err = call(capsys, "resume", "--checkpoint", str(db), "--run-id", "h", "--set-state", bad)
        assert code == 2 and words in err and len(err.splitlines()) == 1, err
    with open_store(db, readonly=True) as store:
        assert store.get_run("h").status == "interrupted"  # a refused edit leaves the run waiting
    edited = [3, *agent3[1:]]  # agent 3 believes its three rounds are over
    code, out, err = call(capsys, "resume", "--checkpoint", str(db), "--run-id", "h", "--json", "--who", "ada",
                          "--set-state", f"3={json.dumps(edited)}")  # fmt: skip
    assert code == 0, err
    result = without_wall(json.loads(out))
    assert result["messages"] < SPEC.execute().summary()["messages"]  # the edit changed the run
    code, out, _ = call(capsys, "history", "--db", str(db), "--run-id", "h", "--json")
    rows = [r for r in json.loads(out) if r["meta"].get("edit")]
    assert len(rows) == 1 and rows[0]["meta"]["edit"]["who"] == "ada"
    assert rows[0]["meta"]["edit"]["set_state"] == {"3": edited}
    # the same edit on the twin, the run then lost mid-way and resumed without edits: the edit is replayed
    with open_store(twin) as store:
        spec = RunSpec.from_dict(store.get_run("h").params)
        options = DurableOptions.from_dict(store.get_run("h").options)
        lease = store.claim("h", "w1", __version__, 30)
        polls = iter(range(10**6))
        with pytest.raises(FencingError):
            run_durable(store, lease, spec, options, edits=HumanEdits("ada", {3: edited}), lost=lambda: next(polls) > 3)
        assert store.end_lease("h", "w1", lease.fence)
        again = run_durable(store, store.claim("h", "w2", __version__, 30), spec, options)
    assert without_wall(json.loads(json.dumps(with_status(again.summary())))) == result


def test_a_worker_that_loses_the_run_as_it_stops_it_reports_it_lost() -> None:
    store = MemoryStore()
    queue = RunQueue(store)
    queue.submit(SPEC, DurableOptions(interrupt_at=0.0).as_dict(), run_id="q")

    class CancelledMeanwhile(WorkerMetrics):
        def checkpoint_written(self, seconds: float, nbytes: int) -> None:
            super().checkpoint_written(seconds, nbytes)
            store.cancel("q", "cancelled by hand")  # as the run reaches its interrupt

    lease = queue.claim_next("w")
    assert lease is not None
    lines: list[str] = []
    assert execute_claimed(store, lease, log=lines.append, metrics=CancelledMeanwhile()) == "lost"
    run = store.get_run("q")
    assert (run.status, run.error) == ("cancelled", "cancelled by hand")
    assert any("lease lost" in line for line in lines), lines
