"""Agents: the Idle → Processing → Response state machine of MegaAgent §2.2.3.

An agent owns an in-queue (messages waiting for its next batch), an out-queue
(messages produced while Processing, delivered on entering Response), a short
memory window (token counts of what it last read and wrote) and the serializable
state of its behaviour. Runtimes drive the state machine; the legal moves are::

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

__all__ = ["LEGAL_TRANSITIONS", "Agent", "AgentState", "TransitionError"]


class AgentState(IntEnum):
    """The three states of a MegaAgent agent."""

    IDLE = 0
    PROCESSING = 1
    RESPONSE = 2


IDLE, PROCESSING, RESPONSE = AgentState.IDLE, AgentState.PROCESSING, AgentState.RESPONSE

LEGAL_TRANSITIONS: frozenset[tuple[AgentState, AgentState]] = frozenset(
    {(IDLE, PROCESSING), (PROCESSING, RESPONSE), (RESPONSE, PROCESSING), (RESPONSE, IDLE)}
)


_LEGAL = tuple(tuple((f, t) in LEGAL_TRANSITIONS for t in AgentState) for f in AgentState)


class Agent:
    """One agent: queues, state, memory window and behaviour state."""

    __slots__ = (
        "batch_tokens",
        "calls",
        "data",
        "id",
        "inbox",
        "memory",
        "outbox",
        "pending",
        "state",
    )

    def __init__(self, agent_id: int, data: Any = None) -> None:
        self.id = agent_id
        self.state: AgentState = IDLE
        self.inbox: list[Packet] = []
        """Messages waiting for the next batch, as the packets they came in."""
        self.outbox: list[Send] = []
        self.data = data
        self.memory: list[int] = []
        """Token counts of the last items read or written, newest last."""
        self.calls = 0
        """LLM calls made so far (the call index of the next one)."""
        self.batch_tokens = 0
        """Tokens of the batch taken last (the default prompt of its LLM request)."""
        self.pending: Any = None
        """What the agent waits for (an LLM request in flight, or queued start effects)."""

    def transition(self, to: AgentState, now: float, trace: Trace | None = None) -> None:
        """Move to ``to`` at virtual time ``now``; raise on an illegal move."""
        frm = self.state
        if not _LEGAL[frm][to]:
            raise TransitionError(f"agent {self.id}: illegal transition {frm.name} -> {AgentState(to).name}")
        self.state = to
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
        return f"Agent({self.id}, {self.state.name}, queued={len(self.inbox)})"
