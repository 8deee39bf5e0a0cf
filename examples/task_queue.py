"""Manager–worker task queue: each admin hands out tasks to the members of its group.

An admin (the manager) plans with one LLM call, then gives one task to each of its
workers. A worker solves a task with an LLM call and a tool call (``run_tests``, which
takes ``test_s`` seconds), and reports back; the tests fail with probability
``failure`` (a seeded draw), and a failed task goes back into the queue. The manager
reviews each batch of reports (one LLM call) and hands the next task to every worker
that is free, until ``tasks`` tasks passed. It needs an organisation with admins
whose members can answer them (two-tier, hierarchy, or a graph with ``group`` and
``role`` attributes): on one without, the run is refused before it starts.

Run it (from this folder, or with it on PYTHONPATH)::

    megaactors run --behaviour task_queue:TaskQueue --topology two-tier --agents 40 --group-size 8 \\
        --behaviour-param tasks=30
"""

from __future__ import annotations

from typing import Any

from megaactors import (
    AgentContext,
    Batch,
    Effects,
    LLMReply,
    LLMRequest,
    Organisation,
    OrganisationError,
    Send,
    ToolCall,
    ToolResult,
)
from megaactors.core.llm import stream_uniform

__all__ = ["TaskQueue"]


def workers(org: Organisation, manager: int) -> list[tuple[str, int]]:
    """(channel, agent) for each member of the group ``manager`` administers that it may
    message and that is no admin itself."""
    group = org.admin_group[manager]
    if group < 0:
        return []
    return [
        (channel, b)
        for channel, peers in org.contacts(manager)
        for b in peers
        if org.member_group[b] == group and not org.is_admin(b)
    ]


class TaskQueue:
    """Manager–worker: each admin hands tasks to its group's members and reviews their reports."""

    name = "task-queue"
    version = "1"

    def __init__(self, tasks: int = 10, test_s: float = 2.0, failure: float = 0.2, seed: int = 0) -> None:
        if tasks < 1:
            raise ValueError(f"tasks must be >= 1, got {tasks}")
        if not 0 <= failure < 1:
            raise ValueError(f"failure must be a probability in [0, 1), got {failure}")
        self.tasks, self.test_s, self.failure, self.seed = tasks, test_s, failure, seed

    def check_organisation(self, org: Organisation) -> None:
        managers = [a for a in range(org.n) if workers(org, a)]
        if not managers:
            raise OrganisationError(
                f"task-queue needs admins with members to hand tasks to, and {org!r} has none "
                "(use two-tier or hierarchy, or give a graph 'group' and 'role' attributes)"
            )
        for a in managers:
            for _, w in workers(org, a):
                if not any(org.route_error(w, a, channel) is None for channel in ("intra", "hierarchy", "admin")):
                    raise OrganisationError(f"task-queue: worker {w} cannot report back to its manager {a}")

    def init(self, agent: int, org: Organisation) -> dict[str, Any]:
        return {"todo": 0, "issued": 0, "free": [], "passed": 0, "failed": 0, "solved": 0, "task": None, "draws": 0}

    def on_start(self, ctx: AgentContext, state: dict[str, Any]) -> Effects | None:
        if not workers(ctx.org, ctx.agent):
            return None  # a worker waits for tasks
        state["todo"] = self.tasks
        state["free"] = sorted(w for _, w in workers(ctx.org, ctx.agent))
        return Effects(llm=LLMRequest(new_tokens=200, stage="plan"))

    def on_batch(self, ctx: AgentContext, state: dict[str, Any], batch: Batch) -> Effects:
        for message in batch:
            if message.kind == "task":  # a worker's task: solve it
                state["task"] = [message.payload, message.sender, message.channel]
            elif message.payload["passed"]:  # a manager's report
                state["passed"] += 1
                state["free"].append(message.sender)
            else:
                state["failed"] += 1
                state["todo"] += 1  # the task goes back into the queue
                state["free"].append(message.sender)
        state["free"].sort()
        return Effects(llm=LLMRequest(stage="solve" if state["task"] else "review"))

    def on_reply(self, ctx: AgentContext, state: dict[str, Any], reply: LLMReply) -> Effects:
        if state["task"] is not None:  # the worker wrote its code: test it
            return Effects(tool=ToolCall("run_tests", self.test_s, args=state["task"][0], stage="solve"))
        channel_of = dict((b, ch) for ch, b in workers(ctx.org, ctx.agent))
        sends = []
        while state["todo"] and state["free"]:
            worker = state["free"].pop(0)
            state["todo"] -= 1
            state["issued"] += 1
            sends.append(Send((worker,), channel_of[worker], "task", state["issued"]))
        return Effects(sends=sends)

    def on_tool(self, ctx: AgentContext, state: dict[str, Any], result: ToolResult) -> Effects:
        task, manager, channel = state["task"]
        state["task"] = None
        state["solved"] += 1
        passed = stream_uniform(self.seed, ctx.agent, state["draws"], stream=0x7A5C) >= self.failure
        state["draws"] += 1
        reply_on = channel if ctx.org.route_error(ctx.agent, manager, channel) is None else _any_channel(ctx, manager)
        return Effects(sends=[Send((manager,), reply_on, "report", {"task": task, "passed": passed})])


def _any_channel(ctx: AgentContext, to: int) -> str:
    for channel in ("intra", "hierarchy", "admin"):
        if ctx.org.route_error(ctx.agent, to, channel) is None:
            return channel
    raise OrganisationError(f"agent {ctx.agent} cannot report to {to}")
