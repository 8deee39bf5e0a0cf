"""What changed in a simulation since it was last described: the observer of a
:class:`~megaactors.durable.state.DurableSim`.

Events run, agents touched outside their own events, and sends stamped are noted
as the simulation runs (list appends); :meth:`ChangeTracker.collect_packets`
encodes their packets.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any, cast

import numpy as np

from megaactors.core.behaviour import ToolCall
from megaactors.core.llm import LLMReply
from megaactors.core.messages import Packet
from megaactors.core.organisation import Organisation
from megaactors.durable.state_codec import encode_packets

__all__ = ["ChangeTracker", "LLMCallHook", "ToolGate"]

LLMCallHook = Callable[[int, int, LLMReply], None]
"""Called with ``(agent, call_index, reply)`` for every LLM call issued."""
ToolGate = Callable[[int, int, ToolCall, Callable[[], Any]], Any]
"""Runs a tool function: ``(agent, invocation_index, call, run) -> value``."""


class ChangeTracker:
    """What changed in a simulation since it was last described (its observer).

    An agent's record changes only when one of its events completes, when it takes
    a batch or makes an LLM call or sends (its ledger row changes), when it starts
    a tool, is recruited, or runs its start effects. The first is noted in
    :attr:`events` as events run (how many per agent tells how its memory changed);
    ledger rows are compared when a delta is written; tools and recruits are noted
    in :attr:`touched_agents`. Paid calls and tool functions go through the hooks."""

    def __init__(self, org: Organisation, on_llm_call: LLMCallHook | None, tool_gate: ToolGate | None) -> None:
        self.org = org
        self.on_llm_call = on_llm_call
        self.wants_llm_calls = on_llm_call is not None
        self.tool_gate = tool_gate
        self.events: list[int] = []
        self.touched_agents: set[int] = set()
        self.sends: list[list[Packet] | bool] = []
        """The packets of every send stamped, each followed by whether it was a
        broadcast (the postman appends them; emptied in place)."""

    def touched(self, agent: int) -> None:
        self.touched_agents.add(agent)

    def llm_issued(self, agent: int, call_index: int, reply: LLMReply) -> None:
        if self.on_llm_call is not None:
            self.on_llm_call(agent, call_index, reply)

    def run_tool(self, agent: int, invocation: int, call: ToolCall, run: Callable[[], Any]) -> Any:
        return run() if self.tool_gate is None else self.tool_gate(agent, invocation, call, run)

    def recruited(self, recruiter: int, agents: list[int]) -> None:
        self.touched_agents.update(agents)

    def reset(self) -> None:
        """Forget everything noted so far."""
        self.events, self.touched_agents = [], set()
        self.sends.clear()

    def collect_packets(self, members_changed: bool) -> dict[str, Any]:
        """The packets stamped since the last reset, encoded. A broadcast's recipients
        are left out — they are its sender's peers on its channel — unless the
        organisation's groups changed since it was sent (``members_changed``: agents
        were recruited)."""
        sends = self.sends
        groups, flags = cast("list[list[Packet]]", sends[::2]), cast("list[bool]", sends[1::2])
        sends.clear()
        packets = list(chain.from_iterable(groups))
        if members_changed or True not in flags:
            return encode_packets(packets, None)
        sent = np.fromiter(flags, dtype=bool, count=len(flags))
        if len(packets) == len(groups):  # one packet per send (its ids of one size)
            return encode_packets(packets, sent)
        counts = np.fromiter(map(len, groups), dtype=np.int64, count=len(groups))
        return encode_packets(packets, np.repeat(sent & (counts == 1), counts))
