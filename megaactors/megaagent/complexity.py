"""Makespan versus the number of agents: the paper's §3.4 claim, measured.

The hierarchy run of a scenario (a balanced recruitment tree with a fixed fan-out)
runs for each N in parallel and in serial (one agent Processing at a time), with one
LLM call per worker task so that 100,000 agents fit the time budget. The claim is
about coordination, so the main curves leave git operations unserialised; a third
curve keeps the global git mutex to show where it takes over. Fits:

* parallel ``makespan = a + b·log10 N`` (against a straight line in N for contrast);
* serial ``makespan = c·N`` (against ``a + b·log10 N`` for contrast);
* the log–log slope (power-law exponent) of every curve, over the whole range and
  between its last two points.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from typing import Any

import numpy as np

from megaactors.behaviours.megaagent import TreePlan
from megaactors.megaagent.scenarios import Scenario

__all__ = ["CURVES", "DEFAULT_AGENTS", "complexity_scenario", "crossover", "fit", "sweep"]

DEFAULT_AGENTS = (10, 30, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000)
CURVES = ("parallel", "serial", "parallel_git_lock")


def complexity_scenario(base: Scenario, agents: int, fanout: int, *, serial: bool, git_lock: bool) -> Scenario:
    """``base`` as a balanced hierarchy of ``agents`` with one LLM call per worker task."""
    work = replace(base.work, task_calls=1, deliveries=1, git_lock=git_lock)
    return base.but(
        name=f"{base.name}-hierarchy",
        plan=TreePlan.balanced(agents, fanout),
        work=work,
        fanout_cap=None,
        serial=serial,
    )


def _point(base: Scenario, n: int, fanout: int, seed: int, curve: str) -> dict[str, Any]:
    """One run of the sweep (a module-level function, so a process pool can run it)."""
    scenario = complexity_scenario(base, n, fanout, serial=curve == "serial", git_lock=curve == "parallel_git_lock")
    t0 = time.perf_counter()
    result = scenario.run(seed)
    wall = time.perf_counter() - t0
    led = result.ledger
    return {
        "curve": curve,
        "agents": result.org.n,
        "levels": result.org.depth() + 1,
        "makespan_s": round(led.virtual_time_s, 3),
        "llm_calls": led.llm_calls,
        "messages": led.messages,
        "lock_wait_s": round(led.lock_wait_s, 3),
        "wall_s": round(wall, 3),
    }


def sweep(
    base: Scenario,
    agents: Sequence[int] = DEFAULT_AGENTS,
    fanout: int = 5,
    seed: int = 1,
    curves: Sequence[str] = CURVES,
    progress: Callable[[str], None] | None = None,
    workers: int | None = None,
) -> list[dict[str, Any]]:
    """One row per (N, curve): makespan, levels, LLM calls, wall time.

    ``workers`` processes run the points (``None``: one per core once the sweep
    reaches 10,000 agents, else 1); every run is independent and deterministic, so
    the rows do not depend on it."""
    unknown = sorted(set(curves) - set(CURVES))
    if unknown:
        raise ValueError(f"unknown curve(s) {', '.join(unknown)}; expected some of {', '.join(CURVES)}")
    jobs = [(n, curve) for n in agents for curve in curves]
    if workers is None:
        workers = min(os.cpu_count() or 1, len(jobs)) if max(agents, default=0) >= 10_000 else 1
    rows: dict[tuple[int, str], dict[str, Any]] = {}

    def done(job: tuple[int, str], row: dict[str, Any]) -> None:
        rows[job] = row
        if progress is not None:
            progress(
                f"{row['curve']:>17} N={row['agents']:>7,}: makespan {row['makespan_s']:>12,.0f} s "
                f"({row['wall_s']:.1f} s wall)"
            )

    if workers <= 1:
        for job in jobs:
            done(job, _point(base, job[0], fanout, seed, job[1]))
    else:
        # fork where there is one: it needs no importable __main__, so any script or notebook can sweep
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
            futures = {
                pool.submit(_point, base, n, fanout, seed, curve): (n, curve)
                for n, curve in sorted(jobs, key=lambda j: -j[0])  # largest first: the pool stays busy
            }
            for future in as_completed(futures):
                done(futures[future], future.result())
    return [rows[job] for job in jobs]


def _r2(y: np.ndarray, predicted: np.ndarray) -> float:
    ss_res = float(((y - predicted) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0


def _log_fit(n: np.ndarray, y: np.ndarray) -> dict[str, float]:
    x = np.log10(n)
    b, a = np.polyfit(x, y, 1)
    return {"a": float(a), "b_per_decade": float(b), "r2": _r2(y, a + b * x)}


def _line_fit(n: np.ndarray, y: np.ndarray) -> dict[str, float]:
    d, c = np.polyfit(n, y, 1)
    return {"intercept": float(c), "slope_per_agent": float(d), "r2": _r2(y, c + d * n)}


def _proportional_fit(n: np.ndarray, y: np.ndarray) -> dict[str, float]:
    c = float((n * y).sum() / (n * n).sum())
    return {"c_per_agent": c, "r2": _r2(y, c * n)}


def _exponent(n: np.ndarray, y: np.ndarray) -> float:
    return float(np.polyfit(np.log10(n), np.log10(y), 1)[0])


def fit(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Fits of every curve in ``rows`` and the verdict on the §3.4 claim."""
    out: dict[str, Any] = {}
    for curve in CURVES:
        pts = sorted((r["agents"], r["makespan_s"]) for r in rows if r["curve"] == curve)
        if len(pts) < 3:
            continue
        n = np.array([p[0] for p in pts], dtype=float)
        y = np.array([p[1] for p in pts], dtype=float)
        out[curve] = {
            "log": _log_fit(n, y),
            "linear": _line_fit(n, y),
            "proportional": _proportional_fit(n, y),
            "exponent": _exponent(n, y),
            "last_exponent": float(np.log10(y[-1] / y[-2]) / np.log10(n[-1] / n[-2])),
        }
    par, ser = out.get("parallel"), out.get("serial")
    if par and ser:
        log_wins = par["log"]["r2"] > par["linear"]["r2"]
        linear_wins = ser["proportional"]["r2"] > ser["log"]["r2"]
        out["claim_holds"] = bool(log_wins and linear_wins and par["exponent"] < 0.5 < ser["exponent"])
        out["summary"] = (
            f"parallel: makespan = {par['log']['a']:.0f} s + {par['log']['b_per_decade']:.0f} s × log10 N "
            f"(R² {par['log']['r2']:.3f}; a straight line in N: R² {par['linear']['r2']:.3f}); "
            f"serial: makespan = {ser['proportional']['c_per_agent']:.2f} s × N "
            f"(R² {ser['proportional']['r2']:.3f}; a + b·log10 N: R² {ser['log']['r2']:.3f}); "
            f"log–log slopes {par['exponent']:.2f} (parallel) and {ser['exponent']:.2f} (serial)"
        )
    return out


def crossover(rows: Sequence[dict[str, Any]]) -> int | None:
    """Smallest N at which the git mutex at least doubles the parallel makespan."""
    plain = {r["agents"]: r["makespan_s"] for r in rows if r["curve"] == "parallel"}
    for r in sorted((r for r in rows if r["curve"] == "parallel_git_lock"), key=lambda r: r["agents"]):
        base = plain.get(r["agents"])
        if base and r["makespan_s"] >= 2 * base:
            return int(r["agents"])
    return None
