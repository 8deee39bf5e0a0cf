"""The simulation's state as a documented type, and what may watch it change.

Between two events a simulation is completely described by a :class:`SimState`:
:meth:`SimRuntime.snapshot() <megaactors.runtime.sim.SimRuntime.snapshot>` returns one
and :meth:`SimRuntime.restore() <megaactors.runtime.sim.SimRuntime.restore>` makes a
runtime continue from one, exactly as the run it was taken from would have (same
events, message ids, LLM call indices and ledger, float for float). A durable run
encodes it (:mod:`megaactors.durable.state`) and never reads the runtime's internals.

What an agent waits for (``Agent.pending``) is one of: ``None``; :data:`START` (its
start effects wait for the serial token); an :data:`LLMInFlight` tuple (or its lean
form); a :class:`ToolInFlight`; an :class:`LLMRetry` (its call waits to try again under the
provider model); or the :class:`~megaactors.core.behaviour.LLMRequest` it
waits to issue while every LLM slot is taken.

A :class:`SimObserver` sees what changes between two snapshots without scanning the
run: every event's agent, every packet stamped (a list the postman appends to), agents touched outside their own
events, and (as a :class:`~megaactors.runtime.interpreter.RunObserver`) paid calls,
tool side effects and recruits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from megaactors.runtime.interpreter import RunObserver

if TYPE_CHECKING:
    from megaactors.core.agent import Agent
    from megaactors.core.behaviour import Effects, ToolCall
    from megaactors.core.ledger import Ledger
    from megaactors.core.llm import LLMReply
    from megaactors.core.messages import Packet
    from megaactors.core.trace import Trace
    from megaactors.providers.limits import LimitState
    from megaactors.runtime.events import Event
    from megaactors.runtime.mailboxes import Mailboxes
    from megaactors.runtime.net_delivery import NetworkState

__all__ = ["START", "LLMInFlight", "LLMRetry", "SimObserver", "SimState", "ToolInFlight"]


class _Start:
    __slots__ = ()

    def __repr__(self) -> str:
        return "START"


START = _Start()
"""``Agent.pending`` of an agent whose start effects wait for the serial token."""

LLMInFlight = tuple[int, "LLMReply", "Event"]
"""``Agent.pending`` of an agent whose LLM call is in flight: the call's new prompt
tokens, its reply (due at the event's time) and the event that delivers it.

The lean form (a call on the simulation's plain path, under a
:class:`~megaactors.core.llm.SimulatedLLM`) is the event alone, grown by the request
(its output tokens set), the latency and the prompt tokens drawn: ``(time, sequence,
agent, request, latency, prompt tokens)``. The new tokens are the request's (the
batch's when None) and the reply is
:meth:`~megaactors.core.llm.SimulatedLLM.reply_of` call ``calls - 1``, made when the
call ends: no per-call object but the event (read warm as it comes due) and its
latency lives across the call's latency, to be freed cold."""


class ToolInFlight:
    """``Agent.pending`` of an agent whose tool call waits for its lock or runs."""

    __slots__ = ("call", "requested", "started")

    def __init__(self, call: ToolCall, requested: float, started: float | None = None) -> None:
        self.call = call
        self.requested = requested
        """When the agent asked for the call."""
        self.started = requested if started is None else started
        """When it got the lock and started (``requested`` while it waits)."""

    def __repr__(self) -> str:
        return f"ToolInFlight({self.call.name!r}, requested={self.requested}, started={self.started})"


class LLMRetry:
    """``Agent.pending`` of an agent whose LLM call failed an attempt under the
    provider model and waits to try again (its event is the next attempt)."""

    __slots__ = ("attempt", "first", "new_tokens", "reply")

    def __init__(self, new_tokens: int, reply: LLMReply, first: float, attempt: int = 0) -> None:
        self.new_tokens = new_tokens
        self.reply = reply
        """The call as drawn (not yet accounted)."""
        self.first = first
        """When its first attempt started."""
        self.attempt = attempt
        """The number of the next attempt (0 first)."""

    def __repr__(self) -> str:
        return f"LLMRetry(call {self.reply.call_index}, attempt {self.attempt}, first={self.first})"


@dataclass
class SimState:
    """Everything a simulation is between two events.

    A snapshot shares the runtime's own containers (agents, ledger, trace, ...), so
    taking one costs nearly nothing; it stays valid until the next event runs."""

    now: float
    """Virtual time of the last event run."""
    seq: int
    """Sequence number of the last event scheduled (ties in time go by it)."""
    events_run: int
    """Events run so far (0 right after the start)."""
    started: bool
    agents: list[Agent]
    """Every agent's record: phase, behaviour state, memory, call count, batch tokens,
    what it waits for, out-queue and private in-queue."""
    mail: Mailboxes
    """The in-queues: each agent's private one (``agent.inbox``) and the channel logs
    broadcasts go to; ``mail.head(agent)``, ``mail.live()`` and ``mail.refill()``
    describe and rebuild them."""
    awake: bytearray
    """1 per agent that is busy or queued to run (a delivery need not wake it)."""
    events: list[Event]
    """Pending events ``(time, sequence, agent)``, in no particular order."""
    in_flight: int
    """LLM calls in flight."""
    llm_waiting: list[int]
    """Agents waiting for an LLM slot (``max_concurrent_llm``), first in line first."""
    serial_holder: int | None
    """The agent holding the serial token (serial mode)."""
    serial_waiting: list[int]
    lock_holders: dict[str, int]
    """Named tool locks held, by the agent holding each."""
    lock_waiting: dict[str, list[int]]
    start_effects: dict[int, Effects]
    """Start effects not yet run (agents waiting for the serial token)."""
    recruited: dict[int, list[int]]
    """Recruiter -> agents its next callback sees in ``ctx.recruited``."""
    recruiters: list[int]
    """Who recruited each agent beyond the organisation's first ones, in order."""
    tool_invocations: int
    next_message_id: int
    ledger: Ledger
    trace: Trace | None
    wall_s: float
    """Wall time the run has taken so far."""
    limits: LimitState | None = None
    """The provider model's token buckets (None: the run has no provider model)."""
    network: NetworkState | None = None
    """Copies in flight, crashed agents, seen ids and fault counts (a run through a
    network: see :mod:`megaactors.runtime.net_delivery`)."""
    machines: tuple[list[int], list[int]] | None = None
    """With groups on two or more machines: each machine's next message id and next
    key of a copy to another machine (see :mod:`megaactors.runtime.machine_link`)."""


class SimObserver(RunObserver, Protocol):
    """Watches a simulation between two snapshots (a durable run's change tracker)."""

    events: list[int]
    """The agent of every event run is appended here."""
    sends: list[list[Packet] | bool]
    """The postman appends here the packets of every send it stamps, then whether the
    send went to every peer of its sender on its channel (no call per send). The
    postman holds this list: it is emptied in place, never replaced."""

    def touched(self, agent: int) -> None:
        """``agent``'s record changed outside its own events (its tool call was
        queued or started by another agent's event)."""
        ...
