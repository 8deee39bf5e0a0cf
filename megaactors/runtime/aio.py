"""The asyncio runtime: agents as activations on one event loop, each with its own in-queue.

Each activation is the shared agent cycle
(:meth:`~megaactors.runtime.live.LiveRuntime.cycle`), run in a loop callback as far
as it goes without waiting; one that waits (an LLM's latency, a gate, a real
endpoint) is driven on by a task of its own, which ends with it. Start effects run
in one callback, in id order; no agent takes a batch before every agent's start
effects have reached their first wait, as in the simulation. A broadcast to a whole
group or to every admin is one entry in that channel's shared log, which each
member reads from its own cursor; any other send appends a reference to its packet
to each recipient's private in-queue (see :mod:`megaactors.runtime.mailboxes`: a
batch gathering several queues lists its messages by id, which in one process is
arrival order). Once per turn of the loop a wake-up pass takes the recipients that
were Idle, however many messages each received, and runs their activations in
turn. A simulated LLM's latency is slept (``latency_s * time_scale`` wall seconds),
a real endpoint (an object with ``async acomplete``, e.g.
:class:`megaactors.providers.chat_completions.ChatCompletionsClient`) is awaited as
it answers. The serial token, LLM slots and tool locks are FIFO gates whose waiters
wait on futures.

The run ends when every agent is Idle with an empty in-queue: no task is left on
the loop. An exception in an agent ends the run at once: the tasks are cancelled
and :meth:`AsyncioRuntime.run` raises it (a
:class:`~megaactors.errors.BehaviourError` names the agent and the message).

``run()`` makes its own event loop (uvloop when installed, unless
``event_loop="asyncio"``); inside a running loop (Jupyter) use
``await runtime.run_async()``. ``virtual_time_s`` in the ledger is the wall time
from releasing the agents to the last one going Idle, divided by ``time_scale``.

``timer_tick_s > 0`` coalesces timers: every simulated wait ending within the same
tick of that length is woken by one shared timer, at the end of the tick (waits
are rounded up by less than one tick). It pays off with hundreds of thousands of
concurrent waits. ``shards=k`` runs the agents in ``k`` Ray actors, one event loop
each (see :mod:`megaactors.runtime.aio_shards`), each with a :class:`Router` that
sends what is not local to the other shards, on the cluster at ``address``
(default: the Ray this process is connected to, else a local instance started and
stopped by the run).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from megaactors.core.agent import Agent
from megaactors.core.behaviour import Behaviour, Effects
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError
from megaactors.runtime.aio_loops import EVENT_LOOPS, new_event_loop
from megaactors.runtime.aio_messages import AsyncioMessages
from megaactors.runtime.aio_shards import Router, check_sharding
from megaactors.runtime.aio_timers import CoalescedTimers, sleep_future
from megaactors.runtime.gates import FifoGate
from megaactors.runtime.gc_tuning import quiet_gc
from megaactors.runtime.live import STARTS, Acquire, Ask, Cycle, CycleWait, LiveRuntime, Sleep
from megaactors.runtime.mailboxes import Mailboxes
from megaactors.runtime.options import RuntimeOptions
from megaactors.runtime.result import RunResult

__all__ = ["EVENT_LOOPS", "AsyncioRuntime", "Router", "new_event_loop"]


class AsyncioRuntime(AsyncioMessages, LiveRuntime):
    """Runs a behaviour over an organisation on one asyncio event loop (its messages:
    :class:`~megaactors.runtime.aio_messages.AsyncioMessages`)."""

    name = "asyncio"
    applies_faults = True
    one_thread = True

    def __init__(
        self,
        org: Organisation,
        behaviour: Behaviour,
        llm: Any = None,
        options: RuntimeOptions | None = None,
        *,
        event_loop: str = "auto",
        timer_tick_s: float = 0.0,
        shards: int = 1,
        address: str | None = None,
        **option_fields: Any,
    ) -> None:
        super().__init__(org, behaviour, llm, options, **option_fields)
        if event_loop not in EVENT_LOOPS:
            raise ParameterError(f"unknown event loop {event_loop!r}; expected one of {', '.join(EVENT_LOOPS)}")
        if not isinstance(timer_tick_s, (int, float)) or not 0 <= timer_tick_s < float("inf"):
            raise ParameterError(f"timer tick must be a number >= 0 seconds, got {timer_tick_s!r}")
        check_sharding(org, self.options, self.core.provider, shards, address)
        self.address = address
        """The Ray cluster the shards run on, ``HOST:PORT`` (None: the Ray this process
        is connected to, else a local instance)."""
        self.event_loop = event_loop
        self.timer_tick_s = float(timer_tick_s)
        self.shards = shards
        self.router: Router | None = None
        """Set in a process that runs only some of the agents (see :class:`Router`)."""
        self.tasks: set[asyncio.Task[None]] = set()
        """The tasks driving activations that wait (each ends with its activation)."""
        self.inboxes = [a.inbox for a in self.agents]
        """Each agent's private in-queue (``agent.inbox``), by id."""
        self._idle = [False] * org.n  # by agent: Idle, a message wakes it
        self._held: list[tuple[Agent, Cycle]] = []  # at the start barrier
        self._dirty: set[int] = set()  # agents sent a private message since the last wake-up pass
        self.mailboxes: Mailboxes | None = None
        """Every in-queue: private ones and channel logs (made when the run starts)."""
        self._waking = False
        self._active = 0
        self._done: asyncio.Future[None] | None = None
        self._timers: CoalescedTimers | None = None
        self._starting = 0  # agents whose start effects have not reached their first wait
        self._starts: asyncio.Future[None] | None = None  # done once none is left: batches may be taken

    def shard_recipe(self) -> dict[str, Any]:
        """The arguments that build this runtime again (one process's part of a run
        sharded over Ray actors builds it there)."""
        fields = ("org", "behaviour", "llm", "options", "event_loop", "timer_tick_s")
        return {name: getattr(self, name) for name in fields}

    # ------------------------------------------------------------------ driving

    def run(self) -> RunResult:
        """Run on a fresh event loop (one per shard) until every agent is Idle."""
        if self.shards > 1:
            from megaactors.runtime.shard_coordinator import run_sharded

            return run_sharded(self)
        results: list[RunResult] = []

        async def main() -> None:  # returns None: the runner formats the task's result
            results.append(await self.run_async())

        with asyncio.Runner(loop_factory=lambda: new_event_loop(self.event_loop)) as runner:
            runner.run(main())
        return results[0]

    async def run_async(self) -> RunResult:
        """Run on the current event loop until every agent is Idle; return the result."""
        if self.shards > 1:
            raise ParameterError("shards: a sharded run starts its own Ray actors; call run(), not run_async()")
        wall0 = time.perf_counter()
        with quiet_gc():
            starts = self.start_effects()
            self.mark_start()
            await self.serve(self.agents, starts)
        self.wall_s = time.perf_counter() - wall0
        return self.result()

    async def serve(
        self,
        agents: list[Agent],
        starts: list[Effects | None],
        settled: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Run ``agents`` (with their start effects) as tasks until quiescence ends the
        run, then end every task; raise the first error of any agent. ``settled`` is
        awaited first when the run ended without an error."""
        loop = asyncio.get_running_loop()
        if self.mailboxes is None:
            local, ids = self.router.local if self.router else None, [a.id for a in self.agents]
            self.mailboxes = Mailboxes(self.org, self.inboxes, local, ids=ids)  # cursors keyed by agent.id itself
        self._done = loop.create_future()
        if self.timer_tick_s > 0:
            self._timers = CoalescedTimers(loop, self.timer_tick_s)
        self._active = len(agents)
        self._starting = 0 if self.token is not None else sum(eff is not None for eff in starts)
        self._starts = loop.create_future()
        if not self._starting:  # serial: the token runs the start effects first
            self._starts.set_result(None)
            self.start_barrier = False
        loop.call_soon(self._start, agents, starts)
        try:
            await self._done
            self.mark_end()
            if settled is not None and self.error is None:
                await settled()
        finally:
            if not self._end:
                self.mark_end()
            await self._stop_tasks()
            close = getattr(self.llm, "aclose", None)
            if self.async_llm and close is not None:
                await close()
        if self.error is not None:
            raise self.error

    def finish(self) -> None:
        """End the run: every agent is Idle with an empty in-queue (everywhere)."""
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    def _quiescent(self) -> None:
        if self.router is not None:
            self.router.quiescent()
        else:
            self.finish()

    async def _stop_tasks(self) -> None:
        """End every task: Idle ones return, busy ones (after an error) are cancelled."""
        if self.error is not None or not self._done.done():  # type: ignore[union-attr]
            for task in self.tasks:  # an agent failed, or the run itself was cancelled
                task.cancel()
        if self.tasks:  # each records its agent's error itself (fail)
            await asyncio.wait(self.tasks)

    def fail(self, exc: BaseException) -> None:
        """Record the run's first error and end the run."""
        if self.error is None:
            self.error = exc
        self.finish()

    def place(self, recruiter: Agent, agents: list[Agent]) -> None:
        if self.router is not None:
            self.router.admit(recruiter, "recruit")
        mail = self.mailboxes
        for agent in agents:
            self.inboxes.append(agent.inbox)
            self._idle.append(False)
            mail.subscribe(agent.id)  # type: ignore[union-attr]
            mail.subscribe(self.org.parent[agent.id])  # type: ignore[union-attr]  # it may administer a new group
            self._active += 1
            asyncio.get_running_loop().call_soon(self._start, [agent], [None])  # type: ignore[arg-type]

    def tool_lock(self, a: Agent, name: str) -> FifoGate[Agent]:
        if self.router is not None:
            self.router.admit(a, f"lock {name!r}")
        return super().tool_lock(a, name)

    # ------------------------------------------------------------------ one agent

    def _start(self, agents: list[Agent], starts: list[Effects | None]) -> None:
        """Run each agent's start effects (or what waits for it) as far as they go."""
        pending = self.mailboxes.pending  # type: ignore[union-attr]
        for a, eff in zip(agents, starts, strict=True):
            if eff is None and not pending(a.id):
                self._park(a.id)
                continue
            starting = eff is not None and not self.all_started()
            cycle = self.plain_cycle(a, False, None, eff, starting) if self.plain else self.cycle(a, eff)
            if not self._run_on(a, cycle):
                return

    def _release(self) -> None:
        """Every start effect has reached its first wait: run the agents held at the barrier on."""
        held, self._held = self._held, []
        for a, cycle in held:
            if not self._run_on(a, cycle):
                return

    def _run_on(self, a: Agent, cycle: Cycle) -> bool:
        """Run ``cycle`` on as far as it goes and settle ``a``; False if it raised (the run fails)."""
        try:
            self._settle(a, cycle, self._advance(a, cycle, next(cycle, None)))
        except BaseException as exc:
            self.fail(exc)
            return False
        return True

    def _settle(self, a: Agent, cycle: Cycle, pending: Awaitable[Any] | None) -> None:
        """``a``'s cycle ran as far as it could: Idle now (``pending`` None), held at
        the start barrier, or handed to a task that awaits ``pending`` and drives it on."""
        if pending is None:
            self._park(a.id)
        elif pending is self._starts:
            self._held.append((a, cycle))
        else:
            task = asyncio.get_running_loop().create_task(self._continue(a, cycle, pending))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def _park(self, aid: int) -> None:
        """``aid`` is Idle: a message wakes it (no task waits for it)."""
        self._idle[aid] = True
        for log in self.mailboxes.reads[aid]:  # type: ignore[union-attr]  # Mailboxes.idle, inlined
            log.idle.add(aid)
        self._active -= 1
        if not self._active:
            self._quiescent()

    async def _continue(self, a: Agent, cycle: Cycle, pending: Awaitable[Any]) -> None:
        """Drive an activation that waits to its end, then park its agent."""
        try:
            await self._drive(a, cycle, pending)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.fail(exc)
            return
        self._park(a.id)

    def _advance(self, a: Agent, cycle: Cycle, wait: CycleWait | None) -> Awaitable[Any] | None:
        """Run ``cycle`` on from its wait ``wait`` while it waits for nothing (a free
        gate, no delay); return what to await, that wait begun, or None: it is over."""
        while wait is not None:
            if type(wait) is Sleep:
                if wait.seconds > 0:
                    return self._sleep(wait.seconds)
            elif type(wait) is Acquire:
                gate = wait.gate
                if not gate.try_acquire(a):
                    fut = asyncio.get_running_loop().create_future()
                    gate.wait(a, fut)
                    return fut
            elif type(wait) is Ask:
                return self._ask(wait)
            elif wait is STARTS and not self._starts.done():  # type: ignore[union-attr]
                return self._starts
            wait = next(cycle, None)
        return None

    async def _drive(self, a: Agent, cycle: Cycle, pending: Awaitable[Any] | None) -> None:
        """Await ``pending`` (begun by :meth:`_advance`), then run ``cycle`` on, awaiting
        each wait; if a wait raises (the task was cancelled), the cycle is closed."""
        while pending is not None:
            try:
                await pending
            except BaseException:
                cycle.close()
                raise
            pending = self._advance(a, cycle, next(cycle, None))

    async def _ask(self, ask: Ask) -> None:
        ask.reply = await self.llm.acomplete(*ask.args)

    def reached_first_wait(self) -> None:
        self._starting -= 1
        if not self._starting and not self._starts.done():  # type: ignore[union-attr]  # (cancelled: the run ends)
            self._starts.set_result(None)  # type: ignore[union-attr]
            self.start_barrier = False  # an activation from Idle need not look
            if self._held:  # after what runs now: as the barrier's waiters would have
                asyncio.get_running_loop().call_soon(self._release)

    def all_started(self) -> bool:
        return self._starts is not None and self._starts.done()

    def wake_waiter(self, waiter: Any) -> bool:
        if waiter.done():  # its task was cancelled
            return False
        waiter.set_result(None)
        return True

    def _sleep(self, delay: float) -> asyncio.Future[None]:
        """A future done in ``delay`` seconds (its timer set now)."""
        return self._timers.sleep(delay) if self._timers is not None else sleep_future(delay)

    # ------------------------------------------------------------------ messages

    # taking a batch, responding and delivering: see AsyncioMessages

    def wake_soon(self) -> None:
        """Wake the Idle agents among those that received messages, at the end of
        this turn of the event loop (once however many messages they received)."""
        if not self._waking:
            self._waking = True
            self._active += 1  # the pending pass counts as activity
            asyncio.get_running_loop().call_soon(self._wake_dirty)

    def _wake_dirty(self) -> None:
        """Mark busy every Idle agent with a message waiting, then run each one's
        activation here, in turn, until it waits (then a task drives it on) or is
        Idle again. Sends made meanwhile wake their recipients in the next pass."""
        self._waking = False  # a send from here on asks for another pass
        idle, inboxes, woken = self._idle, self.inboxes, []
        mail = self.mailboxes
        reads = mail.reads  # type: ignore[union-attr]
        for r in self._dirty:
            if idle[r] and inboxes[r]:  # Idle, and not emptied meanwhile
                idle[r] = False
                for read in reads[r]:  # Mailboxes.busy, inlined
                    read.idle.discard(r)
                woken.append(r)
        self._dirty.clear()
        logs = mail.dirty  # type: ignore[union-attr]
        while logs:
            log = logs.pop()
            cursors, end = log.cursors, log.end
            # an Idle reader has a message unless it went Idle after reading the post
            for r in [r for r in log.idle if cursors[r] < end]:
                idle[r] = False
                for read in reads[r]:  # Mailboxes.busy, inlined
                    read.idle.discard(r)
                woken.append(r)
        self._active += len(woken)
        agents, activation = self.agents, self.plain_cycle if self.plain else self.activation
        parked = 0
        for r in woken:
            a = agents[r]
            try:
                cycle = activation(a)
                wait = next(cycle, None)
                if wait is not None:
                    self._settle(a, cycle, self._advance(a, cycle, wait))
                    continue
            except BaseException as exc:
                self.fail(exc)
                return
            aid = a.id  # over without a wait: Idle again (_park, inlined; this pass keeps the run active)
            idle[aid] = True
            for log in reads[aid]:
                log.idle.add(aid)
            parked += 1
        self._active -= parked + 1  # the activations parked here, and this pass
        if not self._active:
            self._quiescent()
