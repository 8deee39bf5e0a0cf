"""A step-by-step runtime for debugging: one activation at a time, on demand.

:class:`StepRuntime` drives the same agent cycle as the live runtimes
(:meth:`~megaactors.runtime.live.LiveRuntime.cycle`) on a virtual clock, in one
thread, and only when asked. :meth:`StepRuntime.step` runs the next agent in line
from where it waited to its next wait (an LLM call, a tool call, a gate) or back to
Idle, and says what happened; between two steps every agent's record, in-queue and
the ledger can be looked at (in a notebook, say). Agents woken by a delivery queue up
in order; when none is ready the clock jumps to the next wait that ends (a reply, a
finished tool call). Waits last their virtual duration (``latency_s``; the time
scale does not apply) and nothing reads the wall clock but ``wall_s``.

It agrees with the simulation on every run of the conformance suite (same messages,
bytes and final states); its batches may differ, as the live runtimes' do.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from megaactors.core.agent import IDLE, PROCESSING, RESPONSE, Agent
from megaactors.core.behaviour import Behaviour
from megaactors.core.messages import Batch
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError
from megaactors.runtime.live import Acquire, Ask, Cycle, LiveRuntime, Sleep
from megaactors.runtime.options import RuntimeOptions
from megaactors.runtime.result import RunResult

__all__ = ["StepRuntime", "Turn"]

_Ready = tuple[Agent, Cycle]
"""An agent ready to go on, and its cycle."""


@dataclass(frozen=True)
class Turn:
    """What one :meth:`StepRuntime.step` ran: one agent's turn."""

    time: float
    """Virtual time of the step."""
    agent: int
    waits_for: str
    """What the agent waits for now: ``llm``, ``tool``, ``gate``, or ``idle`` (done)."""

    def __str__(self) -> str:
        return f"t={self.time:.3f}s agent {self.agent} -> {self.waits_for}"


class StepRuntime(LiveRuntime):
    """Runs a behaviour over an organisation one activation at a time, on demand."""

    name = "step"

    def __init__(
        self,
        org: Organisation,
        behaviour: Behaviour,
        llm: Any = None,
        options: RuntimeOptions | None = None,
        **option_fields: Any,
    ) -> None:
        super().__init__(org, behaviour, llm, options, **option_fields)
        if self.async_llm:
            raise ParameterError("the step runtime needs an LLM with a blocking complete(); use the asyncio runtime")
        self.time_scale = 1.0  # waits last their virtual duration
        self.asks_llm = False
        self.clock = 0.0
        """Virtual time."""
        self.turns = 0
        """Turns run so far (one per :meth:`step`)."""
        self._ready: deque[_Ready] = deque()
        self._timers: list[tuple[float, int, _Ready]] = []
        self._seq = 0
        self._busy = bytearray(org.n)
        """1 while an agent has a cycle under way (a delivery need not wake it)."""

    # ------------------------------------------------------------------ driving

    def now(self) -> float:
        return self.clock

    def start(self) -> None:
        """Call every agent's ``on_start``; nothing runs until :meth:`step`."""
        for a, eff in zip(self.agents, self.start_effects(), strict=True):
            if eff is not None:
                self._busy[a.id] = 1
                self._ready.append((a, self.cycle(a, eff)))

    @property
    def finished(self) -> bool:
        """True once every agent is Idle with nothing queued."""
        return self.started and not self._ready and not self._timers

    def pending(self) -> list[tuple[float, int]]:
        """``(time, agent)`` of everyone due to run, the next one first."""
        ready = [(self.clock, turn[0].id) for turn in self._ready]
        return ready + [(t, turn[0].id) for t, _, turn in sorted(self._timers, key=lambda e: e[:2])]

    def step(self) -> Turn | None:
        """Run the next agent in line until it waits for something that is not there
        yet or is Idle (one turn); None when nothing is left to run."""
        if not self.started:
            self.start()
        if not self._ready:
            if not self._timers:
                return None
            self.clock, _, turn = heapq.heappop(self._timers)
            self._ready.append(turn)
        a, cycle = self._ready.popleft()
        self.turns += 1
        for wait in cycle:  # until the agent waits for something that is not there yet, or is Idle
            if type(wait) is Sleep:
                if wait.seconds > 0:
                    self._seq += 1
                    heapq.heappush(self._timers, (self.clock + wait.seconds, self._seq, (a, cycle)))
                    return Turn(self.clock, a.id, wait.what)
            elif type(wait) is Acquire:
                if not wait.gate.try_acquire(a):
                    wait.gate.wait(a, (a, cycle))
                    return Turn(self.clock, a.id, "gate")
            elif type(wait) is Ask:
                try:
                    wait.reply = self.llm.complete(*wait.args)
                except BaseException:
                    cycle.close()
                    raise
            else:
                raise RuntimeError(f"agent {a.id}: the step runtime cannot wait for {wait!r}")
        self._busy[a.id] = 0
        return Turn(self.clock, a.id, "idle")

    def run(self) -> RunResult:
        """Step until nothing is left to run; return the result."""
        wall0 = time.perf_counter()
        while self.step() is not None:
            pass
        self.wall_s += time.perf_counter() - wall0
        return self.result()

    def result(self) -> RunResult:
        return self.with_faults(self.core.result(self.name, self.clock, self.wall_s, map(self.queued, self.agents)))

    # ------------------------------------------------------------------ what a live runtime supplies

    def take(self, a: Agent, woken: bool) -> Batch:
        self.move(a, PROCESSING)
        batch = a.take_batch()
        self.account_batch(a, batch, self.postman.take(batch))
        return batch

    def respond(self, a: Agent) -> tuple[bool, Batch | None]:
        self.move(a, RESPONSE)
        if a.outbox:
            stamp, now, agents, busy, ready = self.postman.stamp, self.clock, self.agents, self._busy, self._ready
            for send in a.outbox:
                for packet in stamp(a.id, send, now):
                    for r in packet.recipients:
                        agents[r].inbox.append(packet)
                        if not busy[r]:
                            busy[r] = 1
                            ready.append((agents[r], self.activation(agents[r])))
            a.outbox = []
        if a.inbox:
            return False, None
        self.move(a, IDLE)
        return True, None

    def wake_waiter(self, waiter: Any) -> bool:
        self._ready.append(waiter)
        return True

    def place(self, recruiter: Agent, agents: list[Agent]) -> None:
        self._busy.extend(bytes(len(agents)))
