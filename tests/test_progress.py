"""A sweep's progress counts estimated work, so its ETA is right while large runs go first."""

from __future__ import annotations

import itertools

import pytest

from megaactors.experiments.progress import SweepProgress
from megaactors.experiments.sweep import plan, run_sweep


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_eta_follows_work_not_runs() -> None:
    clock = Clock()
    bar = SweepProgress(enabled=False, clock=clock)
    bar.begin([90.0, 5.0, 5.0], total_runs=4)  # one run was done before
    assert bar.done_runs == 1 and bar.eta_s() is None
    clock.now = 9.0
    bar.advance(90.0)  # one run of three, but 90 % of the work
    assert bar.fraction == pytest.approx(0.9)
    assert bar.eta_s() == pytest.approx(1.0)  # a count of runs would say 18 s
    clock.now = 10.0
    bar.advance(5.0, error=True)
    bar.advance(5.0)
    assert bar.errors == 1 and bar.done_runs == 4 and bar.eta_s() == 0
    assert [h[2] for h in bar.history] == [2, 3, 4] and bar.history[-1][1] == 1.0
    bar.close()


def test_a_sweep_reports_every_run_largest_first() -> None:
    grid = {"topology": ["star", "flat"], "agents": [10, 100, 300], "seed": [1]}
    bar = SweepProgress(enabled=False)
    df = run_sweep(grid, None, workers=0, max_messages=20_000, progress=bar)
    assert bar.done_runs == bar.total_runs == len(df) == 6
    assert bar.fraction == pytest.approx(1.0)
    costs = sorted((p.estimated_cost() for p in plan(grid, 20_000) if not p.skipped), reverse=True)
    steps = [b[1] - a[1] for a, b in itertools.pairwise([(0, 0.0, 0), *bar.history])]
    skipped = (df["status"] == "skipped").sum()
    assert skipped == 1 and steps[:skipped] == [0.0]  # flat at 300 is over the budget: no work
    assert steps[skipped:] == pytest.approx([c / sum(costs) for c in costs])
