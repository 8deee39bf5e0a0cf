"""Tool calls in the simulation: a call runs for its ``duration_s`` of virtual time,
holding its lock (a :class:`~megaactors.runtime.gates.FifoGate`, first come first
served) if it names one; what it returns goes to ``on_tool`` when it ends.

:class:`ToolCalls` is a part of :class:`~megaactors.runtime.sim.SimRuntime` (it uses
the runtime's event queue, gates and records).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from megaactors.runtime.gates import FifoGate
from megaactors.runtime.sim_state import ToolInFlight

if TYPE_CHECKING:
    from collections.abc import Callable

    from megaactors.core.agent import Agent
    from megaactors.core.behaviour import Effects, ToolCall
    from megaactors.runtime.events import EventQueue
    from megaactors.runtime.interpreter import Interpreter
    from megaactors.runtime.sim_state import SimObserver

__all__ = ["ToolCalls"]


class ToolCalls:
    """The simulation's tool calls and their locks."""

    core: Interpreter
    now: float
    observer: SimObserver | None
    _seq: int
    _events: EventQueue
    _locks: dict[str, FifoGate[Agent]]
    _apply: Callable[[Agent, Effects], None]

    def _call_tool(self, a: Agent, call: ToolCall) -> None:
        flight = ToolInFlight(call, self.now)
        if call.lock is not None:
            gate = self._locks.get(call.lock)
            if gate is None:
                gate = self._locks[call.lock] = FifoGate()
            if not gate.try_acquire(a):
                a.pending = flight
                gate.wait(a)
                if self.observer is not None:
                    self.observer.touched(a.id)
                return
        self._run_tool(a, flight)

    def _run_tool(self, a: Agent, flight: ToolInFlight) -> None:
        flight.started = self.now
        a.pending = flight
        self._seq += 1
        self._events.push((self.now + flight.call.duration_s, self._seq, a.id))
        if self.observer is not None:
            self.observer.touched(a.id)

    def _tool_done(self, a: Agent, flight: ToolInFlight) -> None:
        call, core = flight.call, self.core
        if call.lock is not None:
            nxt = self._locks[call.lock].release(a)
            if nxt is not None:
                self._run_tool(nxt[0], nxt[0].pending)
        core.account_tool(call, flight.started - flight.requested)
        self._apply(a, core.tool_effects(a, call, flight.requested, flight.started, core.context(a, self.now)))
