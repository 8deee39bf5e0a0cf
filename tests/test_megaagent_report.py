"""The §3 report: intervals and model comparison, the reference log's measurement,
the speed-up bound, the complexity sweep, sensitivity conclusions, and the report
and command line computed from runs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from megaactors.megaagent.calibration import calibrate
from megaactors.megaagent.complexity import ComplexityGrid, complexity_tasks, summarise
from megaactors.megaagent.pool import run_tasks
from megaactors.megaagent.records import bound_record, measured, summary_rows, verdicts
from megaactors.megaagent.reference_log import analyse
from megaactors.megaagent.reproduce import reproduce_section3
from megaactors.megaagent.scenarios import POLICY, SCENARIOS, policy_plan
from megaactors.megaagent.sensitivity import conclusions
from megaactors.megaagent.stats import compare_models, interval

ROOT = Path(__file__).resolve().parents[1]
SMALL_POLICY = POLICY.but(plan=policy_plan(100))
TINY_GRID = ComplexityGrid(
    agents=(10, 30, 100, 300),
    other_fanouts=(3,),
    other_max_agents=100,
    serial_max_agents=100,
    linear_max_agents=100,
    three_level_fanouts=(3, 5, 8),
)


# ---------------------------------------------------------------------- statistics


def test_interval_is_the_student_t_interval_of_the_mean() -> None:
    iv = interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert iv["mean"] == 3.0 and iv["n"] == 5
    half = 2.7764451 * math.sqrt(2.5) / math.sqrt(5)  # t(0.975, 4) · s / √n
    assert iv["lo"] == pytest.approx(3 - half) and iv["hi"] == pytest.approx(3 + half)
    assert interval([7.0])["lo"] == interval([7.0])["hi"] == 7.0
    assert interval([0.0, 0.0, 9.0])["lo"] == 0.0  # a non-negative quantity keeps a non-negative interval


@pytest.mark.parametrize(
    ("law", "expected"),
    [
        (lambda n: 40 + 25 * np.log10(n), ("log", "depth")),
        (lambda n: 10 + 3 * np.sqrt(n), ("sqrt",)),
        (lambda n: 5 + 0.5 * n, ("linear",)),
        (lambda n: 2 * n**0.7, ("power",)),
    ],
)
def test_model_comparison_finds_the_law_behind_noisy_points(law, expected) -> None:
    rng = np.random.default_rng(3)
    n = np.repeat([10, 30, 100, 300, 1000, 3000, 10000], 5).astype(float)
    levels = np.ceil(np.log(n * 4 + 1) / np.log(5))  # a tree's depth: a step function of log N
    y = law(n) * (1 + 0.01 * rng.standard_normal(len(n)))
    result = compare_models(n, levels, y)
    assert result["best_aic"] in expected, result["models"]
    assert result["models"][result["best_aic"]]["delta_aic"] == 0


# ---------------------------------------------------------------------- the reference log


def _log_dir(tmp_path: Path) -> Path:
    """Two agents, three LLM calls with known latencies and tokens, one write, one reminder."""
    (tmp_path / "logs").mkdir()
    t = "2025-01-01 00:00:"
    (tmp_path / "log.txt").write_text(
        f"{t}01,000: Input token: 1000, Output token: 10\n"
        f"{t}05,000: Input token: 4000, Output token: 30\n"
        f"{t}08,000: Input token: 6000, Output token: 40\n"
        f"{t}20,000: Time elapsed: 20.0 seconds\n"
    )
    (tmp_path / "logs" / "A.log").write_text(
        f"{t}00,000 - A - INFO - {{'role': 'user', 'content': 'go'}}\n"
        f"{t}01,000 - A - INFO - {{'role': 'assistant', 'content': None, 'function_call': {{'name': 'write_file'}}}}\n"
        f"{t}02,000 - A - INFO - {{'role': 'function', 'name': 'write_file', 'content': 'Merge conflict. x'}}\n"
        f"{t}05,000 - A - INFO - {{'role': 'assistant', 'content': None, 'function_call': {{'name': 'terminate'}}}}\n"
    )
    (tmp_path / "logs" / "B.log").write_text(
        f"{t}06,000 - B - INFO - {{'role': 'system', 'content': 'Other agents have terminated. However, ...'}}\n"
        f"{t}08,000 - B - INFO - {{'role': 'assistant', 'content': None, 'function_call': {{'name': 'terminate'}}}}\n"
    )
    return tmp_path


def test_the_reference_log_is_measured_call_by_call(tmp_path: Path) -> None:
    stats = analyse(_log_dir(tmp_path))
    assert stats["llm_calls"] == 3 and stats["tokens_in"] == 6000 and stats["makespan_s"] == 20.0
    assert stats["llm_busy_s"] == 1 + 3 + 2 and stats["tool_busy_s"] == 1
    assert stats["mean_concurrency"] == pytest.approx(7 / 20)
    assert stats["writes"] == 1 and stats["write_conflicts"] == 1
    assert stats["reminder_rounds"] == 1 and stats["reminded_per_round"] == [1] and stats["calls_per_reminder"] == 1
    assert stats["tools"]["write_file"]["min_s"] == 1.0
    with pytest.raises(FileNotFoundError, match=r"holds no log\.txt"):
        analyse(tmp_path / "logs")
    cli = [sys.executable, "-m", "megaactors.megaagent.reference_log"]
    done = subprocess.run([*cli, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout)["write_conflicts"] == 1
    bad = subprocess.run([*cli, str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "holds no log.txt" in bad.stderr


# ---------------------------------------------------------------------- records


def _run(makespan: float, busy: float) -> dict:
    return {"makespan_s": makespan, "busy_s": busy, "mean_concurrency": busy / makespan, "batches": 10}


def test_the_bound_and_the_missing_work_follow_from_busy_time() -> None:
    full = [_run(100, 300), _run(120, 300)]
    serial = [_run(300, 300), _run(300, 300)]  # same work, never idle: speed-up = mean concurrency
    b = bound_record("gobang", full, serial)
    assert b["speedup"]["mean"] == pytest.approx(b["mean_concurrency"]["mean"])
    s = b["paper_speedup"]
    assert b["needed_extra_serial_s"]["mean"] == pytest.approx(s * 110 - 300, rel=1e-3)
    assert b["needed_mean_concurrency"]["mean"] == pytest.approx(s, rel=1e-3)
    assert b["needed_idle_per_batch_s"]["mean"] == pytest.approx((s * 110 - 300) / 10, rel=1e-3)


def test_verdicts_come_from_emergent_rows_only() -> None:
    runs = [measured(SCENARIOS["gobang"], seed) for seed in (1, 2)]
    serial = [measured(SCENARIOS["gobang"].variant("no_parallelism"), seed) for seed in (1, 2)]
    rows = summary_rows("gobang", {"full": runs, "no_parallelism": serial}, bound_record("gobang", runs, serial))
    assert {r["basis"] for r in rows} == {"input", "fitted", "emergent"}
    by_figure = {r["figure"]: r["basis"] for r in rows}
    assert by_figure["input tokens"] == "fitted" and by_figure["makespan (s)"] == "emergent"
    assert by_figure["agents"] == "input"
    judged = {v["figure"] for v in verdicts(rows)}
    assert "makespan (s)" in judged and "parallel speed-up" in judged
    assert not judged & {r["figure"] for r in rows if r["basis"] != "emergent"}


def test_a_conclusion_survives_only_if_every_point_keeps_it() -> None:
    paper = {"parallel_speedup": 5.6, "parallel_speedup_is_lower_bound": False, "makespan_s": 800}
    base = {"makespan_s": 500, "speedup": 3.0, "bound": 3.1}
    points = [
        {"makespan_s": 900, "speedup": 3.2, "bound": 3.3, "axis": "latency", "end": "high (2)"},
        {"makespan_s": 300, "speedup": 2.0, "bound": 3.0, "axis": "tree", "end": "low"},
    ]
    out = {c["conclusion"].split(" is ")[0]: c for c in conclusions("gobang", base, points, paper)}
    assert out["the parallel speed-up"]["survives"]
    assert not out["the makespan"]["survives"] and out["the makespan"]["broken_by"] == ["latency high (2)"]


# ---------------------------------------------------------------------- complexity


def test_processes_do_not_change_results_and_makespan_follows_depth_in_parallel() -> None:
    base = calibrate(SMALL_POLICY, 1).scenario
    tasks = complexity_tasks(base, TINY_GRID, [1, 2])
    rows = run_tasks(tasks, workers=2)
    again = run_tasks(tasks[:4], workers=1)
    strip = [{k: v for k, v in r.items() if k != "wall_s"} for r in rows[:4]]
    assert strip == [{k: v for k, v in r.items() if k != "wall_s"} for r in again]
    summary = summarise(rows)
    assert {
        "fanout5/parallel",
        "fanout5/serial",
        "fanout5/parallel_git_lock",
        "fanout3/parallel",
        "three_levels",
    } == set(summary)
    serial = summary["fanout5/serial"]["models"]
    assert serial["models"]["power"]["b"] > 0.85  # one agent at a time: linear in N
    parallel = summary["fanout5/parallel"]["models"]
    assert parallel["models"]["power"]["b"] < 0.5
    assert [p["levels"] for p in summary["three_levels"]["points"]] == [3, 3, 3]


# ---------------------------------------------------------------------- the report


def test_the_report_is_computed_from_runs(tmp_path: Path) -> None:
    report = reproduce_section3(tmp_path / "one", seeds=2, grid=TINY_GRID, workers=2)
    saved = json.loads((tmp_path / "one" / "report.json").read_text())
    text = (tmp_path / "one" / "report.md").read_text()
    assert saved["scenarios"].keys() == {"gobang", "policy"}
    assert all(r["basis"] in ("input", "fitted", "emergent") for r in saved["summary_rows"])
    assert {v["figure"] for v in saved["verdicts"]} <= {
        r["figure"] for r in saved["summary_rows"] if r["basis"] == "emergent"
    }
    for name in ("gobang", "policy"):
        sc = calibrate(SCENARIOS[name], seed=1).scenario
        full = [measured(sc, s) for s in (1, 2)]
        serial = [measured(sc.variant("no_parallelism"), s) for s in (1, 2)]
        b = saved["scenarios"][name]["bound"]
        assert b["parallel_makespan_s"]["mean"] == pytest.approx(np.mean([r["makespan_s"] for r in full]))
        speedups = [s["makespan_s"] / f["makespan_s"] for f, s in zip(full, serial, strict=True)]
        assert b["speedup"]["mean"] == pytest.approx(np.mean(speedups))
        assert f"{b['parallel_makespan_s']['mean']:,.0f}" in text
        mech = {r["name"]: r for r in saved["mechanisms"][name]["rows"]}
        assert mech["baseline"]["result"]["makespan_s"]["mean"] == pytest.approx(b["parallel_makespan_s"]["mean"])
        assert len(saved["sensitivity"][name]["axes"]) == 8 and saved["sensitivity"][name]["conclusions"]
    for section in (
        "## Verdicts",
        "## The speed-up bound",
        "## Candidate mechanisms",
        "## Sensitivity",
        "## Prompt-length latency",
        "## Paper inconsistencies",
        "three levels",
    ):
        assert section in text, section
    assert "ΔAIC" in text and "**fitted**" in text and "**emergent**" in text
    for png in saved["figures"].values():
        assert (tmp_path / "one" / png).stat().st_size > 10_000
    assert report["complexity"]["three_levels_best"] in ("depth", "log", "sqrt", "linear", "power")


def megaactors(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=300)


def test_command_line_rejects_bad_input_in_one_line(tmp_path: Path) -> None:
    for bad, message in [
        (["--agents", "10,100"], "at least three distinct values"),
        (["--agents", "10,x,100"], "--agents must be comma-separated integers"),
        (["--fanout", "1", "--agents", "10,30,100"], "fanout must be an integer >= 2"),
        (["--other-fanouts", "1"], "--other-fanouts values must be >= 2"),
        (["--workers", "0"], "workers must be an integer >= 1"),
        (["--three-level-fanouts", "3,5"], "--three-level-fanouts needs none or at least three"),
        (["--seeds", "0"], "seeds must be an integer >= 1"),
    ]:
        proc = megaactors("reproduce", "section3", "--out", str(tmp_path / "bad"), *bad)
        assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "bad").exists()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    proc = megaactors("reproduce", "section3", "--out", str(a_file), "--agents", "10,30,100")
    assert proc.returncode == 2 and "is not a directory" in proc.stderr


@pytest.mark.slow
def test_experiment_script_is_the_command(tmp_path: Path) -> None:
    script = ROOT / "experiments" / "section3.py"
    args = ["--agents", "10,30,100", "--other-fanouts", "", "--three-level-fanouts", "2,3,4", "--seeds", "1", "--quiet"]
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path), *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["complexity"]["grid"]["agents"] == [10, 30, 100] and saved["seeds"] == [1]
    assert "parallel speed-up" in proc.stdout and "wrote" in proc.stdout
