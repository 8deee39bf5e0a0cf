"""The pykka runtime: every agent is a pykka ``ThreadingActor`` with its own thread.

Each activation is the shared agent cycle
(:meth:`~megaactors.runtime.live.LiveRuntime.cycle`), driven in the actor's thread:
every wait blocks it (a simulated LLM call or a tool call for ``latency_s *
time_scale`` wall seconds; a gate on an event). Postman, ledger, trace, organisation
and gates are shared by all threads and touched under one lock. While a run
executes, the interpreter's thread switch interval is
:data:`~megaactors.runtime.thread_limits.SWITCH_INTERVAL` (restored afterwards;
``switch_interval=None`` leaves it alone). The actors' threads run on one CPU, the one
the run starts on (:func:`~megaactors.runtime.thread_limits.on_one_cpu`;
``one_cpu=False`` lets them use every CPU): only one of them runs Python code at a
time, and handing the interpreter lock between CPUs costs more than the work between
two hand-offs.

**The inbox.** An actor's inbox is an :class:`AgentInbox`, supplied through pykka's
extension point for actor implementors, ``_create_actor_inbox()`` (pykka's
``ActorInbox`` protocol: ``put``, ``get``, ``empty``). pykka's own messages (stop
requests) go through ``put`` as usual; a packet is appended straight to the inbox,
a reference shared by all its recipients (no envelope per copy), and ``get`` hands
the actor loop one wake-up letter for everything waiting. The inbox knows whether
its thread waits for a message, which the wake hand-off needs. Should an actor get
another inbox (a pykka without that hook), packets travel as plain ``tell`` s,
one envelope each (tested; about 10% more CPU in the benchmark's chat rounds).

When a message reaches an Idle agent, the actor takes it and everything queued
behind it as one batch; messages that arrive while it is Processing wait in the
inbox for the next batch, which it takes as it leaves Response (delivering,
accounting and taking the batch under one acquisition of the shared lock).

**Waking is handed on.** A recipient whose actor waits for a message is not woken at
once but put in line; an agent that goes Idle wakes the first in line just before
its own thread waits for a message, and one about to wait for anything else (a
call, a tool, a gate) wakes everyone in line. Only one thread can run Python code
at a time, so waking a hundred recipients at once only makes them queue for the
interpreter lock (two context switches each, and each takes a smaller batch than it
would a moment later); handed on, the next agent runs as the previous one stops and
takes everything sent to it meanwhile, first put in line first woken (as the
simulation's ready queue does).

**The start barrier.** All actors are started before any of them runs its start
effects, so every recipient exists when the first message is sent. No agent takes a
batch before every agent's start effects have run up to their first wait (an LLM or
tool call) or to their end, so that, as in the simulation, every start message sent
without waiting is in its recipient's first batch; a start effect that waits for a
call does not hold the others back (in serial mode the token orders the starts).

**The end.** The run ends when every agent is Idle and no message waits in an inbox;
the actors are then stopped and their threads joined. An exception in an agent ends
the run: the other agents stop at their next step (one in the middle of a simulated
wait finishes that wait first) and :meth:`PykkaRuntime.run` raises it (a
:class:`~megaactors.errors.BehaviourError` names the agent and the message). A thread
per agent is capped machine-wide (:mod:`megaactors.runtime.thread_limits`).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any

import pykka

from megaactors.core.agent import IDLE, PROCESSING, RESPONSE, Agent
from megaactors.core.behaviour import Behaviour, Effects
from megaactors.core.llm import SimulatedLLM
from megaactors.core.messages import Batch, Packet
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError
from megaactors.runtime.gates import FifoGate
from megaactors.runtime.gc_tuning import quiet_gc
from megaactors.runtime.live import STARTS, Aborted, Acquire, Ask, Cycle, LiveRuntime, Sleep
from megaactors.runtime.options import RuntimeOptions
from megaactors.runtime.pykka_inbox import PACKETS, AgentInbox
from megaactors.runtime.result import RunResult
from megaactors.runtime.thread_limits import (
    MAPS_PER_THREAD,
    SWITCH_INTERVAL,
    THREAD_RESERVE,
    check_thread_capacity,
    on_one_cpu,
    switch_interval,
    thread_capacity,
)

inbox_factory: Callable[[], Any] = AgentInbox
"""What makes each actor's inbox (anything but an :class:`AgentInbox` means plain tells)."""

__all__ = [
    "MAPS_PER_THREAD",
    "SWITCH_INTERVAL",
    "THREAD_RESERVE",
    "AgentInbox",
    "PykkaRuntime",
    "check_thread_capacity",
    "switch_interval",
    "thread_capacity",
]

_recipients = attrgetter("recipients")


def _place(items: list[Any], index: int, value: Any) -> None:
    """``items[index] = value``, growing ``items`` with ``None`` as needed."""
    if index >= len(items):
        items.extend([None] * (index + 1 - len(items)))
    items[index] = value


class _AgentActor(pykka.ThreadingActor):
    """One agent on its own thread."""

    use_daemon_thread = True

    @staticmethod
    def _create_actor_inbox() -> Any:
        return inbox_factory()

    def __init__(self, runtime: PykkaRuntime, agent: Agent, start: Effects | None) -> None:
        super().__init__()
        self.runtime = runtime
        self.agent = agent
        self.start_effects = start
        self.thread: threading.Thread | None = None
        inbox = self.actor_inbox
        with runtime.shared:
            _place(runtime.actors, agent.id, self)
            _place(runtime.inboxes, agent.id, inbox if type(inbox) is AgentInbox else None)

    def on_start(self) -> None:
        self.thread = threading.current_thread()
        rt = self.runtime
        rt.go.wait()
        if self.start_effects is not None and rt.error is None:
            eff, self.start_effects = self.start_effects, None
            rt.guarded(self.agent, eff)

    def on_receive(self, message: Any) -> None:
        rt = self.runtime
        if rt.error is not None:
            return
        if type(message) is Packet:  # a plain tell
            self.agent.inbox.append(message)
        elif message is not PACKETS:
            return
        rt.guarded(self.agent, None, woken=True)


class PykkaRuntime(LiveRuntime):
    """Runs a behaviour over an organisation with one pykka thread per agent."""

    name = "pykka"
    applies_faults = True

    def __init__(
        self,
        org: Organisation,
        behaviour: Behaviour,
        llm: Any = None,
        options: RuntimeOptions | None = None,
        *,
        switch_interval: float | None = SWITCH_INTERVAL,
        one_cpu: bool = True,
        **option_fields: Any,
    ) -> None:
        if switch_interval is not None and (
            not isinstance(switch_interval, (int, float))
            or isinstance(switch_interval, bool)
            or not 0 < switch_interval < math.inf
        ):
            raise ParameterError(f"switch interval must be a finite number of seconds > 0, got {switch_interval!r}")
        if not isinstance(one_cpu, bool):
            raise ParameterError(f"one_cpu must be True or False, got {one_cpu!r}")
        check_thread_capacity(org.n)
        super().__init__(org, behaviour, llm, options, **option_fields)
        if self.async_llm:
            raise ParameterError("the pykka runtime needs an LLM with a blocking complete(); use the asyncio runtime")
        self.asks_llm = type(self.llm) is not SimulatedLLM
        """A call to anything but the simulated model may wait for the network: asked
        for outside the cycle, after waking everyone in line."""
        self.shared = self.core.guard = self._lock = threading.Lock()
        self.go = threading.Event()
        self.done = threading.Event()
        self.starts_done = threading.Event()
        """Set once every agent's start effects have run up to their first wait (or to
        the end): no agent takes a batch before (as in the simulation, where every
        start effect runs first)."""
        self._starting = 0
        """Agents whose start effects have not yet reached their first wait."""
        self.actors: list[_AgentActor] = []
        self.refs: list[pykka.ActorRef[Any]] = []
        self.inboxes: list[AgentInbox | None] = []
        """Each actor's inbox if it is an :class:`AgentInbox`, else ``None`` (plain tells)."""
        self._outstanding = 0
        """Messages not yet taken plus agents not Idle: the run is over at 0."""
        self._to_wake: deque[AgentInbox] = deque()
        """Inboxes that received a message while their actor waited for one, in order,
        not yet woken (see :meth:`_wake`)."""
        self.switch_interval = switch_interval
        """The interpreter's thread switch interval while :meth:`run` runs (``None``: unchanged)."""
        self.one_cpu = one_cpu
        """Whether the actors' threads run on one CPU, the one the run starts on
        (:func:`~megaactors.runtime.thread_limits.on_one_cpu`): on 2 CPUs the benchmark's
        chat rounds take about half the wall time. Runs in parallel processes each keep
        to the CPU they started on; ``False`` leaves the threads every CPU (for
        behaviours whose own work releases the interpreter lock)."""

    # ------------------------------------------------------------------ driving

    def run(self) -> RunResult:
        """Start one actor per agent, run until every agent is Idle, stop them all."""
        wall0 = time.perf_counter()
        with quiet_gc(), switch_interval(self.switch_interval), on_one_cpu(self.one_cpu):
            starts = self.start_effects()
            self._outstanding = sum(1 for eff in starts if eff is not None)
            self._starting = 0 if self.token is not None else self._outstanding
            if not self._starting:  # serial: the token already runs the start effects first
                self.starts_done.set()
            try:
                for a, eff in zip(self.agents, starts, strict=True):
                    self._spawn_actor(a, eff)
                self.mark_start()
                if not self._outstanding:
                    self.done.set()
                self.go.set()
                self.done.wait()
            except BaseException as exc:  # no thread, or interrupted: the actors must not start work
                self._fail(exc)
                raise
            finally:
                self.mark_end()
                self.go.set()
                self.starts_done.set()
                self._stop_actors()
        if self.error is not None:
            raise self.error
        self.wall_s = time.perf_counter() - wall0
        return self.result()

    def _spawn_actor(self, a: Agent, start: Effects | None) -> None:
        try:
            ref = _AgentActor.start(self, a, start)
        except RuntimeError as exc:  # the kernel refused a thread after all
            raise ParameterError(
                f"agents: could not start a thread for agent {a.id} ({exc}); "
                f"this machine's thread capacity is {thread_capacity()['capacity']:,}"
            ) from exc
        with self._lock:
            _place(self.refs, a.id, ref)

    def _stop_actors(self) -> None:
        """Tell every actor to stop, then wait for each thread to end."""
        self._abandon_gates()
        started = [actor for actor, ref in zip(self.actors, self.refs, strict=False) if ref is not None]
        for actor in started:
            with contextlib.suppress(pykka.ActorDeadError):
                actor.stop()
        for actor in started:
            if actor.thread is None:  # not yet in on_start: once stopped, it has been
                actor.actor_stopped.wait(timeout=60)
            if actor.thread is not None:
                actor.thread.join(timeout=60)

    def _abandon_gates(self) -> None:
        """Wake every agent waiting at a gate (the run is over or failing: they stop)."""
        with self._lock:
            for gate in [self.token, self.llm_slots, *self.locks.values()]:
                if gate is not None:
                    for _, event in gate.waiting:
                        event.set()
                    gate.waiting.clear()

    def place(self, recruiter: Agent, agents: list[Agent]) -> None:
        for agent in agents:
            check_thread_capacity(1)
            self._spawn_actor(agent, None)

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = exc
        self._abandon_gates()
        self.starts_done.set()
        self.done.set()

    # ------------------------------------------------------------------ one agent (in its thread)

    def guarded(self, a: Agent, eff: Effects | None, woken: bool = False) -> None:
        """Run the agent until Idle (``woken``: by a message while Idle); record the
        first exception and end the run."""
        try:
            self._drive(a, self.cycle(a, eff) if eff is not None else self.activation(a, woken))
        except Aborted:
            return
        except Exception as exc:
            self._fail(exc)

    def _drive(self, a: Agent, cycle: Cycle) -> None:
        """Run ``cycle``, blocking this thread on each of its waits (after waking
        everyone in line: this thread is about to give the interpreter up); if a wait
        raises, the cycle is closed (releasing what it holds) and it propagates."""
        for wait in cycle:
            try:
                self._wake(everyone=True)
                if type(wait) is Sleep:
                    if wait.seconds > 0:
                        time.sleep(wait.seconds)
                elif type(wait) is Acquire:
                    self._acquire(wait.gate, a)
                elif type(wait) is Ask:
                    wait.reply = self.llm.complete(*wait.args)
                elif wait is STARTS:
                    self.starts_done.wait()
            except BaseException:
                cycle.close()
                raise

    def _acquire(self, gate: FifoGate[Agent], a: Agent) -> None:
        with self._lock:
            if gate.try_acquire(a):
                return
            event = threading.Event()
            gate.wait(a, event)
        event.wait()

    def wake_waiter(self, waiter: Any) -> bool:
        waiter.set()
        return True

    def reached_first_wait(self) -> None:
        """An agent's start effects reached their first wait or their end; the last
        one lets every agent take batches."""
        with self._lock:
            self._starting -= 1
            last = not self._starting
        if last:
            self.starts_done.set()

    def all_started(self) -> bool:
        return self.starts_done.is_set()

    def went_idle(self, a: Agent) -> None:
        self._wake(everyone=False)  # this thread is about to wait for a message

    def _drain(self, a: Agent) -> None:
        """Move everything waiting in the actor's inbox into the agent's in-queue."""
        inbox = self.inboxes[a.id]
        if inbox is not None:
            if inbox.packets:
                a.inbox += inbox.take()
            return
        other = self.actors[a.id].actor_inbox  # plain tells: one message at a time
        waiting = []
        while not other.empty():
            waiting.append(other.get())
        append = a.inbox.append
        for envelope in waiting:
            message = envelope.message
            if type(message) is Packet:
                append(message)
            else:  # a stop request: leave it for the actor loop
                other.put(envelope)

    def take(self, a: Agent, woken: bool) -> Batch:
        """Enter Processing with everything queued for ``a`` as one batch (one lock)."""
        self._drain(a)
        with self._lock:
            a.transition(PROCESSING, self.now() if self.trace is not None else 0.0, self.trace)
            batch = self._take_batch(a)
            self._outstanding += woken - len(batch)  # busy from now on, batch taken
        return batch

    def _take_batch(self, a: Agent) -> Batch:
        batch = a.take_batch()
        self.account_batch(a, batch, self.postman.take(batch))
        return batch

    def respond(self, a: Agent) -> tuple[bool, Batch | None]:
        """Deliver the out-queue and leave Response, all accounted under one lock: to
        Idle if nothing waits, else (no token, every start effect under way) back to
        Processing with the next batch."""
        self.move(a, RESPONSE)
        self._drain(a)
        pretake = self.token is None and self.starts_done.is_set()
        sends = a.outbox
        batch = None
        with self._lock:
            trace = self.trace
            now = self.now() if trace is not None or sends else 0.0
            packets: list[Packet] = []
            copies = None
            if sends:
                stamp, sender = self.postman.stamp, a.id
                for send in sends:
                    packets += stamp(sender, send, now)
                if self.live_faults is not None:
                    copies = self.live_faults.copies(packets, now)
                    self._outstanding += len(copies)
                else:
                    self._outstanding += sum(len(p.recipients) for p in packets)
            if not a.inbox:
                a.transition(IDLE, now, trace)
                self._outstanding -= 1
            elif pretake:
                a.transition(PROCESSING, now, trace)
                batch = self._take_batch(a)
                self._outstanding -= len(batch)
            finished = not self._outstanding
        if sends:
            a.outbox = []
            if copies is None:
                self._post(zip(packets, map(_recipients, packets), strict=True))
            else:
                self._post((packet, (r,)) for packet, r in copies)
        if finished:
            self.done.set()
        return a.phase is IDLE, batch

    def _post(self, deliveries: Iterable[tuple[Packet, Iterable[int]]]) -> None:
        """Put each packet in the inboxes of the recipients it is paired with (all of
        its own, or one copy's recipient when it went through :attr:`live_faults`)."""
        inboxes, refs, to_wake = self.inboxes, self.refs, self._to_wake
        for packet, recipients in deliveries:
            for r in recipients:
                inbox = inboxes[r]
                if inbox is None:
                    refs[r].tell(packet)
                    continue
                with inbox.mutex:  # appended under the inbox's mutex (unrolled: once per message)
                    inbox.packets.append(packet)
                    if inbox.waiting and not inbox.flagged:  # its actor waits for a message: wake it in turn
                        inbox.flagged = True
                        to_wake.append(inbox)

    def _wake(self, everyone: bool) -> None:
        """Wake the actors waiting for the messages put in their inboxes: the first in
        line (``everyone=False``: the calling thread is about to wait for a message, so
        the one woken takes the interpreter from it), or all of them (the calling
        thread is about to wait for something else, which may take long)."""
        to_wake = self._to_wake
        while to_wake:
            try:
                inbox = to_wake.popleft()
            except IndexError:  # another thread took the last one
                return
            if inbox.wake() and not everyone:
                return
