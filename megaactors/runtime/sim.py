"""Deterministic discrete-event simulation runtime (the default).

Virtual time only: an LLM call takes the latency its seeded model draws, message
delivery is instantaneous, and nothing reads the wall clock except the final
``wall_s`` figure. Events are LLM completions and finished tool calls, taken in
``(time, sequence number)`` order from an :class:`~megaactors.runtime.events.EventQueue`;
agents woken by a delivery at the current instant wait
in a FIFO. The same seed therefore gives the same results, byte for byte.

Options: ``max_concurrent_llm`` caps calls in flight (an API rate limit; extra calls
wait in FIFO order) and ``serial`` lets only one agent be Processing at a time
(MegaAgent's "w/o parallelism" ablation).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from itertools import repeat
from typing import Any

from megaactors.core.agent import IDLE, PROCESSING, RESPONSE, Agent
from megaactors.core.behaviour import (
    NOTHING,
    UNCHANGED,
    AgentContext,
    Behaviour,
    BehaviourError,
    Effects,
    LLMRequest,
    ToolCall,
    ToolResult,
)
from megaactors.core.ledger import Ledger
from megaactors.core.llm import SimulatedLLM
from megaactors.core.messages import Batch
from megaactors.core.organisation import Organisation
from megaactors.core.trace import Trace
from megaactors.runtime.events import EventQueue
from megaactors.runtime.gc_tuning import paused_gc
from megaactors.runtime.mailboxes import Mailboxes, gather
from megaactors.runtime.postman import Postman
from megaactors.runtime.result import RunResult

__all__ = ["SimRuntime"]

_consume = deque(maxlen=0).extend  # runs an iterator to its end at C speed
_append = list.append
_START = object()  # marks an agent whose start effects wait for the serial token


class _ToolInFlight:
    """A tool call waiting for its lock or running."""

    __slots__ = ("call", "requested", "started")

    def __init__(self, call: ToolCall, requested: float) -> None:
        self.call = call
        self.requested = requested
        self.started = requested


class SimRuntime:
    """Runs a behaviour over an organisation in virtual time."""

    name = "sim"

    def __init__(
        self,
        org: Organisation,
        behaviour: Behaviour,
        llm: SimulatedLLM | None = None,
        *,
        seed: int = 0,
        max_concurrent_llm: int | None = None,
        serial: bool = False,
        trace: bool = True,
        tools: dict[str, Callable[[Any], Any]] | None = None,
    ) -> None:
        if max_concurrent_llm is not None and max_concurrent_llm < 1:
            raise ValueError(f"max_concurrent_llm must be >= 1, got {max_concurrent_llm}")
        self.org = org
        self.behaviour = behaviour
        self.llm = llm if llm is not None else SimulatedLLM(seed=seed)
        self.seed = seed
        self.max_concurrent_llm = max_concurrent_llm
        self.serial = serial
        init = behaviour.init
        self.agents: list[Agent] = [Agent(a, init(a, org)) for a in range(org.n)]
        self._inboxes = [a.inbox for a in self.agents]
        self._awake = bytearray(org.n)
        """1 while an agent is busy or queued to run: a delivery need not wake it."""
        self.mail = Mailboxes(org, self._inboxes, lazy=True)
        """The in-queues: a broadcast is one entry in its channel's shared log, any
        other send a packet reference in each recipient's ``inbox`` (their state:
        ``mail.head``, ``mail.live``, ``mail.refill``)."""
        self._reads = self.mail.reads
        self.ledger = Ledger(org.n)
        self.trace: Trace | None = Trace() if trace else None
        self.now = 0.0
        median = getattr(getattr(self.llm, "latency", None), "median_s", 0.0) or 1.0
        self._events_width = median / 16
        self._events = EventQueue(self._events_width)
        """Pending events: LLM replies and finished tool calls (a calendar of time buckets
        1/16 of the median LLM latency wide)."""
        self._seq = 0
        self._ready: deque[int] = deque()
        self._in_flight = 0
        self._llm_waiting: deque[Agent] = deque()
        self._holder: Agent | None = None
        self._serial_waiting: deque[Agent] = deque()
        self._start_effects: dict[int, Effects] = {}
        self._recruited: dict[int, list[int]] = {}
        self._window = self.llm.tokens.memory_window
        self._bytes_per_token = self.llm.tokens.bytes_per_token
        self.postman = Postman(org, self.ledger)
        self.tools = tools or {}
        self._locks: dict[str, Agent] = {}
        self._lock_waiting: dict[str, deque[Agent]] = {}
        self.started = False
        self.steps = 0
        """Events run so far (0 right after the start cascade)."""
        self._event_log: list[int] | None = None
        """When a list, the agent of every event run is appended to it (a durable run
        learns from it which agents changed)."""
        self._wall = 0.0

    # ------------------------------------------------------------------ driving

    def run(self) -> RunResult:
        """Run until no agent has anything left to do; return the result."""
        with paused_gc():  # a run makes no reference cycles (see gc_tuning)
            wall0 = time.perf_counter()
            if not self.started:
                self.start()
            self.advance(math.inf)
            self._wall += time.perf_counter() - wall0
        return self.result()

    def start(self) -> None:
        """Call every agent's ``on_start`` and run the cascade at time 0."""
        if self.started:
            raise RuntimeError("this run has already started")
        self.started = True
        self._start()
        self._drain()

    def step(self) -> bool:
        """Run one event: the next LLM reply or finished tool call and the
        instantaneous cascade it causes (deliveries, wake-ups, new batches). Between
        two events nothing is in motion but calls in flight. Returns False when there
        was nothing left to run. (A durable run's super-step is a window of virtual
        time holding any number of events: see :mod:`megaactors.durable.checkpointing`.)"""
        if not self._events:
            return False
        t, _, aid = self._events.pop()
        self.now = t
        if self._event_log is not None:
            self._event_log.append(aid)
        self._complete(self.agents[aid])
        self._drain()
        self.steps += 1
        return True

    def advance(self, until: float) -> int:
        """Run every event due before virtual time ``until`` (with the cascades they
        cause, and events they schedule before ``until``); return how many ran."""
        # step(), inlined: this is the main loop of a run
        events, agents, complete, ready, wake = self._events, self.agents, self._complete, self._ready, self._wake
        log = self._event_log
        ran = 0
        while True:
            # EventQueue.pop, inlined: read the current bucket in place
            current, i = events.current, events.index
            if i == len(current):
                if not events.refill():
                    break
                current, i = events.current, 0
            t, _, aid = current[i]
            if t >= until:
                break
            events.index = i + 1
            self.now = t
            if log is not None:
                log.append(aid)
            complete(agents[aid])
            while ready:
                wake(agents[ready.popleft()])
            self.steps += 1
            ran += 1
        return ran

    @property
    def next_event_time(self) -> float | None:
        """Virtual time of the next event, or None when nothing is left."""
        event = self._events.peek()
        return None if event is None else event[0]

    @property
    def finished(self) -> bool:
        """True once no event is left."""
        return self.started and not self._events

    def result(self) -> RunResult:
        """Ledger, trace and states as they stand."""
        ledger = self.ledger
        leftover = max(map(self.queued, range(len(self.agents))), default=0)
        ledger.peak_queue_depth = max(ledger.peak_queue_depth, leftover)
        ledger.virtual_time_s = self.now
        ledger.wall_s = self._wall
        return RunResult(
            runtime=self.name,
            org=self.org,
            ledger=ledger,
            trace=self.trace,
            states=[a.data for a in self.agents],
        )

    def queued(self, agent: int) -> int:
        """How many messages wait for ``agent``."""
        return self.mail.queued(agent)

    def _ctx(self, a: Agent) -> AgentContext:
        return AgentContext(a.id, self.org, self.now, self._recruited.pop(a.id, ()) if self._recruited else ())

    def _start(self) -> None:
        on_start = self.behaviour.on_start
        for a in self.agents:
            try:
                eff = on_start(self._ctx(a), a.data)
            except Exception as exc:
                raise BehaviourError(
                    f"agent {a.id}: behaviour {self.behaviour.name!r} failed in on_start: {exc!r}"
                ) from exc
            if eff is not None:
                self._start_effects[a.id] = eff
                a.pending = _START
                self._awake[a.id] = 1
                self._ready.append(a.id)

    def _drain(self) -> None:
        ready, agents, wake = self._ready, self.agents, self._wake
        while ready:
            wake(agents[ready.popleft()])

    def _wake(self, a: Agent) -> None:
        if a.pending is None and not self.mail.pending(a.id):
            self._awake[a.id] = 0
            return
        if self.serial:
            if self._holder is None:
                self._holder = a
            elif self._holder is not a:
                self._serial_waiting.append(a)
                return
        self._process(a)

    # ------------------------------------------------------------------ the state machine

    def _process(self, a: Agent, ctx: AgentContext | None = None) -> None:
        """Enter Processing: run the start effects or take the whole in-queue.

        ``ctx`` is the context of the callback this agent ran a moment ago at this
        same instant; when it names no recruits it is handed on unchanged, as a fresh
        one would be equal to it (this saves one object per activation)."""
        now, trace = self.now, self.trace
        if trace is None and a.state is not PROCESSING:  # Agent.transition, inlined (see _respond)
            a.state = PROCESSING
        else:
            a.transition(PROCESSING, now, trace)
        if a.pending is _START:
            a.pending = None
            self._apply(a, self._start_effects.pop(a.id))
            return
        if self._reads[a.id]:  # it reads a channel log: nothing done per message here
            count, copy_bytes, parts = self.mail.take_later(a.id)
            batch = Batch.deferred(a.id, count, gather, parts)
            nbytes = self.postman.account_batch(a.id, count, copy_bytes)
        else:  # Agent.take_batch, inlined: the in-queue list itself lives as long as the agent
            inbox = a.inbox
            batch = Batch(a.id, inbox.copy())
            inbox.clear()
            nbytes = self.postman.take(batch)
        a.batch_tokens = -(-nbytes // self._bytes_per_token)
        if trace is not None:
            trace.batch(a.id, now, len(batch))
        if ctx is None or ctx.recruited or self._recruited:
            ctx = self._ctx(a)
        try:
            eff = self.behaviour.on_batch(ctx, a.data, batch)
        except Exception as exc:
            first = batch[0] if batch else None
            raise BehaviourError(
                f"agent {a.id}: behaviour {self.behaviour.name!r} failed on a batch of {len(batch)} "
                f"message(s) (first: {first!r}): {exc!r}"
            ) from exc
        self._apply(a, eff, ctx)

    def _apply(self, a: Agent, eff: Effects, ctx: AgentContext | None = None) -> None:
        if eff.state is not UNCHANGED:
            a.data = eff.state
        if eff.sends:
            a.outbox.extend(eff.sends)
        if eff.recruits:
            self._recruit(a, eff.recruits)
        if eff.llm is not None:
            self._call_llm(a, eff.llm)
        elif eff.tool is not None:
            self._call_tool(a, eff.tool)
        else:
            self._respond(a, ctx)

    def _recruit(self, a: Agent, count: int) -> None:
        init = self.behaviour.init
        new = []
        for _ in range(count):
            rid = self.org.recruit(a.id)
            agent = Agent(rid, init(rid, self.org))
            self.agents.append(agent)
            self._inboxes.append(agent.inbox)
            self._awake.append(0)
            self.mail.subscribe(rid)
            new.append(rid)
        self.mail.subscribe(a.id)  # it may administer a new group
        self.ledger.grow(self.org.n)
        self._recruited.setdefault(a.id, []).extend(new)

    def _call_llm(self, a: Agent, request: LLMRequest) -> None:
        cap = self.max_concurrent_llm
        if cap is not None and self._in_flight >= cap:
            a.pending = request
            self._llm_waiting.append(a)
            return
        self._in_flight += 1
        if self._in_flight > self.ledger.peak_llm_in_flight:
            self.ledger.peak_llm_in_flight = self._in_flight
        new_tokens = a.batch_tokens if request.new_tokens is None else request.new_tokens
        reply = self.llm.complete(a.id, a.calls, request, sum(a.memory), new_tokens)
        a.calls += 1
        self.ledger.record_llm(a.id, reply)
        self._seq += 1
        event = (self.now + reply.latency_s, self._seq, a.id)
        a.pending = (new_tokens, reply, event)
        self._events.push(event)

    def _complete(self, a: Agent) -> None:
        """An LLM call or a tool call of ``a`` finished now."""
        pending = a.pending
        a.pending = None
        if type(pending) is _ToolInFlight:
            self._tool_done(a, pending)
            return
        self._in_flight -= 1
        new_tokens, reply, _ = pending
        if self._llm_waiting:
            nxt = self._llm_waiting.popleft()
            self._call_llm(nxt, nxt.pending)
        # Agent.remember_call, inlined: this runs once per LLM call
        memory = a.memory
        if new_tokens:
            memory.append(new_tokens)
        memory.append(reply.tokens_out)
        if len(memory) > self._window:
            del memory[: len(memory) - self._window]
        ctx = AgentContext(a.id, self.org, self.now, self._recruited.pop(a.id, ()) if self._recruited else ())
        try:
            eff = self.behaviour.on_reply(ctx, a.data, reply)
        except Exception as exc:
            raise BehaviourError(
                f"agent {a.id}: behaviour {self.behaviour.name!r} failed on LLM reply {reply.call_index}: {exc!r}"
            ) from exc
        if eff is NOTHING:  # the usual end of a function-call loop: straight to Response
            self._respond(a, ctx)
        else:
            self._apply(a, eff, ctx)

    def _call_tool(self, a: Agent, call: ToolCall) -> None:
        if call.duration_s < 0:
            raise BehaviourError(f"agent {a.id}: tool {call.name!r} has a negative duration {call.duration_s}")
        if call.lock is not None and call.lock in self._locks:
            a.pending = _ToolInFlight(call, self.now)
            self._lock_waiting.setdefault(call.lock, deque()).append(a)
            return
        self._run_tool(a, _ToolInFlight(call, self.now))

    def _run_tool(self, a: Agent, flight: _ToolInFlight) -> None:
        call = flight.call
        if call.lock is not None:
            self._locks[call.lock] = a
        flight.started = self.now
        a.pending = flight
        self._seq += 1
        self._events.push((self.now + call.duration_s, self._seq, a.id))

    def _tool_done(self, a: Agent, flight: _ToolInFlight) -> None:
        call = flight.call
        if call.lock is not None:
            del self._locks[call.lock]
            waiting = self._lock_waiting.get(call.lock)
            if waiting:
                nxt = waiting.popleft()
                self._run_tool(nxt, nxt.pending)
        ledger = self.ledger
        waited = flight.started - flight.requested
        ledger.tool_calls += 1
        ledger.tool_time_s += call.duration_s
        ledger.lock_wait_s += waited
        try:
            value = self._invoke_tool(a, call)
            result = ToolResult(call.name, value, flight.started, self.now, waited, call.stage)
            eff = self.behaviour.on_tool(self._ctx(a), a.data, result)  # type: ignore[attr-defined]
        except Exception as exc:
            raise BehaviourError(
                f"agent {a.id}: behaviour {self.behaviour.name!r} failed on tool {call.name!r}: {exc!r}"
            ) from exc
        self._apply(a, eff)

    def _invoke_tool(self, a: Agent, call: ToolCall) -> Any:
        """Run the tool function of a finished call (None when no function is registered)."""
        tool = self.tools.get(call.name)
        return tool(call.args) if tool is not None else None

    def _respond(self, a: Agent, ctx: AgentContext | None = None) -> None:
        now, trace = self.now, self.trace
        # Agent.transition, inlined when there is no trace to write and the move is
        # the legal one; any other case goes through the checked method
        if trace is None and a.state is PROCESSING:
            a.state = RESPONSE
        else:
            a.transition(RESPONSE, now, trace)
        if a.outbox:
            self._deliver(a)
        if not a.inbox:
            aid = a.id
            for log in self._reads[aid]:  # Mailboxes.pending, inlined: anything unread?
                if log.cursors[aid] < log.end:
                    break
            else:
                if trace is None:
                    a.state = IDLE  # from RESPONSE, set just above: legal
                else:
                    a.transition(IDLE, now, trace)
                self._awake[aid] = 0
                if self.serial:
                    self._release(a)
                return
        if self.serial and self._serial_waiting:
            a.transition(IDLE, now, trace)
            self._serial_waiting.append(a)
            self._release(a)
            return
        self._process(a, ctx)

    def _release(self, a: Agent) -> None:
        if self._holder is a:
            self._holder = None
            if self._serial_waiting:
                nxt = self._serial_waiting.popleft()
                self._holder = nxt
                self._ready.append(nxt.id)

    # ------------------------------------------------------------------ delivery (the hot loop)

    def _deliver(self, a: Agent) -> None:
        """Flush the out-queue: a broadcast into its channel log(s), any other send as a
        reference appended to each recipient's in-queue; wake the Idle ones in order."""
        postman, now, sender = self.postman, self.now, a.id
        stamp, share = postman.stamp, self.mail.share
        inboxes, awake = self._inboxes, self._awake
        is_awake = awake.__getitem__
        for send in a.outbox:
            packets = stamp(sender, send, now)
            if postman.broadcast and len(packets) == 1:
                packet = packets[0]
                if not all(map(is_awake, share(packet))):
                    self._wake_idle(packet.recipients)
                continue
            for packet in packets:
                recipients = packet.recipients
                _consume(map(_append, map(inboxes.__getitem__, recipients), repeat(packet)))
                if not all(map(is_awake, recipients)):
                    self._wake_idle(recipients)
        a.outbox = []

    def _wake_idle(self, recipients: Iterable[int]) -> None:
        """Queue the Idle ones among ``recipients`` to run, in order."""
        awake, ready_append = self._awake, self._ready.append
        for r in recipients:
            if not awake[r]:
                awake[r] = 1
                ready_append(r)
