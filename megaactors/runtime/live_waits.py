"""What an agent cycle of a live runtime waits for, and how it stops.

:meth:`~megaactors.runtime.live.LiveRuntime.cycle` is a generator that *yields what
it waits for* and is sent the outcome; each runtime drives it its own way (see
:mod:`megaactors.runtime.live`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from megaactors.core.agent import Agent
from megaactors.core.behaviour import LLMRequest
from megaactors.core.llm import LLMReply
from megaactors.runtime.gates import FifoGate

__all__ = ["STARTS", "Aborted", "Acquire", "Ask", "Cycle", "CycleWait", "Sleep"]


class Acquire:
    """Wait until ``gate`` is held."""

    __slots__ = ("gate",)

    def __init__(self, gate: FifoGate[Agent]) -> None:
        self.gate = gate


class Sleep:
    """Wait ``seconds`` (of wall time; virtual time on a virtual clock) for ``what``:
    an ``llm`` call's latency or a ``tool`` call's duration."""

    __slots__ = ("seconds", "what")

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what


class Ask:
    """Call an LLM that answers by itself with ``args`` (see
    :meth:`~megaactors.runtime.interpreter.Interpreter.llm_args`); the driver puts
    the answer in :attr:`reply`."""

    __slots__ = ("args", "reply")

    def __init__(self, args: tuple[int, int, LLMRequest, int, int]) -> None:
        self.args = args
        self.reply: LLMReply | None = None


class _Starts:
    __slots__ = ()

    def __repr__(self) -> str:
        return "STARTS"


STARTS = _Starts()
"""Wait until every agent's start effects have reached their first wait."""

CycleWait = Acquire | Sleep | Ask | _Starts
"""What a cycle yields: what its agent waits for."""
Cycle = Generator[CycleWait, Any, None]
"""One agent from Idle (or its start) back to Idle."""


class Aborted(Exception):
    """Another agent failed: this one stops where it is."""
