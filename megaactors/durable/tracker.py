"""What changed in a simulation since it was last described: the observer of a
:class:`~megaactors.durable.state.DurableSim`.

Events run, agents touched outside their own events, and sends stamped are noted
as the simulation runs (a list append each); :meth:`ChangeTracker.collect_packets`
encodes their packets and names the agents they may have come to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain, compress
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from megaactors.core.behaviour import ToolCall
from megaactors.core.llm import LLMReply
from megaactors.core.messages import ADMIN, Packet
from megaactors.core.organisation import Organisation
from megaactors.durable.state_codec import encode_packets

__all__ = ["ChangeTracker", "LLMCallHook", "ToolGate"]

LLMCallHook = Callable[[int, int, LLMReply], None]
"""Called with ``(agent, call_index, reply)`` for every LLM call issued."""
ToolGate = Callable[[int, int, ToolCall, Callable[[], Any]], Any]
"""Runs a tool function: ``(agent, invocation_index, call, run) -> value``."""

_CHANNEL = attrgetter("channel")
_PACKETS, _BROADCAST = itemgetter(0), itemgetter(1)


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
        self.sends: list[tuple[list[Packet], bool]] = []
        """The packets of every send stamped, and whether it was a broadcast."""
        self._members_of_n = -1
        self._groups_of = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        self._member_arrays: dict[int, np.ndarray] = {}

    def stamped(self, packets: list[Packet], broadcast: bool) -> None:
        self.sends.append((packets, broadcast))  # one append: this runs once per send

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
        self.events, self.touched_agents, self.sends = [], set(), []

    def collect_packets(self, members_changed: bool) -> tuple[dict[str, Any], np.ndarray]:
        """The packets stamped since the last reset, encoded, and the agents that
        received them (and possibly a few more). A broadcast's recipients are left
        out — they are its sender's peers on its channel — unless the organisation's
        groups changed since it was sent (``members_changed``: agents were recruited)."""
        sends, self.sends = self.sends, []
        packets = list(chain.from_iterable(map(_PACKETS, sends)))
        counts = np.fromiter(map(len, map(_PACKETS, sends)), dtype=np.int64, count=len(sends))
        sent = np.fromiter(map(_BROADCAST, sends), dtype=bool, count=len(sends)) & (counts == 1)
        if members_changed or not sent.any():
            encoded = encode_packets(packets, None)
            return encoded, np.frombuffer(encoded["recipients"], dtype=np.int64)
        broadcasts = sent if len(packets) == len(sends) else np.repeat(sent, counts)  # one flag per packet
        encoded = encode_packets(packets, broadcasts)
        # every member of a group or admins' channel that was broadcast to (a few more
        # than received: the groups of admins' senders too)
        senders = np.frombuffer(encoded["sender"], dtype=np.int64)
        channels: Iterable[str] = encoded["channel"]  # all of them, or their one value
        if not broadcasts.all():
            senders = senders[broadcasts]
            channels = map(_CHANNEL, compress(packets, broadcasts.tolist()))
        member_group, admin_group = self._group_columns()
        groups = set(member_group[senders].tolist()) | set(admin_group[senders].tolist())  # np.unique imports numpy.ma
        groups.discard(-1)
        lists = [self._members(g) for g in groups]
        if ADMIN in channels:
            lists.append(self._members(-1))
        return encoded, np.concatenate([np.frombuffer(encoded["recipients"], dtype=np.int64), *lists])

    def _group_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Each agent's group and the group it administers (-1: none), as arrays kept
        until agents are recruited (the only way groups change)."""
        org = self.org
        if len(org.member_group) != self._members_of_n:
            self._member_arrays = {}
            self._members_of_n = len(org.member_group)
            self._groups_of = (np.array(org.member_group, dtype=np.int64), np.array(org.admin_group, dtype=np.int64))
        return self._groups_of

    def _members(self, group: int) -> np.ndarray:
        """The members of ``group`` (-1: the admins) as an array (see :meth:`_group_columns`)."""
        found = self._member_arrays.get(group)
        if found is None:
            members = self.org.admins if group < 0 else self.org.groups[group]
            found = self._member_arrays[group] = np.array(members, dtype=np.int64)
        return found
