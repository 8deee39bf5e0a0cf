"""MegaAgent (arXiv:2408.09955 §2, Algorithm 2) as a behaviour.

The run starts from a lone boss. An agent handed a subtask of ``size`` agents
(itself included) either does the work itself (``size == 1``, a *worker*) or becomes
the *admin* of a group: it plans, recruits its children at run time (the
organisation's fan-out cap applies) and hands each a share of the remaining agents,
so recruitment recurses level by level (:class:`TreePlan`). Groups at the same level
run in parallel; nothing waits for a level to finish.

Inside one Processing round an agent runs the function-call loop of the paper
(LLM → tool → LLM …):

* an admin plans in ``plan_calls`` LLM calls, each followed by a git operation
  (writing the plan, then recruiting), and hands out the subtasks;
* a worker alternates LLM calls and tool calls (a file write, which is a git
  operation behind the one global ``git`` mutex, then a code run or file read,
  without it), checks its own checklist (monitoring level 1) and delivers the part
  to its admin; a task comes in ``deliveries`` parts;
* an admin reviews each delivery its children send (monitoring level 2; the boss's
  review of its admins is level 3) and answers ``continue`` or ``retry``; once every
  child's final result is accepted it merges them (an LLM call and a git commit) and
  reports to its own parent.

A validation fails with a set probability drawn from a counter-based stream, so runs
are deterministic; every failure is a retry of the agent whose work failed, and one
agent failing more than ``retry_cap`` times ends the run with
:class:`RetryLimitError`. On finishing, every agent shares a note with its next
sibling: workers on the intra-group channel, admins with another admin on the admin
channel (inter-group chat); tasks, deliveries and reviews travel on the hierarchy
channel. Token counts per LLM call come from :class:`TokenPlan` (one entry per
stage: planning, task solving, merging).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from megaactors.core.behaviour import AgentContext, Effects, LLMRequest, Send, ToolCall, ToolResult
from megaactors.core.llm import LLMReply, stream_uniform
from megaactors.core.messages import ADMIN, HIERARCHY, INTRA, Batch
from megaactors.core.organisation import Organisation

__all__ = [
    "GIT_LOCK",
    "MERGING",
    "MONITOR_STREAM",
    "PLANNING",
    "STAGES",
    "TASK_SOLVING",
    "MegaAgent",
    "Monitoring",
    "RetryLimitError",
    "StageTokens",
    "TokenPlan",
    "TreePlan",
    "Work",
    "new_state",
    "stage_windows",
    "total_retries",
]

PLANNING, TASK_SOLVING, MERGING = "planning", "task_solving", "merging"
STAGES = (PLANNING, TASK_SOLVING, MERGING)
GIT_LOCK = "git"
"""The one global mutex every git operation holds."""
MONITOR_STREAM = 0x4D4F4E
"""Stream id of the monitoring draws (independent of the LLM latency stream)."""

# phases (what an agent is waiting for between rounds) and purposes of an LLM call
_WORK, _CHECK, _READ, _PLAN, _RECRUIT, _REVIEW, _MERGE = 1, 2, 3, 4, 5, 6, 7
_TASK_TEXT = "Subtask: build your part of the deliverable, recruit help if it is too big, report back. " * 4
_RESULT_TEXT = "Result: the files for my part are committed; summary of what was done and how to check it. " * 3
_NOTE_TEXT = "Note: interface and dependencies of my part, for the next part to build on. " * 3
_RETRY_TEXT = "Review: the result fails validation; fix the listed problems and resubmit. " * 2
_CONTINUE_TEXT = "Review: this part passes; go on with the next part of your task. " * 2


class RetryLimitError(RuntimeError):
    """An agent failed validation more often than the retry cap allows."""


def _check_int(name: str, value: int, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_probability(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")


@dataclass(frozen=True)
class TreePlan:
    """How many agents the run recruits and how: ``fanouts[level]`` caps the children
    of an admin at that level. An admin whose subtree must hold ``size`` agents
    recruits as few children as can hold the ``size - 1`` others within the fan-outs
    below (an admin recruits only the help it needs) and splits those others among
    them as evenly as possible, larger shares first."""

    agents: int
    fanouts: tuple[int, ...]

    def __post_init__(self) -> None:
        _check_int("agents", self.agents, 1)
        object.__setattr__(self, "fanouts", tuple(self.fanouts))
        for i, f in enumerate(self.fanouts):
            _check_int(f"fanout of level {i}", f, 1)
        if self.capacity < self.agents:
            raise ValueError(
                f"{self.agents} agents do not fit in a tree with fan-outs {self.fanouts} "
                f"(at most {self.capacity}); add a level or raise a fan-out"
            )

    @property
    def capacity(self) -> int:
        """Most agents a tree with these fan-outs holds."""
        return self._capacity(self.fanouts)

    def split(self, size: int, level: int) -> list[int]:
        """Subtree sizes of the children of an admin at ``level`` whose subtree holds ``size``."""
        rest = size - 1
        if rest <= 0:
            return []
        below = self._capacity(self.fanouts[level + 1 :])
        k = min(self.fanouts[level], -(-rest // below))
        q, r = divmod(rest, k)
        return [q + 1] * r + [q] * (k - r)

    def per_level(self) -> list[int]:
        """Agents at each level of the tree the plan builds."""
        counts: list[int] = []
        frontier = [self.agents]
        level = 0
        while frontier:
            counts.append(len(frontier))
            frontier = [c for s in frontier for c in self.split(s, level)]
            level += 1
        return counts

    @property
    def levels(self) -> int:
        """Levels of the tree, the boss's included."""
        return len(self.per_level())

    @property
    def max_fanout(self) -> int:
        return max(self.fanouts, default=1)

    @classmethod
    def balanced(cls, agents: int, fanout: int) -> TreePlan:
        """The shallowest tree of ``agents`` with at most ``fanout`` children per admin."""
        _check_int("fanout", fanout, 2)
        fanouts: tuple[int, ...] = ()
        while cls._capacity(fanouts) < agents:
            fanouts += (fanout,)
        return cls(agents, fanouts)

    @classmethod
    def flat(cls, agents: int) -> TreePlan:
        """No hierarchy: the boss recruits every other agent into its one group."""
        return cls(agents, (max(1, agents - 1),))

    @staticmethod
    def _capacity(fanouts: tuple[int, ...]) -> int:
        cap = 1
        for f in reversed(fanouts):
            cap = 1 + f * cap
        return cap


@dataclass(frozen=True)
class StageTokens:
    """Tokens of one LLM call of a stage: the prompt beyond the system prompt, the
    memory window and the batch just taken (``new_tokens``, at least 1 so that every
    call leaves the same items in the memory window), and the reply."""

    new_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        _check_int("new tokens", self.new_tokens, 1)
        _check_int("output tokens", self.output_tokens, 1)


@dataclass(frozen=True)
class TokenPlan:
    """Per-stage token counts of every LLM call."""

    planning: StageTokens
    task_solving: StageTokens
    merging: StageTokens

    def stage(self, name: str) -> StageTokens:
        return getattr(self, name)


@dataclass(frozen=True)
class Monitoring:
    """Three-level monitoring: each validation fails with its probability and
    triggers a retry of the agent whose work failed; one agent may be retried
    ``retry_cap`` times (the paper: 30 per agent per round)."""

    enabled: bool = True
    checklist_failure: float = 0.2
    """An agent's own checklist rejects its work (level 1)."""
    review_failure: float = 0.2
    """An admin rejects a child's delivery (level 2)."""
    boss_failure: float = 0.1
    """The boss rejects an admin's merged result (level 3)."""
    retry_cap: int = 30

    def __post_init__(self) -> None:
        _check_probability("checklist failure probability", self.checklist_failure)
        _check_probability("review failure probability", self.review_failure)
        _check_probability("boss failure probability", self.boss_failure)
        _check_int("retry cap", self.retry_cap, 0)


@dataclass(frozen=True)
class Work:
    """The function-call loop: LLM calls per task and per retry, tool durations."""

    task_calls: int = 4
    """LLM calls (each followed by a tool call) a worker makes for its task."""
    deliveries: int = 1
    """Parts a worker delivers its task in; its admin reviews each before it goes on."""
    plan_calls: int = 3
    """LLM calls of an admin's planning loop (each followed by a git operation: writing
    the plan, then recruiting)."""
    retry_calls: int = 1
    """LLM calls (each followed by a tool call) to fix rejected work."""
    git_s: float = 0.5
    """Seconds one git operation holds the global mutex."""
    tool_s: float = 1.0
    """Seconds of any other tool call (running code, reading files)."""
    git_lock: bool = True
    """Serialise git operations behind one global mutex (False: no mutex)."""
    notes: bool = True
    """Share a note with the next sibling on finishing (intra-group and admin chat)."""

    def __post_init__(self) -> None:
        _check_int("task calls", self.task_calls, 1)
        _check_int("plan calls", self.plan_calls, 1)
        _check_int("deliveries", self.deliveries, 1)
        if self.deliveries > self.task_calls:
            raise ValueError(f"{self.deliveries} deliveries need at least as many task calls, got {self.task_calls}")
        _check_int("retry calls", self.retry_calls, 1)
        for name in ("git_s", "tool_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name.replace('_', ' ')} must be a number >= 0, got {value!r}")


def new_state() -> dict[str, Any]:
    """The serializable state of an agent that has no task yet."""
    return {
        "size": 0,  # agents in its subtree, itself included (0: no task yet)
        "level": 0,
        "phase": 0,  # what the next LLM reply or tool result is for
        "left": 0,  # LLM calls left in the current function-call loop
        "step": 0,  # loop iterations done (odd ones run code, even ones write files)
        "part": 0,  # parts of its task delivered and accepted so far
        "retries": 0,
        "draws": 0,  # monitoring draws made (the counter of its random stream)
        "children": [],
        "accepted": 0,
        "review": [],  # [child, final] for each delivery the current review covers
        "next": -1,  # the sibling it shares its note with
        "noted": False,
        "windows": {},  # stage -> [first call start, last call end]
    }


class MegaAgent:
    """The MegaAgent mechanism; see the module docstring."""

    name = "megaagent"

    def __init__(
        self,
        plan: TreePlan,
        tokens: TokenPlan,
        work: Work | None = None,
        monitoring: Monitoring | None = None,
        *,
        seed: int = 0,
        bytes_per_token: int = 4,
    ) -> None:
        _check_int("bytes per token", bytes_per_token, 1)
        self.plan = plan
        self.tokens = tokens
        self.work = work or Work()
        self.monitoring = monitoring or Monitoring()
        self.seed = seed
        self.bytes_per_token = bytes_per_token
        self._git = GIT_LOCK if self.work.git_lock else None
        w = self.work
        q, r = divmod(w.task_calls, w.deliveries)
        self._part_calls = [q + 1] * r + [q] * (w.deliveries - r)
        """LLM calls of each part of a worker's task."""

    # ------------------------------------------------------------------ protocol

    def init(self, agent: int, org: Organisation) -> dict[str, Any]:
        return new_state()

    def on_start(self, ctx: AgentContext, state: dict[str, Any]) -> Effects | None:
        org = ctx.org
        if org.n != 1 or org.boss != ctx.agent:
            raise ValueError(
                f"MegaAgent starts from a lone boss and recruits everyone else; got {org!r} "
                "(use Organisation.hierarchy(1, fanout))"
            )
        state["size"] = self.plan.agents
        return self._begin(state, 0)

    def on_batch(self, ctx: AgentContext, state: dict[str, Any], batch: Batch) -> Effects:
        read = -(-batch.nbytes() // self.bytes_per_token)
        retry = proceed = False
        for packet in batch.packets:
            kind = packet.kind
            if kind == "task":
                state["size"], state["level"], state["next"] = packet.payload[:3]
                return self._begin(state, read)
            if kind == "result":
                state["review"].append([packet.sender, True])
            elif kind == "progress":
                state["review"].append([packet.sender, False])
            elif kind == "retry":
                retry = True
            elif kind == "continue":
                proceed = True
        if retry:
            self._count_retry(ctx, state, "its parent rejected its work")
            if state["children"]:
                return self._call(state, _MERGE, MERGING, read)
            state["left"] = self.work.retry_calls
            return self._call(state, _WORK, TASK_SOLVING, read)
        if proceed:
            state["part"] += 1
            state["left"] = self._part_calls[state["part"]]
            return self._call(state, _WORK, TASK_SOLVING, read)
        if state["review"]:
            return self._call(state, _REVIEW, TASK_SOLVING, read)
        return self._call(state, _READ, TASK_SOLVING, read)

    def on_reply(self, ctx: AgentContext, state: dict[str, Any], reply: LLMReply) -> Effects:
        window = state["windows"].get(reply.stage)
        if window is None:
            state["windows"][reply.stage] = [ctx.now - reply.latency_s, ctx.now]
        else:
            window[1] = ctx.now
        phase = state["phase"]
        if phase == _WORK:
            step = state["step"]
            state["step"] = step + 1
            if step % 2:
                return Effects(tool=ToolCall("run_code", self.work.tool_s, stage=TASK_SOLVING))
            return Effects(tool=ToolCall("write_file", self.work.git_s, self._git, stage=TASK_SOLVING))
        if phase == _CHECK:
            if self._fails(state, ctx.agent, self.monitoring.checklist_failure):
                self._count_retry(ctx, state, "its checklist failed")
                state["left"] = self.work.retry_calls
                return self._call(state, _WORK, TASK_SOLVING, 0)
            return self._deliver(ctx, state)
        if phase == _PLAN:
            state["left"] -= 1
            if state["left"]:
                return Effects(tool=ToolCall("write_plan", self.work.git_s, self._git, stage=PLANNING))
            state["phase"] = _RECRUIT
            sizes = self.plan.split(state["size"], state["level"])
            return Effects(recruits=len(sizes), tool=ToolCall("add_agents", self.work.git_s, self._git, stage=PLANNING))
        if phase == _REVIEW:
            return self._reviewed(ctx, state)
        if phase == _MERGE:
            return Effects(tool=ToolCall("merge", self.work.git_s, self._git, stage=MERGING))
        return Effects()  # _READ: the notes are in its memory now

    def on_tool(self, ctx: AgentContext, state: dict[str, Any], result: ToolResult) -> Effects:
        phase = state["phase"]
        if phase == _WORK:
            state["left"] -= 1
            if state["left"]:
                return self._call(state, _WORK, TASK_SOLVING, 0)
            if self.monitoring.enabled:
                return self._call(state, _CHECK, TASK_SOLVING, 0)
            return self._deliver(ctx, state)
        if phase == _PLAN:
            return self._call(state, _PLAN, PLANNING, 0)
        if phase == _RECRUIT:
            return self._hand_out(ctx, state)
        return self._deliver(ctx, state)  # _MERGE: the merged result is committed

    # ------------------------------------------------------------------ steps

    def _call(self, state: dict[str, Any], phase: int, stage: str, read: int) -> Effects:
        state["phase"] = phase
        t = self.tokens.stage(stage)
        return Effects(llm=LLMRequest(t.new_tokens + read, t.output_tokens, stage))

    def _begin(self, state: dict[str, Any], read: int) -> Effects:
        """A task arrived: plan and recruit, or do it."""
        if state["size"] > 1:
            state["left"] = self.work.plan_calls
            return self._call(state, _PLAN, PLANNING, read)
        state["left"] = self._part_calls[0]
        return self._call(state, _WORK, TASK_SOLVING, read)

    def _hand_out(self, ctx: AgentContext, state: dict[str, Any]) -> Effects:
        """The recruits exist: give each its share of the subtask."""
        children = list(ctx.recruited)
        sizes = self.plan.split(state["size"], state["level"])
        state["children"] = children
        state["phase"] = 0
        level = state["level"] + 1
        k = len(children)
        return Effects(
            sends=[
                Send((c,), HIERARCHY, "task", [s, level, children[(i + 1) % k] if k > 1 else -1, _TASK_TEXT])
                for i, (c, s) in enumerate(zip(children, sizes, strict=True))
            ]
        )

    def _reviewed(self, ctx: AgentContext, state: dict[str, Any]) -> Effects:
        """The review call is back: accept or reject each delivery it covered."""
        a = ctx.agent
        p = self.monitoring.boss_failure if a == ctx.org.boss else self.monitoring.review_failure
        rejected, proceed = [], []
        for child, final in state["review"]:
            if self._fails(state, a, p):
                rejected.append(child)
            elif final:
                state["accepted"] += 1
            else:
                proceed.append(child)
        state["review"] = []
        sends = []
        if rejected:
            sends.append(Send(rejected, HIERARCHY, "retry", _RETRY_TEXT))
        if proceed:
            sends.append(Send(proceed, HIERARCHY, "continue", _CONTINUE_TEXT))
        if state["accepted"] == len(state["children"]):
            state["phase"] = _MERGE
            t = self.tokens.merging
            return Effects(sends=sends, llm=LLMRequest(t.new_tokens, t.output_tokens, MERGING))
        state["phase"] = 0
        return Effects(sends=sends)

    def _deliver(self, ctx: AgentContext, state: dict[str, Any]) -> Effects:
        """Send the part just finished to the parent: progress, or the result (with,
        once, a note to the next sibling)."""
        org, a = ctx.org, ctx.agent
        state["phase"] = 0
        parent = org.parent[a]
        if parent < 0:
            return Effects()
        if not state["children"] and state["part"] + 1 < len(self._part_calls):
            return Effects(sends=[Send((parent,), HIERARCHY, "progress", _RESULT_TEXT)])
        sends = [Send((parent,), HIERARCHY, "result", _RESULT_TEXT)]
        nxt = state["next"]
        if self.work.notes and nxt >= 0 and not state["noted"]:
            state["noted"] = True
            channel = ADMIN if org.admin_group[a] >= 0 and org.admin_group[nxt] >= 0 else INTRA
            sends.append(Send((nxt,), channel, "note", _NOTE_TEXT))
        return Effects(sends=sends)

    # ------------------------------------------------------------------ monitoring

    def _fails(self, state: dict[str, Any], agent: int, p: float) -> bool:
        if not self.monitoring.enabled or p <= 0.0:
            return False
        draw = state["draws"]
        state["draws"] = draw + 1
        return stream_uniform(self.seed, agent, draw, MONITOR_STREAM) < p

    def _count_retry(self, ctx: AgentContext, state: dict[str, Any], why: str) -> None:
        state["retries"] += 1
        cap = self.monitoring.retry_cap
        if state["retries"] > cap:
            role = ctx.org.role(ctx.agent)
            raise RetryLimitError(
                f"{role} {ctx.agent} (level {state['level']}) failed validation {state['retries']} times "
                f"({why}): retry cap of {cap} reached"
            )


def stage_windows(states: list[dict[str, Any]]) -> dict[str, list[float]]:
    """First start and last end of each stage's LLM calls over all agents."""
    out: dict[str, list[float]] = {}
    for s in states:
        for stage, (start, end) in s["windows"].items():
            w = out.get(stage)
            if w is None:
                out[stage] = [start, end]
            else:
                w[0] = min(w[0], start)
                w[1] = max(w[1], end)
    return {k: out[k] for k in STAGES if k in out}


def total_retries(states: list[dict[str, Any]]) -> int:
    """Retries over all agents (checklist failures and rejected results)."""
    return sum(s["retries"] for s in states)
