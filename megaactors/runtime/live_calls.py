"""The two waits of a live agent cycle besides the batch: an LLM call and a tool call.

Each is a generator that yields what it waits for (:mod:`megaactors.runtime.live_waits`)
and returns the effects of the callback that follows (``on_reply``, ``on_tool``).
:class:`LiveCalls` (``llm_call``, ``tool_call``) is a part of every
:class:`~megaactors.runtime.live.LiveRuntime`; the runtime sets every attribute it declares.
:meth:`LiveRuntime.plain_cycle <megaactors.runtime.live.LiveRuntime.plain_cycle>` draws
its calls inline instead.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from megaactors.core.agent import Agent
from megaactors.core.behaviour import Effects, LLMRequest, ToolCall
from megaactors.runtime.live_provider import attempts
from megaactors.runtime.live_waits import Aborted, Acquire, Ask, Sleep

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from megaactors.core.behaviour import AgentContext
    from megaactors.runtime.gates import FifoGate
    from megaactors.runtime.interpreter import Interpreter

__all__ = ["LiveCalls"]


class LiveCalls:
    """The LLM and tool calls of a live agent cycle (a part of ``LiveRuntime``)."""

    core: Interpreter
    shared: AbstractContextManager[Any]
    llm_slots: FifoGate[Agent] | None
    error: BaseException | None
    asks_llm: bool
    async_llm: bool
    time_scale: float

    if TYPE_CHECKING:  # the runtime's; for the type checker alone

        def now(self) -> float: ...

        def context(self, a: Agent) -> AgentContext: ...

        def tool_lock(self, a: Agent, name: str) -> FifoGate[Agent]: ...

        def release(self, gate: FifoGate[Agent], a: Agent) -> None: ...

    def llm_call(self, a: Agent, request: LLMRequest) -> Generator[Any, Any, Effects]:
        """One LLM call: a slot (``max_concurrent_llm``), the call, its latency; then
        ``on_reply``."""
        core, slots, shared = self.core, self.llm_slots, self.shared
        held = False
        try:
            if slots is not None:
                yield Acquire(slots)
                held = True
                if self.error is not None:  # the run is failing: stop here
                    raise Aborted
            if self.asks_llm:
                args = core.llm_args(a, request)
                with shared:
                    core.llm_started()
                ask = Ask(args)
                try:
                    yield ask
                except BaseException:
                    with shared:
                        core.in_flight -= 1
                    raise
                assert ask.reply is not None, "the driver puts the reply in the Ask"
                reply, new_tokens, counted, remaining_s = ask.reply, args[4], True, 0.0
            elif core.provider is not None:  # attempts under the provider's limits
                new_tokens, reply, remaining_s = yield from attempts(
                    core, shared, self.now, self.time_scale, a, request
                )
                counted = True
            else:  # a pure function of the agent's record: drawn without the lock
                new_tokens, reply = core.draw_llm(a, request)
                counted, remaining_s = False, reply.latency_s
            delay = 0.0 if self.async_llm else remaining_s * self.time_scale
            with shared:
                if not counted:
                    core.llm_started()
                if reply.failed is None:
                    core.record_llm(a, reply)
                if delay <= 0:  # nothing to wait for: the call is over at once
                    core.in_flight -= 1
            if delay > 0:
                try:
                    yield Sleep(delay, "llm")
                finally:
                    with shared:
                        core.in_flight -= 1
        finally:
            if held:
                self.release(slots, a)  # type: ignore[arg-type]
        if self.error is not None:
            raise Aborted
        return core.reply_effects(a, new_tokens, reply, self.context(a))

    def tool_call(self, a: Agent, call: ToolCall) -> Generator[Any, Any, Effects]:
        """One tool call: its lock (if named), its duration; then ``on_tool``."""
        requested = self.now()
        gate = self.tool_lock(a, call.lock) if call.lock is not None else None
        held = False
        try:
            if gate is not None:
                yield Acquire(gate)
                held = True
                if self.error is not None:  # the run is failing: stop here
                    raise Aborted
            started = self.now()
            yield Sleep(call.duration_s * self.time_scale, "tool")  # a driver does not wait for 0
        finally:
            if held:
                self.release(gate, a)  # type: ignore[arg-type]
        with self.shared:
            self.core.account_tool(call, started - requested)
        if self.error is not None:
            raise Aborted
        return self.core.tool_effects(a, call, requested, started, self.context(a))
