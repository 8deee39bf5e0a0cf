"""How many agents are Idle, Processing or waiting for the git mutex over a run.

The trace records every state transition; waits for the mutex happen inside
Processing, so :class:`MutexWaits` runs a behaviour unchanged and notes, from each
tool result, when a lock wait began and ended. :func:`occupancy` turns both into
counts on a time grid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from megaactors.core.agent import AgentState
from megaactors.core.behaviour import AgentContext, Behaviour, Effects, ToolResult
from megaactors.core.llm import LLMReply
from megaactors.core.messages import Batch
from megaactors.core.organisation import Organisation
from megaactors.megaagent.scenarios import Scenario
from megaactors.runtime.result import RunResult
from megaactors.runtime.sim import SimRuntime

__all__ = ["MutexWaits", "occupancy", "traced_run"]


class MutexWaits:
    """A behaviour that runs ``inner`` unchanged and keeps ``(start, end)`` of every
    wait for a tool's lock."""

    def __init__(self, inner: Behaviour) -> None:
        self.inner = inner
        self.name = inner.name
        self.waits: list[tuple[float, float]] = []

    def init(self, agent: int, org: Organisation) -> Any:
        return self.inner.init(agent, org)

    def on_start(self, ctx: AgentContext, state: Any) -> Effects | None:
        return self.inner.on_start(ctx, state)

    def on_batch(self, ctx: AgentContext, state: Any, batch: Batch) -> Effects:
        return self.inner.on_batch(ctx, state, batch)

    def on_reply(self, ctx: AgentContext, state: Any, reply: LLMReply) -> Effects:
        return self.inner.on_reply(ctx, state, reply)

    def on_tool(self, ctx: AgentContext, state: Any, result: ToolResult) -> Effects:
        if result.waited_s > 0:
            self.waits.append((result.started_s - result.waited_s, result.started_s))
        return self.inner.on_tool(ctx, state, result)  # type: ignore[attr-defined]


def traced_run(scenario: Scenario, seed: int) -> tuple[RunResult, list[tuple[float, float]]]:
    """A run of ``scenario`` with its trace and its mutex waits."""
    recorder = MutexWaits(scenario.behaviour(seed))
    runtime = SimRuntime(
        scenario.organisation(),
        recorder,
        scenario.llm(seed),
        seed=seed,
        serial=scenario.serial,
        trace=True,
        max_concurrent_llm=scenario.limits.max_concurrent_llm,
    )
    result = runtime.run()
    return result, recorder.waits


def _counts(grid: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many of the intervals [start, end) hold each grid time."""
    return np.searchsorted(np.sort(starts), grid, side="right") - np.searchsorted(np.sort(ends), grid, side="right")


def occupancy(result: RunResult, waits: list[tuple[float, float]], points: int = 600) -> dict[str, Any]:
    """Agents recruited, Processing, and waiting for the mutex at ``points`` times."""
    trace = result.trace
    if trace is None:
        raise ValueError("occupancy needs a run with a trace")
    end = max(result.ledger.virtual_time_s, 1e-9)
    grid = np.linspace(0.0, end, points)
    agent = np.asarray(trace.t_agent)
    frm, to, time = np.asarray(trace.t_from), np.asarray(trace.t_to), np.asarray(trace.t_time)
    proc = int(AgentState.PROCESSING)
    starts, ends = time[to == proc], time[frm == proc]
    first = {}
    for a, t in zip(agent.tolist(), time.tolist(), strict=True):
        first.setdefault(a, t)
    born = np.array([first.get(a, 0.0) for a in range(result.org.n)])
    born[0] = 0.0
    w = np.array(waits, dtype=float).reshape(-1, 2)
    processing = _counts(grid, starts, ends)
    mutex = _counts(grid, w[:, 0], w[:, 1]) if len(w) else np.zeros_like(grid, dtype=int)
    present = np.searchsorted(np.sort(born), grid, side="right")
    return {
        "time_s": grid,
        "present": present,
        "processing": processing,
        "waiting_for_mutex": mutex,
        "idle": present - processing,
    }
