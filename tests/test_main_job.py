"""The main job's plan: what it runs, and that its figures are drawn from whole runs."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

from megaactors.experiments.sweep import plan

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("coordination_cost", ROOT / "experiments" / "coordination_cost.py")
experiment = importlib.util.module_from_spec(_spec)
sys.modules["coordination_cost"] = experiment  # its figure jobs are pickled by module name
_spec.loader.exec_module(experiment)


def test_every_seed_up_to_the_spread_limit_then_one() -> None:
    runs = plan(experiment.grid([10, 3_000, 30_000, 100_000], [1, 2, 3]), experiment.MAX_MESSAGES)
    seeds = Counter((r.spec.agents, r.spec.seed) for r in runs if not r.spec.serial)
    assert {n for n, _ in seeds} == {10, 3_000, 30_000, 100_000}
    for (n, seed), _count in seeds.items():
        assert n <= experiment.SPREAD_MAX_AGENTS or seed == 1
    assert {s for (n, s) in seeds if n == 3_000} == {1, 2, 3}
    serial = {r.spec.agents for r in runs if r.spec.serial}
    assert serial == {10, 3_000} and max(serial) <= experiment.SERIAL_MAX_AGENTS
    # the group-size sweep at N = 3,000 keeps all seeds, as its figure shows their spread
    sizes = {(r.spec.group_size, r.spec.seed) for r in runs if r.spec.agents == 3_000 and r.group_rule == "fixed"}
    assert len(sizes) == 3 * len({g for g, _ in sizes}) > 30


def test_small_run_figures_come_from_runs() -> None:
    jobs = experiment.small_run_jobs(seed=1)
    assert [j.name for j in jobs] == ["load_distribution", "state_timeline", "queue_depth", "organisation"]
    fig = experiment.organisation(seed=1)
    titles = [ax.get_title() for ax in fig.axes]
    assert all("(channels that carried messages)" in t for t in titles)
    texts = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
    assert "no messages, not drawn: hierarchy" in texts  # two-tier: the tree edges carry nothing
    assert "no messages, not drawn: intra-group, admin" in texts  # hierarchy: only the tree does
