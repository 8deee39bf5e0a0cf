"""Sweeps: grids to rows, parallel worker processes, resuming, failures, bad input, CLI."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megaactors import Organisation, RunSpec, expected_messages
from megaactors.core.llm import PRICES
from megaactors.experiments.spec import ParameterError
from megaactors.experiments.sweep import (
    COLUMNS,
    ResultsError,
    SweepError,
    closed_form_messages,
    load_results,
    optimal_group_size,
    plan,
    run_sweep,
)
from megaactors.runtime import RUNTIMES, SimRuntime

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"topology": ["flat", "star", "two-tier", "hierarchy"], "agents": [10, 40], "seed": [1, 2]}
VARIES = {"wall_s", "run_s"}  # wall-clock figures; everything else is deterministic


def megaactors(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=240, cwd=cwd
    )


def stable(df):  # a DataFrame without its wall-clock columns
    return df.drop(columns=sorted(VARIES)).reset_index(drop=True)


# ---------------------------------------------------------------------- closed forms and planning


@pytest.mark.parametrize("topology", ["flat", "star", "two-tier", "hierarchy"])
def test_closed_form_matches_the_organisation(topology: str) -> None:
    for n in range(1, 41):
        for g in (1, 2, 3, 7, 10, n, n + 1):
            org = Organisation.build(topology, n, g, 3)
            for rounds in (1, 2):
                assert closed_form_messages(topology, n, g, rounds) == expected_messages(org, rounds), (n, g)


def test_optimal_group_size_minimises_the_closed_form() -> None:
    for n in (1, 2, 10, 57, 300):
        costs = {g: expected_messages(Organisation.two_tier(n, g)) for g in range(1, n + 1)}
        best = min(costs.values())
        assert optimal_group_size(n) == min(g for g, c in costs.items() if c == best)
    assert optimal_group_size(100_000) == 59  # ≈ (2N)^(1/3) = 58.5


def test_plan_expands_dedupes_and_resolves_the_optimal_group_size() -> None:
    runs = plan(
        {"topology": ["flat", "two-tier", "hierarchy"], "agents": [100], "group_size": [5, 10, "optimal"],
         "fanout": [2, 4], "seed": [1, 2]}
    )  # fmt: skip
    by = {}
    for r in runs:
        by.setdefault(r.spec.topology, []).append(r)
    # flat ignores group size and fan-out, two-tier ignores fan-out, hierarchy ignores group size
    assert len(by["flat"]) == 2 and len(by["two-tier"]) == 6 and len(by["hierarchy"]) == 4
    assert {r.spec.group_size for r in by["flat"]} == {RunSpec().group_size}
    optimal = [r for r in by["two-tier"] if r.group_rule == "optimal"]
    assert {r.spec.group_size for r in optimal} == {optimal_group_size(100)}
    assert {r.group_rule for r in by["two-tier"]} == {"fixed", "optimal"}
    assert all(r.expected_messages == closed_form_messages(r.spec.topology, 100, r.spec.group_size) for r in runs)
    skipped = plan({"topology": ["flat", "star"], "agents": [100, 1000]}, max_messages=10_000)
    assert [(r.spec.topology, r.spec.agents, r.skipped) for r in skipped] == [
        ("flat", 100, False),
        ("flat", 1000, True),
        ("star", 100, False),
        ("star", 1000, False),
    ]


def test_a_list_of_grids_is_their_union_without_duplicates() -> None:
    runs = plan([{"topology": "star", "agents": [10, 20]}, {"topology": ["star"], "agents": [20, 30]}])
    assert [r.spec.agents for r in runs] == [10, 20, 30]


@pytest.mark.parametrize(
    ("grid", "error", "needle"),
    [
        ({"agents": [10], "colour": ["red"]}, ParameterError, "unknown parameter(s) colour"),
        ({"seeds": [1, 2]}, ParameterError, "unknown parameter(s) seeds"),
        ([], SweepError, "empty grid: no parameter sets"),
        ({"agents": []}, SweepError, "empty grid: parameter 'agents' has no values"),
        ({"agents": [10, 0]}, ParameterError, "agents must be an integer >= 1 and <= 1e9, got 0"),
        ({"topology": ["ring"]}, ParameterError, "unknown topology 'ring'"),
        ({"topology": "two-tier", "group_size": ["big"]}, ParameterError, "group_size must be an integer or 'optimal'"),
        ({"runtime": ["quantum"]}, ParameterError, "unknown runtime 'quantum'"),
        (["agents"], SweepError, "a grid maps parameter names to lists of values"),
    ],
)
def test_bad_grids_are_clear_errors(grid: object, error: type[Exception], needle: str, tmp_path: Path) -> None:
    with pytest.raises(error) as info:
        run_sweep(grid, tmp_path / "out", progress=False)  # type: ignore[arg-type]
    assert needle in str(info.value)
    assert not (tmp_path / "out" / "results.csv").exists()


# ---------------------------------------------------------------------- rows


def test_a_row_holds_every_ledger_figure_and_the_parameters(tmp_path: Path) -> None:
    df = run_sweep({"topology": "two-tier", "agents": 60, "group_size": 7, "seed": 3, "rounds": 2}, tmp_path, workers=1,
                   progress=False)  # fmt: skip
    assert list(df.columns) == list(COLUMNS) and len(df) == 1
    row = df.iloc[0]
    spec = RunSpec.from_dict({"topology": "two-tier", "agents": 60, "group_size": 7, "seed": 3, "rounds": 2})
    summary = spec.execute().summary()
    prices = {"price_in": PRICES[spec.model].input_per_m, "price_out": PRICES[spec.model].output_per_m}
    for name, value in spec.as_dict().items():
        if name in ("fanout", "degree", "rewire") or (value is None and name not in prices):
            assert str(row[name]) in ("<NA>", "nan", ""), name  # ignored or unset: their cells are blank
        elif name in prices:  # the prices paid: the model's list price
            assert value is None and row[name] == prices[name] == summary[name], name
        elif name == "behaviour_params":  # canonical JSON text in a frame
            assert json.loads(row[name]) == value == {}
        else:
            assert row[name] == value, name
    for name, value in summary.items():
        if name in ("wall_s", *spec.as_dict()):
            continue
        if isinstance(value, dict) and name.endswith("_by_channel"):
            for channel, count in value.items():
                assert row[f"{name.split('_')[0]}_{channel}"] == count, (name, channel)
        elif isinstance(value, dict):
            assert row[name] == value, name
        else:
            assert row[name] == value, name
    assert row["status"] == "ok" and row["detail"] == ""
    assert row["messages"] == row["expected_messages"] == closed_form_messages("two-tier", 60, 7, 2)
    assert row["max_agent_received"] == max(
        r["received"] for r in spec.execute().ledger.agent_rows(spec.organisation())
    )


def test_parallel_workers_give_the_same_rows_as_one_process(tmp_path: Path) -> None:
    parallel = run_sweep(SMALL, tmp_path / "a", workers=2, progress=False)
    inline = run_sweep(SMALL, None, workers=0, progress=False)
    assert len(parallel) == 16 and (parallel["status"] == "ok").all()
    assert stable(parallel).equals(stable(inline))
    # the CSV loads back to the same frame, in grid order
    assert stable(load_results(tmp_path / "a" / "results.csv")).equals(stable(parallel))
    assert list(parallel["topology"][:4]) == ["flat"] * 4


def test_a_sweep_uses_several_processes(tmp_path: Path) -> None:
    """Runs report the process that ran them through a runtime registered before the
    workers fork."""
    df = run_sweep({"agents": 10, "seed": list(range(6)), "runtime": "pid"}, None, workers=2, progress=False)
    assert (df["status"] == "ok").all()
    pids = set(df["tool_calls"])
    assert len(pids) == 2 and os.getpid() not in pids


# ---------------------------------------------------------------------- resuming


def test_rows_already_in_the_output_are_not_recomputed(tmp_path: Path) -> None:
    first = run_sweep(SMALL, tmp_path, workers=2, progress=False)
    path = tmp_path / "results.csv"
    lines = path.read_text().splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    # keep 10 rows, mark one kept row so a recomputation would show, drop the other 6
    kept = rows[:10]
    marked = kept[0].split(",")
    marked[COLUMNS.index("wall_s")] = "12345.0"
    kept[0] = ",".join(marked)
    path.write_text(header + "".join(kept))
    second = run_sweep(SMALL, tmp_path, workers=2, progress=False)
    assert second["wall_s"].iloc[0] == 12345.0  # not recomputed
    assert stable(second).equals(stable(first))  # the dropped ones were
    assert len(path.read_text().splitlines()) == 17


def test_a_line_torn_by_an_interrupted_append_is_recomputed(tmp_path: Path) -> None:
    first = run_sweep(SMALL, tmp_path, workers=0, progress=False)
    path = tmp_path / "results.csv"
    text = path.read_text()
    path.write_text(text[: text.rstrip("\n").rfind("\n") + 1] + text.rstrip("\n").rsplit("\n", 1)[1][:25])
    second = run_sweep(SMALL, tmp_path, workers=0, progress=False)
    assert stable(second).equals(stable(first))


def test_a_wider_grid_extends_the_directory_and_keeps_its_rows(tmp_path: Path) -> None:
    first = run_sweep({"topology": "star", "agents": [10, 20]}, tmp_path, workers=0, progress=False)
    lines = (tmp_path / "results.csv").read_text().splitlines()
    marked = lines[1].split(",")
    marked[COLUMNS.index("wall_s")] = "12345.0"  # a recomputed row would lose the mark
    (tmp_path / "results.csv").write_text("\n".join([lines[0], ",".join(marked), *lines[2:]]) + "\n")
    wider = run_sweep({"topology": "star", "agents": [10, 20, 30]}, tmp_path, workers=0, progress=False)
    assert list(wider["agents"]) == [10, 20, 30] and wider["wall_s"].iloc[0] == 12345.0
    assert stable(wider.iloc[:2]).equals(stable(first))
    # another grid in the same directory: its rows are added, the earlier ones stay
    other = run_sweep({"topology": "hierarchy", "agents": [10]}, tmp_path, workers=0, progress=False)
    assert len(other) == 1
    everything = load_results(tmp_path)
    assert sorted(zip(everything["topology"], everything["agents"], strict=True)) == [
        ("hierarchy", 10), ("star", 10), ("star", 20), ("star", 30)
    ]  # fmt: skip
    grids = json.loads((tmp_path / "grid.json").read_text())["grids"]
    assert grids == [{"topology": ["star"], "agents": [10, 20]}, {"topology": ["star"], "agents": [10, 20, 30]},
                     {"topology": ["hierarchy"], "agents": [10]}]  # fmt: skip
    # a smaller budget skips what no longer fits; a larger one runs it (skipped rows are decided again)
    small = run_sweep({"topology": "star", "agents": [10, 20, 30]}, tmp_path, workers=0, progress=False,
                      max_messages=40)  # fmt: skip
    assert list(small["status"]) == ["ok", "ok", "ok"]  # already computed: kept
    fresh = run_sweep({"topology": "star", "agents": [40]}, tmp_path, workers=0, progress=False, max_messages=40)
    assert fresh["status"].iloc[0] == "skipped" and "exceed the budget of 40" in fresh["detail"].iloc[0]
    ran = run_sweep({"topology": "star", "agents": [40]}, tmp_path, workers=0, progress=False)
    assert ran["status"].iloc[0] == "ok"
    assert len(load_results(tmp_path)) == 5
    (tmp_path / "grid.json").unlink()
    with pytest.raises(SweepError, match=r"grid\.json does not: not a sweep directory"):
        run_sweep({"topology": "star", "agents": [10, 20]}, tmp_path, workers=0, progress=False)


# ---------------------------------------------------------------------- failures


class _PidRuntime(SimRuntime):
    """Reports the process that ran it as its tool-call count, after a pause long
    enough that a second worker takes the next run."""

    name = "pid"

    def run(self):
        time.sleep(0.3)
        result = super().run()
        result.ledger.tool_calls = os.getpid()
        return result


class _BrokenRuntime(SimRuntime):
    name = "broken"

    def run(self):
        raise RuntimeError(f"boom on {self.org.n} agents\nsecond line")


class _DoomedRuntime(SimRuntime):
    """Its worker process dies as if killed by the out-of-memory killer."""

    name = "doomed"

    def run(self):
        os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture(autouse=True)
def extra_runtimes(monkeypatch: pytest.MonkeyPatch) -> None:
    for runtime in (_PidRuntime, _BrokenRuntime, _DoomedRuntime):
        monkeypatch.setitem(RUNTIMES, runtime.name, runtime)


def test_a_failing_run_becomes_a_row_with_its_error(tmp_path: Path) -> None:
    grid = {"topology": "star", "agents": [10, 20, 30], "runtime": ["sim", "broken"]}
    df = run_sweep(grid, tmp_path, workers=2, progress=False)
    ok, failed = df[df["runtime"] == "sim"], df[df["runtime"] == "broken"]
    assert (ok["status"] == "ok").all() and (ok["messages"] == [18, 38, 58]).all()
    assert (failed["status"] == "error").all() and failed["messages"].isna().all()
    assert list(failed["detail"]) == [f"RuntimeError: boom on {n} agents second line" for n in (10, 20, 30)]
    # the failure survives the CSV round trip and is not retried unless asked
    assert stable(load_results(tmp_path)).equals(stable(df))
    RUNTIMES["broken"] = SimRuntime
    again = run_sweep(grid, tmp_path, workers=2, progress=False)
    assert (again["status"] == "error").sum() == 3
    retried = run_sweep(grid, tmp_path, workers=2, progress=False, retry_errors=True)
    assert (retried["status"] == "ok").all()


def test_a_killed_worker_is_recorded_and_the_other_runs_survive(tmp_path: Path) -> None:
    grid = [{"topology": "two-tier", "agents": [200, 300, 400, 500], "seed": [1, 2]}, {"runtime": "doomed"}]
    df = run_sweep(grid, tmp_path, workers=2, progress=False)
    doomed = df[df["runtime"] == "doomed"]
    assert len(doomed) == 1 and doomed["status"].iloc[0] == "error"
    assert "worker process died" in doomed["detail"].iloc[0]
    healthy = df[df["runtime"] == "sim"]
    assert len(healthy) == 8 and (healthy["status"] == "ok").all()
    assert (healthy["messages"] == healthy["expected_messages"]).all()


def test_progress_bar_counts_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_sweep({"topology": "star", "agents": [10, 20, 30]}, tmp_path, workers=0, progress=True)
    err = capsys.readouterr().err
    assert "sweep" in err and "3/3" in err and "100%" in err
    run_sweep({"topology": "star", "agents": [10, 20, 30]}, tmp_path, workers=0, progress=True)
    assert "3/3" in capsys.readouterr().err  # resumed: already complete


# ---------------------------------------------------------------------- reading results


def test_a_results_file_from_before_behaviours_graphs_and_prices_reads_and_extends(tmp_path: Path) -> None:
    from megaactors.experiments.result_rows import ADDED_COLUMNS

    run_sweep({"topology": "star", "agents": [10, 20], "model": "gpt-4o"}, tmp_path, workers=0, progress=False)
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    old = [c for c in COLUMNS if c not in ADDED_COLUMNS]
    with open(tmp_path / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, old, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "wall_s": "777.0"})  # a recomputed row would lose the mark
    df = load_results(tmp_path)
    assert list(df["behaviour"]) == ["chat-round"] * 2 and list(df["behaviour_params"]) == ["{}"] * 2
    assert list(df["price_in"]) == [PRICES["gpt-4o"].input_per_m] * 2 and df["degree"].isna().all()
    wider = run_sweep({"topology": "star", "agents": [10, 20, 30], "model": "gpt-4o"}, tmp_path, workers=0,
                      progress=False)  # fmt: skip
    assert list(wider["wall_s"])[:2] == [777.0, 777.0] and len(wider) == 3


def _write_results(path: Path) -> list[str]:
    run_sweep({"topology": "star", "agents": [10, 20, 30]}, path, workers=0, progress=False)
    return (path / "results.csv").read_text().splitlines()


def _empty_but(**values: str) -> str:
    return ",".join(values.get(c, "") for c in COLUMNS)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda lines: [*lines[:3], lines[3] + ",extra"],
         f"line 4: {len(COLUMNS) + 1} fields, expected {len(COLUMNS)}"),
        (lambda lines: [*lines[:2], lines[2].replace(",ok,", ",finished,"), *lines[3:]], "line 3: status 'finished'"),
        (lambda lines: [lines[0], lines[1].replace(",10,", ",ten,", 1), *lines[2:]],
         "line 2: column 'agents' is 'ten', not an integer"),
        (lambda lines: [*lines[:3], _empty_but(topology="star", group_size="10", status="ok")],
         "line 4: column 'agents' is empty"),
        (lambda lines: [lines[0].replace("messages,", "msgs,", 1), *lines[1:]], "line 1: not a results header"),
        (lambda lines: [], "is empty"),
        (lambda lines: ["just some text", "1,2,3"], "line 1: not a results header; missing column(s) topology"),
    ],
)  # fmt: skip
def test_a_malformed_results_csv_names_the_line(tmp_path: Path, edit, needle: str) -> None:
    lines = _write_results(tmp_path)
    broken = tmp_path / "broken.csv"
    broken.write_text("\n".join(edit(lines)) + ("\n" if edit(lines) else ""))
    with pytest.raises(ResultsError) as info:
        load_results(broken)
    assert needle in str(info.value) and str(broken) in str(info.value)
    out = megaactors("plot", str(broken), "--out", str(tmp_path / "figs"))
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and needle in out.stderr


def test_a_missing_results_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="no such results file"):
        load_results(tmp_path / "nothing.csv")
    out = megaactors("plot", str(tmp_path / "nothing.csv"))
    assert out.returncode == 2 and "no such results file" in out.stderr


# ---------------------------------------------------------------------- command line


def test_sweep_command_writes_results_and_figures_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    args = ("sweep", "--topology", "flat,two-tier,star", "--agents", "10,30,100", "--group-size", "5,optimal",
            "--seeds", "1,2", "--max-messages", "5e3", "--param", "latency_sigma=0.3",
            "--out", str(out), "-q")  # fmt: skip
    first = megaactors(*args)
    assert first.returncode == 0, first.stderr
    assert "(24 runs: 22 ok, 2 skipped)" in first.stdout
    df = load_results(out / "results.csv")
    assert set(df["latency_sigma"]) == {0.3}
    assert df[df["status"] == "skipped"][["topology", "agents"]].values.tolist() == [["flat", 100]] * 2
    for name in ("messages", "bytes", "tokens", "dollars", "coordination_cost", "makespan"):
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    csv_before = (out / "results.csv").read_text()
    second = megaactors(*args, "--no-plots")
    assert second.returncode == 0 and (out / "results.csv").read_text() == csv_before
    replot = megaactors("plot", str(out / "results.csv"), "--out", str(tmp_path / "again"))
    assert replot.returncode == 0 and (tmp_path / "again" / "messages.svg").exists()
    wider = megaactors(*[a if a != "10,30,100" else "10,30,100,200" for a in args], "--no-plots")
    assert wider.returncode == 0, wider.stderr
    assert "(32 runs: 28 ok, 4 skipped)" in wider.stdout
    assert load_results(out)["wall_s"].tolist()[:3] == df["wall_s"].tolist()[:3]  # earlier rows kept as they were


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--agents", ""], "empty grid: agents has no values"),
        (["--agents", "10,x"], "agents: 'x' is not an integer"),
        (["--group-size", "large"], "group_size: 'large' is not an integer or 'optimal'"),
        (["--serial", "maybe"], "serial: 'maybe' is not true or false"),
        (["--param", "colour=red"], "unknown parameter 'colour'; known: topology, agents"),
        (["--param", "latency_sigma"], "--param expects NAME=V1,V2"),
        (["--seed", "1", "--param", "seed=2"], "parameter 'seed' is given twice"),
        (["--topology", "ring"], "unknown topology 'ring'"),
        (["--runtime", "quantum"], "unknown runtime 'quantum'"),
        (["--max-messages", "lots"], "max_messages: 'lots' is not an integer"),
        (["--max-messages", "inf"], "max_messages: 'inf' is not an integer"),
        (["--workers", "-1"], "workers must be an integer >= 0"),
        (["--latency-median-s", "1,inf"], "latency_median_s must be a finite number >= 0 and <= 86400, got inf"),
        (["--rounds", "1e30"], "rounds must be an integer >= 0 and <= 1e6, got 1e30"),
    ],
)
def test_sweep_command_bad_input_is_one_line_and_exit_code_2(tmp_path: Path, args: list[str], needle: str) -> None:
    out = megaactors("sweep", *args, "--out", str(tmp_path / "o"))
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]
    assert not (tmp_path / "o" / "results.csv").exists()


def test_sweep_command_reports_failed_runs_with_exit_code_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from megaactors.cli import main

    code = main(["sweep", "--topology", "star", "--agents", "10", "--runtime", "sim,broken", "--out", str(tmp_path),
                 "-q", "--no-plots"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1
    assert "(2 runs: 1 ok, 1 error)" in out
    assert "1 of 2 runs failed" in err and "boom on 10 agents" in err
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [r["status"] for r in rows] == ["ok", "error"]


def test_old_flag_spellings_work_with_a_deprecation_line(tmp_path: Path) -> None:
    out = megaactors("sweep", "--topology", "star", "--agents", "5", "--seeds", "1,2", "--out", str(tmp_path), "-q",
                     "--no-plots")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "megaactors: warning: --seeds is deprecated; use --seed"
    assert list(load_results(tmp_path)["seed"]) == [1, 2]


# ---------------------------------------------------------------------- the experiment


def test_the_coordination_cost_experiment_writes_csv_and_figures(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "coordination_cost.py"), "--agents", "10,30,100", "--seeds", "1,2",
         "--out", str(tmp_path), "--quiet"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "MPLBACKEND": "Agg"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"wrote {(tmp_path / 'results.csv').resolve()}" in out.stdout
    figures = ("messages", "bytes", "tokens", "dollars", "makespan", "group_size", "load_distribution",
               "state_timeline", "queue_depth", "organisation")  # fmt: skip
    for name in figures:
        assert f"wrote {(tmp_path / name).resolve()}.png" in out.stdout
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000 and (tmp_path / f"{name}.svg").exists()
    df = load_results(tmp_path)
    assert (df["status"] == "ok").all()
    assert set(df["topology"]) == {"flat", "star", "two-tier", "hierarchy"} and set(df["serial"]) == {True, False}
    assert (df["messages"] == df["expected_messages"]).all()
    assert "closed form G = " in out.stdout and "flat" in out.stdout


def test_rows_carry_fault_and_provider_counts_and_older_files_resume(tmp_path: Path) -> None:
    import pandas as pd

    from megaactors.experiments.result_rows import ADDED_FIGURES

    grid = {"topology": "two-tier", "agents": [20], "group_size": [5], "faults": [None, "drop=0.1,llm=0.2"]}
    df = run_sweep(grid, tmp_path, workers=0, progress=False)
    plain, faulty = df[df["faults"] == ""].iloc[0], df[df["faults"] != ""].iloc[0]
    assert plain["run_status"] == "ok" and pd.isna(plain["faults_llm"]) and pd.isna(plain["retries"])
    assert faulty["run_status"] == "ok" and faulty["faults_drop"] > 0 and faulty["faults_llm"] > 0
    assert faulty["retries"] + faulty["failed_llm_calls"] == faulty["faults_llm"]
    assert faulty["faults_resent"] == faulty["faults_drop"]  # every lost copy sent again, once
    with open(tmp_path / "results.csv") as f:  # a file written before these columns existed
        rows = list(csv.DictReader(f))
    with open(tmp_path / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, [c for c in COLUMNS if c not in ADDED_FIGURES], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    assert load_results(tmp_path)["faults_llm"].isna().all()
    wider = run_sweep({**grid, "agents": [20, 30]}, tmp_path, workers=0, progress=False)  # resumes, then rewrites
    assert len(wider) == 4 and list(wider.columns) == list(COLUMNS)
    assert wider[wider["agents"] == 30]["faults_llm"].notna().sum() == 1
