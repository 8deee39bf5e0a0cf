"""How much the assumed parameters move the emergent results.

Each :class:`Axis` is one assumption of a calibrated scenario with the low and high
end of its plausible range (and why). The reproduction runs both ends in parallel
and serial over the seeds, everything else as calibrated (the fitted tokens stay
fixed: an axis moves one assumption only), and :func:`conclusions` tells which
emergent conclusions hold at every point.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from megaactors.behaviours.megaagent import TreePlan
from megaactors.megaagent.paper import PAPER, REFERENCE_LOG
from megaactors.megaagent.scenarios import ApiLimits, Scenario

__all__ = ["AXES", "Axis", "conclusions", "policy_plan_with"]


def policy_plan_with(agents: int, ministers: int) -> TreePlan:
    """Boss → ``ministers`` → everyone else split evenly among them."""
    return TreePlan(agents, (ministers, -(-(agents - 1 - ministers) // ministers)))


def _git(sc: Scenario, v: Any) -> Scenario:
    return sc.but(work=replace(sc.work, git_s=v))


def _tool(sc: Scenario, v: Any) -> Scenario:
    return sc.but(work=replace(sc.work, tool_s=v))


def _median(sc: Scenario, v: Any) -> Scenario:
    return sc.but(latency=replace(sc.latency, median_s=v))


def _prefill(sc: Scenario, v: Any) -> Scenario:
    return sc.but(latency=replace(sc.latency, prefill_s_per_token=v))


def _per_output(sc: Scenario, v: Any) -> Scenario:
    return sc.but(latency=replace(sc.latency, per_output_token_s=v))


def _failures(sc: Scenario, v: Any) -> Scenario:
    m = sc.monitoring
    scaled = {k: min(1.0, getattr(m, k) * v) for k in ("checklist_failure", "review_failure", "boss_failure")}
    return sc.but(monitoring=replace(m, **scaled))


def _limit(sc: Scenario, v: Any) -> Scenario:
    return sc.but(limits=ApiLimits(max_concurrent_llm=v))


def _tree(sc: Scenario, v: Any) -> Scenario:
    if sc.name == "policy":
        return sc.but(plan=policy_plan_with(sc.plan.agents, v), fanout_cap=None)
    return sc.but(plan=TreePlan(sc.plan.agents, tuple(v)), fanout_cap=None)


@dataclass(frozen=True)
class Axis:
    """One assumption and its plausible range: ``low(sc)`` and ``high(sc)`` give the
    two ends for a scenario, ``base(sc)`` the calibrated value."""

    name: str
    label: str
    change: Callable[[Scenario, Any], Scenario]
    base: Callable[[Scenario], Any]
    low: Callable[[Scenario], Any]
    high: Callable[[Scenario], Any]
    why: str


def _x(factor: float, read: Callable[[Scenario], float]) -> Callable[[Scenario], float]:
    return lambda sc: round(read(sc) * factor, 9)


def _git_s(sc: Scenario) -> float:
    return sc.work.git_s


def _tool_s(sc: Scenario) -> float:
    return sc.work.tool_s


def _median_s(sc: Scenario) -> float:
    return sc.latency.median_s


def _per_output_s(sc: Scenario) -> float:
    return sc.latency.per_output_token_s


def _prefill_s(sc: Scenario) -> float:
    return sc.latency.prefill_s_per_token


def _tree_base(sc: Scenario) -> Any:
    return PAPER["policy"]["level_one_agents"] if sc.name == "policy" else sc.plan.fanouts


def _tree_low(sc: Scenario) -> Any:
    return 5 if sc.name == "policy" else (sc.plan.agents - 1,)


def _tree_high(sc: Scenario) -> Any:
    return 17 if sc.name == "policy" else (3, 1)


AXES: tuple[Axis, ...] = (
    Axis(
        "git_s",
        "git mutex hold (s)",
        _git,
        _git_s,
        lambda sc: 0.1,
        lambda sc: 2.0,
        f"0.1–2 s: the reference log's shortest write holds it {REFERENCE_LOG['write_file_min_s']} s, its mean write "
        f"takes {REFERENCE_LOG['write_file_mean_s']} s with waiting",
    ),
    Axis(
        "tool_s",
        "other tool time (s)",
        _tool,
        _tool_s,
        _x(0.5, _tool_s),
        _x(2.0, _tool_s),
        "half to twice the assumption (the reference log's tools without the lock take "
        f"{REFERENCE_LOG['other_tool_mean_s']} s on average)",
    ),
    Axis(
        "median_s",
        "LLM latency median (s)",
        _median,
        _median_s,
        _x(0.5, _median_s),
        _x(2.0, _median_s),
        f"half to twice (the reference log's median before token terms: {REFERENCE_LOG['latency']['base_median_s']} s)",
    ),
    Axis(
        "per_output_token_s",
        "time per output token (s)",
        _per_output,
        _per_output_s,
        _x(0.5, _per_output_s),
        _x(2.0, _per_output_s),
        "half to twice (50–200 tokens/s covers the 2024–2025 OpenAI models)",
    ),
    Axis(
        "prefill_s_per_token",
        "prefill time per input token (s)",
        _prefill,
        _prefill_s,
        lambda sc: 0.0,
        _x(2.0, _prefill_s),
        "none to twice the reference log's slope",
    ),
    Axis(
        "failures",
        "monitoring failure probabilities (×)",
        _failures,
        lambda sc: 1.0,
        lambda sc: 0.0,
        lambda sc: 2.0,
        "no failures to twice the assumed probabilities (the paper gives none)",
    ),
    Axis(
        "max_concurrent_llm",
        "LLM calls in flight (rate limit)",
        _limit,
        lambda sc: None,
        lambda sc: 16,
        lambda sc: None,
        "a cap of 16 calls in flight (about 500 requests per minute at 2 s a call, OpenAI's first usage tier) "
        "against none; the runtime's concurrency cap stands in for a requests-per-minute limit",
    ),
    Axis(
        "tree",
        "tree shape",
        _tree,
        _tree_base,
        _tree_low,
        _tree_high,
        "policy: 5 ministers (the reference code's cap) to 17 (the ministries of the paper's output) instead of 9; "
        "Gobang: every worker under the boss, or three admins with one worker each, instead of two with two",
    ),
)


def conclusions(
    scenario: str, base: dict[str, float], points: list[dict[str, Any]], paper: dict[str, Any]
) -> list[dict[str, Any]]:
    """Which emergent conclusions hold at the calibrated point (``base``: mean
    ``makespan_s``, ``speedup`` and ``bound`` over seeds) and at every sensitivity
    point (``points``: the same with ``axis`` and ``end``)."""
    speedup = paper["parallel_speedup"]
    lower = paper["parallel_speedup_is_lower_bound"]
    tests: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [
        (
            f"the parallel speed-up is {'above' if lower else 'below'} the paper's {speedup:.2f}×",
            (lambda r: r["speedup"] > speedup) if lower else (lambda r: r["speedup"] < speedup),
        ),
        (
            f"the makespan is below the paper's {paper['makespan_s']:,} s",
            lambda r: r["makespan_s"] < paper["makespan_s"],
        ),
        (
            "the speed-up is within 10 % of the parallel run's mean concurrency (serial does the same work)",
            lambda r: abs(r["speedup"] / r["bound"] - 1) <= 0.1,
        ),
    ]
    out = []
    for text, holds in tests:
        broken = [f"{p['axis']} {p['end']}" for p in points if not holds(p)]
        out.append(
            {
                "scenario": scenario,
                "conclusion": text,
                "holds_at_base": bool(holds(base)),
                "points": len(points),
                "holds_at": len(points) - len(broken),
                "broken_by": broken,
                "survives": bool(holds(base)) and not broken,
            }
        )
    return out
