"""The agent cycle of every live runtime, written once.

A live runtime (asyncio tasks, pykka threads, the step-by-step debugger) runs the
same behaviours, over the same organisations, with the same accounting as the
simulation, but agents really wait: an LLM call or a tool call takes ``latency_s *
time_scale`` seconds of wall time (virtual seconds on the debugger's clock). Times
seen by behaviours, the trace and the ledger are virtual: elapsed wall time divided
by ``time_scale``.

:meth:`LiveRuntime.cycle` is one agent's life from Idle back to Idle, as a generator
that *yields what it waits for* and is sent the outcome:

* ``Acquire(gate)`` — the serial token, an LLM slot or a tool lock (a
  :class:`~megaactors.runtime.gates.FifoGate`); sent nothing once held;
* ``Sleep(seconds)`` — a simulated LLM latency or tool duration;
* ``Ask(args)`` — an LLM that answers by itself (a real endpoint); the driver puts
  the reply in ``ask.reply``;
* :data:`STARTS` — wait until every agent's start effects have run up to their first
  wait (a runtime whose :meth:`LiveRuntime.all_started` can be false: threads and
  the event loop keep that barrier, as the simulation does).

Each runtime drives the generator its own way: asyncio ``await`` s each wait, the
pykka runtime blocks its thread, the debugger parks the agent in virtual time. The
state machine mirrors :mod:`megaactors.runtime.sim`: start effects first; entering
Processing takes the whole in-queue as one batch; an LLM request is answered by
``on_reply`` and a tool call by ``on_tool``, either of which may ask for another
(the function-call loop); with neither the agent enters Response, its out-queue is
delivered, and it goes back to Processing if its in-queue is not empty, else Idle.

A subclass supplies how messages travel (:meth:`LiveRuntime.take`,
:meth:`LiveRuntime.respond`) and how a waiter is woken from a gate
(:meth:`LiveRuntime.wake_waiter`). Shared records (postman, ledger, trace,
organisation, gates) are touched under :attr:`LiveRuntime.shared`: a threaded
runtime makes it a lock.
"""

from __future__ import annotations

import inspect
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from time import monotonic
from typing import Any

from megaactors.core.agent import IDLE, PROCESSING, Agent, Phase
from megaactors.core.behaviour import AgentContext, Behaviour, Effects, LLMRequest, new_context
from megaactors.core.ledger import Ledger
from megaactors.core.llm import SimulatedLLM
from megaactors.core.messages import Batch
from megaactors.core.organisation import Organisation
from megaactors.runtime.gates import FifoGate
from megaactors.runtime.gc_tuning import paused_gc
from megaactors.runtime.interpreter import Interpreter, Wait
from megaactors.runtime.live_calls import LiveCalls
from megaactors.runtime.live_faults import live_faults_for
from megaactors.runtime.live_waits import STARTS, Aborted, Acquire, Ask, Cycle, CycleWait, Sleep
from megaactors.runtime.net_delivery import NetworkState, report
from megaactors.runtime.options import DEFAULT_TIME_SCALE, RuntimeOptions
from megaactors.runtime.result import RunResult

__all__ = [
    "DEFAULT_TIME_SCALE",
    "STARTS",
    "Aborted",
    "Acquire",
    "Ask",
    "Cycle",
    "CycleWait",
    "LiveRuntime",
    "Sleep",
    "is_async_llm",
]

_new = object.__new__

_PlainParts = tuple[Interpreter, AbstractContextManager[Any], Ledger, Behaviour, Organisation, dict[int, list[int]],
                    Any, Callable[[Agent, Effects], Wait], Callable[[], float], bool, bool]  # fmt: skip
"""What :meth:`LiveRuntime.plain_cycle` reads at every activation: the interpreter, the shared
lock, the ledger, the behaviour, the organisation, the recruits by recruiter, the LLM's
``complete``, the interpreter's ``apply``, ``now``, :attr:`~LiveRuntime.wall_clock` and
:attr:`~LiveRuntime.one_thread`."""


def is_async_llm(llm: Any) -> bool:
    """True if ``llm`` answers with ``await llm.acomplete(...)`` (a real endpoint)
    rather than ``llm.complete(...)`` plus a simulated wait."""
    return inspect.iscoroutinefunction(getattr(llm, "acomplete", None))


class LiveRuntime(LiveCalls, ABC):
    """Options, the interpreter and the agent cycle common to every live runtime (its LLM
    and tool calls: :class:`~megaactors.runtime.live_calls.LiveCalls`)."""

    name = "live"
    applies_faults = False
    """Whether its delivery passes packets through :attr:`live_faults` (else faults are refused)."""
    one_thread = False
    """Whether every agent runs on one thread (an event loop): :meth:`plain_cycle` then
    counts an LLM call without taking :attr:`shared` (entering a lock costs about as
    much as the counting itself)."""

    def __init__(
        self,
        org: Organisation,
        behaviour: Behaviour,
        llm: Any = None,
        options: RuntimeOptions | None = None,
        **option_fields: Any,
    ) -> None:
        self.options = options = RuntimeOptions.build(options, **option_fields)
        self.org, self.behaviour = org, behaviour
        self.llm: Any = llm if llm is not None else SimulatedLLM(seed=options.seed)
        self.seed, self.max_concurrent_llm, self.serial = options.seed, options.max_concurrent_llm, options.serial
        self.time_scale = options.wall_per_virtual_s
        with paused_gc():  # millions of agents, no cycle among them
            self.core = Interpreter(
                org,
                behaviour,
                self.llm,
                host=self,
                tools=dict(options.tools or {}),
                trace=options.trace,
                provider=options.llm_provider(),
            )
        core = self.core
        self.agents, self.ledger, self.trace, self.postman, self.tools = (
            core.agents, core.ledger, core.trace, core.postman, core.tools,
        )  # fmt: skip
        self.live_faults = live_faults_for(options, org, behaviour, self.name, self.applies_faults)
        """Drops and repeats copies (None: none; see :mod:`megaactors.runtime.live_faults`)."""
        self.async_llm = is_async_llm(self.llm)
        self.asks_llm = self.async_llm
        """Whether a call is an :class:`Ask` (the LLM answers by itself) rather than drawn
        from the simulated model inside the cycle."""
        cap = options.max_concurrent_llm
        self.llm_slots: FifoGate[Agent] | None = FifoGate(cap, pool=True) if cap is not None else None
        self.token: FifoGate[Agent] | None = FifoGate() if options.serial else None
        self.locks: dict[str, FifoGate[Agent]] = {}
        self.shared: AbstractContextManager[Any] = threading.Lock()
        """Held while shared records change: a lock (in one thread, never contended,
        and cheaper to enter than a no-op context manager written in Python)."""
        self.started = False
        self.plain = False
        self.start_barrier = self.idle_hook = self.wall_clock = True
        """Whether :meth:`all_started` and :meth:`went_idle` do anything here (decided
        by :meth:`start_effects`: whether the runtime overrides them; :attr:`wall_clock`:
        whether :meth:`now` is this class's own, read inline in :meth:`plain_cycle`)."""
        """Whether no rare feature is set (no serial token, LLM slots, provider model,
        observer of paid calls, or LLM that answers by itself): an agent woken from
        Idle then runs :meth:`plain_cycle` (decided once, by :meth:`start_effects`)."""
        self.error: BaseException | None = None
        """The first exception raised inside an agent; it ends the run."""
        self._plain_parts: _PlainParts | None = None  # what plain_cycle reads (made by its first call)
        self._t0 = 0.0
        self._end = 0.0
        self.wall_s = 0.0

    # ------------------------------------------------------------------ time

    def now(self) -> float:
        """Virtual time: wall seconds since the agents were released, / time_scale."""
        return (time.monotonic() - self._t0) / self.time_scale

    def mark_start(self) -> None:
        """The agents are released now (virtual time 0)."""
        self._t0 = time.monotonic()

    def mark_end(self, when: float | None = None) -> None:
        """The last agent went Idle at ``when`` (monotonic seconds; default now)."""
        self._end = time.monotonic() if when is None else when

    def start_effects(self) -> list[Effects | None]:
        """Every agent's ``on_start``, in id order, at virtual time 0, before any agent runs."""
        if self.started:
            raise RuntimeError("this run has already started")
        self.started = True
        core, cls = self.core, type(self)
        self.start_barrier = cls.all_started is not LiveRuntime.all_started
        self.idle_hook = cls.went_idle is not LiveRuntime.went_idle
        self.wall_clock = cls.now is LiveRuntime.now
        self._plain_parts = None
        self.plain = (
            self.token is None
            and self.llm_slots is None
            and not self.asks_llm
            and core.provider is None
            and core.llm_observer is None
        )
        return core.start_effects(0.0)

    def activation(self, a: Agent, woken: bool = True) -> Cycle:
        """The cycle of ``a`` from Idle (``woken`` by a message): :meth:`plain_cycle`
        when :attr:`plain` holds, else :meth:`cycle`."""
        return self.plain_cycle(a, woken) if self.plain else self.cycle(a, None, woken)

    def context(self, a: Agent) -> AgentContext:
        """The context of ``a``'s next callback, now."""
        # Interpreter.context, inlined: this runs twice per activation
        recruited = self.core.recruited
        return new_context(a.id, self.org, self.now(), recruited.pop(a.id, ()) if recruited else ())  # type: ignore[arg-type]

    # ------------------------------------------------------------------ what a subclass supplies

    @abstractmethod
    def take(self, a: Agent, woken: bool) -> Batch:
        """Enter Processing with everything queued for ``a`` as one batch (``woken``:
        the agent was Idle until a message woke it), accounted by :meth:`account_batch`."""

    @abstractmethod
    def respond(self, a: Agent) -> tuple[bool, Batch | None]:
        """Enter Response and deliver ``a``'s out-queue; then go Idle if nothing waits
        for ``a`` — ``(True, None)`` — or return ``(False, batch)``: still Response
        (``batch`` None) or back in Processing with the next batch already taken."""

    @abstractmethod
    def wake_waiter(self, waiter: Any) -> bool:
        """Wake a waiter a gate handed over to; False if it no longer waits (its task
        was cancelled), and the gate goes to the next in line."""

    def place(self, recruiter: Agent, agents: list[Agent]) -> None:
        """Give recruited agents whatever carries them (the interpreter's host)."""
        raise NotImplementedError(f"the {self.name} runtime cannot recruit")

    def reached_first_wait(self) -> None:
        """This agent's start effects reached their first wait or their end
        (a runtime with a start barrier counts them)."""
        return None

    def all_started(self) -> bool:
        """Whether every start effect has reached its first wait."""
        return True

    def went_idle(self, a: Agent) -> None:
        """``a`` is Idle and about to wait for a message."""
        return None

    def tool_lock(self, a: Agent, name: str) -> FifoGate[Agent]:
        """The named tool lock ``a`` asks for (made on first use)."""
        with self.shared:
            gate = self.locks.get(name)
            if gate is None:
                gate = self.locks[name] = FifoGate()
        return gate

    # ------------------------------------------------------------------ shared steps

    def move(self, a: Agent, to: Phase) -> None:
        trace = self.trace
        if trace is None:  # only the agent's own record changes
            a.transition(to, 0.0, None)
            return
        with self.shared:
            a.transition(to, self.now(), trace)

    def account_batch(self, a: Agent, batch: Batch, nbytes: int) -> None:
        """The batch's tokens (the default prompt of its LLM request) and its trace row."""
        a.batch_tokens = -(-nbytes // self.core.bytes_per_token)
        if self.trace is not None:
            self.trace.batch(a.id, self.now(), len(batch))

    def release(self, gate: FifoGate[Agent], a: Agent) -> None:
        """``a`` leaves ``gate``; the first in line that still waits gets it."""
        with self.shared:
            nxt = gate.release(a)
            while nxt is not None and not self.wake_waiter(nxt[1]):
                nxt = gate.release(nxt[0])

    # ------------------------------------------------------------------ the cycle

    def cycle(self, a: Agent, eff: Effects | None, woken: bool = False) -> Cycle:
        """``a`` from its start effects ``eff`` (or from Idle, ``woken`` by a message)
        through Processing and Response until Idle with nothing queued."""
        core, token = self.core, self.token
        starting = eff is not None and not self.all_started()  # these are its start effects
        if self.plain and not starting:
            yield from self.plain_cycle(a, woken, None, eff)
            return
        batch: Batch | None = None
        while True:
            if token is not None:
                yield Acquire(token)
            if self.error is not None:  # the run is failing: stop here
                raise Aborted
            if eff is None:
                if batch is None:
                    if starting:
                        self.reached_first_wait()
                        starting = False
                    if not self.all_started():
                        yield STARTS
                        if self.error is not None:  # the run is failing: stop here
                            raise Aborted
                    batch = self.take(a, woken)
                    woken = False
                eff = core.batch_effects(a, batch, self.context(a))
                batch = None
            else:
                self.move(a, PROCESSING)
            wait = core.apply(a, eff)
            while wait is not None:
                if starting:
                    self.reached_first_wait()
                    starting = False
                if type(wait) is LLMRequest:
                    eff = yield from self.llm_call(a, wait)
                else:
                    eff = yield from self.tool_call(a, wait)  # type: ignore[arg-type]
                wait = core.apply(a, eff)
            eff = None
            idle, batch = self.respond(a)
            if idle:
                if starting:
                    self.reached_first_wait()
                if token is not None:
                    self.release(token, a)
                self.went_idle(a)
                return
            if token is not None and token.waiting:
                self.move(a, IDLE)
                self.release(token, a)
            elif self.plain and not starting:  # the start effects are over: on as from Idle
                yield from self.plain_cycle(a, False, batch)
                return

    def plain_cycle(
        self,
        a: Agent,
        woken: bool = True,
        batch: Batch | None = None,
        eff: Effects | None = None,
        starting: bool = False,
    ) -> Cycle:
        """:meth:`cycle` when :attr:`plain` holds: ``a`` from its start effects
        ``eff`` (``starting``: some agent's start effects may not have reached their
        first wait yet, so these report theirs and take no batch before), from Idle,
        or from Response with the next ``batch`` if already taken (a runtime whose
        :meth:`respond` never takes one may pass ``starting``). No gate to take, and
        each LLM call drawn from the simulated model (the interpreter's
        ``batch_effects``, ``draw_llm``, ``llm_started``, ``record_llm`` and
        ``reply_effects``, inlined: this runs once per activation)."""
        parts = self._plain_parts
        if parts is None:  # made once: the bound methods and records every activation reads
            core = self.core
            parts = self._plain_parts = (
                core, self.shared, self.ledger, self.behaviour, self.org, core.recruited, self.llm.complete,
                core.apply, self.now, self.wall_clock, self.one_thread,
            )  # fmt: skip
        core, shared, ledger, behaviour, org, recruited, complete, apply, now, wall, one_thread = parts
        if eff is None and self.start_barrier and not self.all_started():
            yield STARTS
        barrier = starting  # its start effects: the barrier is looked at before its first batch
        while True:
            if self.error is not None:  # the run is failing: stop here
                raise Aborted
            if eff is not None:
                self.move(a, PROCESSING)
            else:
                if batch is None:
                    batch = self.take(a, woken)
                    woken = False
                ctx = _new(AgentContext)  # new_context(...), inlined
                ctx.agent, ctx.org, ctx.now = a.id, org, (monotonic() - self._t0) / self.time_scale if wall else now()
                ctx.recruited = recruited.pop(a.id, ()) if recruited else ()  # type: ignore[arg-type,assignment]
                try:
                    eff = behaviour.on_batch(ctx, a.data, batch)
                except Exception as exc:
                    raise core.batch_error(a, batch, exc) from exc
            wait = apply(a, eff)
            while wait is not None:
                if starting:
                    self.reached_first_wait()
                    starting = False
                if type(wait) is not LLMRequest:
                    eff = yield from self.tool_call(a, wait)  # type: ignore[arg-type]
                    wait = apply(a, eff)
                    continue
                memory, index = a.memory, a.calls
                new_tokens = a.batch_tokens if wait.new_tokens is None else wait.new_tokens
                reply = complete(a.id, index, wait, sum(memory), new_tokens)
                delay = reply.latency_s * self.time_scale
                if one_thread:  # the block below, without the lock: no other thread touches the records
                    in_flight = core.in_flight + 1
                    if in_flight > ledger.peak_llm_in_flight:
                        ledger.peak_llm_in_flight = in_flight
                    if reply.failed is None:
                        a.calls = index + 1
                        ledger.record_llm(a.id, reply)
                    core.in_flight = in_flight if delay > 0 else in_flight - 1
                else:
                    with shared:
                        in_flight = core.in_flight + 1
                        if in_flight > ledger.peak_llm_in_flight:
                            ledger.peak_llm_in_flight = in_flight
                        if reply.failed is None:
                            a.calls = index + 1
                            ledger.record_llm(a.id, reply)
                        core.in_flight = in_flight if delay > 0 else in_flight - 1
                if delay > 0:
                    try:
                        yield Sleep(delay, "llm")
                    finally:
                        with shared:
                            core.in_flight -= 1
                if self.error is not None:
                    raise Aborted
                if new_tokens:
                    memory.append(new_tokens)
                memory.append(reply.tokens_out)
                if len(memory) > core.window:
                    del memory[: len(memory) - core.window]
                ctx = _new(AgentContext)  # new_context(...), inlined
                ctx.agent, ctx.org, ctx.now = a.id, org, (monotonic() - self._t0) / self.time_scale if wall else now()
                ctx.recruited = recruited.pop(a.id, ()) if recruited else ()  # type: ignore[arg-type,assignment]
                try:
                    eff = behaviour.on_reply(ctx, a.data, reply)
                except Exception as exc:
                    raise core.reply_error(a, reply, exc) from exc
                wait = apply(a, eff)
            eff = None
            idle, batch = self.respond(a)
            if idle:
                if starting:
                    self.reached_first_wait()
                if self.idle_hook:
                    self.went_idle(a)
                return
            if barrier:  # as cycle() does once its start effects are over
                barrier = False
                if starting:
                    self.reached_first_wait()
                    starting = False
                if not self.all_started():
                    yield STARTS

    # ------------------------------------------------------------------ result

    def queued(self, a: Agent) -> int:
        """How many messages wait for ``a``."""
        return len(a.inbox)

    def result(self) -> RunResult:
        """Ledger, trace and states as they stand. ``virtual_time_s`` is the wall time
        from releasing the agents to the last agent going Idle, divided by the time
        scale; ``wall_s`` is the whole of ``run()`` (setting up and tearing down
        included)."""
        virtual = max(0.0, self._end - self._t0) / self.time_scale
        return self.with_faults(self.core.result(self.name, virtual, self.wall_s, map(self.queued, self.agents)))

    def with_faults(self, result: RunResult) -> RunResult:
        """``result`` with the run's fault counts, stalled agents and status (when it has faults)."""
        if self.live_faults is not None:
            self.live_faults.report(result, self.agents)
        elif result.faults is not None:  # injected LLM faults only
            report(result, self.behaviour, self.agents, NetworkState())
        return result
