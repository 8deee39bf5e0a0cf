"""The behaviour protocol: agent logic as pure functions that return effects.

A behaviour never sleeps, opens a socket or touches a thread. It looks at an agent's
serializable state and the batch of messages it took, and returns :class:`Effects`:
messages to send, an LLM request, agents to recruit and a new state. A runtime
performs the effects (in virtual time, on threads, on an event loop) and calls the
behaviour back with the LLM reply; returning another LLM request from
:meth:`Behaviour.on_reply` is the function-call loop of MegaAgent's Algorithm 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from megaactors.errors import BehaviourError

if TYPE_CHECKING:
    from megaactors.core.llm import LLMReply
    from megaactors.core.messages import Batch
    from megaactors.core.organisation import Organisation

__all__ = [
    "NOTHING",
    "UNCHANGED",
    "AgentContext",
    "Behaviour",
    "BehaviourError",
    "Effects",
    "Interrupt",
    "LLMRequest",
    "OrganisationCheck",
    "ReportsWaiting",
    "Send",
    "ToolBehaviour",
    "ToolCall",
    "ToolResult",
    "check_organisation",
    "new_context",
    "new_send",
    "sends_only",
    "uses_tools",
]


class _Unchanged:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCHANGED"

    def __reduce__(self) -> str:
        return "UNCHANGED"  # unpickled as the one marker (it is compared by identity)


UNCHANGED: Any = _Unchanged()
"""Marker for :attr:`Effects.state`: keep the agent's state as it is."""


@dataclass(slots=True)
class Send:
    """One payload sent on ``channel`` to each of ``recipients`` (one message each)."""

    recipients: Sequence[int]
    channel: str
    kind: str
    payload: Any
    parent: int | None = None
    """Id of the message that caused this one (causal parent)."""


@dataclass(slots=True)
class LLMRequest:
    """An LLM call the agent wants made.

    ``new_tokens`` counts the prompt beyond the system prompt and the memory window
    (``None``: the messages of the batch just taken; inside the function-call loop:
    the tool result); ``output_tokens`` is the reply length (``None``: the model's
    default).
    """

    new_tokens: int | None = None
    output_tokens: int | None = None
    stage: str = ""
    """Free label for accounting (e.g. planning, task_solving, merging)."""
    prompt: str | None = None
    """Text for a real LLM; simulated LLMs only count tokens."""


@dataclass(slots=True)
class ToolCall:
    """A tool the agent wants run inside Processing (the other half of the
    function-call loop). It takes ``duration_s`` of virtual time; with ``lock`` set
    it first waits for that named mutex and holds it throughout (MegaAgent
    serialises every git operation behind one global lock)."""

    name: str
    duration_s: float = 0.0
    lock: str | None = None
    args: Any = None
    stage: str = ""


@dataclass(slots=True)
class ToolResult:
    """What a tool call returned and when it ran."""

    name: str
    result: Any
    started_s: float
    finished_s: float
    waited_s: float
    """Time spent waiting for the lock before starting."""
    stage: str = ""


@dataclass(slots=True)
class Interrupt:
    """Stop for a human at the end of this super-step (a checkpointed run stops with
    status ``interrupted`` and ``reason``; ``resume`` goes on past it). A runtime with
    no checkpoint to stop at records it in
    :attr:`~megaactors.runtime.result.RunResult.interrupts` and goes on."""

    reason: str


@dataclass(slots=True)
class Effects:
    """What a behaviour wants done. At most one of ``llm`` and ``tool``; with
    neither, the agent moves to Response and its sends are delivered."""

    state: Any = UNCHANGED
    sends: Sequence[Send] = ()
    llm: LLMRequest | None = None
    tool: ToolCall | None = None
    recruits: int = 0
    """Agents to recruit; they start Idle with :meth:`Behaviour.init` state."""
    interrupt: Interrupt | None = None
    """Ask for a human once these effects are applied (see :class:`Interrupt`)."""


NOTHING = Effects()
"""Effects that do nothing (do not mutate)."""


@dataclass(slots=True)
class AgentContext:
    """What a behaviour may read besides the agent's own state."""

    agent: int
    org: Organisation
    now: float
    recruited: list[int] = field(default_factory=list)
    """Ids of agents recruited by the previous effects of this agent."""


_new = object.__new__


def new_send(recipients: Sequence[int], channel: str, kind: str, payload: Any, parent: int | None = None) -> Send:
    """``Send(recipients, channel, kind, payload, parent)``, made without calling the
    class (see :func:`new_context`): for a behaviour's hot path."""
    send = _new(Send)
    send.recipients, send.channel, send.kind, send.payload, send.parent = recipients, channel, kind, payload, parent
    return send


def sends_only(sends: Sequence[Send]) -> Effects:
    """``Effects(sends=sends)``, made without calling the class (see :func:`new_context`):
    for a behaviour's hot path."""
    eff = _new(Effects)
    eff.state, eff.sends, eff.llm, eff.tool, eff.recruits, eff.interrupt = UNCHANGED, sends, None, None, 0, None
    return eff


def new_context(agent: int, org: Organisation, now: float, recruited: list[int]) -> AgentContext:
    """``AgentContext(agent, org, now, recruited)``, made without calling the class: on
    CPython 3.11 a class whose ``__init__`` is Python code costs about 3,000 machine
    instructions a call, this a fraction of that (a runtime makes one per callback)."""
    ctx = _new(AgentContext)
    ctx.agent, ctx.org, ctx.now, ctx.recruited = agent, org, now, recruited
    return ctx


class Behaviour(Protocol):
    """Agent logic, written once and run by every runtime.

    Optional hooks: a behaviour that returns a :class:`ToolCall` also defines
    ``on_tool`` (it is then a :class:`ToolBehaviour`); one that cannot run on every
    organisation defines ``check_organisation`` (an :class:`OrganisationCheck`)."""

    name: str

    def init(self, agent: int, org: Organisation) -> Any:
        """Initial serializable state of ``agent``."""
        ...

    def on_start(self, ctx: AgentContext, state: Any) -> Effects | None:
        """Called once per agent at time 0; ``None`` leaves the agent Idle."""
        ...

    def on_batch(self, ctx: AgentContext, state: Any, batch: Batch) -> Effects:
        """The agent entered Processing with ``batch`` (its whole in-queue)."""
        ...

    def on_reply(self, ctx: AgentContext, state: Any, reply: LLMReply) -> Effects:
        """The LLM answered; return another request to keep Processing, or none to respond."""
        ...


class ToolBehaviour(Behaviour, Protocol):
    """A behaviour that calls tools (returns :class:`ToolCall` effects)."""

    def on_tool(self, ctx: AgentContext, state: Any, result: ToolResult) -> Effects:
        """A tool call finished; what next (another call keeps the agent Processing)."""
        ...


@runtime_checkable
class ReportsWaiting(Protocol):
    """A behaviour that can say what an agent still waits for once a run is over
    (a run through a faulty network reports such agents as stalled)."""

    def awaiting(self, org: Organisation, agent: int, state: Any, received: int) -> str | None:
        """What ``agent`` (in ``state``, having taken ``received`` messages) still
        waits for, in a few words; None if its work is done."""
        ...


def uses_tools(behaviour: Behaviour) -> bool:
    """Whether ``behaviour`` has the optional ``on_tool`` hook (is a :class:`ToolBehaviour`)."""
    return callable(getattr(behaviour, "on_tool", None))


class OrganisationCheck(Protocol):
    """A behaviour that refuses organisations it cannot run on (e.g. without admins)."""

    def check_organisation(self, org: Organisation) -> None:
        """Raise :class:`~megaactors.errors.OrganisationError` naming why ``org`` will not do."""
        ...


def check_organisation(behaviour: Behaviour, org: Organisation) -> None:
    """Let ``behaviour`` refuse ``org`` if it has the optional hook (is an
    :class:`OrganisationCheck`); the command line calls it before anything is written."""
    check = getattr(behaviour, "check_organisation", None)
    if callable(check):
        check(org)
