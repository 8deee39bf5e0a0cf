"""The asyncio runtime: every agent is an asyncio task with its own in-queue.

An agent's task runs its start effects, then sleeps on a future until a message
arrives. A broadcast to a whole group or to every admin is one entry in that
channel's shared log, which each member reads from its own cursor; any other send
appends a reference to its packet to each recipient's private in-queue (see
:mod:`megaactors.runtime.mailboxes`: a batch gathering several queues lists its
messages by id, which in one process is arrival order). Once per turn of the
event loop a wake-up pass resolves the futures of the recipients that were Idle,
however many messages each received. LLM calls are awaited: a simulated LLM's
latency is slept (``latency_s * time_scale`` wall seconds), a real endpoint (an object with ``async acomplete``, e.g.
:class:`megaactors.providers.chat_completions.ChatCompletionsClient`) is awaited as it answers.
``max_concurrent_llm`` is an :class:`asyncio.Semaphore`; serial mode passes one
token in FIFO order; tool locks are :class:`asyncio.Lock` by name (FIFO).

The run ends when every agent is Idle with an empty in-queue; every task then
returns, so nothing is left on the loop. An exception in an agent ends the run at
once: the other tasks are cancelled and :meth:`AsyncioRuntime.run` raises it
(a :class:`~megaactors.core.behaviour.BehaviourError` names the agent and the message).

``run()`` makes its own event loop (uvloop when installed, unless
``event_loop="asyncio"``); inside a running loop (Jupyter) use
``await runtime.run_async()``. ``virtual_time_s`` in the ledger is the wall time
from releasing the agents to the last one going Idle, divided by ``time_scale``.

``timer_tick_s > 0`` coalesces timers: every simulated wait ending within the same
tick of that length is woken by one shared timer, at the end of the tick (waits
are rounded up by less than one tick). It pays off with hundreds of thousands of
concurrent waits. ``shards=k`` runs the agents in ``k`` processes, one event loop
each (see :mod:`megaactors.runtime.aio_shards`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from itertools import repeat
from typing import Any

from megaactors.core.agent import IDLE, PROCESSING, RESPONSE, Agent
from megaactors.core.behaviour import Behaviour, Effects, LLMRequest, ToolCall
from megaactors.core.messages import Batch
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError
from megaactors.runtime.gc_tuning import quiet_gc
from megaactors.runtime.live import DEFAULT_TIME_SCALE, LiveRuntime
from megaactors.runtime.mailboxes import Mailboxes
from megaactors.runtime.result import RunResult

__all__ = ["EVENT_LOOPS", "AsyncioRuntime", "new_event_loop"]

EVENT_LOOPS = ("auto", "uvloop", "asyncio")
_STOP = object()  # resolves an Idle agent's wake-up future when the run is over
_consume = deque(maxlen=0).extend  # runs an iterator to its end at C speed
_append = list.append


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """A fresh event loop: uvloop's if installed (``auto``) or asked for, else asyncio's."""
    if kind not in EVENT_LOOPS:
        raise ParameterError(f"unknown event loop {kind!r}; expected one of {', '.join(EVENT_LOOPS)}")
    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ParameterError("event loop 'uvloop' needs the uvloop package (pip install uvloop)") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class _Token:
    """Serial mode: one agent may be Processing; the others queue in FIFO order."""

    def __init__(self) -> None:
        self.holder: Agent | None = None
        self.waiting: deque[tuple[Agent, asyncio.Future[None]]] = deque()

    async def acquire(self, a: Agent) -> None:
        if self.holder is None or self.holder is a:
            self.holder = a
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append((a, fut))
        await fut

    def release(self, a: Agent) -> None:
        if self.holder is a:
            self.holder = None
            while self.waiting:
                nxt, fut = self.waiting.popleft()
                if not fut.done():
                    self.holder = nxt
                    fut.set_result(None)
                    return


class _Timers:
    """Coalesced sleeps: one loop timer per tick wakes every wait ending in it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, tick_s: float) -> None:
        self.loop = loop
        self.tick = tick_s
        self.buckets: dict[int, asyncio.Future[None]] = {}

    def sleep(self, delay: float) -> asyncio.Future[None]:
        key = math.ceil((time.monotonic() + delay) / self.tick)
        fut = self.buckets.get(key)
        if fut is None:
            fut = self.buckets[key] = self.loop.create_future()
            self.loop.call_later(max(0.0, key * self.tick - time.monotonic()), self._fire, key)
        return fut

    def _fire(self, key: int) -> None:
        fut = self.buckets.pop(key)
        if not fut.done():
            fut.set_result(None)


class AsyncioRuntime(LiveRuntime):
    """Runs a behaviour over an organisation with one asyncio task per agent."""

    name = "asyncio"

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
        event_loop: str = "auto",
        timer_tick_s: float = 0.0,
        shards: int = 1,
    ) -> None:
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
        if event_loop not in EVENT_LOOPS:
            raise ParameterError(f"unknown event loop {event_loop!r}; expected one of {', '.join(EVENT_LOOPS)}")
        if not isinstance(timer_tick_s, (int, float)) or not 0 <= timer_tick_s < float("inf"):
            raise ParameterError(f"timer tick must be a number >= 0 seconds, got {timer_tick_s!r}")
        if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
            raise ParameterError(f"shards must be an integer >= 1, got {shards!r}")
        if shards > 1 and (serial or max_concurrent_llm is not None):
            raise ParameterError("shards: serial mode and max_concurrent_llm need one process (shards=1)")
        self.event_loop = event_loop
        self.timer_tick_s = float(timer_tick_s)
        self.shards = shards
        self.tasks: list[asyncio.Task[None]] = []
        self._inboxes = [a.inbox for a in self.agents]
        self._wakers: list[asyncio.Future[Any] | None] = [None] * org.n
        self._dirty: set[int] = set()
        """Agents that received a private message since the last wake-up pass."""
        self._mail: Mailboxes | None = None
        """Every in-queue: private ones and channel logs (made when the run starts)."""
        self._waking = False
        self._active = 0
        self._done: asyncio.Future[None] | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._token: _Token | None = None
        self._tool_locks: dict[str, asyncio.Lock] = {}
        self._timers: _Timers | None = None

    # ------------------------------------------------------------------ driving

    def run(self) -> RunResult:
        """Run on a fresh event loop (one per shard) until every agent is Idle."""
        if self.shards > 1:
            from megaactors.runtime.aio_shards import run_sharded

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
            raise ParameterError("shards: a sharded run makes its own processes; call run(), not run_async()")
        wall0 = time.perf_counter()
        with quiet_gc():
            starts = self._start_effects()
            self._mark_start()
            await self._serve(self.agents, starts)
        self._wall = time.perf_counter() - wall0
        return self.result()

    async def _serve(
        self,
        agents: list[Agent],
        starts: list[Effects | None],
        settled: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Run ``agents`` (with their start effects) as tasks until quiescence ends the
        run, then end every task; raise the first error of any agent. ``settled`` is
        awaited first when the run ended without an error."""
        loop = asyncio.get_running_loop()
        if self._mail is None:
            self._mail = Mailboxes(self.org, self._inboxes)
        self._done = loop.create_future()
        if self.max_concurrent_llm is not None:
            self._semaphore = asyncio.Semaphore(self.max_concurrent_llm)
        if self.serial:
            self._token = _Token()
        if self.timer_tick_s > 0:
            self._timers = _Timers(loop, self.timer_tick_s)
        self._active = len(agents)
        create_task, agent_main = loop.create_task, self._agent_main
        self.tasks = [create_task(agent_main(a, eff)) for a, eff in zip(agents, starts, strict=True)]
        try:
            await self._done
            self._end = time.monotonic()
            if settled is not None and self.error is None:
                await settled()
        finally:
            self._end = self._end or time.monotonic()
            await self._stop_tasks()
            close = getattr(self.llm, "aclose", None)
            if self._async_llm and close is not None:
                await close()
        if self.error is not None:
            raise self.error

    def _quiescent(self) -> None:
        """Every agent is Idle with an empty in-queue: the run is over."""
        if not self._done.done():  # type: ignore[union-attr]
            self._done.set_result(None)  # type: ignore[union-attr]

    async def _stop_tasks(self) -> None:
        """End every task: Idle ones return, busy ones (after an error) are cancelled."""
        wakers = self._wakers
        for i, fut in enumerate(wakers):
            if fut is not None:
                wakers[i] = None
                fut.set_result(_STOP)
        if self.error is not None or not self._done.done():  # type: ignore[union-attr]
            for task in self.tasks:  # an agent failed, or the run itself was cancelled
                task.cancel()
        for task in self.tasks:
            if not task.done():
                await asyncio.wait(self.tasks)
                break
        for task in self.tasks:
            if not task.cancelled() and task.exception() is not None and self.error is None:
                self.error = task.exception()

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    def _spawn(self, agent: Agent) -> None:
        self._inboxes.append(agent.inbox)
        self._wakers.append(None)
        mail = self._mail
        mail.subscribe(agent.id)  # type: ignore[union-attr]
        mail.subscribe(self.org.parent[agent.id])  # type: ignore[union-attr]  # it may administer a new group
        self._active += 1
        self.tasks.append(asyncio.get_running_loop().create_task(self._agent_main(agent, None)))

    # ------------------------------------------------------------------ one agent

    async def _agent_main(self, a: Agent, start: Effects | None) -> None:
        """The agent's task: start effects, then a batch whenever its in-queue fills."""
        try:
            mail = self._mail
            if start is not None or mail.pending(a.id):  # type: ignore[union-attr]
                await self._activate(a, start)
            loop = asyncio.get_running_loop()
            wakers, idle = self._wakers, mail.idle  # type: ignore[union-attr]
            while True:
                fut = loop.create_future()
                wakers[a.id] = fut
                idle(a.id)
                self._active -= 1
                if not self._active:
                    self._quiescent()
                if await fut is _STOP:
                    return
                await self._activate(a, None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._fail(exc)

    async def _activate(self, a: Agent, eff: Effects | None) -> None:
        """From Idle through Processing and Response until Idle with an empty in-queue."""
        token, pending = self._token, self._mail.pending  # type: ignore[union-attr]
        while True:
            if token is not None:
                await token.acquire(a)
            self._move(a, PROCESSING)
            if eff is None:
                eff = self._on_batch(a, self._take_batch(a))
            wait = self._apply(a, eff)
            while wait is not None:
                if type(wait) is LLMRequest:
                    eff = await self._call_llm(a, wait)
                else:
                    eff = await self._call_tool(a, wait)  # type: ignore[arg-type]
                wait = self._apply(a, eff)
            eff = None
            self._move(a, RESPONSE)
            if a.outbox:
                self._deliver(a)
            if not pending(a.id):
                self._move(a, IDLE)
                if token is not None:
                    token.release(a)
                return
            if token is not None and token.waiting:
                self._move(a, IDLE)
                token.release(a)

    def _collect(self, a: Agent) -> tuple[Batch, int]:
        packets, copy_bytes = self._mail.take(a.id)  # type: ignore[union-attr]
        return Batch(a.id, packets), self.postman.account_batch(a.id, len(packets), copy_bytes)

    def _queued(self, a: Agent) -> int:
        return len(a.inbox) if self._mail is None else self._mail.queued(a.id)

    def _deliver(self, a: Agent) -> None:
        """Flush the out-queue: a broadcast into its channel log(s), any other send
        as a packet reference into each recipient's private in-queue."""
        postman, now, sender = self.postman, self.now(), a.id
        mail = self._mail
        stamp, post, compact = postman.stamp, mail.post, mail.compact  # type: ignore[union-attr]
        inboxes, dirty = self._inboxes, self._dirty
        for send in a.outbox:
            packets = stamp(sender, send, now)
            if postman.broadcast and len(packets) == 1:
                compact(packets[0])
                post(packets[0])
                continue
            for packet in packets:
                recipients = packet.recipients
                _consume(map(_append, map(inboxes.__getitem__, recipients), repeat(packet)))
                dirty.update(recipients)
        a.outbox = []
        self._wake_soon()

    def _wake_soon(self) -> None:
        """Wake the Idle agents among those that received messages, at the end of
        this turn of the event loop (once however many messages they received)."""
        if not self._waking:
            self._waking = True
            self._active += 1  # the pending pass counts as activity
            asyncio.get_running_loop().call_soon(self._wake_dirty)

    def _wake_dirty(self) -> None:
        wakers, inboxes, woken = self._wakers, self._inboxes, 0
        mail = self._mail
        busy = mail.busy  # type: ignore[union-attr]
        for r in self._dirty:
            fut = wakers[r]
            if fut is not None and inboxes[r]:  # Idle, and not emptied meanwhile
                wakers[r] = None
                busy(r)
                fut.set_result(None)
                woken += 1
        self._dirty.clear()
        logs = mail.dirty  # type: ignore[union-attr]
        while logs:
            log = logs.pop()
            cursors, end = log.cursors, log.end
            # an Idle reader has a message unless it went Idle after reading the post
            for r in [r for r in log.idle if cursors[r] < end]:
                fut = wakers[r]
                wakers[r] = None
                busy(r)
                fut.set_result(None)  # type: ignore[union-attr]
                woken += 1
        self._waking = False
        self._active += woken - 1
        if not self._active:
            self._quiescent()

    def _sleep(self, delay: float) -> Coroutine[Any, Any, None] | asyncio.Future[None]:
        if self._timers is not None:
            return self._timers.sleep(delay)
        return asyncio.sleep(delay)

    async def _call_llm(self, a: Agent, request: LLMRequest) -> Effects:
        semaphore = self._semaphore
        if semaphore is not None:
            await semaphore.acquire()
        self._llm_started()
        try:
            if self._async_llm:
                args = self._llm_args(a, request)
                reply = await self.llm.acomplete(*args)
                self._record_llm(a, reply)
                new_tokens = args[-1]
            else:
                new_tokens, reply = self._issue_llm(a, request)
                delay = reply.latency_s * self.time_scale
                if delay > 0:
                    await self._sleep(delay)
        finally:
            self._in_flight -= 1
            if semaphore is not None:
                semaphore.release()
        return self._reply(a, new_tokens, reply)

    async def _call_tool(self, a: Agent, call: ToolCall) -> Effects:
        requested = self.now()
        lock = None
        if call.lock is not None:
            lock = self._tool_locks.get(call.lock)
            if lock is None:
                lock = self._tool_locks[call.lock] = asyncio.Lock()
            await lock.acquire()
        try:
            started = self.now()
            delay = call.duration_s * self.time_scale
            if delay > 0:
                await self._sleep(delay)
        finally:
            if lock is not None:
                lock.release()
        self._account_tool(call, started - requested)
        return self._tool_done(a, call, requested, started)
