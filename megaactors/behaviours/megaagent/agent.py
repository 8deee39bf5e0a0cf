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
stage: planning, task solving, merging). An LLM call the provider gave up on (a reply
with ``failed`` set: rate limits, errors, timeouts, see
:mod:`megaactors.providers.limits`) is made again, its prompt now in memory.

Optional mechanisms of the reference code (off by default; see :class:`Work` and
:class:`OuterLoop`): reviews that read every delivery they cover, a polling delay
before a batch is worked on, git writes that conflict after waiting for the mutex,
and the main loop's joined rounds of TODO reminders with the boss's proofreading.
"""

from __future__ import annotations

from typing import Any

from megaactors.behaviours.megaagent.plan import (
    MERGING,
    PLANNING,
    TASK_SOLVING,
    Monitoring,
    OuterLoop,
    TokenPlan,
    TreePlan,
    Work,
    check_int,
)
from megaactors.behaviours.megaagent.state import TODO_CLEAR, TODO_OWED, TODO_RUNNING, new_state
from megaactors.core.behaviour import AgentContext, Effects, LLMRequest, Send, ToolCall, ToolResult
from megaactors.core.llm import LLMReply, stream_uniform
from megaactors.core.messages import ADMIN, HIERARCHY, INTRA, Batch
from megaactors.core.organisation import Organisation
from megaactors.errors import OrganisationError

__all__ = [
    "GIT_LOCK",
    "MECHANISM_STREAM",
    "MONITOR_STREAM",
    "MegaAgent",
    "RetryLimitError",
]

GIT_LOCK = "git"
"""The one global mutex every git operation holds."""
MONITOR_STREAM = 0x4D4F4E
"""Stream id of the monitoring draws (independent of the LLM latency stream)."""
MECHANISM_STREAM = 0x4D4543
"""Stream id of the optional mechanisms' draws (polling delays, conflicts, stale TODO lists)."""

# phases (what an agent is waiting for between rounds) and purposes of an LLM call
_WORK, _CHECK, _READ, _PLAN, _RECRUIT, _REVIEW, _MERGE = 1, 2, 3, 4, 5, 6, 7
_POLL, _REWRITE, _REMIND, _LOOP_POLL, _PROOF = 8, 9, 10, 11, 12
_TASK_TEXT = "Subtask: build your part of the deliverable, recruit help if it is too big, report back. " * 4
_RESULT_TEXT = "Result: the files for my part are committed; summary of what was done and how to check it. " * 3
_NOTE_TEXT = "Note: interface and dependencies of my part, for the next part to build on. " * 3
_RETRY_TEXT = "Review: the result fails validation; fix the listed problems and resubmit. " * 2
_CONTINUE_TEXT = "Review: this part passes; go on with the next part of your task. " * 2


class RetryLimitError(RuntimeError):
    """An agent failed validation more often than the retry cap allows."""


class MegaAgent:
    """The MegaAgent mechanism; see the module docstring."""

    name = "megaagent"
    version = "1"
    """This logic's version: bumped by a change that alters its results, so that a run
    made with one is never resumed by another (megaactors' own upgrades keep it)."""

    def __init__(
        self,
        plan: TreePlan,
        tokens: TokenPlan,
        work: Work | None = None,
        monitoring: Monitoring | None = None,
        *,
        seed: int = 0,
        bytes_per_token: int = 4,
        outer_loop: OuterLoop | None = None,
    ) -> None:
        check_int("bytes per token", bytes_per_token, 1)
        self.plan = plan
        self.tokens = tokens
        self.work = work or Work()
        self.monitoring = monitoring or Monitoring()
        self.outer_loop = outer_loop or OuterLoop()
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
        self.check_organisation(ctx.org)
        state["size"] = self.plan.agents
        return self._begin(state, 0)

    def check_organisation(self, org: Organisation) -> None:
        """Refuse an organisation this mechanism cannot run on: it recruits its own."""
        if org.n != 1 or org.boss is None:
            raise OrganisationError(
                f"MegaAgent starts from a lone boss and recruits everyone else; got {org!r} "
                "(use Organisation.hierarchy(1, fanout))"
            )

    def on_batch(self, ctx: AgentContext, state: dict[str, Any], batch: Batch) -> Effects:
        read = -(-batch.nbytes() // self.bytes_per_token)
        retry = proceed = False
        relays: list[Send] = []
        other = False
        for packet in batch.packets:
            kind = packet.kind
            if kind == "task":
                state["size"], state["level"], state["next"] = packet.payload[:3]
                return self._after_poll(ctx, state, self._begin(state, read))
            if kind == "round":
                relays += self._join_round(ctx, state, packet.payload[0])
                continue
            if kind == "round_done":
                state["waiting"] -= 1
                continue
            other = True
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
                eff = self._call(state, _MERGE, MERGING, read)
            else:
                state["left"] = self.work.retry_calls
                eff = self._call(state, _WORK, TASK_SOLVING, read)
        elif proceed:
            state["part"] += 1
            state["left"] = self._part_calls[state["part"]]
            eff = self._call(state, _WORK, TASK_SOLVING, read)
        elif state["review"]:
            covered = self.work.review_tokens * len(state["review"])
            eff = self._call(state, _REVIEW, TASK_SOLVING, read + covered)
        elif other:
            eff = self._call(state, _READ, TASK_SOLVING, read)
        elif state["todo"] == TODO_OWED:
            eff = self._remind(state, read)
        else:
            eff = self._round_end(ctx, state) or Effects()
        if relays:
            eff.sends = [*relays, *eff.sends]
        return self._after_poll(ctx, state, eff)

    def on_reply(self, ctx: AgentContext, state: dict[str, Any], reply: LLMReply) -> Effects:
        if reply.failed is not None:  # the provider gave up: the same call again, its prompt now in memory
            if reply.failed == "too_large":
                raise ValueError(f"a call of {reply.tokens_in} prompt tokens can never fit the provider's token limit")
            return Effects(llm=LLMRequest(0, self.tokens.stage(reply.stage).output_tokens, reply.stage))
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
            recruits = len(self.plan.split(state["size"], state["level"])) if self.recruits else 0
            return Effects(recruits=recruits, tool=ToolCall("add_agents", self.work.git_s, self._git, stage=PLANNING))
        if phase == _REVIEW:
            return self._reviewed(ctx, state)
        if phase == _MERGE:
            return Effects(tool=ToolCall("merge", self.work.git_s, self._git, stage=MERGING))
        if phase == _REWRITE:
            state["phase"] = _WORK
            return Effects(tool=ToolCall("write_file", self.work.git_s, self._git, stage=TASK_SOLVING))
        if phase == _REMIND:
            state["left"] -= 1
            if not state["left"]:
                state["todo"] = TODO_CLEAR
                return self._round_end(ctx, state) or Effects()
            if state["left"] == self.outer_loop.reminder_calls - 1:
                return Effects(tool=ToolCall("change_task_status", self.work.git_s, self._git, stage=TASK_SOLVING))
            return Effects(tool=ToolCall("run_code", self.work.tool_s, stage=TASK_SOLVING))
        if phase == _PROOF:
            state["left"] -= 1
            if not state["left"]:
                state["phase"] = 0
                return Effects()
            name = "run_code" if state["left"] == 1 else "read_file"
            return Effects(tool=ToolCall(name, self.work.tool_s, stage=MERGING))
        # _READ: the notes are in its memory now; a reminder of the main loop may wait
        if state["todo"] == TODO_OWED:
            return self._remind(state, 0)
        return self._round_end(ctx, state) or Effects()

    def on_tool(self, ctx: AgentContext, state: dict[str, Any], result: ToolResult) -> Effects:
        phase = state["phase"]
        if phase == _WORK:
            if result.name == "write_file" and self._conflicts(ctx, state, result):
                state["conflicts"] += 1
                self._count_retry(ctx, state, "its git writes kept conflicting")
                return self._call(state, _REWRITE, TASK_SOLVING, 0)
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
        if phase == _POLL:
            held, state["stash"] = state["stash"], None
            state["phase"] = held[0]
            return Effects(llm=LLMRequest(held[1], held[2], held[3]))
        if phase == _REMIND:
            return self._call(state, _REMIND, TASK_SOLVING, 0)
        if phase == _LOOP_POLL:
            return self._next_round(ctx, state)
        if phase == _PROOF:
            return self._call(state, _PROOF, MERGING, 0)
        if self.manager(ctx.org, ctx.agent) < 0 and self.outer_loop.enabled:  # the boss's merge is committed
            return self._loop_poll(ctx, state)
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
        children, sizes = self.team(ctx, state)
        state["children"] = children
        state["phase"] = 0
        level = state["level"] + 1
        a, org = ctx.agent, ctx.org
        return Effects(
            sends=[
                Send((c,), self.channel(org, a, c), "task", [s, level, self.sibling(org, children, i), _TASK_TEXT])
                for i, (c, s) in enumerate(zip(children, sizes, strict=True))
            ]
        )

    # ------------------------------------------------------------------ who works with whom

    recruits = True
    """Recruit the team at run time (:meth:`team` is who was recruited)."""

    def team(self, ctx: AgentContext, state: dict[str, Any]) -> tuple[list[int], list[int]]:
        """The agents this admin hands subtasks to, and each one's subtree size."""
        return list(ctx.recruited), self.plan.split(state["size"], state["level"])

    def manager(self, org: Organisation, a: int) -> int:
        """Whom ``a`` reports to (-1: nobody)."""
        return org.parent[a]

    def channel(self, org: Organisation, a: int, b: int) -> str:
        """The channel ``a`` uses for tasks, deliveries and reviews with ``b``."""
        return HIERARCHY

    def sibling(self, org: Organisation, team: list[int], i: int) -> int:
        """Whom ``team[i]`` shares its note with (-1: nobody)."""
        k = len(team)
        return team[(i + 1) % k] if k > 1 else -1

    def note_channel(self, org: Organisation, a: int, b: int) -> str:
        return ADMIN if org.admin_group[a] >= 0 and org.admin_group[b] >= 0 else INTRA

    def _to(self, org: Organisation, a: int, recipients: list[int], kind: str, payload: Any) -> list[Send]:
        """One send per channel ``a`` reaches ``recipients`` on, in their order."""
        by_channel: dict[str, list[int]] = {}
        for b in recipients:
            by_channel.setdefault(self.channel(org, a, b), []).append(b)
        return [Send(bs, ch, kind, payload) for ch, bs in by_channel.items()]

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
            sends += self._to(ctx.org, a, rejected, "retry", _RETRY_TEXT)
        if proceed:
            sends += self._to(ctx.org, a, proceed, "continue", _CONTINUE_TEXT)
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
        parent = self.manager(org, a)
        if parent < 0:
            return Effects()
        up = self.channel(org, a, parent)
        if not state["children"] and state["part"] + 1 < len(self._part_calls):
            return Effects(sends=[Send((parent,), up, "progress", _RESULT_TEXT)])
        sends = [Send((parent,), up, "result", _RESULT_TEXT)]
        nxt = state["next"]
        if self.work.notes and nxt >= 0 and not state["noted"]:
            state["noted"] = True
            sends.append(Send((nxt,), self.note_channel(org, a, nxt), "note", _NOTE_TEXT))
        return Effects(sends=sends)

    # ------------------------------------------------------------------ optional mechanisms

    def _draw(self, state: dict[str, Any], agent: int) -> float:
        draw = state["mdraws"]
        state["mdraws"] = draw + 1
        return stream_uniform(self.seed, agent, draw, MECHANISM_STREAM)

    def _after_poll(self, ctx: AgentContext, state: dict[str, Any], eff: Effects) -> Effects:
        """Hold the batch's first LLM call back by a polling delay (``Work.poll_s``)."""
        poll = self.work.poll_s
        request = eff.llm
        if not poll or request is None:
            return eff
        state["stash"] = [state["phase"], request.new_tokens, request.output_tokens, request.stage]
        state["phase"] = _POLL
        delay = poll * self._draw(state, ctx.agent)
        return Effects(sends=eff.sends, tool=ToolCall("poll", delay, stage=request.stage))

    def _conflicts(self, ctx: AgentContext, state: dict[str, Any], result: ToolResult) -> bool:
        """A write that waited for the mutex was based on a stale commit: does it conflict?"""
        p = self.work.conflict_probability
        return bool(p) and result.waited_s > 0 and self._draw(state, ctx.agent) < p

    def _loop_poll(self, ctx: AgentContext, state: dict[str, Any]) -> Effects:
        """The boss's work is merged, or a round is over: the main loop notices after
        a part of its polling interval, then starts the next round or proofreading."""
        delay = self.outer_loop.poll_s * self._draw(state, ctx.agent)
        state["phase"] = _LOOP_POLL
        return Effects(tool=ToolCall("main_loop_poll", delay, stage=MERGING))

    def _next_round(self, ctx: AgentContext, state: dict[str, Any]) -> Effects:
        r = state["round"] + 1
        if r > self.outer_loop.rounds:
            if not self.outer_loop.proofread:
                state["phase"] = 0
                return Effects()
            state["left"] = len(state["children"]) + 2
            return self._call(state, _PROOF, MERGING, 0)
        state["phase"] = 0
        relays = self._join_round(ctx, state, r)
        eff = self._remind(state, 0) if state["todo"] == TODO_OWED else (self._round_end(ctx, state) or Effects())
        eff.sends = [*relays, *eff.sends]
        return eff

    def _join_round(self, ctx: AgentContext, state: dict[str, Any], r: int) -> list[Send]:
        """Round ``r`` of the main loop reached this agent: pass it on to its children
        and draw whether its own TODO list is still non-empty."""
        state["round"] = r
        children = state["children"]
        state["waiting"] = len(children)
        if self._draw(state, ctx.agent) < self.outer_loop.stale_todo[r - 1]:
            state["todo"] = TODO_OWED
        return self._to(ctx.org, ctx.agent, children, "round", [r]) if children else []

    def _remind(self, state: dict[str, Any], read: int) -> Effects:
        state["todo"] = TODO_RUNNING
        state["left"] = self.outer_loop.reminder_calls
        return self._call(state, _REMIND, TASK_SOLVING, read)

    def _round_end(self, ctx: AgentContext, state: dict[str, Any]) -> Effects | None:
        """If this agent and its subtree are done with the current round, say so (the
        boss: start the next one)."""
        r = state["round"]
        if r == 0 or state["reported"] == r or state["todo"] != TODO_CLEAR or state["waiting"]:
            return None
        state["reported"] = r
        state["phase"] = 0
        parent = self.manager(ctx.org, ctx.agent)
        if parent < 0:
            return self._loop_poll(ctx, state)
        return Effects(sends=[Send((parent,), self.channel(ctx.org, ctx.agent, parent), "round_done", [r])])

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
