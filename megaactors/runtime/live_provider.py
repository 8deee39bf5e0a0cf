"""A live runtime's simulated LLM call under a provider model (rate limits,
timeouts, errors, retries): its attempts, each at the virtual time it starts, the
backoff before each retry slept as a :class:`~megaactors.runtime.live_waits.Sleep`."""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from typing import Any

from megaactors.core.agent import Agent
from megaactors.core.behaviour import LLMRequest
from megaactors.core.llm import LLMReply
from megaactors.providers.limits import Answered, CallFailed
from megaactors.runtime.interpreter import Interpreter
from megaactors.runtime.live_waits import Sleep

__all__ = ["attempts"]


def attempts(
    core: Interpreter,
    shared: AbstractContextManager[Any],
    now: Callable[[], float],
    time_scale: float,
    a: Agent,
    request: LLMRequest,
) -> Generator[Any, Any, tuple[int, LLMReply, float]]:
    """The attempts of ``a``'s call ``request`` under the provider model (the
    interpreter's :meth:`~megaactors.runtime.interpreter.Interpreter.attempt_llm`, at
    the virtual time ``now()`` each starts, with ``shared`` held), sleeping ``after_s ×
    time_scale`` before each retry; returns its new tokens, its reply (answered, or
    failed for good) and the virtual seconds its last attempt still takes; the call
    is counted in flight."""
    new_tokens, reply = core.draw_llm(a, request)
    with shared:
        core.llm_started()
    first, attempt = now(), 0
    try:
        while True:
            with shared:
                at = now()
                outcome = core.attempt_llm(a, reply, attempt, at, at - first)
            if type(outcome) is Answered:
                return new_tokens, outcome.reply, outcome.reply.latency_s
            if type(outcome) is CallFailed:
                return new_tokens, outcome.reply, outcome.after_s
            attempt += 1
            yield Sleep(outcome.after_s * time_scale, "llm")  # type: ignore[union-attr]
    except BaseException:
        with shared:
            core.in_flight -= 1
        raise
