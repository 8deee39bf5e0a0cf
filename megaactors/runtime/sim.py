"""Deterministic discrete-event simulation runtime (the default).

Virtual time only: an LLM call takes the latency its seeded model draws, delivery is
instantaneous, and nothing reads the wall clock but ``wall_s``. Events (LLM replies,
retries, finished tool calls) are taken in ``(time, sequence number)`` order from an
:class:`~megaactors.runtime.events.EventQueue`; agents woken at the current instant
wait in a FIFO. The same seed gives the same results, byte for byte.

What effects mean is the :class:`~megaactors.runtime.interpreter.Interpreter`'s; this
module decides when things happen (calls under a provider model:
:mod:`megaactors.runtime.sim_retry`). The serial token, tool locks and LLM slots are
:class:`~megaactors.runtime.gates.FifoGate` s. In-queues are :attr:`SimRuntime.mail`
(a broadcast is one entry in its channel's shared log). Between two events the whole
state is a :class:`~megaactors.runtime.sim_state.SimState` (:meth:`SimRuntime.snapshot`,
:meth:`SimRuntime.restore`). The event loop and delivery are written out by hand
(they run once per event and per message); the inlined steps say what they mirror.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from heapq import heappop
from itertools import repeat
from typing import Any

from megaactors.core.agent import IDLE, PROCESSING, RESPONSE, Agent
from megaactors.core.behaviour import NOTHING, UNCHANGED, AgentContext, Behaviour, Effects, LLMRequest
from megaactors.core.ledger import Ledger
from megaactors.core.llm import SimulatedLLM
from megaactors.core.messages import Batch, Packet
from megaactors.core.organisation import Organisation
from megaactors.core.shared_ints import SHARED_BELOW, SHARED_COUNTS
from megaactors.runtime.events import EventQueue
from megaactors.runtime.gates import FifoGate
from megaactors.runtime.gc_tuning import paused_gc
from megaactors.runtime.interpreter import Interpreter, Wait
from megaactors.runtime.mailboxes import Mailboxes, gather, leads
from megaactors.runtime.net_delivery import NetworkState, network_for, report
from megaactors.runtime.options import RuntimeOptions
from megaactors.runtime.result import RunResult
from megaactors.runtime.sim_placement import SimPlacement
from megaactors.runtime.sim_queues import SimQueues, event_width
from megaactors.runtime.sim_retry import ProviderCalls
from megaactors.runtime.sim_snapshots import SimSnapshots
from megaactors.runtime.sim_state import START, SimObserver, ToolInFlight
from megaactors.runtime.sim_tools import ToolCalls

__all__ = ["SimRuntime"]

_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend  # runs an iterator to its end at C speed
_append = list.append
_new = object.__new__


class SimRuntime(ProviderCalls, ToolCalls, SimQueues, SimPlacement, SimSnapshots):
    """Runs a behaviour over an organisation in virtual time.

    ``observer`` watches the run change between snapshots (see
    :class:`~megaactors.runtime.sim_state.SimObserver`)."""

    name = "sim"
    applies_faults = True

    def __init__(
        self,
        org: Organisation,
        behaviour: Behaviour,
        llm: Any = None,
        options: RuntimeOptions | None = None,
        *,
        observer: SimObserver | None = None,
        machine: int | None = None,
        **option_fields: Any,
    ) -> None:
        self.options = options = RuntimeOptions.build(options, **option_fields)
        llm = llm if llm is not None else SimulatedLLM(seed=options.seed)
        tools, provider = dict(options.tools or {}), options.llm_provider()
        self.core = Interpreter(
            org, behaviour, llm, host=self, tools=tools, trace=options.trace, observer=observer, provider=provider
        )
        self.org, self.behaviour, self.llm, self.tools = org, behaviour, llm, self.core.tools
        self.seed, self.max_concurrent_llm, self.serial = options.seed, options.max_concurrent_llm, options.serial
        self.observer = observer
        if observer is not None:
            self.core.postman.stamped = observer.sends
        cap = options.max_concurrent_llm
        self._llm_slots: FifoGate[Agent] | None = FifoGate(cap, pool=True) if cap is not None else None
        self._bind()
        self._net = network_for(self, self.postman, behaviour, options, machine)
        """The network messages go through (None: each arrives at once, exactly once)."""
        self._crashes = self._net is not None and self._net.may_crash  # asked at each take if so
        self._machine_ledger = self._place_on_machines(machine)
        self._open_mail()
        self._awake = bytearray(org.n)
        """1 while an agent is busy or queued to run: a delivery need not wake it."""
        self.now = 0.0
        self._events_width = event_width(llm, self._net.decisions.network if self._net is not None else None)
        self._events = EventQueue(self._events_width)
        """Pending events (a calendar of time buckets, see :func:`event_width`)."""
        self._seq = 0
        self._ready: deque[int] = deque()
        self._token: FifoGate[Agent] | None = FifoGate() if options.serial else None
        self._locks: dict[str, FifoGate[Agent]] = {}
        self._start_effects: dict[int, Effects] = {}
        self._window = self.core.window
        self._bytes_per_token = self.core.bytes_per_token
        self.started = False
        self.events_run = 0
        """Events run so far (0 right after the start cascade)."""
        self.wall_s = 0.0
        """Wall time :meth:`run` has taken so far."""

    def _bind(self) -> None:
        """Short names for the interpreter's records (the hot path reads them)."""
        core = self.core
        self.agents, self.ledger, self.trace, self.postman = core.agents, core.ledger, core.trace, core.postman
        self._apply_effects, self._issue_llm = core.apply, core.issue_llm
        self._recruited, self._draw = core.recruited, core.llm.complete
        self._plain_llm = self._llm_slots is None and core.provider is None and core.llm_observer is None
        """Whether a call starts at once (:meth:`_call_llm_now`): no slot, provider model
        or observer of paid calls is set."""
        self._lean = type(core.llm) is SimulatedLLM and type(core.ledger) is Ledger
        """Whether a plain call in flight is its event alone (the lean form, see
        :data:`~megaactors.runtime.sim_state.LLMInFlight`), accounted by
        :meth:`Ledger.record_call <megaactors.core.ledger.Ledger.record_call>`."""
        self._reply_of = core.llm.reply_of if self._lean else None
        self._lean_draw = core.llm.draw if self._lean else None
        self._full_requests: dict[int, tuple[LLMRequest, LLMRequest]] = {}
        """id of a request without output tokens -> (it, the same with the model's default)."""

    def _open_mail(self) -> None:
        """In-queues for the agents as they are (empty channel logs)."""
        self._inboxes = [a.inbox for a in self.agents]
        self.mail = Mailboxes(self.org, self._inboxes, lazy=True, ids=[a.id for a in self.agents])
        """The in-queues (``mail.head``, ``mail.live``, ``mail.refill`` describe them)."""
        self._reads = self.mail.reads

    # ------------------------------------------------------------------ driving

    def run(self) -> RunResult:
        """Run until no agent has anything left to do; return the result."""
        with paused_gc():  # a run makes no reference cycles (see gc_tuning)
            wall0 = time.perf_counter()
            if not self.started:
                self.start()
            self.advance(math.inf)
            self.wall_s += time.perf_counter() - wall0
        return self.result()

    def start(self) -> None:
        """Call every agent's ``on_start`` and run the cascade at time 0."""
        if self.started:
            raise RuntimeError("this run has already started")
        self.started = True
        agents = self._own_agents()
        for a, eff in zip(agents, self.core.start_effects(self.now, agents), strict=True):
            if eff is not None:
                self._start_effects[a.id] = eff
                a.pending = START
                self._awake[a.id] = 1
                self._ready.append(a.id)
        self._drain()

    def send_human(self, agent: int, text: str) -> Packet:
        """A human's message (:data:`~megaactors.core.messages.HUMAN`) into ``agent``'s
        in-queue now, between two events; an Idle agent takes it at once. Raises
        :class:`~megaactors.errors.MessageError` for no such agent or an unfit text."""
        packet = self.postman.stamp_human(agent, text, self.now)
        self.enqueue(agent, packet)
        self._drain()
        return packet

    def step(self) -> bool:
        """Run one event (an LLM reply, a retry, a finished tool call) and the cascade it
        causes (deliveries, wake-ups, new batches); False when nothing was left to run."""
        if not self._events:
            return False
        event = self._events.pop()
        t, aid = event[0], event[2]
        self.now = t
        if self.observer is not None:
            self.observer.events.append(aid)
        if aid >= 0:
            self._completion()(self.agents[aid])
        else:
            self._net.fire(-aid)  # type: ignore[union-attr]
        self._drain()
        self.events_run += 1
        return True

    def advance(self, until: float) -> int:
        """Run every event due before virtual time ``until`` (with the cascades they
        cause, and events they schedule before ``until``); return how many ran."""
        # step(), inlined: this is the main loop of a run
        events, agents, complete, ready, wake = self._events, self.agents, self._completion(), self._ready, self._wake
        log = self.observer.events if self.observer is not None else None
        soon, pop_soon = events.soon, heappop
        ran = 0
        while True:
            # EventQueue.pop, inlined: the current bucket read in place, or its side heap
            current, i = events.current, events.index
            if soon and (i == len(current) or soon[0] < current[i]):
                event = soon[0]
                t, aid = event[0], event[2]
                if t >= until:
                    break
                pop_soon(soon)
            else:
                if i == len(current):
                    if not events.refill():
                        break
                    current, i = events.current, 0
                event = current[i]
                t, aid = event[0], event[2]
                if t >= until:
                    break
                events.index = i + 1
                current[i] = None  # type: ignore[call-overload]  # done: freed with its call, still warm
            self.now = t
            if log is not None:
                log.append(aid)
            if aid >= 0:
                complete(agents[aid])
            else:  # a network event (see schedule_network)
                self._net.fire(-aid)  # type: ignore[union-attr]
            while ready:
                wake(agents[ready.popleft()])
            self.events_run += 1
            ran += 1
        return ran

    def result(self) -> RunResult:
        """Ledger, trace and states as they stand."""
        if self._machine_ledger is not None:
            self._machine_ledger.settle()
        result = self.core.result(self.name, self.now, self.wall_s, (self.mail.most_queued(),))
        if self._net is not None:
            self._net.report(result, self.agents)
        elif result.faults is not None:  # injected LLM faults only
            report(result, self.behaviour, self.agents, NetworkState())
        return result

    def _drain(self) -> None:
        ready, agents, wake = self._ready, self.agents, self._wake
        while ready:
            wake(agents[ready.popleft()])

    def _wake(self, a: Agent) -> None:
        if a.pending is None and not self.mail.pending(a.id):
            self._awake[a.id] = 0
            return
        token = self._token
        if token is not None and not token.try_acquire(a):
            token.wait(a)
            return
        self._process(a)

    # ------------------------------------------------------------------ the state machine

    def _process(self, a: Agent, ctx: AgentContext | None = None) -> None:
        """Enter Processing: run the start effects or take the whole in-queue.

        ``ctx`` is the context of the callback this agent ran a moment ago at this
        same instant; when it names no recruits it is handed on unchanged, as a fresh
        one would be equal to it (this saves one object per activation)."""
        now, trace = self.now, self.trace
        if self._crashes and a.pending is not START and self._net.crash_on_take(a):  # type: ignore[union-attr]
            return
        if trace is None and a.phase is not PROCESSING:  # Agent.transition, inlined (see _respond)
            a.phase = PROCESSING
        else:
            a.transition(PROCESSING, now, trace)
        if a.pending is START:
            a.pending = None
            self._apply(a, self._start_effects.pop(a.id))
            return
        aid, reads = a.id, self._reads[a.id]
        if reads:  # it reads a channel log: nothing done per message here
            if a.inbox:
                count, copy_bytes, parts = self.mail.take_later(aid)
            else:  # Mailboxes.take_later, inlined: only logs to read (the usual case)
                parts, count, copy_bytes = [], 0, 0
                for log in reads:
                    if log.cursors[aid] < log.end:
                        part, unread, size = log.take(aid)  # type: ignore[misc]
                        parts.append(part)
                        count += unread
                        copy_bytes += size
            batch = Batch.deferred(aid, count, gather, parts, leads)
            nbytes = self.postman.account_batch(a.id, count, copy_bytes)
        else:  # Agent.take_batch, inlined: the in-queue list itself lives as long as the agent
            inbox = a.inbox
            batch = Batch(a.id, inbox.copy())
            inbox.clear()
            nbytes = self.postman.take(batch)
        tokens = -(-nbytes // self._bytes_per_token)
        a.batch_tokens = SHARED_COUNTS[tokens] if tokens < SHARED_BELOW else tokens  # in memory windows: shared ints
        if trace is not None:
            trace.batch(a.id, now, len(batch))
        if ctx is None or ctx.recruited or self._recruited:
            ctx = self.core.context(a, now)
        try:  # Interpreter.batch_effects, inlined: this runs once per batch
            eff = self.behaviour.on_batch(ctx, a.data, batch)
        except Exception as exc:
            raise self.core.batch_error(a, batch, exc) from exc
        llm = eff.llm  # an LLM call and nothing else: Interpreter.apply and _go_on, inlined
        plain = type(llm) is LLMRequest and self._plain_llm and eff.state is UNCHANGED and eff.interrupt is None
        if plain and not (eff.sends or eff.recruits):
            self._call_llm_now(a, llm)  # type: ignore[arg-type]
        else:
            self._go_on(a, self._apply_effects(a, eff), ctx)  # _apply, inlined

    def _apply(self, a: Agent, eff: Effects, ctx: AgentContext | None = None) -> None:
        self._go_on(a, self._apply_effects(a, eff), ctx)

    def _go_on(self, a: Agent, wait: Wait, ctx: AgentContext | None = None) -> None:
        """``a``'s effects are applied: respond, or start what it waits for."""
        if wait is None:
            self._respond(a, ctx)
        elif type(wait) is LLMRequest:
            if self._plain_llm:
                self._call_llm_now(a, wait)
            else:
                self._call_llm(a, wait)
        else:
            self._call_tool(a, wait)  # type: ignore[arg-type]

    def _call_llm_now(self, a: Agent, request: LLMRequest) -> None:
        """:meth:`_call_llm` when no LLM slot, provider model or observer of paid
        calls is set: ``Interpreter.issue_llm``, inlined, as this runs once per call."""
        core, ledger = self.core, self.ledger
        in_flight = core.in_flight = core.in_flight + 1
        if in_flight > ledger.peak_llm_in_flight:
            ledger.peak_llm_in_flight = in_flight
        new_tokens = a.batch_tokens if request.new_tokens is None else request.new_tokens
        index, aid = a.calls, a.id
        a.calls = index + 1
        seq = self._seq = self._seq + 1
        event: Any  # an Event, grown in the lean form
        if self._lean:  # the lean form: only the event lives on (see sim_state.LLMInFlight)
            tokens_in, tokens_out, latency, cost = self._lean_draw(aid, index, request, sum(a.memory), new_tokens)  # type: ignore[misc]
            ledger.record_call(aid, tokens_in, tokens_out, cost, latency, request.stage)
            if request.output_tokens is None:
                known = self._full_requests.get(id(request))
                request = known[1] if known is not None else self._full_request(request)
            event = a.pending = (self.now + latency, seq, aid, request, latency, tokens_in)
        else:
            reply = self._draw(aid, index, request, sum(a.memory), new_tokens)
            ledger.record_llm(aid, reply)
            event = (self.now + reply.latency_s, seq, aid)
            a.pending = (new_tokens, reply, event)
        events = self._events  # EventQueue.push, inlined when the event's bucket exists
        key = int(event[0] * events.inverse_width)
        bucket = events.buckets.get(key) if key > events.current_key else None
        if bucket is not None:
            bucket.append(event)
        else:
            events.push(event)

    def _full_request(self, request: LLMRequest) -> LLMRequest:
        """``request`` with the model's default output tokens set, made once per request
        (behaviours mostly return a few constant ones; beyond 64, a new one each time)."""
        full = self._full_requests  # an entry keeps its request alive: no other object has its id
        known = full.get(id(request))
        if known is not None:
            return known[1]
        filled = replace(request, output_tokens=self.llm.tokens.output_tokens)
        if len(full) < 64:
            full[id(request)] = (request, filled)
        return filled

    def _complete(self, a: Agent) -> None:
        """An LLM call or a tool call of ``a`` finished now."""
        pending = a.pending
        a.pending = None
        if type(pending) is not tuple:  # an LLMInFlight tuple is the usual case
            if type(pending) is ToolInFlight:
                self._tool_done(a, pending)
            else:
                self._attempt(a, pending)
            return
        core = self.core
        core.in_flight -= 1
        memory = a.memory
        if len(pending) > 3:  # the lean form (see sim_state.LLMInFlight): the reply made now
            request = pending[3]
            new_tokens = a.batch_tokens if request.new_tokens is None else request.new_tokens
            reply = self._reply_of(a.calls - 1, request, pending[5], pending[4])  # type: ignore[misc]
        else:
            new_tokens, reply, _ = pending
        slots = self._llm_slots
        if slots is not None:
            nxt = slots.release(a)
            if nxt is not None:
                self._call_llm(nxt[0], nxt[0].pending, admitted=True)
        # Interpreter.reply_effects (and .context), inlined: this runs once per LLM call
        if new_tokens:
            memory.append(new_tokens)
        memory.append(reply.tokens_out)
        if len(memory) > self._window:
            del memory[: len(memory) - self._window]
        recruited = self._recruited
        ctx = _new(AgentContext)  # new_context, inlined
        ctx.agent, ctx.org, ctx.now = a.id, self.org, self.now
        ctx.recruited = recruited.pop(a.id, ()) if recruited else ()  # type: ignore[arg-type,assignment]
        try:
            eff = self.behaviour.on_reply(ctx, a.data, reply)
        except Exception as exc:
            raise core.reply_error(a, reply, exc) from exc
        if eff is NOTHING:  # the usual end of a function-call loop: straight to Response
            self._respond(a, ctx)
        else:
            self._go_on(a, self._apply_effects(a, eff), ctx)  # _apply, inlined

    def _respond(self, a: Agent, ctx: AgentContext | None = None) -> None:
        now, trace = self.now, self.trace
        # Agent.transition, inlined when there is no trace to write and the move is
        # the legal one; any other case goes through the checked method
        if trace is None and a.phase is PROCESSING:
            a.phase = RESPONSE
        else:
            a.transition(RESPONSE, now, trace)
        if a.outbox:
            self._deliver(a)
        token = self._token
        if not a.inbox:
            aid = a.id
            for log in self._reads[aid]:  # Mailboxes.pending, inlined: anything unread?
                if log.cursors[aid] < log.end:
                    break
            else:
                if trace is None:
                    a.phase = IDLE  # from RESPONSE, set just above: legal
                else:
                    a.transition(IDLE, now, trace)
                self._awake[aid] = 0
                if token is not None:
                    self._release_token(a)
                return
        if token is not None and token.waiting:
            a.transition(IDLE, now, trace)
            token.wait(a)
            self._release_token(a)
            return
        self._process(a, ctx)

    # ------------------------------------------------------------------ delivery (the hot loop)

    def _deliver(self, a: Agent) -> None:
        """Flush the out-queue: a broadcast into its channel log(s), any other send as a
        reference appended to each recipient's in-queue; wake the Idle ones in order
        (or hand it to the network, if any)."""
        if self._net is not None:
            self._net.deliver(a)
            return
        postman, now, sender = self.postman, self.now, a.id
        stamp, share = postman.stamp, self.mail.share
        inboxes, awake = self._inboxes, self._awake
        is_awake = awake.__getitem__
        for send in a.outbox:
            packets = stamp(sender, send, now)
            if postman.broadcast and len(packets) == 1:
                packet = packets[0]
                where = share(packet)
                if type(where) is range:  # a group of consecutive ids: its Idle ones found in C
                    if awake.find(0, where.start, where.stop) >= 0:
                        self._wake_span(where, packet.recipients)
                elif not all(map(is_awake, where)):
                    self._wake_idle(packet.recipients)
                continue
            for packet in packets:
                recipients = packet.recipients
                _consume(map(_append, map(inboxes.__getitem__, recipients), repeat(packet)))
                if not all(map(is_awake, recipients)):
                    self._wake_idle(recipients)
        a.outbox.clear()  # the list made with the agent, beside its other lists: fewer cache lines later
