"""What a MegaAgent run's agent states say about it as a whole."""

from __future__ import annotations

from typing import Any

from megaactors.behaviours.megaagent.plan import STAGES

__all__ = ["stage_windows", "total_retries"]


def stage_windows(states: list[dict[str, Any]]) -> dict[str, list[float]]:
    """First start and last end of each stage's LLM calls over all agents."""
    out: dict[str, list[float]] = {}
    for s in states:
        for stage, (start, end) in s["windows"].items():
            w = out.get(stage)
            if w is None:
                out[stage] = [start, end]
            else:
                w[0] = min(w[0], start)
                w[1] = max(w[1], end)
    return {k: out[k] for k in STAGES if k in out}


def total_retries(states: list[dict[str, Any]]) -> int:
    """Retries over all agents (checklist failures and rejected results)."""
    return sum(s["retries"] for s in states)
