"""Makespan versus the number of agents: the paper's §3.4 claim, tested.

A scenario's hierarchy runs for many N, with one LLM call per worker task so that
large N fit the time budget, over several seeds:

* balanced trees with fan-outs 3, 5 and 10 (the shallowest tree with at most that
  many children per admin), in parallel; for the main fan-out also in serial (one
  agent Processing at a time) and in parallel with the global git mutex (the claim is
  about coordination, so the other curves leave git operations unserialised);
* the paper's own regime: three levels (boss, admins, workers) whose fan-out grows
  with N (``N = 1 + f + f²``).

Every curve is compared against tree depth, log N, √N, N and a power law by AIC and
BIC (:func:`~megaactors.megaagent.stats.compare_models`), each seed's run one point.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from megaactors.behaviours.megaagent import TreePlan
from megaactors.megaagent.pool import Task
from megaactors.megaagent.scenarios import Scenario
from megaactors.megaagent.stats import compare_models, interval

__all__ = [
    "CURVES",
    "DEFAULT_AGENTS",
    "THREE_LEVEL_FANOUTS",
    "ComplexityGrid",
    "complexity_scenario",
    "complexity_tasks",
    "crossover",
    "point",
    "summarise",
]

DEFAULT_AGENTS = (10, 30, 100, 300, 1_000, 3_000, 10_000)
CURVES = ("parallel", "serial", "parallel_git_lock")
THREE_LEVEL_FANOUTS = (3, 5, 10, 20, 30, 50)


@dataclass(frozen=True)
class ComplexityGrid:
    """Which runs the sweep makes (every one for every seed)."""

    agents: tuple[int, ...] = DEFAULT_AGENTS
    main_fanout: int = 5
    other_fanouts: tuple[int, ...] = (3, 10)
    other_max_agents: int = 1_000
    """Largest N of the other fan-outs' curves."""
    serial_max_agents: int = 1_000
    """Largest N of the serial curve (one agent at a time: its makespan is the work, linear in N)."""
    linear_max_agents: int = 3_000
    """Largest N of the git-mutex curve."""
    three_level_fanouts: tuple[int, ...] = THREE_LEVEL_FANOUTS


def complexity_scenario(base: Scenario, plan: TreePlan, *, serial: bool, git_lock: bool) -> Scenario:
    """``base`` on recruitment tree ``plan`` with one LLM call per worker task."""
    work = replace(base.work, task_calls=1, deliveries=1, git_lock=git_lock)
    return base.but(name=f"{base.name}-hierarchy", plan=plan, work=work, fanout_cap=None, serial=serial)


def point(base: Scenario, family: str, fanout: int, agents: int, curve: str, seed: int) -> dict[str, Any]:
    """One run of the sweep (a module-level function, so a process pool can run it)."""
    plan = TreePlan.three_levels(fanout) if family == "three_levels" else TreePlan.balanced(agents, fanout)
    scenario = complexity_scenario(base, plan, serial=curve == "serial", git_lock=curve == "parallel_git_lock")
    t0 = time.perf_counter()
    result = scenario.run(seed)
    led = result.ledger
    return {
        "family": family,
        "fanout": fanout,
        "curve": curve,
        "seed": seed,
        "agents": result.org.n,
        "levels": result.org.depth() + 1,
        "makespan_s": round(led.virtual_time_s, 3),
        "llm_calls": led.llm_calls,
        "lock_wait_s": round(led.lock_wait_s, 3),
        "wall_s": round(time.perf_counter() - t0, 3),
    }


def complexity_tasks(base: Scenario, grid: ComplexityGrid, seeds: Sequence[int]) -> list[Task]:
    """Every run of the grid as a task for :func:`~megaactors.megaagent.pool.run_tasks`."""
    specs: list[tuple[str, int, int, str]] = []
    for n in grid.agents:
        limits = {"parallel": n, "serial": grid.serial_max_agents, "parallel_git_lock": grid.linear_max_agents}
        for curve in CURVES:
            if n <= limits[curve]:
                specs.append(("balanced", grid.main_fanout, n, curve))
        for f in grid.other_fanouts:
            if n <= grid.other_max_agents:
                specs.append(("balanced", f, n, "parallel"))
    for f in grid.three_level_fanouts:
        specs.append(("three_levels", f, 1 + f + f * f, "parallel"))
    return [(point, (base, *spec, seed), float(spec[2])) for spec in specs for seed in seeds]


def _curve_key(row: dict[str, Any]) -> str:
    if row["family"] == "three_levels":
        return "three_levels"
    return f"fanout{row['fanout']}/{row['curve']}"


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per curve: makespan per N with its interval over seeds, and the models compared."""
    curves: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        curves.setdefault(_curve_key(r), []).append(r)
    out: dict[str, Any] = {}
    for key, pts in sorted(curves.items()):
        by_n: dict[int, list[dict[str, Any]]] = {}
        for r in pts:
            by_n.setdefault(r["agents"], []).append(r)
        points = [
            {
                "agents": n,
                "levels": group[0]["levels"],
                "fanout": group[0]["fanout"],
                "makespan_s": interval([r["makespan_s"] for r in group]),
                "lock_wait_s": float(np.mean([r["lock_wait_s"] for r in group])),
            }
            for n, group in sorted(by_n.items())
        ]
        entry: dict[str, Any] = {"points": points}
        if len(by_n) >= 3:
            entry["models"] = compare_models(
                [r["agents"] for r in pts], [r["levels"] for r in pts], [r["makespan_s"] for r in pts]
            )
            ns = [p["agents"] for p in points]
            ys = [p["makespan_s"]["mean"] for p in points]
            entry["last_exponent"] = float(np.log(ys[-1] / ys[-2]) / np.log(ns[-1] / ns[-2]))
        out[key] = entry
    return out


def crossover(summary: dict[str, Any], fanout: int) -> int | None:
    """Smallest N at which the git mutex at least doubles the mean parallel makespan."""
    plain = {
        p["agents"]: p["makespan_s"]["mean"] for p in summary.get(f"fanout{fanout}/parallel", {}).get("points", [])
    }
    for p in summary.get(f"fanout{fanout}/parallel_git_lock", {}).get("points", []):
        if p["agents"] in plain and p["makespan_s"]["mean"] >= 2 * plain[p["agents"]]:
            return int(p["agents"])
    return None
