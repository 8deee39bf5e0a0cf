"""Cost accounting: messages, bytes, LLM calls, tokens and dollars.

Totals, per channel, per LLM stage, per agent and (derived from the organisation)
per hierarchy level; peak in-queue depth, virtual makespan and wall time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from megaactors.core.agent_columns import AGENT_COLUMNS, FOLD_AT, AgentColumns
from megaactors.core.messages import CHANNELS

if TYPE_CHECKING:
    from array import array

    from megaactors.core.llm import LLMReply
    from megaactors.core.organisation import Organisation

__all__ = ["AGENT_COLUMNS", "PROVIDER_COUNTERS", "Ledger"]

_ADDITIVE: tuple[str, ...] = ("messages", "bytes", "llm_calls", "tokens_in", "tokens_out", "cost_usd", "llm_time_s")
_ADDITIVE += ("tool_calls", "tool_time_s", "lock_wait_s")
PROVIDER_COUNTERS = ("rate_limited", "llm_errors", "llm_timeouts", "retries", "llm_wait_s", "failed_llm_calls")
"""What a provider model adds (see :mod:`megaactors.providers.limits`)."""
_ADDITIVE += PROVIDER_COUNTERS
"""Totals that add up over the parts of a run."""


class Ledger:
    """Running totals of everything a run costs."""

    def __init__(self, n_agents: int = 0) -> None:
        self.messages = 0
        self.bytes = 0
        self.llm_calls = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self.cost_usd = 0.0
        self.messages_by_channel: dict[str, int] = dict.fromkeys(CHANNELS, 0)
        self.bytes_by_channel: dict[str, int] = dict.fromkeys(CHANNELS, 0)
        self._stages: dict[str, list[float]] = {}
        self.peak_queue_depth = 0
        self.peak_llm_in_flight = 0
        self.llm_time_s = 0.0
        """Sum of every LLM call's latency (busy time, not makespan)."""
        self.tool_calls = 0
        self.tool_time_s = 0.0
        self.lock_wait_s = 0.0
        """Time agents spent waiting for tool locks (contention)."""
        self.provider = False
        """Whether the run had a provider model that sets a limit, a failure rate or a
        timeout (then :meth:`summary` reports its counters)."""
        self.rate_limited = 0
        """Attempts refused with HTTP 429 (over the RPM or TPM limit)."""
        self.llm_errors = 0
        """Attempts that failed with a server error."""
        self.llm_timeouts = 0
        """Attempts that timed out."""
        self.retries = 0
        """Attempts made again after a failed one."""
        self.llm_wait_s = 0.0
        """Time calls spent backing off before a retry (Retry-After or jittered backoff)."""
        self.failed_llm_calls = 0
        """Calls that failed for good (retries exhausted): the behaviour got a failed reply."""
        self.virtual_time_s = 0.0
        self.wall_s = 0.0
        self.agent_columns = AgentColumns(n_agents)
        """The per-agent counts (:attr:`per_agent`, :attr:`cost_per_agent`) and their journals."""

    @property
    def per_agent(self) -> dict[str, array[int]]:
        """Column name (:data:`AGENT_COLUMNS`) -> one count per agent."""
        return self.agent_columns.columns

    @property
    def cost_per_agent(self) -> array[float]:
        """Dollars per agent."""
        return self.agent_columns.cost

    def grow(self, n_agents: int) -> None:
        """Make room for agents recruited at run time."""
        self.agent_columns.grow(n_agents)

    def record_llm(self, agent: int, reply: LLMReply) -> None:
        """Account one LLM call."""
        tin, tout, cost = reply.tokens_in, reply.tokens_out, reply.cost_usd
        self.llm_calls += 1
        self.tokens_in += tin
        self.tokens_out += tout
        self.cost_usd += cost
        self.llm_time_s += reply.latency_s
        columns = self.agent_columns
        agents, tins, touts, costs = columns.calls  # journaled: see AgentColumns
        agents.append(agent)
        tins.append(tin)
        touts.append(tout)
        costs.append(cost)
        if len(agents) >= FOLD_AT:
            columns.fold()
        stage = self._stages.get(reply.stage)
        if stage is None:
            stage = self._stages[reply.stage] = [0, 0, 0, 0.0]
        stage[0] += 1
        stage[1] += tin
        stage[2] += tout
        stage[3] += cost

    def record_call(self, agent: int, tokens_in: int, tokens_out: int, cost: float, latency: float, stage: str) -> None:
        """Account one LLM call given by its figures (:meth:`record_llm` without a reply,
        written out again as the simulation runs it once per call)."""
        self.llm_calls += 1
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.cost_usd += cost
        self.llm_time_s += latency
        columns = self.agent_columns
        agents, tins, touts, costs = columns.calls
        agents.append(agent)
        tins.append(tokens_in)
        touts.append(tokens_out)
        costs.append(cost)
        if len(agents) >= FOLD_AT:
            columns.fold()
        sums = self._stages.get(stage)
        if sums is None:
            sums = self._stages[stage] = [0, 0, 0, 0.0]
        sums[0] += 1
        sums[1] += tokens_in
        sums[2] += tokens_out
        sums[3] += cost

    def part(self, agents: slice | np.ndarray) -> dict[str, Any]:
        """What this ledger holds about ``agents`` (a slice of ids or an array of
        them: their per-agent columns) and everything it counted in total, as plain
        data: one process's or machine's share of a run split over several, for
        :meth:`add_part`."""
        return {
            "totals": {k: getattr(self, k) for k in _ADDITIVE},
            "messages_by_channel": dict(self.messages_by_channel),
            "bytes_by_channel": dict(self.bytes_by_channel),
            "stages": {k: list(v) for k, v in self._stages.items()},
            "per_agent": {c: np.frombuffer(col, dtype=np.int64)[agents].copy() for c, col in self.per_agent.items()},
            "cost_per_agent": np.frombuffer(self.cost_per_agent, dtype=np.float64)[agents].copy(),
            "peak_queue_depth": self.peak_queue_depth,
            "peak_llm_in_flight": self.peak_llm_in_flight,
        }

    def add_part(self, part: dict[str, Any], agents: slice | np.ndarray) -> None:
        """Add a :meth:`part` of another ledger: totals add up, the per-agent columns
        of ``agents`` are taken as they are, the queue peak is the larger one, and
        peaks of calls in flight add up (an upper bound: the parts' peaks need not
        coincide)."""
        for k, v in part["totals"].items():
            setattr(self, k, getattr(self, k) + v)
        counts, sizes = self.messages_by_channel, self.bytes_by_channel
        for ch, v in part["messages_by_channel"].items():  # a channel beyond CHANNELS (a human's) too
            counts[ch] = counts.get(ch, 0) + v
        for ch, v in part["bytes_by_channel"].items():
            sizes[ch] = sizes.get(ch, 0) + v
        for stage, values in part["stages"].items():
            mine = self._stages.setdefault(stage, [0, 0, 0, 0.0])
            for i, v in enumerate(values):
                mine[i] += v
        for c, col in part["per_agent"].items():
            np.frombuffer(self.per_agent[c], dtype=np.int64)[agents] = col
        np.frombuffer(self.cost_per_agent, dtype=np.float64)[agents] = part["cost_per_agent"]
        self.peak_queue_depth = max(self.peak_queue_depth, part["peak_queue_depth"])
        self.peak_llm_in_flight += part["peak_llm_in_flight"]

    @property
    def stages(self) -> dict[str, list[float]]:
        """Running sums ``[calls, tokens in, tokens out, dollars]`` by stage label (the
        raw form of :attr:`by_stage`, as a checkpoint stores it)."""
        return self._stages

    @stages.setter
    def stages(self, value: dict[str, list[float]]) -> None:
        self._stages = value

    @property
    def by_stage(self) -> dict[str, dict[str, float]]:
        """LLM calls, tokens and dollars per stage label."""
        return {
            k: {"llm_calls": v[0], "tokens_in": v[1], "tokens_out": v[2], "cost_usd": v[3]}
            for k, v in sorted(self._stages.items())
        }

    def by_level(self, org: Organisation) -> dict[int, dict[str, int]]:
        """Per-agent columns summed over each hierarchy level (sender's level for sends)."""
        levels: dict[int, dict[str, int]] = {}
        cols = self.per_agent
        for a, lvl in enumerate(org.level):
            row = levels.get(lvl)
            if row is None:
                row = levels[lvl] = dict.fromkeys(("agents", *AGENT_COLUMNS), 0)
            row["agents"] += 1
            for c in AGENT_COLUMNS:
                row[c] += cols[c][a]
        return dict(sorted(levels.items()))

    def agent_rows(self, org: Organisation) -> list[dict[str, Any]]:
        """One row per agent: role, group, level and every per-agent column."""
        cols = self.per_agent
        return [
            {
                "agent": a,
                "role": org.role(a),
                "group": org.member_group[a],
                "level": org.level[a],
                **{c: cols[c][a] for c in AGENT_COLUMNS},
                "cost_usd": self.cost_per_agent[a],
            }
            for a in range(org.n)
        ]

    def summary(self, org: Organisation) -> dict[str, Any]:
        """The figures every runtime reports (JSON-ready)."""
        return {
            "agents": org.n,
            "groups": len(org.groups),
            "levels": org.depth() + 1,
            "messages": self.messages,
            "messages_by_channel": dict(self.messages_by_channel),
            "bytes": self.bytes,
            "bytes_by_channel": dict(self.bytes_by_channel),
            "llm_calls": self.llm_calls,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cost_usd": round(self.cost_usd, 9),
            "by_stage": {k: dict(v, cost_usd=round(v["cost_usd"], 9)) for k, v in self.by_stage.items()},
            "by_level": {str(k): v for k, v in self.by_level(org).items()},
            "batches": sum(self.per_agent["batches"]),
            "virtual_time_s": round(self.virtual_time_s, 9),
            "wall_s": round(self.wall_s, 6),
            "peak_queue_depth": self.peak_queue_depth,
            "peak_llm_in_flight": self.peak_llm_in_flight,
            "llm_time_s": round(self.llm_time_s, 9),
            "tool_calls": self.tool_calls,
            "tool_time_s": round(self.tool_time_s, 9),
            "lock_wait_s": round(self.lock_wait_s, 9),
            **(self.provider_summary() if self.provider else {}),
        }

    def provider_summary(self) -> dict[str, Any]:
        """The provider model's counters (429s, errors, timeouts, retries, backoff, failed calls)."""
        return {k: round(getattr(self, k), 9) if k == "llm_wait_s" else getattr(self, k) for k in PROVIDER_COUNTERS}
