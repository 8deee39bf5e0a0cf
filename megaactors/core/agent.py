"""Agents: the Idle → Processing → Response state machine of MegaAgent §2.2.3.

An agent owns an in-queue (messages waiting for its next batch), an out-queue
(messages produced while Processing, delivered on entering Response), a short
memory window (token counts of what it last read and wrote) and its behaviour's
state (:attr:`Agent.data`, the serializable value behaviours call ``state``). Where
it is in the state machine is its *phase* (:class:`Phase`, :attr:`Agent.phase`).
Runtimes drive the state machine; the legal moves are::

    Idle ──batch taken──▶ Processing ──no more LLM calls──▶ Response ──queue empty──▶ Idle
                                                              └─queue not empty──▶ Processing
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Any

from megaactors.core.messages import Batch
from megaactors.errors import TransitionError

if TYPE_CHECKING:
    from megaactors.core.behaviour import Send
    from megaactors.core.messages import Packet
    from megaactors.core.trace import Trace

__all__ = ["LEGAL_TRANSITIONS", "Agent", "AgentState", "Phase", "TransitionError"]


class Phase(IntEnum):
    """The three phases of a MegaAgent agent (the states of its state machine)."""

    IDLE = 0
    PROCESSING = 1
    RESPONSE = 2


AgentState = Phase
"""Former name of :class:`Phase`."""

IDLE, PROCESSING, RESPONSE = Phase.IDLE, Phase.PROCESSING, Phase.RESPONSE

LEGAL_TRANSITIONS: frozenset[tuple[Phase, Phase]] = frozenset(
    {(IDLE, PROCESSING), (PROCESSING, RESPONSE), (RESPONSE, PROCESSING), (RESPONSE, IDLE)}
)


_LEGAL = tuple(tuple((f, t) in LEGAL_TRANSITIONS for t in Phase) for f in Phase)


class Agent:
    """One agent: queues, phase, memory window and behaviour state."""

    __slots__ = (
        "batch_tokens",
        "calls",
        "data",
        "id",
        "inbox",
        "memory",
        "outbox",
        "pending",
        "phase",
    )

    def __init__(self, agent_id: int, data: Any = None) -> None:
        self.id = agent_id
        self.phase: Phase = IDLE
        self.inbox: list[Packet] = []
        """Messages waiting for the next batch, as the packets they came in."""
        self.outbox: list[Send] = []
        self.data = data
        """The behaviour's state (what ``on_batch``, ``on_reply`` ... receive as ``state``)."""
        self.memory: list[int] = []
        """Token counts of the last items read or written, newest last."""
        self.calls = 0
        """LLM calls made so far (the call index of the next one)."""
        self.batch_tokens = 0
        """Tokens of the batch taken last (the default prompt of its LLM request)."""
        self.pending: Any = None
        """What the agent waits for (an LLM request in flight, or queued start effects)."""

    @property
    def state(self) -> Phase:
        """Former name of :attr:`phase`."""
        return self.phase

    @state.setter
    def state(self, phase: Phase) -> None:
        self.phase = phase

    def transition(self, to: Phase, now: float, trace: Trace | None = None) -> None:
        """Move to phase ``to`` at virtual time ``now``; raise on an illegal move."""
        frm = self.phase
        if not _LEGAL[frm][to]:
            raise TransitionError(f"agent {self.id}: illegal transition {frm.name} -> {Phase(to).name}")
        self.phase = to
        if trace is not None:
            trace.transition(self.id, frm, to, now)

    def take_batch(self) -> Batch:
        """Empty the in-queue and return everything that was in it."""
        inbox = self.inbox
        batch = Batch(self.id, inbox.copy())
        inbox.clear()  # the in-queue list itself lives as long as the agent
        return batch

    def remember(self, tokens: int, window: int) -> None:
        """Add an item of ``tokens`` tokens to the memory window of ``window`` items."""
        memory = self.memory
        memory.append(tokens)
        if len(memory) > window:
            del memory[0]

    def remember_call(self, new_tokens: int, output_tokens: int, window: int) -> None:
        """Add an LLM call's new prompt tokens and its reply to the memory window."""
        memory = self.memory
        if new_tokens:
            memory.append(new_tokens)
        memory.append(output_tokens)
        if len(memory) > window:
            del memory[: len(memory) - window]

    def __repr__(self) -> str:
        return f"Agent({self.id}, {self.phase.name}, queued={len(self.inbox)})"
