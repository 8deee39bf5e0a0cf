"""One shard of a sharded simulation: the machines it simulates, one
:class:`~megaactors.runtime.sim.SimRuntime` each.

Every machine's runtime holds the whole organisation but starts only the agents of
its machine; a copy for an agent of another machine leaves through its
:class:`~megaactors.runtime.machine_link.MachineLink` outbox. A shard advances its
machines one window at a time (:meth:`SimShard.advance`) and returns what left
them, grouped by the shard it is for; the coordinator
(:mod:`megaactors.runtime.sim_shards`) hands it on at the next window. The same
class runs in the coordinator's process or as a Ray actor.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Any

import numpy as np

from megaactors.core.behaviour import Behaviour
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError
from megaactors.runtime.machine_link import MachineLink, Outgoing
from megaactors.runtime.net_delivery import NetworkDelivery, stalled_agents
from megaactors.runtime.options import RuntimeOptions
from megaactors.runtime.sim import SimRuntime

__all__ = ["MachinePart", "SimShard", "WindowReport"]


@dataclass
class WindowReport:
    """What a shard says after a window."""

    outgoing: dict[int, list[Outgoing]]
    """Copies for other shards, by shard."""
    next_time: float
    """The time of its next event, or of the earliest copy it sent (inf: none)."""


@dataclass
class MachinePart:
    """One machine's share of the result (plain data, so it can cross processes)."""

    machine: int
    agents: np.ndarray
    """Ids of the machine's agents, ascending."""
    ledger: dict[str, Any]
    """The ledger's totals, counts by channel and stage, peaks, and the per-agent
    columns of the machine's agents (``Ledger.part``)."""
    machine_figures: dict[str, Any]
    """Its per-machine dollars, LLM time and peak (``MachineLedger.machine_part``)."""
    states: list[Any]
    """Behaviour state of each of its agents."""
    virtual_time_s: float
    fault_counts: dict[str, int]
    stalled: dict[int, str]
    interrupts: list[tuple[int, str]]
    events_run: int


class SimShard:
    """Simulates ``machines`` (each on its own runtime) of a run placed on machines."""

    def __init__(
        self,
        org: Organisation,
        behaviour: Behaviour,
        llm: Any,
        options: RuntimeOptions,
        machines: list[int],
        shard_of_machine: list[int],
        durable: bool = False,
    ) -> None:
        self.org, self.behaviour = org, behaviour
        runtime: type[SimRuntime] = SimRuntime
        if durable:  # each machine's state can be described (checkpoints)
            from megaactors.durable.state import DurableSim

            runtime = DurableSim
        self.sims = {m: runtime(org, behaviour, llm, options, machine=m) for m in machines}
        self.n_agents = org.n
        self.shard_of_machine = shard_of_machine
        link = self._link(next(iter(self.sims.values())))
        self.machine_of = np.frombuffer(link.machine_of, dtype=np.uint16)
        self.shard_of_agent = np.asarray(shard_of_machine, dtype=np.int32)[self.machine_of]

    @staticmethod
    def _delivery(sim: SimRuntime) -> NetworkDelivery:
        delivery = sim.network_delivery
        assert delivery is not None and delivery.link is not None
        return delivery

    def _link(self, sim: SimRuntime) -> MachineLink:
        return self._delivery(sim).link  # type: ignore[return-value]

    def start(self) -> WindowReport:
        """Start every machine's agents (the cascade at time 0)."""
        for sim in self.sims.values():
            sim.start()
        return self._report()

    def accept(self, incoming: list[list[Outgoing]]) -> WindowReport:
        """Take the copies other shards sent (each becomes an event of its machine)."""
        for copies in incoming:
            for copy in copies:
                self._delivery(self.sims[int(self.machine_of[copy[3]])]).arrive_from((copy,))
        return self._report()

    def advance(self, until: float, incoming: list[list[Outgoing]]) -> WindowReport:
        """Take the copies other shards sent, then run every event due before ``until``."""
        self.accept(incoming)
        for sim in self.sims.values():
            sim.advance(until)
        self._check_unshared()
        return self._report()

    def _check_unshared(self) -> None:
        for sim in self.sims.values():
            if sim.org.n != self.n_agents:
                raise ParameterError("a sharded simulation cannot recruit agents (the organisation is every shard's)")
            if sim.tool_locks:
                raise ParameterError("a sharded simulation cannot take named tool locks (they are the whole run's)")

    def _report(self) -> WindowReport:
        outgoing: dict[int, list[Outgoing]] = {}
        soonest = float("inf")
        for sim in self.sims.values():
            link = self._link(sim)
            shard_of = self.shard_of_agent
            for copy in link.outbox:
                outgoing.setdefault(int(shard_of[copy[3]]), []).append(copy)
                if copy[0] < soonest:
                    soonest = copy[0]
            link.outbox = []
            t = sim.next_event_time
            if t is not None and t < soonest:
                soonest = t
        return WindowReport(outgoing, soonest)

    def full(self) -> dict[int, dict[str, Any]]:
        """Each machine's state, described in full (a shard built with ``durable``)."""
        return {m: sim.full() for m, sim in self.sims.items()}  # type: ignore[attr-defined]

    def restore(self, described: dict[int, dict[str, Any]]) -> WindowReport:
        """Continue from what :meth:`full` described (this shard not yet started)."""
        for m, sim in self.sims.items():
            sim.restore_chain([described[m]])  # type: ignore[attr-defined]
        return self._report()

    def peak_rss_kb(self) -> int:
        """Peak resident memory of the process this shard runs in (KiB)."""
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def parts(self) -> list[MachinePart]:
        """Each machine's share of the result, in machine order."""
        out = []
        for m, sim in sorted(self.sims.items()):
            result = sim.result()
            ledger = sim.ledger
            agents = np.flatnonzero(self.machine_of == m)
            delivery = self._delivery(sim)
            owned = [sim.agents[i] for i in agents.tolist()]
            received = ledger.per_agent["received"]
            stalled = stalled_agents(self.behaviour, self.org, owned, received, delivery.state)
            out.append(
                MachinePart(
                    machine=m,
                    agents=agents,
                    ledger=ledger.part(agents),
                    machine_figures=ledger.machine_part(m),  # type: ignore[attr-defined]
                    states=[a.data for a in owned],
                    virtual_time_s=sim.now,
                    fault_counts=dict(delivery.state.counts),
                    stalled={s.agent: s.waits_for for s in stalled},
                    interrupts=list(result.interrupts),
                    events_run=sim.events_run,
                )
            )
        return out
