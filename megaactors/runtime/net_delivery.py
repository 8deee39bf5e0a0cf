"""The simulation's delivery through a network: latency, lost, repeated and late
copies, crashed agents, partitions, and recovery.

A :class:`SimRuntime <megaactors.runtime.sim.SimRuntime>` given a
:class:`~megaactors.network.NetworkModel` with latency or a
:class:`~megaactors.network.FaultSpec` that can fail hands its out-queues to a
:class:`NetworkDelivery` instead of delivering them at once. Each copy (one message
to one recipient) is decided on by :class:`~megaactors.network.FaultDecisions`,
keyed by (message id, recipient, attempt):

* partitioned or dropped: it is lost; with ``recover`` its sender notices the missing
  acknowledgement and sends it again ``timeout_s`` after it sent it (at most
  ``retries`` times; acknowledgements ride on replies and cost nothing);
* delayed: it arrives ``delay_s`` late; duplicated: a second copy arrives as well,
  and with ``dedup`` the recipient ignores a message id it has seen;
* otherwise it arrives after its latency (at once when that is zero), as an event.

An agent may crash as it takes a batch: the batch and its in-queue are lost (kept
with ``keep = "inbox"``; its behaviour state is reset with ``keep = "nothing"``),
copies reaching it while it is down are lost, and it restarts ``restart_s`` later —
at most ``restarts`` times, after which it stays down (a crash loop ends).
Every injected fault and every recovery action is counted in :attr:`counts`, apart
from the fault-free work the ledger counts (re-sent copies are not in
``ledger.messages``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from megaactors.core.agent import Agent
from megaactors.core.behaviour import ReportsWaiting
from megaactors.core.llm import stream_uniform
from megaactors.core.messages import Packet, int_size
from megaactors.network import FaultDecisions, FaultSpec, NetworkModel
from megaactors.network.decisions import JITTER_STREAM
from megaactors.runtime.machine_link import MachineLink, Outgoing

if TYPE_CHECKING:
    from megaactors.core.behaviour import Behaviour
    from megaactors.core.organisation import Organisation
    from megaactors.runtime.options import RuntimeOptions
    from megaactors.runtime.postman import Postman
    from megaactors.runtime.result import RunResult

__all__ = [
    "ARRIVE",
    "RESEND",
    "RESTART",
    "NetworkDelivery",
    "NetworkHost",
    "NetworkState",
    "Stalled",
    "network_for",
    "report",
    "stalled_agents",
]

ARRIVE, RESEND, RESTART = 0, 1, 2
"""Kinds of network event: a copy arrives, a lost copy is sent again, an agent restarts."""
_COPY_FAULTS = ("drop", "duplicate", "delay")

COUNTERS = (
    "drop",
    "duplicate",
    "delay",
    "partition",
    "crash",
    "lost_to_crash",
    "restart",
    "resent",
    "resent_bytes",
    "duplicates_ignored",
    "undelivered",
)
"""Fault and recovery counters (:attr:`NetworkState.counts`)."""


class NetworkHost(Protocol):
    """What the delivery needs of the runtime it delivers for."""

    now: float

    def schedule_network(self, time: float) -> int:
        """Schedule a network event at ``time``; return its key."""
        ...

    def schedule_keyed(self, time: float, key: int) -> None:
        """Schedule the network event ``key`` (a copy between machines) at ``time``."""
        ...

    def enqueue(self, recipient: int, packet: Packet) -> None:
        """Put a copy of ``packet`` into ``recipient``'s in-queue (waking it if Idle)."""
        ...

    def crashed(self, agent: Agent) -> None:
        """``agent`` crashed as it was about to take a batch: it stops, Idle."""
        ...

    def wake(self, agent: int) -> None:
        """Let ``agent`` (just restarted) take what waits in its in-queue."""
        ...


@dataclass
class NetworkState:
    """What the network holds between two events (part of the simulation's state)."""

    transit: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    """Event key -> (ARRIVE, packet, recipient, attempt) | (RESEND, packet, recipient,
    attempt) | (RESTART, agent)."""
    down: dict[int, float] = field(default_factory=dict)
    """Crashed agents -> when they restart."""
    seen: dict[int, set[int]] = field(default_factory=dict)
    """Message ids each agent has received (with ``dedup``, when copies may repeat)."""
    crashes: dict[int, int] = field(default_factory=dict)
    """Crashes of each agent so far (keys its next crash decision)."""
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    undelivered: dict[int, int] = field(default_factory=dict)
    """Recipient -> copies lost for good (no recovery, or retries spent)."""


@dataclass(frozen=True)
class Stalled:
    """An agent whose work cannot finish, and what it waits for."""

    agent: int
    waits_for: str


class NetworkDelivery:
    """Delivers a simulation's out-queues through the network and its faults."""

    def __init__(self, host: NetworkHost, postman: Postman, behaviour: Behaviour, decisions: FaultDecisions) -> None:
        self.host = host
        self.postman = postman
        self.behaviour = behaviour
        self.decisions = decisions
        self.faults = decisions.faults
        self.state = NetworkState()
        faults = self.faults
        self._may = {kind: faults.may(kind) for kind in _COPY_FAULTS}
        """Which faults can happen at all (those that cannot are never drawn)."""
        self._may["partition"] = bool(faults.partitions)
        self._may["latency"] = not decisions.network.instant
        self.dedup = faults.dedup and self._may["duplicate"]
        self.may_crash = bool(faults.crash)
        """Whether an agent can crash as it takes a batch (:meth:`crash_on_take` is
        asked only then: it reads the ledger's per-agent batch counts)."""
        self.latency_only = not self.may_crash and not any(self._may[k] for k in (*_COPY_FAULTS, "partition"))
        """Whether a copy can only be late (no fault): :meth:`deliver` takes the short way."""
        self.link: MachineLink | None = None
        """Machines and their counters when groups are placed on two or more."""

    # ------------------------------------------------------------------ sending

    def deliver(self, a: Agent) -> None:
        """Flush ``a``'s out-queue into the network."""
        stamp, now, sender = self.postman.stamp, self.host.now, a.id
        if self.latency_only:
            send_late = self._send_late
            for send in a.outbox:
                for packet in stamp(sender, send, now):
                    send_late(packet)
        else:
            send_copy = self.send_copy
            for send in a.outbox:
                for packet in stamp(sender, send, now):
                    first = packet.first_id
                    for i, r in enumerate(packet.recipients):
                        send_copy(packet, r, 0, first + i)
        a.outbox = []

    def _send_late(self, packet: Packet) -> None:
        """:meth:`send_copy` of every first copy of ``packet`` when no fault can happen
        (:attr:`latency_only`): :meth:`FaultDecisions.latency
        <megaactors.network.FaultDecisions.latency>` and :meth:`arrive_after`, inlined,
        as this runs once per copy."""
        network, link, host, transit = self.decisions.network, self.link, self.host, self.state.transit
        seed, jitter, now, schedule = self.decisions.seed, network.jitter_s, host.now, host.schedule_network
        near = network.latency_s.get(packet.channel, 0.0)
        machine_of = link.machine_of if link is not None else ()
        known = len(machine_of)  # agents recruited later: link.machine
        home = link.machine(packet.sender) if link is not None else 0
        mid = packet.first_id
        for r in packet.recipients:
            far = bool(known) and (machine_of[r] if r < known else link.machine(r)) != home  # type: ignore[union-attr]
            latency = network.cross_s if far else near
            if jitter:
                latency += jitter * stream_uniform(seed, mid, r, JITTER_STREAM)
            mid += 1
            if latency <= 0:
                host.enqueue(r, packet)  # arrive(), when nothing is down and nothing repeats
            elif far:
                self._arrive_from_afar(now + latency, link, packet, r)  # type: ignore[arg-type]
            else:
                transit[schedule(now + latency)] = (ARRIVE, packet, r, 0)

    def send_copy(self, packet: Packet, recipient: int, attempt: int, mid: int | None = None) -> None:
        """Decide the fate of one copy (message id ``mid``) sent now (``attempt`` 0
        first, then re-sends). Kinds of fault that cannot happen are not drawn."""
        host, decide, counts, may = self.host, self.decisions, self.state.counts, self._may
        now, channel = host.now, packet.channel
        if mid is None:
            mid = packet.message_id(recipient)
        if may["partition"] and decide.partitioned(packet.sender, recipient, now):
            self.lost("partition", packet, recipient, attempt)
            return
        if may["drop"] and decide.happens("drop", mid, recipient, attempt, channel, now):
            self.lost("drop", packet, recipient, attempt)
            return
        latency = decide.latency(mid, recipient, attempt, channel, packet.sender) if may["latency"] else 0.0
        if may["delay"] and decide.happens("delay", mid, recipient, attempt, channel, now):
            counts["delay"] += 1
            latency += self.faults.delay_s
        self.arrive_after(latency, packet, recipient, attempt)
        if may["duplicate"] and decide.happens("duplicate", mid, recipient, attempt, channel, now):
            counts["duplicate"] += 1
            self.arrive_after(latency, packet, recipient, attempt)

    def arrive_after(self, latency: float, packet: Packet, recipient: int, attempt: int) -> None:
        if latency <= 0:
            self.arrive(packet, recipient, attempt)
            return
        link = self.link
        if link is not None and link.machine(packet.sender) != link.machine(recipient):
            self._arrive_from_afar(self.host.now + latency, link, packet, recipient, attempt)
            return
        key = self.host.schedule_network(self.host.now + latency)
        self.state.transit[key] = (ARRIVE, packet, recipient, attempt)

    def _arrive_from_afar(self, at: float, link: MachineLink, packet: Packet, recipient: int, attempt: int = 0) -> None:
        """A copy between two machines arrives at time ``at``: keyed by the sending
        machine (see machine_link); in a shard, one for another machine leaves."""
        key = link.next_key(link.machine(packet.sender))
        if link.local is not None and link.machine(recipient) != link.local:
            link.outbox.append((at, key, packet, recipient, attempt))
            return
        self.host.schedule_keyed(at, key)
        self.state.transit[key] = (ARRIVE, packet, recipient, attempt)

    def arrive_from(self, copies: Iterable[Outgoing]) -> None:
        """Copies sent by other shards, each due at its time under its key."""
        schedule, transit = self.host.schedule_keyed, self.state.transit
        for time, key, packet, recipient, attempt in copies:
            schedule(time, key)
            transit[key] = (ARRIVE, packet, recipient, attempt)

    def lost(self, kind: str, packet: Packet, recipient: int, attempt: int) -> None:
        """A copy is lost (``kind``): re-sent after the timeout if recovery allows."""
        state, faults = self.state, self.faults
        state.counts[kind] += 1
        if faults.recover and attempt < faults.retries:
            key = self.host.schedule_network(self.host.now + faults.timeout_s)
            state.transit[key] = (RESEND, packet, recipient, attempt + 1)
        else:
            state.counts["undelivered"] += 1
            state.undelivered[recipient] = state.undelivered.get(recipient, 0) + 1

    # ------------------------------------------------------------------ events

    def fire(self, key: int) -> None:
        """Run the network event ``key`` (its time is the host's ``now``)."""
        entry = self.state.transit.pop(key)
        kind = entry[0]
        if kind == ARRIVE:
            if self.latency_only:  # arrive(), when nothing is down and nothing repeats
                self.host.enqueue(entry[2], entry[1])
            else:
                self.arrive(entry[1], entry[2], entry[3])
        elif kind == RESEND:
            packet, recipient = entry[1], entry[2]
            counts = self.state.counts
            counts["resent"] += 1
            counts["resent_bytes"] += packet.copy_bytes + int_size(recipient)
            self.send_copy(packet, recipient, entry[3])
        else:
            self.restart(entry[1])

    def arrive(self, packet: Packet, recipient: int, attempt: int) -> None:
        state = self.state
        if recipient in state.down:
            self.lost("lost_to_crash", packet, recipient, attempt)
            return
        if self.dedup:
            seen = state.seen.get(recipient)
            if seen is None:
                seen = state.seen[recipient] = set()
            mid = packet.message_id(recipient)
            if mid in seen:
                state.counts["duplicates_ignored"] += 1
                return
            seen.add(mid)
        self.host.enqueue(recipient, packet)

    # ------------------------------------------------------------------ crashes

    def crash_on_take(self, a: Agent) -> bool:
        """Whether ``a`` crashes as it takes its next batch (then it is down)."""
        state, aid = self.state, a.id
        index = self.postman.ledger.per_agent["batches"][aid] + state.crashes.get(aid, 0)
        if not self.decisions.crashes(aid, index):
            return False
        state.crashes[aid] = state.crashes.get(aid, 0) + 1
        state.counts["crash"] += 1
        faults, host = self.faults, self.host
        if state.crashes[aid] > faults.restarts:  # restarted too often: it stays down
            state.down[aid] = float("inf")
        else:  # scheduled first: a re-send due at the same instant finds it up again
            state.down[aid] = host.now + faults.restart_s
            state.transit[host.schedule_network(host.now + faults.restart_s)] = (RESTART, aid)
        if faults.keep != "inbox":
            lost, a.inbox[:] = list(a.inbox), []
            for packet in lost:
                self.lost("lost_to_crash", packet, aid, 1)
        if faults.keep == "nothing":
            a.data = self.behaviour.init(aid, self.decisions.org)
            a.memory.clear()
        host.crashed(a)
        return True

    def restart(self, agent: int) -> None:
        self.state.down.pop(agent, None)
        self.state.counts["restart"] += 1
        self.host.wake(agent)

    # ------------------------------------------------------------------ the end

    def report(self, result: RunResult, agents: list[Agent]) -> None:
        """Put the fault counts, the stalled agents and the status into ``result``."""
        report(result, self.behaviour, agents, self.state)


def stalled_agents(
    behaviour: Behaviour, org: Organisation, agents: list[Agent], received: Any, state: NetworkState
) -> list[Stalled]:
    """Agents crashed for good, then those the behaviour says still wait
    (:class:`~megaactors.core.behaviour.ReportsWaiting`); for a behaviour that cannot
    say, the agents with copies lost for good."""
    down = state.down
    out = [Stalled(a, f"a restart: it crashed {state.crashes[a]} times and stays down") for a in sorted(down)]
    if not isinstance(behaviour, ReportsWaiting):
        lost = sorted(state.undelivered.items())
        return out + [Stalled(a, f"{n} message(s) lost for good") for a, n in lost if a not in down]
    for a in agents:
        if a.id not in down:
            waits = behaviour.awaiting(org, a.id, a.data, received[a.id])
            if waits is not None:
                out.append(Stalled(a.id, waits))
    return out


def report(result: RunResult, behaviour: Behaviour, agents: list[Agent], state: NetworkState) -> None:
    """Put the fault counts (the network's, and the injected LLM faults the
    interpreter counted, as ``llm``), the stalled agents and the status into ``result``."""
    result.faults = {**state.counts, "llm": (result.faults or {}).get("llm", 0)}
    stalled = stalled_agents(behaviour, result.org, agents, result.ledger.per_agent["received"], state)
    result.stalled = {s.agent: s.waits_for for s in stalled}
    result.status = "stalled" if stalled else "ok"


def network_for(
    host: NetworkHost, postman: Postman, behaviour: Behaviour, options: RuntimeOptions, machine: int | None = None
) -> NetworkDelivery | None:
    """The network delivery ``options`` ask for, or None when every message is to
    arrive at once and exactly once; with groups on two or more machines it has a
    :class:`MachineLink` (``machine``: the one a shard simulates)."""
    network, faults = options.network, options.faults
    if network is not None:
        network.group_machines(postman.org)  # a placement that does not fit is refused even with no latency
    if (network is None or network.instant) and (faults is None or not faults.on_messages):
        return None
    decisions = FaultDecisions(options.seed, postman.org, network or NetworkModel(), faults or FaultSpec())
    delivery = NetworkDelivery(host, postman, behaviour, decisions)
    if decisions.group_machine and decisions.machine_count > 1:
        delivery.link = MachineLink(decisions.machine, postman.org.n, decisions.machine_count, machine)
    return delivery
