"""What the live runtimes share: agents driven by real waits instead of virtual time.

A live runtime (asyncio tasks, pykka threads) runs the same behaviours, over the same
organisations, with the same accounting as the simulation runtime, but an LLM call
or a tool call really waits: ``latency_s * time_scale`` seconds of wall time, so a
test can run a chat round in milliseconds and a benchmark can wait the true second.
Times seen by behaviours, the trace and the ledger are *virtual*: elapsed wall time
divided by ``time_scale``.

The state machine mirrors :mod:`megaactors.runtime.sim`: the start effects of every
agent run first; entering Processing takes the whole in-queue as one batch
(``on_batch``); an LLM request is answered by ``on_reply`` and a tool call by
``on_tool``, either of which may ask for another (the function-call loop, the agent
stays Processing); with neither the agent enters Response, its out-queue is
delivered, and it goes back to Processing if its in-queue is not empty, else Idle.
Serial mode passes one token around in FIFO order; ``max_concurrent_llm`` is a
semaphore; tool locks are FIFO mutexes by name.

:class:`LiveRuntime` holds everything that does not depend on how an agent waits;
a subclass supplies the waiting (``await`` or a blocking call) and the delivery
(an event-loop wake-up or a pykka ``tell``). The methods that touch shared state
(postman, ledger, trace, organisation) take no lock: a threaded subclass calls them
under its own.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

from megaactors.core.agent import Agent, AgentState
from megaactors.core.behaviour import (
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
from megaactors.core.llm import LLMReply, SimulatedLLM
from megaactors.core.messages import Batch
from megaactors.core.organisation import Organisation
from megaactors.core.trace import Trace
from megaactors.errors import ParameterError
from megaactors.runtime.gc_tuning import paused_gc
from megaactors.runtime.postman import Postman
from megaactors.runtime.result import RunResult

__all__ = ["DEFAULT_TIME_SCALE", "LiveRuntime", "is_async_llm"]

DEFAULT_TIME_SCALE = 0.01
"""Wall seconds per virtual second by default: a 1 s simulated LLM call waits 10 ms."""


def is_async_llm(llm: Any) -> bool:
    """True if ``llm`` answers with ``await llm.acomplete(...)`` (a real endpoint)
    rather than ``llm.complete(...)`` plus a simulated wait."""
    return inspect.iscoroutinefunction(getattr(llm, "acomplete", None))


class LiveRuntime:
    """State, accounting and the behaviour calls common to every live runtime."""

    name = "live"

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
    ) -> None:
        if max_concurrent_llm is not None and (
            not isinstance(max_concurrent_llm, int) or isinstance(max_concurrent_llm, bool) or max_concurrent_llm < 1
        ):
            raise ParameterError(f"max concurrent llm must be an integer >= 1, got {max_concurrent_llm!r}")
        if not isinstance(time_scale, (int, float)) or not time_scale > 0 or time_scale == float("inf"):
            raise ParameterError(f"time scale must be a finite number > 0, got {time_scale!r}")
        self.org = org
        self.behaviour = behaviour
        self.llm = llm if llm is not None else SimulatedLLM(seed=seed)
        self.seed = seed
        self.max_concurrent_llm = max_concurrent_llm
        self.serial = serial
        self.time_scale = float(time_scale)
        self.tools = tools or {}
        init = behaviour.init
        with paused_gc():  # millions of agents, no cycle among them
            self.agents: list[Agent] = [Agent(a, init(a, org)) for a in range(org.n)]
        self.ledger = Ledger(org.n)
        self.trace: Trace | None = Trace() if trace else None
        self.postman = Postman(org, self.ledger)
        self._window = self.llm.tokens.memory_window
        self._bytes_per_token = self.llm.tokens.bytes_per_token
        self._async_llm = is_async_llm(self.llm)
        self._recruited: dict[int, list[int]] = {}
        self._t0 = 0.0
        self._end = 0.0
        self._wall = 0.0
        self._in_flight = 0
        self.started = False
        self.error: BaseException | None = None
        """The first exception raised inside an agent; it ends the run."""

    # ------------------------------------------------------------------ time

    def now(self) -> float:
        """Virtual time: wall seconds since the agents were released, / time_scale."""
        return (time.monotonic() - self._t0) / self.time_scale

    def _mark_start(self) -> None:
        self._t0 = time.monotonic()

    # ------------------------------------------------------------------ behaviour calls

    def _ctx(self, a: Agent) -> AgentContext:
        recruited = self._recruited.pop(a.id, ()) if self._recruited else ()
        return AgentContext(a.id, self.org, self.now(), recruited)  # type: ignore[arg-type]

    def _start_effects(self) -> list[Effects | None]:
        """Every agent's ``on_start``, in id order, at virtual time 0, before any agent runs."""
        if self.started:
            raise RuntimeError("this run has already started")
        self.started = True
        on_start, name = self.behaviour.on_start, self.behaviour.name
        effects: list[Effects | None] = []
        for a in self.agents:
            try:
                effects.append(on_start(AgentContext(a.id, self.org, 0.0, []), a.data))
            except Exception as exc:
                raise BehaviourError(f"agent {a.id}: behaviour {name!r} failed in on_start: {exc!r}") from exc
        return effects

    def _move(self, a: Agent, to: AgentState) -> None:
        trace = self.trace
        a.transition(to, self.now() if trace is not None else 0.0, trace)

    def _take_batch(self, a: Agent) -> Batch:
        """Empty the in-queue into one batch and account it."""
        batch, nbytes = self._collect(a)
        a.batch_tokens = -(-nbytes // self._bytes_per_token)
        if self.trace is not None:
            self.trace.batch(a.id, self.now(), len(batch))
        return batch

    def _collect(self, a: Agent) -> tuple[Batch, int]:
        """Hook: empty ``a``'s in-queue; the batch, accounted, and its size in bytes."""
        batch = a.take_batch()
        return batch, self.postman.take(batch)

    def _queued(self, a: Agent) -> int:
        """Hook: how many messages wait for ``a``."""
        return len(a.inbox)

    def _on_batch(self, a: Agent, batch: Batch) -> Effects:
        try:
            return self.behaviour.on_batch(self._ctx(a), a.data, batch)
        except Exception as exc:
            raise self._batch_error(a, batch, exc) from exc

    def _batch_error(self, a: Agent, batch: Batch, exc: Exception) -> BehaviourError:
        first = batch[0] if len(batch) else None
        return BehaviourError(
            f"agent {a.id}: behaviour {self.behaviour.name!r} failed on a batch of {len(batch)} "
            f"message(s) (first: {first!r}): {exc!r}"
        )

    def _apply(self, a: Agent, eff: Effects) -> LLMRequest | ToolCall | None:
        """Keep the new state, queue the sends, recruit; return what to wait for next."""
        if eff.state is not UNCHANGED:
            a.data = eff.state
        if eff.sends:
            a.outbox.extend(eff.sends)
        if eff.recruits:
            self._recruit(a, eff.recruits)
        if eff.llm is not None:
            return eff.llm
        if eff.tool is not None:
            if eff.tool.duration_s < 0:
                raise BehaviourError(
                    f"agent {a.id}: tool {eff.tool.name!r} has a negative duration {eff.tool.duration_s}"
                )
            return eff.tool
        return None

    def _recruit(self, a: Agent, count: int) -> None:
        for agent in self._add_agents(a, count):
            self._spawn(agent)

    def _add_agents(self, a: Agent, count: int) -> list[Agent]:
        """``count`` agents recruited by ``a``: in the organisation, the ledger and
        ``ctx.recruited`` of ``a``'s next callback."""
        init = self.behaviour.init
        new: list[Agent] = []
        try:
            for _ in range(count):
                rid = self.org.recruit(a.id)
                agent = Agent(rid, init(rid, self.org))
                self.agents.append(agent)
                new.append(agent)
        finally:
            self.ledger.grow(self.org.n)
            self._recruited.setdefault(a.id, []).extend(r.id for r in new)
        return new

    def _spawn(self, agent: Agent) -> None:
        """Hook: give a recruited agent whatever carries it (a task, a thread)."""
        raise NotImplementedError

    def _llm_args(self, a: Agent, request: LLMRequest) -> tuple[int, int, LLMRequest, int, int]:
        """Arguments of ``llm.complete`` or ``llm.acomplete`` for ``a``'s next call."""
        new_tokens = a.batch_tokens if request.new_tokens is None else request.new_tokens
        return a.id, a.calls, request, sum(a.memory), new_tokens

    def _draw_llm(self, a: Agent, request: LLMRequest) -> tuple[int, LLMReply]:
        """A simulated call's new tokens and reply, not yet accounted: a pure function
        of the agent's record (no lock needed)."""
        args = self._llm_args(a, request)
        return args[-1], self.llm.complete(*args)

    def _record_llm(self, a: Agent, reply: LLMReply) -> None:
        """Account a call of ``a`` that was made (its next call gets the next index)."""
        a.calls += 1
        self.ledger.record_llm(a.id, reply)

    def _issue_llm(self, a: Agent, request: LLMRequest) -> tuple[int, LLMReply]:
        """A simulated call, accounted: its reply (due after ``reply.latency_s``)."""
        new_tokens, reply = self._draw_llm(a, request)
        self._record_llm(a, reply)
        return new_tokens, reply

    def _llm_started(self) -> None:
        self._in_flight += 1
        if self._in_flight > self.ledger.peak_llm_in_flight:
            self.ledger.peak_llm_in_flight = self._in_flight

    def _reply(self, a: Agent, new_tokens: int, reply: LLMReply) -> Effects:
        a.remember_call(new_tokens, reply.tokens_out, self._window)
        try:
            return self.behaviour.on_reply(self._ctx(a), a.data, reply)
        except Exception as exc:
            raise BehaviourError(
                f"agent {a.id}: behaviour {self.behaviour.name!r} failed on LLM reply {reply.call_index}: {exc!r}"
            ) from exc

    def _account_tool(self, call: ToolCall, waited: float) -> None:
        ledger = self.ledger
        ledger.tool_calls += 1
        ledger.tool_time_s += call.duration_s
        ledger.lock_wait_s += waited

    def _tool_done(self, a: Agent, call: ToolCall, requested: float, started: float) -> Effects:
        """Run the tool function and hand its result to ``on_tool`` (accounted already)."""
        finished = self.now()
        waited = started - requested
        tool = self.tools.get(call.name)
        try:
            value = tool(call.args) if tool is not None else None
            result = ToolResult(call.name, value, started, finished, waited, call.stage)
            return self.behaviour.on_tool(self._ctx(a), a.data, result)  # type: ignore[attr-defined]
        except Exception as exc:
            raise BehaviourError(
                f"agent {a.id}: behaviour {self.behaviour.name!r} failed on tool {call.name!r}: {exc!r}"
            ) from exc

    # ------------------------------------------------------------------ result

    def result(self) -> RunResult:
        """Ledger, trace and states as they stand. ``virtual_time_s`` is the wall time
        from releasing the agents to the last agent going Idle, divided by the time
        scale; ``wall_s`` is the whole of ``run()`` (setting up and tearing down
        included)."""
        ledger = self.ledger
        leftover = max(map(self._queued, self.agents), default=0)
        ledger.peak_queue_depth = max(ledger.peak_queue_depth, leftover)
        ledger.virtual_time_s = max(0.0, self._end - self._t0) / self.time_scale
        ledger.wall_s = self._wall
        return RunResult(
            runtime=self.name,
            org=self.org,
            ledger=ledger,
            trace=self.trace,
            states=[a.data for a in self.agents],
        )
