"""The effect interpreter: what every runtime does with a behaviour's effects, once.

A behaviour returns :class:`~megaactors.core.behaviour.Effects`; a runtime decides
*when* things happen (virtual time, an event loop, threads) and how agents wait.
Everything else is the same everywhere and lives here: the agents and their
behaviour states, the ledger, the trace and the postman; calling the behaviour
(``on_start``, ``on_batch``, ``on_reply``, ``on_tool``) with its context and
wrapping what it raises in a :class:`~megaactors.errors.BehaviourError` that names
the agent and the message; applying effects (new state, sends queued, recruits);
drawing and accounting LLM calls and the memory window; running and accounting tool
calls; and the run's result.

A runtime supplies an :class:`AgentHost` (what carries a recruited agent: a slot in
the simulation, a task, a thread) and may pass a :class:`RunObserver` (a durable run
records paid calls and gates tool side effects through one). The interpreter takes no
lock; a threaded runtime sets :attr:`Interpreter.guard` to one for recruiting and
calls the accounting methods under it.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from megaactors.core.agent import Agent
from megaactors.core.behaviour import (
    UNCHANGED,
    AgentContext,
    Behaviour,
    Effects,
    LLMRequest,
    ToolCall,
    ToolResult,
    new_context,
    uses_tools,
)
from megaactors.core.ledger import Ledger
from megaactors.core.llm import LLMReply
from megaactors.core.messages import Batch
from megaactors.core.organisation import Organisation
from megaactors.core.trace import Trace
from megaactors.errors import BehaviourError
from megaactors.providers.limits import Answered, LimitState, Outcome, ProviderModel, Retrying
from megaactors.runtime.postman import Postman
from megaactors.runtime.result import RunResult

__all__ = ["AgentHost", "Interpreter", "RunObserver", "Wait"]

Wait = LLMRequest | ToolCall | None
"""What an agent waits for after its effects are applied (None: nothing, it responds)."""


class AgentHost(Protocol):
    """What a runtime does for agents recruited during a run."""

    def place(self, recruiter: Agent, agents: list[Agent]) -> None:
        """Give ``agents`` (just recruited by ``recruiter``, already in the
        organisation, the ledger and :attr:`Interpreter.agents`) whatever carries them."""
        ...


class RunObserver(Protocol):
    """Sees a run's side effects as they happen (a durable run charges and records them)."""

    wants_llm_calls: bool
    """Whether :meth:`llm_issued` is to be called (for every call: say no if not needed)."""

    def llm_issued(self, agent: int, call_index: int, reply: LLMReply) -> None:
        """An LLM call was issued and accounted."""
        ...

    def run_tool(self, agent: int, invocation: int, call: ToolCall, run: Callable[[], Any]) -> Any:
        """Run the tool function ``run`` of the ``invocation``-th tool call of the run
        (or return the value recorded for it) and return its value."""
        ...

    def recruited(self, recruiter: int, agents: list[int]) -> None:
        """``recruiter`` recruited ``agents``."""
        ...


class Interpreter:
    """The agents, the accounting and the behaviour calls of one run."""

    def __init__(
        self,
        org: Organisation,
        behaviour: Behaviour,
        llm: Any,
        *,
        host: AgentHost,
        tools: dict[str, Callable[[Any], Any]] | None = None,
        trace: bool = True,
        observer: RunObserver | None = None,
        provider: ProviderModel | None = None,
    ) -> None:
        self.org = org
        self.behaviour = behaviour
        self.name = behaviour.name
        self.llm = llm
        self._host = weakref.ref(host)
        """The runtime (weakly: it holds this interpreter, and a run makes no cycles)."""
        self.tools = tools or {}
        self.observer = observer
        self.llm_observer = observer.llm_issued if observer is not None and observer.wants_llm_calls else None
        """Called with ``(agent, call_index, reply)`` for every LLM call (or None)."""
        self.tool_hook = uses_tools(behaviour)
        """Whether the behaviour has ``on_tool`` (may ask for tools)."""
        init = behaviour.init
        self.agents: list[Agent] = [Agent(a, init(a, org)) for a in range(org.n)]
        self.ledger = Ledger(org.n)
        self.trace: Trace | None = Trace() if trace else None
        self.postman = Postman(org, self.ledger)
        self.window: int = llm.tokens.memory_window
        """Items in an agent's memory window."""
        self.bytes_per_token: int = llm.tokens.bytes_per_token
        self.recruited: dict[int, list[int]] = {}
        """Recruiter -> agents it recruited that its next callback has not seen yet."""
        self.recruiters: list[int] = []
        """Who recruited each agent beyond the organisation's first ones, in order."""
        self.in_flight = 0
        """LLM calls issued and not yet answered."""
        self.tool_invocations = 0
        """Tool functions run so far (the index of the next one)."""
        self.guard: AbstractContextManager[Any] = contextlib.nullcontext()
        """Held while recruiting (a threaded runtime makes it a lock)."""
        self.provider = provider if provider is not None and provider.active else None
        """The provider's limits, retries and failures, when any is set (see :meth:`attempt_llm`)."""
        self.latency_model = getattr(llm, "latency", None)
        """The simulated LLM's latency model (a retried attempt redraws its random part)."""
        self.limits = LimitState()
        """The provider's token buckets and injected-fault count (part of the run's state)."""
        self.interrupts: list[tuple[int, str]] = []
        """(agent, reason) of every :class:`~megaactors.core.behaviour.Interrupt` yielded
        so far, in the order applied (a checkpointed run stops at the first)."""
        self.ledger.provider = self.provider is not None
        if self.provider is not None:
            self.provider.check_call_size(llm.tokens.system_tokens + llm.tokens.output_tokens)
            self.provider.check_timeout(self.latency_model, llm.tokens.output_tokens)

    # ------------------------------------------------------------------ calling the behaviour

    def context(self, a: Agent, now: float) -> AgentContext:
        """The context of ``a``'s next callback: ``ctx.recruited`` lists the agents it
        recruited since its previous one."""
        recruited = self.recruited
        return new_context(a.id, self.org, now, recruited.pop(a.id, ()) if recruited else ())  # type: ignore[arg-type]

    def start_effects(self, now: float = 0.0, agents: Iterable[Agent] | None = None) -> list[Effects | None]:
        """Every agent's ``on_start`` (or those of ``agents``), in id order."""
        on_start, context = self.behaviour.on_start, self.context
        effects: list[Effects | None] = []
        for a in self.agents if agents is None else agents:
            try:
                effects.append(on_start(context(a, now), a.data))
            except Exception as exc:
                raise BehaviourError(f"agent {a.id}: behaviour {self.name!r} failed in on_start: {exc!r}") from exc
        return effects

    def batch_effects(self, a: Agent, batch: Batch, ctx: AgentContext) -> Effects:
        """``on_batch`` of the batch ``a`` just took."""
        try:
            return self.behaviour.on_batch(ctx, a.data, batch)
        except Exception as exc:
            raise self.batch_error(a, batch, exc) from exc

    def batch_error(self, a: Agent, batch: Batch, exc: Exception) -> BehaviourError:
        """What ``on_batch`` raising ``exc`` on ``batch`` becomes."""
        first = batch[0] if len(batch) else None
        return BehaviourError(
            f"agent {a.id}: behaviour {self.name!r} failed on a batch of {len(batch)} "
            f"message(s) (first: {first!r}): {exc!r}"
        )

    def reply_effects(self, a: Agent, new_tokens: int, reply: LLMReply, ctx: AgentContext) -> Effects:
        """The call answered: its new prompt tokens and the reply join the memory
        window, and ``on_reply`` says what next."""
        # Agent.remember_call, inlined: this runs once per LLM call
        memory = a.memory
        if new_tokens:
            memory.append(new_tokens)
        memory.append(reply.tokens_out)
        if len(memory) > self.window:
            del memory[: len(memory) - self.window]
        try:
            return self.behaviour.on_reply(ctx, a.data, reply)
        except Exception as exc:
            raise self.reply_error(a, reply, exc) from exc

    def reply_error(self, a: Agent, reply: LLMReply, exc: Exception) -> BehaviourError:
        """What ``on_reply`` raising ``exc`` on ``reply`` becomes."""
        return BehaviourError(f"agent {a.id}: behaviour {self.name!r} failed on LLM reply {reply.call_index}: {exc!r}")

    def tool_effects(self, a: Agent, call: ToolCall, requested: float, started: float, ctx: AgentContext) -> Effects:
        """The tool call asked for at ``requested`` ran from ``started`` to ``ctx.now``
        (accounted already): run its function (through the observer, if any) and hand
        the result to ``on_tool``."""
        try:
            value = self.run_tool(a, call)
            result = ToolResult(call.name, value, started, ctx.now, started - requested, call.stage)
            return self.behaviour.on_tool(ctx, a.data, result)  # type: ignore[attr-defined]  # checked by apply
        except Exception as exc:
            raise BehaviourError(
                f"agent {a.id}: behaviour {self.name!r} failed on tool {call.name!r}: {exc!r}"
            ) from exc

    # ------------------------------------------------------------------ applying effects

    def apply(self, a: Agent, eff: Effects) -> Wait:
        """Keep the new state, queue the sends, recruit; return what ``a`` waits for
        next (an LLM request or a tool call), or None: it responds."""
        if eff.state is not UNCHANGED:
            a.data = eff.state
        if eff.sends:
            a.outbox.extend(eff.sends)
        if eff.recruits:
            self.recruit(a, eff.recruits)
        if eff.interrupt is not None:
            self.interrupts.append((a.id, str(eff.interrupt.reason)))
        if eff.llm is not None:
            return eff.llm
        tool = eff.tool
        if tool is not None:
            if tool.duration_s < 0:
                raise BehaviourError(f"agent {a.id}: tool {tool.name!r} has a negative duration {tool.duration_s}")
            if not self.tool_hook:
                raise BehaviourError(
                    f"agent {a.id}: behaviour {self.name!r} asked for tool {tool.name!r} but has no on_tool hook"
                )
        return tool

    def recruit(self, a: Agent, count: int) -> list[Agent]:
        """``count`` new agents recruited by ``a``: in the organisation, the ledger,
        the agent list and ``ctx.recruited`` of ``a``'s next callback; then placed by
        the host."""
        init, org = self.behaviour.init, self.org
        new: list[Agent] = []
        with self.guard:
            try:
                for _ in range(count):
                    rid = org.recruit(a.id)
                    agent = Agent(rid, init(rid, org))
                    self.agents.append(agent)
                    new.append(agent)
            finally:
                self.ledger.grow(org.n)
                ids = [r.id for r in new]
                self.recruited.setdefault(a.id, []).extend(ids)
                self.recruiters.extend([a.id] * len(new))
        if self.observer is not None:
            self.observer.recruited(a.id, ids)
        host = self._host()
        if host is not None:
            host.place(a, new)
        return new

    # ------------------------------------------------------------------ LLM calls

    def llm_args(self, a: Agent, request: LLMRequest) -> tuple[int, int, LLMRequest, int, int]:
        """Arguments of ``llm.complete`` (or ``llm.acomplete``) for ``a``'s next call:
        agent, call index, request, memory tokens, new tokens (the batch's unless the
        request names them)."""
        new_tokens = a.batch_tokens if request.new_tokens is None else request.new_tokens
        return a.id, a.calls, request, sum(a.memory), new_tokens

    def draw_llm(self, a: Agent, request: LLMRequest) -> tuple[int, LLMReply]:
        """A simulated call's new tokens and reply, not yet accounted: a pure function
        of the agent's record (no lock needed)."""
        new_tokens = a.batch_tokens if request.new_tokens is None else request.new_tokens
        return new_tokens, self.llm.complete(a.id, a.calls, request, sum(a.memory), new_tokens)

    def issue_llm(self, a: Agent, request: LLMRequest) -> tuple[int, LLMReply]:
        """A simulated call, started and accounted (:meth:`llm_started`,
        :meth:`draw_llm`, :meth:`record_llm` in one): its new tokens and its reply,
        due after ``reply.latency_s``."""
        self.in_flight += 1
        ledger = self.ledger
        if self.in_flight > ledger.peak_llm_in_flight:
            ledger.peak_llm_in_flight = self.in_flight
        new_tokens = a.batch_tokens if request.new_tokens is None else request.new_tokens
        index = a.calls
        reply = self.llm.complete(a.id, index, request, sum(a.memory), new_tokens)
        a.calls = index + 1
        ledger.record_llm(a.id, reply)
        if self.llm_observer is not None:
            self.llm_observer(a.id, index, reply)
        return new_tokens, reply

    def llm_started(self) -> None:
        """One more call in flight (the ledger keeps the peak)."""
        self.in_flight += 1
        if self.in_flight > self.ledger.peak_llm_in_flight:
            self.ledger.peak_llm_in_flight = self.in_flight

    def record_llm(self, a: Agent, reply: LLMReply) -> None:
        """Account a call ``a`` made (its next call gets the next index)."""
        index = a.calls
        a.calls = index + 1
        self.ledger.record_llm(a.id, reply)
        if self.llm_observer is not None:
            self.llm_observer(a.id, index, reply)

    def attempt_llm(self, a: Agent, reply: LLMReply, attempt: int, now: float, elapsed_s: float) -> Outcome:
        """Attempt ``attempt`` (0 first) at ``now`` of the call ``reply`` (drawn by
        :meth:`draw_llm`, not yet accounted), ``elapsed_s`` after its first attempt,
        under the provider model: the retry path every runtime shares. 429s, errors,
        timeouts, retries, backoff and failed calls are counted here; an
        :class:`~megaactors.providers.limits.Answered` call is accounted by the caller
        (:meth:`record_llm`) when it is issued; a failed one takes its call index."""
        provider = self.provider
        assert provider is not None, "attempt_llm is called only under a provider model"
        outcome = provider.attempt(
            self.limits, now, a.id, self.org.member_group[a.id], attempt, reply, self.latency_model, elapsed_s
        )
        if isinstance(outcome, Answered):
            return outcome
        ledger, kind = self.ledger, outcome.kind
        if kind == "rate_limited":
            ledger.rate_limited += 1
        elif kind == "error":
            ledger.llm_errors += 1
        elif kind == "timeout":
            ledger.llm_timeouts += 1
        elif kind == "fault":
            self.limits.faults += 1
        if type(outcome) is Retrying:
            ledger.retries += 1
            ledger.llm_wait_s += outcome.backoff_s
        else:
            ledger.failed_llm_calls += 1
            a.calls += 1
        return outcome

    # ------------------------------------------------------------------ tool calls

    def account_tool(self, call: ToolCall, waited: float) -> None:
        """Account a finished tool call that waited ``waited`` for its lock."""
        ledger = self.ledger
        ledger.tool_calls += 1
        ledger.tool_time_s += call.duration_s
        ledger.lock_wait_s += waited

    def run_tool(self, a: Agent, call: ToolCall) -> Any:
        """Run the tool function of a finished call (None when none is registered)."""
        index = self.tool_invocations
        self.tool_invocations = index + 1
        tool = self.tools.get(call.name)

        def run() -> Any:
            return tool(call.args) if tool is not None else None

        if self.observer is None:
            return run()
        return self.observer.run_tool(a.id, index, call, run)

    # ------------------------------------------------------------------ the result

    def result(self, runtime: str, virtual_time_s: float, wall_s: float, queued: Iterable[int]) -> RunResult:
        """Ledger, trace and behaviour states as they stand; ``queued`` counts the
        messages still waiting for each agent."""
        ledger = self.ledger
        ledger.peak_queue_depth = max(ledger.peak_queue_depth, max(queued, default=0))
        ledger.virtual_time_s = virtual_time_s
        ledger.wall_s = wall_s
        provider = self.provider
        return RunResult(
            runtime=runtime,
            org=self.org,
            ledger=ledger,
            trace=self.trace,
            states=[a.data for a in self.agents],
            faults={"llm": self.limits.faults} if provider is not None and provider.injects_faults else None,
            interrupts=list(self.interrupts),
        )
