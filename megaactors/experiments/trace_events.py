"""A simulated run as a Trace Event file, the JSON format Perfetto (ui.perfetto.dev)
and chrome://tracing open.

One *process* per group (the boss and agents outside any group in a process of their
own) and one *thread* (track) per agent, named ``agent N`` (``admin``/``boss`` marked);
times are virtual seconds shown as trace microseconds. On each track: the agent's
states as slices (``Processing``, ``Response``; Idle is the gaps), each LLM call as a
slice of its latency (stage, tokens and dollars in its arguments), each tool call as an
instant; every message as a flow arrow from its sender's track at its send time to its
recipient's track.

**Sampling.** A trace of every agent of a large run is too big to open: only
``max_agents`` agents are drawn (default 200; whole groups, smallest ids first, so
a group's chat is seen entire), only messages between two drawn agents are arrows, and
at most ``max_flows`` arrows are written (the first ones in time). The file's
``otherData`` says how many agents and messages were left out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from megaactors.core.agent import Phase
from megaactors.core.behaviour import ToolCall
from megaactors.core.llm import LLMReply
from megaactors.core.messages import Packet
from megaactors.core.organisation import Organisation
from megaactors.core.trace import Trace

__all__ = ["TraceRecorder", "write_trace_events"]

US = 1_000_000.0
"""Trace microseconds per virtual second."""


class _Ignored(list[int]):
    """The observer protocol's list of every event's agent, not kept (a trace does not need it)."""

    def append(self, item: int) -> None:
        return None


class TraceRecorder:
    """A :class:`~megaactors.runtime.sim_state.SimObserver` that notes LLM calls, tool
    calls and sends with their virtual times; ``clock`` reads the run's time (set it
    to the runtime's ``lambda: rt.now`` once the runtime is built)."""

    wants_llm_calls = True

    def __init__(self) -> None:
        self.clock: Callable[[], float] = lambda: 0.0
        self.events: list[int] = _Ignored()
        self.llm_calls: list[tuple[int, float, LLMReply]] = []
        self.tool_calls: list[tuple[int, float, str]] = []
        self.sends: list[list[Packet] | bool] = []
        """Each send's packets, then whether it was a broadcast (the postman appends them)."""

    def stamped(self) -> Iterator[tuple[Packet, bool]]:
        """Every packet stamped so far, with whether its send was a broadcast."""
        sends = self.sends
        groups, flags = cast("list[list[Packet]]", sends[::2]), cast("list[bool]", sends[1::2])
        for packets, broadcast in zip(groups, flags, strict=True):
            for packet in packets:
                yield packet, broadcast

    def touched(self, agent: int) -> None:
        return None

    def llm_issued(self, agent: int, call_index: int, reply: LLMReply) -> None:
        self.llm_calls.append((agent, self.clock(), reply))

    def run_tool(self, agent: int, invocation: int, call: ToolCall, run: Callable[[], Any]) -> Any:
        self.tool_calls.append((agent, self.clock(), call.name))
        return run()

    def recruited(self, recruiter: int, agents: list[int]) -> None:
        return None


def _drawn(org: Organisation, max_agents: int) -> set[int]:
    """Whole groups, smallest agent ids first, up to ``max_agents`` agents."""
    if org.n <= max_agents:
        return set(range(org.n))
    drawn: set[int] = set()
    if org.boss is not None:
        drawn.add(org.boss)
    for members in sorted(org.groups, key=min):
        if len(drawn) + len(members) > max_agents:
            break
        drawn.update(members)
    if len(drawn) < max_agents:  # groups too large: the first agents by id
        drawn.update(range(min(org.n, max_agents - len(drawn))))
    return drawn


def _process_of(org: Organisation, agent: int) -> int:
    group = org.member_group[agent] if org.member_group[agent] >= 0 else org.admin_group[agent]
    return group + 2 if group >= 0 else 1


def write_trace_events(
    path: str | Path,
    org: Organisation,
    trace: Trace,
    recorder: TraceRecorder,
    *,
    max_agents: int = 200,
    max_flows: int = 100_000,
) -> dict[str, int]:
    """Write the Trace Event file; return what it holds (agents, slices, calls, flows)."""
    drawn = _drawn(org, max_agents)
    events: list[dict[str, Any]] = []
    processes = {_process_of(org, a) for a in drawn}
    for pid in sorted(processes):
        name = "boss and ungrouped agents" if pid == 1 else f"group {pid - 2}"
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
    for a in sorted(drawn):
        role = " (boss)" if a == org.boss else " (admin)" if org.admin_group[a] >= 0 else ""
        events.append({"ph": "M", "name": "thread_name", "pid": _process_of(org, a), "tid": a,
                       "args": {"name": f"agent {a}{role}"}})  # fmt: skip
    open_since: dict[int, tuple[int, float]] = {}
    slices = 0
    for agent, frm, to, t in zip(trace.t_agent, trace.t_from, trace.t_to, trace.t_time, strict=True):
        if agent not in drawn:
            continue
        began = open_since.pop(agent, None)
        if began is not None and began[0] == frm and frm != Phase.IDLE:
            events.append({"ph": "X", "name": Phase(frm).name.title(), "cat": "state", "pid": _process_of(org, agent),
                           "tid": agent, "ts": began[1] * US, "dur": (t - began[1]) * US})  # fmt: skip
            slices += 1
        open_since[agent] = (to, t)
    for agent, t, reply in recorder.llm_calls:
        if agent in drawn:
            events.append({"ph": "X", "name": f"LLM {reply.stage or 'call'}", "cat": "llm",
                           "pid": _process_of(org, agent), "tid": agent, "ts": t * US, "dur": reply.latency_s * US,
                           "args": {"tokens_in": reply.tokens_in, "tokens_out": reply.tokens_out,
                                    "cost_usd": reply.cost_usd, "call": reply.call_index}})  # fmt: skip
    for agent, t, name in recorder.tool_calls:
        if agent in drawn:
            events.append({"ph": "i", "s": "t", "name": f"tool {name}", "cat": "tool", "pid": _process_of(org, agent),
                           "tid": agent, "ts": t * US})  # fmt: skip
    flows = left_out = 0
    for packet, broadcast in recorder.stamped():
        sender = packet.sender
        recipients = list(packet.recipients) or (org.peers(sender, packet.channel) if broadcast else [])
        for i, recipient in enumerate(recipients):
            if sender not in drawn or recipient not in drawn or flows >= max_flows:
                left_out += 1
                continue
            fid = packet.first_id + i
            ts = packet.sent_at * US
            common = {"name": packet.channel, "cat": "message", "id": fid, "ts": ts}
            events.append({**common, "ph": "s", "pid": _process_of(org, sender), "tid": sender})
            events.append({**common, "ph": "f", "bp": "e", "pid": _process_of(org, recipient), "tid": recipient})
            flows += 1
    counts = {
        "agents": len(drawn),
        "agents_left_out": org.n - len(drawn),
        "state_slices": slices,
        "llm_calls": sum(a in drawn for a, _, _ in recorder.llm_calls),
        "tool_calls": sum(a in drawn for a, _, _ in recorder.tool_calls),
        "flows": flows,
        "messages_left_out": left_out,
    }
    document = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"time": "virtual", **counts}}
    Path(path).write_text(json.dumps(document))
    return counts
