"""LLM calls under a provider model in the simulation: attempts, 429s and retries as
timer events in virtual time.

:class:`ProviderCalls` is a part of :class:`~megaactors.runtime.sim.SimRuntime` (it
uses the runtime's event queue and records). Each attempt of a call is decided by
:meth:`Interpreter.attempt_llm <megaactors.runtime.interpreter.Interpreter.attempt_llm>`
at the virtual time it starts, so the token buckets see attempts in time order and
are exact. A refused or failed attempt leaves the agent waiting with an
:class:`~megaactors.runtime.sim_state.LLMRetry` and an event at the next attempt's
time; an answered one is an ordinary call in flight; a call that failed for good
delivers its failed reply to ``on_reply`` when its last attempt ends. The call holds
its LLM slot (``max_concurrent_llm``) from its first attempt to its reply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from megaactors.providers.limits import Answered, Retrying
from megaactors.runtime.sim_state import LLMRetry

if TYPE_CHECKING:
    from megaactors.core.agent import Agent
    from megaactors.core.behaviour import LLMRequest
    from megaactors.core.llm import LLMReply
    from megaactors.runtime.events import EventQueue
    from megaactors.runtime.gates import FifoGate
    from megaactors.runtime.interpreter import Interpreter

__all__ = ["ProviderCalls"]


class ProviderCalls:
    """The simulation's LLM calls when a provider model is set."""

    core: Interpreter
    now: float
    _seq: int
    _events: EventQueue
    _llm_slots: FifoGate[Agent] | None
    _issue_llm: Callable[[Agent, LLMRequest], tuple[int, LLMReply]]

    def _call_llm(self, a: Agent, request: LLMRequest, admitted: bool = False) -> None:
        """Issue ``a``'s call (``admitted``: it holds an LLM slot) or queue it for one
        (the general case of ``SimRuntime._call_llm_now``)."""
        slots = self._llm_slots
        if slots is not None and not admitted and not slots.try_acquire(a):
            a.pending = request
            slots.wait(a)
            return
        if self.core.provider is not None:
            self._first_attempt(a, request)
            return
        new_tokens, reply = self._issue_llm(a, request)
        self._seq += 1
        event = (self.now + reply.latency_s, self._seq, a.id)
        a.pending = (new_tokens, reply, event)
        self._events.push(event)

    def _first_attempt(self, a: Agent, request: LLMRequest) -> None:
        """``a`` holds its slot (if any): start its call's first attempt now."""
        core = self.core
        core.llm_started()
        new_tokens, reply = core.draw_llm(a, request)
        self._attempt(a, LLMRetry(new_tokens, reply, self.now))

    def _attempt(self, a: Agent, retry: LLMRetry) -> None:
        """Attempt ``retry.attempt`` of ``a``'s call, now."""
        core, now = self.core, self.now
        outcome = core.attempt_llm(a, retry.reply, retry.attempt, now, now - retry.first)
        self._seq += 1
        kind = type(outcome)
        if kind is Retrying:
            retry.attempt += 1
            a.pending = retry
            self._events.push((now + outcome.after_s, self._seq, a.id))  # type: ignore[union-attr]
            return
        if kind is Answered:
            reply = outcome.reply  # type: ignore[union-attr]
            core.record_llm(a, reply)
            due = now + reply.latency_s
        else:  # CallFailed: its index is taken, nothing is billed
            reply, due = outcome.reply, now + outcome.after_s  # type: ignore[union-attr]
        event = (due, self._seq, a.id)
        a.pending = (retry.new_tokens, reply, event)
        self._events.push(event)
