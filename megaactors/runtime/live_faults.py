"""Faults in the live runtimes (asyncio, pykka): lost and repeated copies.

A live runtime given a :class:`~megaactors.network.FaultSpec` hands every packet it
delivers to :meth:`LiveFaults.copies`, which decides per copy with the same seeded
:class:`~megaactors.network.FaultDecisions` as the simulation, keyed by (message id,
recipient, attempt 0): a dropped copy is not delivered, a duplicated one is delivered
twice (or, with ``dedup``, its second arrival is ignored). Where a live runtime
stamps the same message ids as the simulation (a single-process run whose sends are
stamped in the same order, as in serial mode), it drops and repeats exactly the
same copies.

What the live runtimes do not do, and refuse: latency and machines, late copies
(``delay``), crashes, partitions, timed windows of message faults and re-sending lost
copies (a live run with ``drop`` needs ``recover=false``): each needs timers the
simulation has as events. Injected LLM faults (``llm``) are not handled here: they go
through the provider model's retry path (:meth:`RuntimeOptions.llm_provider
<megaactors.runtime.options.RuntimeOptions.llm_provider>`), decided per (agent, call,
attempt) as in the simulation; only a timed ``llm`` window is decided at a wall-clock
time, so with windows the live counts may differ from the simulation's.
Messages still count once in the ledger; ``faults`` in the result counts
what happened, and agents left waiting make the run ``stalled``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from megaactors.core.messages import Packet
from megaactors.errors import ParameterError
from megaactors.network import FaultDecisions, NetworkModel
from megaactors.runtime.net_delivery import NetworkState, report

if TYPE_CHECKING:
    from megaactors.core.agent import Agent
    from megaactors.core.behaviour import Behaviour
    from megaactors.core.organisation import Organisation
    from megaactors.runtime.options import RuntimeOptions
    from megaactors.runtime.result import RunResult

__all__ = ["LiveFaults", "live_faults_for"]


class LiveFaults:
    """Drops and repeats copies for a live runtime (see the module)."""

    def __init__(self, decisions: FaultDecisions, behaviour: Behaviour) -> None:
        self.decisions = decisions
        self.behaviour = behaviour
        self.state = NetworkState()
        faults = decisions.faults
        self._drop, self._duplicate = faults.may("drop"), faults.may("duplicate")
        self.dedup = faults.dedup

    def copies(self, packets: list[Packet], now: float) -> list[tuple[Packet, int]]:
        """(packet, recipient) of every copy to put into an in-queue, in order."""
        decide, counts, out = self.decisions, self.state.counts, []
        for packet in packets:
            channel, first = packet.channel, packet.first_id
            for i, r in enumerate(packet.recipients):
                mid = first + i
                if self._drop and decide.happens("drop", mid, r, 0, channel, now):
                    counts["drop"] += 1
                    counts["undelivered"] += 1
                    self.state.undelivered[r] = self.state.undelivered.get(r, 0) + 1
                    continue
                out.append((packet, r))
                if self._duplicate and decide.happens("duplicate", mid, r, 0, channel, now):
                    counts["duplicate"] += 1
                    if self.dedup:
                        counts["duplicates_ignored"] += 1
                    else:
                        out.append((packet, r))
        return out

    def report(self, result: RunResult, agents: list[Agent]) -> None:
        """Put the fault counts, the stalled agents and the status into ``result``."""
        report(result, self.behaviour, agents, self.state)


def live_faults_for(
    options: RuntimeOptions, org: Organisation, behaviour: Behaviour, runtime: str, applies: bool = True
) -> LiveFaults | None:
    """The faults ``options`` ask of live runtime ``runtime`` (None: none); what a
    live runtime cannot do (anything, unless it ``applies`` faults) is refused with a
    one-line error."""
    network, faults = options.network, options.faults
    if network is not None and not network.instant:
        raise ParameterError(f"the {runtime} runtime delivers at once: network latency and machines need --runtime sim")
    if faults is None or not faults.on_messages:
        return None  # injected LLM faults go through the provider model's retry path
    if not applies:
        raise ParameterError(f"the {runtime} runtime does not inject faults; use --runtime sim, asyncio or pykka")
    unsupported = [
        name
        for name, used in (
            ("delay", faults.may("delay")),
            ("crash", bool(faults.crash)),
            ("partition", bool(faults.partitions)),
            ("window", any(w.on_messages for w in faults.windows)),
            ("recover (with drop: set recover=false)", faults.recover and faults.may("drop")),
        )
        if used
    ]
    if unsupported:
        raise ParameterError(
            f"the {runtime} runtime applies only drop and duplicate; {', '.join(unsupported)} need --runtime sim"
        )
    return LiveFaults(FaultDecisions(options.seed, org, network or NetworkModel(), faults), behaviour)
