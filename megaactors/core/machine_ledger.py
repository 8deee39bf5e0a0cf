"""A ledger whose sums do not depend on how machines' events interleave.

A run placed on several machines adds its dollars and latencies per machine and
totals them in machine order (:meth:`MachineLedger.settle`), and its peak of LLM
calls in flight is the sum of each machine's own peak. Whether the machines run in
one simulation or in shards (:mod:`megaactors.runtime.sim_shards`), every machine
adds the same figures in the same order, so the totals are equal float for float.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from megaactors.core.ledger import Ledger

if TYPE_CHECKING:
    from megaactors.core.llm import LLMReply

__all__ = ["MachineLedger"]


class MachineLedger(Ledger):
    """A :class:`Ledger` keeping dollars, LLM time, stage dollars and calls in flight
    per machine (``machine`` maps an agent to its machine)."""

    def __init__(self, n_agents: int, machines: int, machine: Callable[[int], int]) -> None:
        super().__init__(n_agents)
        self.machine = machine
        self.cost_parts = [0.0] * machines
        self.llm_time_parts = [0.0] * machines
        self.stage_cost_parts: list[dict[str, float]] = [{} for _ in range(machines)]
        self.in_flight_parts = [0] * machines
        self.peak_parts = [0] * machines

    def record_llm(self, agent: int, reply: LLMReply) -> None:
        """Account one LLM call (it is in flight until :meth:`call_done`)."""
        super().record_llm(agent, reply)
        m = self.machine(agent)
        self.cost_parts[m] += reply.cost_usd
        self.llm_time_parts[m] += reply.latency_s
        stages = self.stage_cost_parts[m]
        stages[reply.stage] = stages.get(reply.stage, 0.0) + reply.cost_usd
        flying = self.in_flight_parts[m] = self.in_flight_parts[m] + 1
        if flying > self.peak_parts[m]:
            self.peak_parts[m] = flying

    def call_done(self, agent: int) -> None:
        """An LLM call of ``agent`` has returned."""
        self.in_flight_parts[self.machine(agent)] -= 1

    def settle(self) -> None:
        """Totals from the per-machine figures, added in machine order."""
        self.cost_usd = _total(self.cost_parts)
        self.llm_time_s = _total(self.llm_time_parts)
        for stage, values in self.stages.items():
            values[3] = _total(parts.get(stage, 0.0) for parts in self.stage_cost_parts)
        self.peak_llm_in_flight = sum(self.peak_parts)

    def figures(self) -> dict[str, Any]:
        """Every per-machine figure, as plain data (a checkpoint stores it)."""
        return {
            "cost": list(self.cost_parts),
            "llm_time": list(self.llm_time_parts),
            "stage_cost": [dict(d) for d in self.stage_cost_parts],
            "in_flight": list(self.in_flight_parts),
            "peak": list(self.peak_parts),
        }

    def load_figures(self, figures: dict[str, Any]) -> None:
        """Set what :meth:`figures` returned."""
        self.cost_parts = list(figures["cost"])
        self.llm_time_parts = list(figures["llm_time"])
        self.stage_cost_parts = [dict(d) for d in figures["stage_cost"]]
        self.in_flight_parts = list(figures["in_flight"])
        self.peak_parts = list(figures["peak"])

    def machine_part(self, machine: int) -> dict[str, Any]:
        """What ``machine`` added to the per-machine figures (for :meth:`add_machine_part`)."""
        return {
            "cost": self.cost_parts[machine],
            "llm_time": self.llm_time_parts[machine],
            "stage_cost": dict(self.stage_cost_parts[machine]),
            "peak": self.peak_parts[machine],
        }

    def add_machine_part(self, machine: int, part: dict[str, Any]) -> None:
        """Take ``machine``'s figures from another ledger's :meth:`machine_part`."""
        self.cost_parts[machine] = part["cost"]
        self.llm_time_parts[machine] = part["llm_time"]
        self.stage_cost_parts[machine] = dict(part["stage_cost"])
        self.peak_parts[machine] = part["peak"]


def _total(parts: Iterable[float]) -> float:
    total = 0.0
    for part in parts:
        total += part
    return total
