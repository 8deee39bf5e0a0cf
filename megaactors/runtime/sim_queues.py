"""The simulation's queues and what the network asks of them: the events pending,
the agents ready to run, the in-queues, and the host of a
:class:`~megaactors.runtime.net_delivery.NetworkDelivery` (network events, copies
arriving, crashed and restarted agents).

:class:`SimQueues` is the part of :class:`~megaactors.runtime.sim.SimRuntime` that
reads and feeds those queues; the runtime sets every attribute it declares.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from megaactors.core.agent import IDLE, RESPONSE, Agent
from megaactors.core.messages import Packet
from megaactors.core.trace import Trace
from megaactors.network import NetworkModel
from megaactors.runtime.events import EventQueue
from megaactors.runtime.gates import FifoGate
from megaactors.runtime.mailboxes import Mailboxes, Without

__all__ = ["SimQueues", "event_width"]


def event_width(llm: Any, network: NetworkModel | None) -> float:
    """The width of the event calendar's buckets: 1/16 of the LLM's median latency, or
    the least latency above 0 of a network copy when that is shorter (each copy is an
    event: one due a bucket or more ahead is appended to its bucket, where one due
    within the bucket being consumed goes into its side heap). The order of events is
    the same whatever the width."""
    width = (getattr(getattr(llm, "latency", None), "median_s", 0.0) or 1.0) / 16
    least = network.least_latency_s if network is not None else 0.0
    return min(width, least) if least > 0 else width


class SimQueues:
    """Events, ready agents and in-queues of a simulation (a part of ``SimRuntime``)."""

    now: float
    started: bool
    events_run: int
    trace: Trace | None
    mail: Mailboxes
    _events: EventQueue
    _seq: int
    _ready: deque[int]
    _awake: bytearray
    _inboxes: list[list[Packet]]
    _token: FifoGate[Agent] | None

    @property
    def steps(self) -> int:
        """Former name of :attr:`events_run`."""
        return self.events_run

    @property
    def next_event_time(self) -> float | None:
        """Virtual time of the next event, or None when nothing is left."""
        event = self._events.peek()
        return None if event is None else event[0]

    @property
    def finished(self) -> bool:
        """True once no event is left."""
        return self.started and not self._events

    def queued(self, agent: int) -> int:
        """How many messages wait for ``agent``."""
        return self.mail.queued(agent)

    def _wake_idle(self, recipients: Iterable[int]) -> None:
        """Queue the Idle ones among ``recipients`` to run, in order."""
        awake, ready_append = self._awake, self._ready.append
        for r in recipients:
            if not awake[r]:
                awake[r] = 1
                ready_append(r)

    def _wake_span(self, span: range, recipients: Sequence[int]) -> None:
        """:meth:`_wake_idle` for a broadcast to a group of consecutive ids ``span``
        (its sender among them, busy): the Idle ones found by scanning ``_awake`` in C.
        ``recipients`` that are not the group less its busy sender go the general way."""
        awake = self._awake
        if (
            type(recipients) is not Without
            or len(recipients) != len(span) - 1
            or not awake[recipients.members[recipients.skip]]
        ):
            self._wake_idle(recipients)
            return
        ready_append, stop = self._ready.append, span.stop
        r = awake.find(0, span.start, stop)
        while r >= 0:
            awake[r] = 1
            ready_append(r)
            r = awake.find(0, r + 1, stop)

    def _release_token(self, a: Agent) -> None:
        nxt = self._token.release(a)  # type: ignore[union-attr]
        if nxt is not None:
            self._ready.append(nxt[0].id)

    # ------------------------------------------------------------------ the network's host

    def schedule_network(self, time: float) -> int:
        """Schedule a network event at ``time``; its key is its sequence number (the
        event's agent field holds it negated)."""
        self._seq += 1
        self._events.push((time, self._seq, -self._seq))
        return self._seq

    def schedule_keyed(self, time: float, key: int) -> None:
        """Schedule the network event ``key`` at ``time`` (a copy between machines,
        keyed by :class:`~megaactors.runtime.machine_link.MachineLink`)."""
        self._events.push_keyed((time, key, -key))

    def enqueue(self, recipient: int, packet: Packet) -> None:
        """A copy of ``packet`` arrives in ``recipient``'s private in-queue."""
        self._inboxes[recipient].append(packet)
        if not self._awake[recipient]:
            self._wake_idle((recipient,))

    def place(self, recruiter: Agent, agents: list[Agent]) -> None:
        """Recruited agents start Idle with an empty in-queue (the interpreter's host)."""
        for agent in agents:
            self._inboxes.append(agent.inbox)
            self._awake.append(0)
            self.mail.subscribe(agent.id)
        self.mail.subscribe(recruiter.id)  # it may administer a new group

    def wake(self, agent: int) -> None:
        """Let ``agent`` take what waits in its in-queue."""
        if not self._awake[agent]:
            self._wake_idle((agent,))

    def crashed(self, a: Agent) -> None:
        """``a`` crashed as it was about to take a batch: it stops, Idle."""
        if a.phase is RESPONSE:
            a.transition(IDLE, self.now, self.trace)
        self._awake[a.id] = 0
        if self._token is not None and self._token.holder is a:
            self._release_token(a)
