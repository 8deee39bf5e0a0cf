"""The pykka runtime: every agent is a pykka ``ThreadingActor`` with its own thread.

An agent's in-queue is its actor's inbox; its out-queue is flushed to the
recipients as ``tell`` does it (one envelope per packet, a reference to it put in
each recipient's inbox under the inbox's mutex; ``Queue.put`` unrolled, as it is
called once per recipient).

When a message reaches an Idle agent, the actor takes it and everything queued
behind it as one batch; messages that arrive while it is Processing wait in the
inbox for the next batch, which it takes as it leaves Response (delivering,
accounting and taking the batch under one acquisition of the shared lock). A
simulated LLM call or a tool call blocks the agent's thread for ``latency_s *
time_scale`` wall seconds. Postman, ledger, trace and organisation are shared by
all threads and touched under one lock. While a run executes, the interpreter's
thread switch interval is :data:`SWITCH_INTERVAL` (restored afterwards;
``switch_interval=None`` leaves it alone).

Waking is handed on. A recipient whose actor waits for a message is not woken at
once but put in line; an agent that goes Idle wakes the first in line just before
its own thread waits for a message, and one about to wait for anything else (a
call, a tool, a lock, the token) wakes everyone in line. Only one thread can run
Python code at a time, so waking a hundred recipients at once only makes them
queue for the interpreter lock (two context switches each, and each takes a
smaller batch than it would a moment later); handed on, the next agent runs as
the previous one stops and takes everything sent to it meanwhile, first put in
line first woken (as the simulation's ready queue does).

All actors are started before any of them runs its start effects (a barrier), so
every recipient exists when the first message is sent. No agent takes a batch
before every agent's start effects have run up to their first wait (an LLM or tool
call) or to their end, so that, as in the simulation, every start message sent
without waiting is in its recipient's first batch; a start effect that waits for a
call does not hold the others back (in serial mode the token orders the starts).
The run ends when every agent is Idle and no message waits in an inbox; the actors
are then stopped and their threads joined. An exception in an agent ends the run:
the other agents stop at their next step (one in the middle of a simulated wait
finishes that wait first) and :meth:`PykkaRuntime.run` raises it (a
:class:`~megaactors.core.behaviour.BehaviourError` names the agent and the message).

A thread per agent is capped machine-wide: :func:`thread_capacity` reads the
kernel's limits (``threads-max``, ``pid_max``, the cgroup's ``pids.max``,
``RLIMIT_NPROC``, and ``vm.max_map_count`` for the threads' memory mappings) and
the threads already in use, and the runtime refuses a larger organisation with a
:class:`~megaactors.experiments.spec.ParameterError` before starting any actor. On the
reference machine ``pid_max`` is 32,768 but ``vm.max_map_count`` (65,530) binds
first, at about three mappings per thread: the capacity is about 21,600 agents,
and a star chat round of 21,632 agents ran there (the next thread beyond about
22,100 fails to start).
"""

from __future__ import annotations

import contextlib
import math
import queue
import resource
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pykka

try:  # sharing one envelope among a packet's recipients saves an allocation per copy
    from pykka._envelope import Envelope
except ImportError:  # pragma: no cover - another pykka layout: plain tells
    Envelope = None  # type: ignore[assignment,misc]

from megaactors.core.agent import IDLE, PROCESSING, RESPONSE, Agent, AgentState
from megaactors.core.behaviour import Behaviour, Effects, LLMRequest, ToolCall
from megaactors.core.llm import SimulatedLLM
from megaactors.core.messages import Batch, Packet
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError
from megaactors.runtime.gc_tuning import quiet_gc
from megaactors.runtime.live import DEFAULT_TIME_SCALE, LiveRuntime
from megaactors.runtime.result import RunResult

__all__ = [
    "MAPS_PER_THREAD",
    "SWITCH_INTERVAL",
    "THREAD_RESERVE",
    "PykkaRuntime",
    "check_thread_capacity",
    "switch_interval",
    "thread_capacity",
]

THREAD_RESERVE = 128
"""Threads left to the rest of the machine when computing the capacity."""
MAPS_PER_THREAD = 3
"""Memory mappings a thread adds to the process (its stack, its guard page, and
allocator arenas): measured 2.2 for the first thousand pykka actors, 3.0 after."""

SWITCH_INTERVAL = 1.0
"""The interpreter's thread switch interval during a run, in seconds (CPython's
default is 0.005). A thread waiting for the GIL wakes once per interval to ask for
it, so thousands of actor threads waiting at once (all released at the start, or
all back from their calls) made hundreds of thousands of wake-ups a second: a star
chat round of 10,000 agents took 14–120 s, mostly in the kernel, at 0.05 s, and
about 7 s at 1 s. The interval also preempted agents in the middle of a batch. Agents
give the GIL up anyway whenever they wait (for a message, a call, a lock), so a
longer interval only bounds how long a busy stretch may run uninterrupted."""

_PROC = Path("/proc")

_SEES_WAITERS = hasattr(threading.Condition(), "_waiters")
"""Whether a queue's condition shows who waits on it (CPython's ``threading``): the
wake hand-off needs it; without it every inbox is filled with plain tells."""


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _cgroup_pids() -> tuple[int | None, int | None]:
    """``pids.max`` and ``pids.current`` of this process's cgroup (v2 or v1), if set."""
    try:
        lines = (_PROC / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
        elif "pids" in controllers.split(","):
            base = Path("/sys/fs/cgroup/pids") / path.lstrip("/")
        else:
            continue
        limit = _read_int(base / "pids.max")
        if limit is not None:
            return limit, _read_int(base / "pids.current")
    return None, None


def _threads_in_use() -> int:
    """Threads on the whole machine (``/proc/loadavg``), or this process's if unreadable."""
    try:
        return int((_PROC / "loadavg").read_text().split()[3].split("/")[1])
    except (OSError, IndexError, ValueError):
        return threading.active_count()


def _maps_in_use() -> int:
    try:
        with open(_PROC / "self" / "maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def thread_capacity() -> dict[str, int | None]:
    """How many more threads this process may start, and what limits it.

    Each limit is reduced by what is already in use: ``threads-max`` and ``pid_max``
    by the threads on the machine, the cgroup's ``pids.max`` by its ``pids.current``,
    ``RLIMIT_NPROC`` by the threads on the machine (a conservative stand-in for this
    user's), ``vm.max_map_count`` by this process's mappings (divided by
    :data:`MAPS_PER_THREAD`). ``capacity`` is the smallest, less :data:`THREAD_RESERVE`.
    """
    in_use = _threads_in_use()
    free: dict[str, int | None] = {"threads_in_use": in_use}
    threads_max = _read_int(_PROC / "sys" / "kernel" / "threads-max")
    pid_max = _read_int(_PROC / "sys" / "kernel" / "pid_max")
    free["threads_max"] = None if threads_max is None else threads_max - in_use
    free["pid_max"] = None if pid_max is None else pid_max - in_use
    pids_max, pids_current = _cgroup_pids()
    free["cgroup_pids_max"] = None if pids_max is None else pids_max - (pids_current or in_use)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    free["rlimit_nproc"] = None if nproc == resource.RLIM_INFINITY else nproc - in_use
    max_maps = _read_int(_PROC / "sys" / "vm" / "max_map_count")
    free["max_map_count"] = None if max_maps is None else (max_maps - _maps_in_use()) // MAPS_PER_THREAD
    limits = [v for k, v in free.items() if k != "threads_in_use" and v is not None]
    free["capacity"] = max(0, min(limits, default=1 << 20) - THREAD_RESERVE)
    return free


def check_thread_capacity(agents: int) -> None:
    """Raise :class:`ParameterError` if ``agents`` threads cannot be started here."""
    cap = thread_capacity()
    if agents > cap["capacity"]:  # type: ignore[operator]
        binding = min(
            (k for k, v in cap.items() if k not in ("capacity", "threads_in_use") and v is not None),
            key=lambda k: cap[k],  # type: ignore[arg-type, return-value]
            default="none",
        )
        raise ParameterError(
            f"agents: the pykka runtime needs one thread per agent and this machine can start at most "
            f"{cap['capacity']:,} more ({binding} is the binding limit, {cap['threads_in_use']:,} threads in use); "
            f"got {agents:,} agents — use the asyncio or sim runtime for more"
        )


@contextlib.contextmanager
def switch_interval(seconds: float | None) -> Iterator[None]:
    """The interpreter's thread switch interval set to ``seconds`` for the block
    (``None``: left as it is), restored afterwards."""
    if seconds is None:
        yield
        return
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _place(items: list[Any], index: int, value: Any) -> None:
    """``items[index] = value``, growing ``items`` with ``None`` as needed."""
    if index >= len(items):
        items.extend([None] * (index + 1 - len(items)))
    items[index] = value


class _Aborted(Exception):
    """Another agent failed: stop working."""


class _SerialToken:
    """Serial mode: one agent may be Processing; the others queue in FIFO order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holder: Agent | None = None
        self.waiting: deque[tuple[Agent, threading.Event]] = deque()

    def acquire(self, a: Agent) -> None:
        with self.lock:
            if self.holder is None or self.holder is a:
                self.holder = a
                return
            event = threading.Event()
            self.waiting.append((a, event))
        event.wait()

    def release(self, a: Agent) -> None:
        with self.lock:
            if self.holder is a:
                self.holder = None
                if self.waiting:
                    nxt, event = self.waiting.popleft()
                    self.holder = nxt
                    event.set()

    def has_waiting(self) -> bool:
        with self.lock:
            return bool(self.waiting)

    def wake_all(self) -> None:
        with self.lock:
            for _, event in self.waiting:
                event.set()
            self.waiting.clear()


class _FifoLock:
    """A mutex that admits waiters in arrival order (as the simulation does)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = False
        self._waiting: deque[threading.Event] = deque()

    def acquire(self) -> None:
        with self._lock:
            if not self._held:
                self._held = True
                return
            event = threading.Event()
            self._waiting.append(event)
        event.wait()

    def release(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()  # ownership passes directly
            else:
                self._held = False


class _AgentActor(pykka.ThreadingActor):
    """One agent on its own thread."""

    use_daemon_thread = True

    def __init__(self, runtime: PykkaRuntime, agent: Agent, start: Effects | None) -> None:
        super().__init__()
        self.runtime = runtime
        self.agent = agent
        self.start_effects = start
        self.thread: threading.Thread | None = None
        with runtime._lock:
            _place(runtime.actors, agent.id, self)
            inbox = self.actor_inbox
            plain = type(inbox) is queue.Queue and inbox.maxsize <= 0 and _SEES_WAITERS  # a put never waits
            _place(runtime.inboxes, agent.id, inbox if plain else None)

    def on_start(self) -> None:
        self.thread = threading.current_thread()
        rt = self.runtime
        rt.go.wait()
        if self.start_effects is not None and rt.error is None:
            eff, self.start_effects = self.start_effects, None
            rt.guarded(self.agent, eff)

    def on_receive(self, message: Any) -> None:
        rt = self.runtime
        if rt.error is not None or type(message) is not Packet:
            return
        a = self.agent
        a.inbox.append(message)
        rt.guarded(a, None, woken=True)


class PykkaRuntime(LiveRuntime):
    """Runs a behaviour over an organisation with one pykka thread per agent."""

    name = "pykka"

    def __init__(
        self,
        org: Organisation,
        behaviour: Behaviour,
        llm: Any = None,
        *,
        seed: int = 0,
        max_concurrent_llm: int | None = None,
        serial: bool = False,
        trace: bool = True,
        tools: dict[str, Callable[[Any], Any]] | None = None,
        time_scale: float = DEFAULT_TIME_SCALE,
        switch_interval: float | None = SWITCH_INTERVAL,
    ) -> None:
        if switch_interval is not None and (
            not isinstance(switch_interval, (int, float))
            or isinstance(switch_interval, bool)
            or not 0 < switch_interval < math.inf
        ):
            raise ParameterError(f"switch interval must be a finite number of seconds > 0, got {switch_interval!r}")
        check_thread_capacity(org.n)
        super().__init__(
            org,
            behaviour,
            llm,
            seed=seed,
            max_concurrent_llm=max_concurrent_llm,
            serial=serial,
            trace=trace,
            tools=tools,
            time_scale=time_scale,
        )
        if self._async_llm:
            raise ParameterError("the pykka runtime needs an LLM with a blocking complete(); use the asyncio runtime")
        self._lock = threading.Lock()
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
        self.inboxes: list[queue.Queue[Any] | None] = []
        """Each actor's inbox if it is a plain unbounded ``queue.Queue`` (filled and
        drained directly, under its own mutex), else ``None`` (``tell`` and ``get``)."""
        self._outstanding = 0
        """Messages not yet taken plus agents not Idle: the run is over at 0."""
        self._to_wake: deque[queue.Queue[Any]] = deque()
        """Inboxes that received a message while their actor waited for one, in order,
        not yet woken (see :meth:`_wake`)."""
        self._semaphore = threading.BoundedSemaphore(max_concurrent_llm) if max_concurrent_llm else None
        self._simulated_llm = type(self.llm) is SimulatedLLM
        """A simulated call only computes (else it may wait for the network)."""
        self._token = _SerialToken() if serial else None
        self._tool_locks: dict[str, _FifoLock] = {}
        self.switch_interval = switch_interval
        """The interpreter's thread switch interval while :meth:`run` runs (``None``: unchanged)."""

    # ------------------------------------------------------------------ driving

    def run(self) -> RunResult:
        """Start one actor per agent, run until every agent is Idle, stop them all."""
        wall0 = time.perf_counter()
        with quiet_gc(), switch_interval(self.switch_interval):
            starts = self._start_effects()
            self._outstanding = sum(1 for eff in starts if eff is not None)
            self._starting = 0 if self._token is not None else self._outstanding
            if not self._starting:  # serial: the token already runs the start effects first
                self.starts_done.set()
            try:
                for a, eff in zip(self.agents, starts, strict=True):
                    self._spawn_actor(a, eff)
                self._mark_start()
                if not self._outstanding:
                    self.done.set()
                self.go.set()
                self.done.wait()
            except BaseException as exc:  # no thread, or interrupted: the actors must not start work
                self._fail(exc)
                raise
            finally:
                self._end = time.monotonic()
                self.go.set()
                self.starts_done.set()
                self._stop_actors()
        if self.error is not None:
            raise self.error
        self._wall = time.perf_counter() - wall0
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
        if self._token is not None:
            self._token.wake_all()
        started = [actor for actor, ref in zip(self.actors, self.refs, strict=False) if ref is not None]
        for actor in started:
            with contextlib.suppress(pykka.ActorDeadError):
                actor.stop()
        for actor in started:
            if actor.thread is None:  # not yet in on_start: once stopped, it has been
                actor.actor_stopped.wait(timeout=60)
            if actor.thread is not None:
                actor.thread.join(timeout=60)

    def _spawn(self, agent: Agent) -> None:
        check_thread_capacity(1)
        self._spawn_actor(agent, None)

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = exc
        if self._token is not None:
            self._token.wake_all()
        self.starts_done.set()
        self.done.set()

    # ------------------------------------------------------------------ one agent (in its thread)

    def guarded(self, a: Agent, eff: Effects | None, woken: bool = False) -> None:
        """Run the agent until Idle (``woken``: by a message while Idle); record the
        first exception and end the run."""
        try:
            self._activate(a, eff, woken)
        except _Aborted:
            return
        except Exception as exc:
            self._fail(exc)

    def _add_agents(self, a: Agent, count: int) -> list[Agent]:
        with self._lock:
            return super()._add_agents(a, count)

    def _move(self, a: Agent, to: AgentState) -> None:
        if self.trace is None:  # only the agent's own state changes
            a.transition(to, 0.0, None)
            return
        with self._lock:
            a.transition(to, self.now(), self.trace)

    def _check(self) -> None:
        if self.error is not None:
            raise _Aborted

    def _drain(self, a: Agent) -> None:
        """Move everything waiting in the actor's inbox into the agent's in-queue, in
        one go under the queue's own mutex."""
        inbox = self.inboxes[a.id]
        if inbox is not None:
            with inbox.mutex:
                if not inbox.queue:
                    return
                waiting = list(inbox.queue)
                inbox.queue.clear()
            if not self.done.is_set():  # before the end only packets are sent
                a.inbox += [envelope.message for envelope in waiting]
                return
        else:  # another inbox implementation: one message at a time
            inbox = self.actors[a.id].actor_inbox
            waiting = []
            with contextlib.suppress(queue.Empty):
                while True:
                    waiting.append(inbox.get(block=False))  # type: ignore[call-arg]
        append = a.inbox.append
        for envelope in waiting:
            message = envelope.message
            if type(message) is Packet:
                append(message)
            else:  # a stop request: leave it for the actor loop
                inbox.put(envelope)

    def _take(self, a: Agent, woken: bool) -> Batch:
        """Enter Processing with everything queued for ``a`` as one batch (one lock)."""
        self._drain(a)
        with self._lock:
            a.transition(PROCESSING, self.now() if self.trace is not None else 0.0, self.trace)
            batch = self._take_batch(a)
            self._outstanding += woken - len(batch)  # busy from now on, batch taken
        return batch

    def _activate(self, a: Agent, eff: Effects | None, woken: bool) -> None:
        """Run ``a`` from its start effects (``eff``) or from a message that woke it
        until it is Idle again."""
        token = self._token
        traced = self.trace is not None
        starts_done = self.starts_done
        starting = eff is not None and not starts_done.is_set()  # these are its start effects
        batch: Batch | None = None
        while True:
            if token is not None:
                self._wake(everyone=True)
                token.acquire(a)
            if self.error is not None:
                raise _Aborted
            if eff is None:
                if batch is None:
                    if starting:
                        self._start_reached()
                        starting = False
                    if not starts_done.is_set():
                        self._wake(everyone=True)
                        starts_done.wait()
                        self._check()
                    batch = self._take(a, woken)
                    woken = False
                eff = self._on_batch(a, batch)
                batch = None
            else:
                self._move(a, PROCESSING)
            wait = self._apply(a, eff)
            while wait is not None:
                if starting:
                    self._start_reached()
                    starting = False
                eff = self._call_llm(a, wait) if type(wait) is LLMRequest else self._call_tool(a, wait)  # type: ignore[arg-type]
                self._check()
                wait = self._apply(a, eff)
            eff = None
            if traced:
                self._move(a, RESPONSE)
            else:  # only the agent's own state changes
                a.transition(RESPONSE, 0.0, None)
            self._drain(a)
            batch, finished = self._respond(a, pretake=token is None and starts_done.is_set())
            if a.state is IDLE:
                if starting:
                    self._start_reached()
                if token is not None:
                    token.release(a)
                if finished:
                    self.done.set()
                self._wake(everyone=False)  # this thread is about to wait for a message
                return
            if token is not None and token.has_waiting():
                self._move(a, IDLE)
                token.release(a)

    def _start_reached(self) -> None:
        """An agent's start effects reached their first wait or their end; the last
        one lets every agent take batches."""
        with self._lock:
            self._starting -= 1
            last = not self._starting
        if last:
            self.starts_done.set()

    def _respond(self, a: Agent, pretake: bool) -> tuple[Batch | None, bool]:
        """Deliver the out-queue and leave Response, all accounted under one lock: to
        Idle if nothing waits, else (``pretake``) to Processing with the next batch.
        Returns that batch and whether the run is over."""
        sends = a.outbox
        batch = None
        with self._lock:
            trace = self.trace
            now = self.now() if trace is not None or sends else 0.0
            packets: list[Packet] = []
            if sends:
                stamp, sender = self.postman.stamp, a.id
                for send in sends:
                    packets += stamp(sender, send, now)
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
            self._post(packets)
        return batch, finished

    def _post(self, packets: list[Packet]) -> None:
        """Put each packet in each of its recipients' inboxes, as ``tell`` does."""
        inboxes, refs, to_wake = self.inboxes, self.refs, self._to_wake
        for packet in packets:
            envelope = Envelope(packet) if Envelope is not None else None
            for r in packet.recipients:
                inbox = inboxes[r]
                if inbox is None or envelope is None:
                    refs[r].tell(packet)
                    continue
                with inbox.mutex:  # Queue.put_nowait on an unbounded queue, unrolled
                    inbox.queue.append(envelope)
                    inbox.unfinished_tasks += 1
                    if inbox.not_empty._waiters:  # its actor waits for a message: wake it in turn
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
            with inbox.mutex:
                if not inbox.not_empty._waiters or not inbox.queue:  # woken already, or busy
                    continue  # (a wake without a message would end the hand-off here)
                inbox.not_empty.notify()
            if not everyone:
                return

    def _call_llm(self, a: Agent, request: LLMRequest) -> Effects:
        semaphore = self._semaphore
        if semaphore is not None:
            self._wake(everyone=True)
            semaphore.acquire()
            if self.error is not None:
                semaphore.release()
                raise _Aborted
        try:
            if not self._simulated_llm:  # a real client may wait for the network
                self._wake(everyone=True)
            new_tokens, reply = self._draw_llm(a, request)  # no lock: a pure function of the agent's record
            delay = reply.latency_s * self.time_scale
            with self._lock:
                self._llm_started()
                self._record_llm(a, reply)
                if delay <= 0:  # nothing to wait for: the call is over at once
                    self._in_flight -= 1
            if delay > 0:
                self._wake(everyone=True)
                try:
                    time.sleep(delay)
                finally:
                    with self._lock:
                        self._in_flight -= 1
        finally:
            if semaphore is not None:
                semaphore.release()
        self._check()
        return self._reply(a, new_tokens, reply)

    def _call_tool(self, a: Agent, call: ToolCall) -> Effects:
        self._wake(everyone=True)  # a tool may wait for its lock, its duration, or the outside world
        requested = self.now()
        lock = None
        if call.lock is not None:
            with self._lock:
                lock = self._tool_locks.get(call.lock)
                if lock is None:
                    lock = self._tool_locks[call.lock] = _FifoLock()
            lock.acquire()
            if self.error is not None:
                lock.release()
                raise _Aborted
        try:
            started = self.now()
            delay = call.duration_s * self.time_scale
            if delay > 0:
                time.sleep(delay)
        finally:
            if lock is not None:
                lock.release()
        with self._lock:
            self._account_tool(call, started - requested)
        self._check()
        return self._tool_done(a, call, requested, started)
