"""The part of :class:`~megaactors.runtime.sim.SimRuntime` that hands out and adopts
the whole state between two events: :meth:`SimSnapshots.snapshot` and
:meth:`SimSnapshots.restore` (a :class:`~megaactors.runtime.sim_state.SimState`).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from megaactors.core.agent import Agent
from megaactors.runtime.events import Event, EventQueue
from megaactors.runtime.gates import FifoGate
from megaactors.runtime.interpreter import Interpreter
from megaactors.runtime.mailboxes import Mailboxes
from megaactors.runtime.sim_state import SimState

if TYPE_CHECKING:
    from megaactors.runtime.net_delivery import NetworkDelivery

__all__ = ["SimSnapshots"]


class SimSnapshots:
    """Snapshots of a simulation (a part of ``SimRuntime``; the runtime sets every
    attribute it declares and defines the methods it names)."""

    core: Interpreter
    mail: Mailboxes
    now: float
    started: bool
    events_run: int
    wall_s: float
    _seq: int
    _awake: bytearray
    _events: EventQueue
    _events_width: float
    _ready: deque[int]
    _start_effects: dict[int, Any]
    _llm_slots: FifoGate[Agent] | None
    _token: FifoGate[Agent] | None
    _locks: dict[str, FifoGate[Agent]]
    _net: NetworkDelivery | None

    def _bind(self) -> None: ...

    def _open_mail(self) -> None: ...

    def _restore_placement(self, state: SimState) -> None: ...

    def _machine_counters(self) -> tuple[list[int], list[int]] | None: ...

    def snapshot(self, *, events: bool = True) -> SimState:
        """The whole state between two events (sharing this runtime's containers).
        ``events`` False leaves the pending events out (``events`` empty): listing
        them makes a tuple per event, which a caller that reads none need not pay
        (:meth:`pending_events` lists them on demand)."""
        core, slots, token = self.core, self._llm_slots, self._token
        return SimState(
            now=self.now,
            seq=self._seq,
            events_run=self.events_run,
            started=self.started,
            agents=core.agents,
            mail=self.mail,
            awake=self._awake,
            events=self._events.events() if events else [],
            in_flight=core.in_flight,
            llm_waiting=[a.id for a in slots.waiters()] if slots is not None else [],
            serial_holder=token.holder.id if token is not None and token.holder is not None else None,
            serial_waiting=[a.id for a in token.waiters()] if token is not None else [],
            lock_holders={name: gate.holder.id for name, gate in self._locks.items() if gate.holder is not None},
            lock_waiting={name: [a.id for a in gate.waiters()] for name, gate in self._locks.items() if gate.waiting},
            start_effects=self._start_effects,
            recruited=core.recruited,
            recruiters=core.recruiters,
            tool_invocations=core.tool_invocations,
            next_message_id=core.postman.next_message_id,
            ledger=core.ledger,
            trace=core.trace,
            wall_s=self.wall_s,
            limits=core.limits if core.provider is not None else None,
            network=self._net.state if self._net is not None else None,
            machines=self._machine_counters(),
        )

    def pending_events(self) -> list[Event]:
        """Every pending event as ``(time, sequence, agent)``, in no particular order
        (the ``events`` of a :meth:`snapshot`)."""
        return self._events.events()

    def restore(self, state: SimState) -> None:
        """Continue from ``state`` (taken from a run of this organisation, behaviour,
        LLM and options, or built to match one): this runtime adopts its containers."""
        core, agents = self.core, state.agents
        queues = None
        if agents is not core.agents or state.mail is not self.mail:  # another runtime's: copy its in-queues
            live = state.mail.live()
            queues = [live[i] for i in sorted(live)], [state.mail.head(i) for i in range(len(agents))]
        if agents is not core.agents:
            core.agents[:] = agents
        self._restore_placement(state)  # the ledger and the message ids
        core.trace = state.trace
        core.recruited, core.recruiters = state.recruited, state.recruiters
        core.in_flight, core.tool_invocations = state.in_flight, state.tool_invocations
        if state.limits is not None:
            core.limits = state.limits
        self._bind()
        if queues is not None:
            self._open_mail()
            self.mail.refill(*queues)
        self._awake = state.awake
        self.now, self._seq, self.events_run, self.started = state.now, state.seq, state.events_run, state.started
        self.wall_s = state.wall_s
        self._events = EventQueue(self._events_width, state.events)
        self._ready.clear()
        self._start_effects = state.start_effects
        if self._net is not None and state.network is not None:
            self._net.state = state.network
        at = agents.__getitem__
        if self._llm_slots is not None:
            slots = self._llm_slots.capacity
            self._llm_slots = FifoGate.restored(None, map(at, state.llm_waiting), capacity=slots, held=state.in_flight)
        if self._token is not None:
            holder = None if state.serial_holder is None else at(state.serial_holder)
            self._token = FifoGate.restored(holder, map(at, state.serial_waiting))
        holders, waiting = state.lock_holders, state.lock_waiting
        self._locks = {
            name: FifoGate.restored(at(holders[name]) if name in holders else None, map(at, waiting.get(name, [])))
            for name in [*holders, *(name for name in waiting if name not in holders)]
        }
