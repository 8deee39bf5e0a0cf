"""The chat round: the workload of every coordination-cost experiment.

In one round every agent sends one message to every agent it may chat with on each
of its channels:

* flat: every other agent (``N(N-1)`` messages);
* two-tier: every other member of its group, and each admin also every other admin
  on the admin channel (``Σ sᵢ(sᵢ-1) + a(a-1)``); a boss, if any, exchanges one
  message with each admin on the hierarchy channel (``+ 2a``);
* star: every spoke sends to the hub and the hub replies to each (``2(N-1)``);
* hierarchy: a task flows down every tree edge from the boss and a result flows back
  up every edge (``2(N-1)``);
* a graph organisation: one message along every directed edge (an undirected edge
  carries one each way: ``2|E|``), each on its edge's channel.

Every batch an agent takes costs one LLM call (it reads the batch); composing its
first message costs one more. A call the provider gave up on (a reply with
``failed`` set, see :mod:`megaactors.providers.limits`) is asked again, its prompt
now in the memory window, until it is answered. With several rounds, an agent sends round ``r + 1``
once it has read every round-``r`` message addressed to it (no agent can be more
than one round ahead of a peer, so two counters suffice). On a directed graph an
agent may run several rounds ahead of the agents it messages, so it counts the
messages of each round; one that nobody messages sends its rounds one after the
other.

A message from a human (channel ``human``, ``megaactors resume --send``) is read like
any batch (one LLM call) and counted in no round (once an agent's rounds are over, its
count of what it read decides nothing and takes it in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from megaactors.core.behaviour import NOTHING, AgentContext, Effects, LLMRequest, Send, new_send, sends_only
from megaactors.core.llm import LLMReply
from megaactors.core.messages import ADMIN, HIERARCHY, HUMAN, INTRA, Batch, Packet
from megaactors.core.organisation import Organisation

__all__ = ["TEXT_BYTES", "ChatRound", "expected_messages", "expected_receipts", "mesh_channels", "mesh_degree"]


_TEXT = (
    "Status update: my part of the task is progressing; here are my findings, open "
    "questions and the dependencies I need from you before the next step can start. "
) * 64
TEXT_BYTES = len(_TEXT)
"""The most payload text a chat-round message carries (``message_bytes``)."""

# state slots
_ROUND, _GOT, _AHEAD, _TODO, _SENDERS, _EXPECTED = 0, 1, 2, 3, 4, 5
_NOTHING, _SEND_ROUND, _TASK_DOWN, _RESULT_UP, _ANSWER = 0, 1, 2, 3, 4
_NOT_MESH = frozenset(("hierarchy", "star", "graph"))


def mesh_channels(org: Organisation, a: int) -> list[tuple[str, Sequence[int]]]:
    """Channels and peers of ``a`` for a symmetric exchange: each pair on one channel,
    the first of intra, admin, hierarchy that allows it (:meth:`Organisation.contacts`);
    peers as views where they are a whole group or every other admin
    (:meth:`Organisation.group_peers_view`, :meth:`Organisation.admin_peers_view`)."""
    if org.boss is None and org.kind in ("two-tier", "flat"):  # disjoint channels, tree edges inside groups
        pairs = ((INTRA, org.group_peers_view(a)), (ADMIN, org.admin_peers_view(a)))
        return [(channel, peers) for channel, peers in pairs if peers]
    return list(org.contacts(a))  # its own list, typed as a sequence of peers


def mesh_degree(org: Organisation, a: int) -> int:
    """``sum(len(peers) for _, peers in mesh_channels(org, a))``, cheaply where the
    structure allows (two-tier without a boss, flat)."""
    if org.kind in ("two-tier", "flat") and org.boss is None:
        degree = len(org.groups[org.member_group[a]]) - 1
        if org.admin_group[a] >= 0:
            degree += len(org.groups) - 1
        return degree
    return sum(len(peers) for _, peers in mesh_channels(org, a))


def expected_messages(org: Organisation, rounds: int = 1) -> int:
    """The closed-form message count of ``rounds`` chat rounds on ``org``."""
    if org.graph is not None:
        return rounds * org.graph.edge_count
    if org.kind in ("star", "hierarchy"):
        return 2 * (org.n - 1) * rounds
    return rounds * sum(len(peers) for a in range(org.n) for _, peers in mesh_channels(org, a))


def expected_receipts(org: Organisation, agent: int, rounds: int = 1) -> int:
    """How many messages ``agent`` receives in ``rounds`` complete chat rounds."""
    if org.kind == "star":
        return rounds * (org.n - 1) if agent == org.boss else rounds
    if org.kind == "hierarchy":
        children = len(org.children.get(agent, []))
        return rounds * (children + (agent != org.boss))
    return rounds * mesh_degree(org, agent)


class ChatRound:
    """``rounds`` chat rounds over any organisation."""

    name = "chat-round"
    version = "1"
    """This logic's version: bumped by a change that alters its results, so that a run
    made with one is never resumed by another (megaactors' own upgrades keep it)."""

    def __init__(self, rounds: int = 1, message_bytes: int = 200, output_tokens: int | None = None) -> None:
        if rounds < 0:
            raise ValueError(f"rounds must be >= 0, got {rounds}")
        if not 0 <= message_bytes <= TEXT_BYTES:
            raise ValueError(f"message_bytes must be between 0 and {TEXT_BYTES}, got {message_bytes}")
        self.rounds = rounds
        self.text = _TEXT[:message_bytes]
        self.output_tokens = output_tokens
        self._compose = Effects(llm=LLMRequest(new_tokens=0, output_tokens=output_tokens, stage="chat"))
        self._read = Effects(llm=LLMRequest(new_tokens=None, output_tokens=output_tokens, stage="chat"))

    # ------------------------------------------------------------------ protocol

    def init(self, agent: int, org: Organisation) -> list[Any]:
        if org.kind == "graph":  # messages read per round, and how many make a round
            return [0, [], 0, _NOTHING, [], org.in_degree(agent)]
        return [0, 0, 0, _NOTHING, [], 0]

    def on_start(self, ctx: AgentContext, state: list[Any]) -> Effects | None:
        if self.rounds == 0:
            return None
        org, a = ctx.org, ctx.agent
        if org.kind == "hierarchy":
            if a != org.boss or not org.children.get(a):
                return None
            todo = _TASK_DOWN
        elif org.kind == "star":
            if a == org.boss:
                return None
            todo = _SEND_ROUND
        elif org.kind == "graph":
            if not org.contacts(a):
                return None
            todo = _SEND_ROUND
        else:
            expected = mesh_degree(org, a)
            if not expected:
                return None
            state[_EXPECTED] = expected
            todo = _SEND_ROUND
        state[_TODO] = todo
        return self._compose

    def on_batch(self, ctx: AgentContext, state: list[Any], batch: Batch) -> Effects:
        kind = ctx.org.kind
        if kind not in _NOT_MESH:  # the mesh kinds (two-tier, flat), inlined: the hot path of every cost experiment
            r = state[_ROUND]
            if r < self.rounds:
                rounds_of = batch.leads()  # each message's round (its payload's first field)
                ahead = rounds_of.count(r)
                state[_AHEAD] += ahead
                got = rounds_of.count(r - 1)
                if ahead + got != len(rounds_of):  # other rounds (an agent restarted afresh) or a human's text
                    got = len(rounds_of) - ahead - sum(type(x) is not int for x in rounds_of)
                state[_GOT] += got
                if state[_GOT] == state[_EXPECTED]:
                    state[_TODO] = _SEND_ROUND
            else:  # its rounds are over: the count decides nothing more
                state[_GOT] += len(batch)
            return self._read
        packets = [p for p in batch.packets if p.channel != HUMAN]
        if not packets:  # only a human's message(s): read, and go on
            return self._read
        if kind == "hierarchy":
            self._tree_batch(ctx, state, packets)
        elif kind == "star":
            self._star_batch(ctx, state, packets)
        else:  # graph
            self._graph_batch(state, packets)
        return self._read

    def on_reply(self, ctx: AgentContext, state: list[Any], reply: LLMReply) -> Effects:
        if reply.failed is not None:  # the provider gave up on the call: ask again
            return self._again(reply)
        todo = state[_TODO]
        state[_TODO] = _NOTHING
        if todo == _NOTHING:
            return NOTHING
        org, a = ctx.org, ctx.agent
        r = state[_ROUND]
        if todo == _SEND_ROUND:
            if org.kind == "graph":
                return self._graph_send(ctx, state)
            if org.kind == "star":
                sends = [Send((org.parent[a],), HIERARCHY, "ask", [r, self.text])]
            else:
                # Send(...) and Effects(sends=...), made cheaply: this runs in every cost experiment
                payload = [r, self.text]
                sends = [new_send(peers, ch, "chat", payload) for ch, peers in mesh_channels(org, a)]
                state[_ROUND], state[_GOT], state[_AHEAD] = r + 1, state[_AHEAD], 0
                return sends_only(sends)
            return Effects(sends=sends)
        if todo == _ANSWER:
            senders = state[_SENDERS]
            state[_SENDERS] = []
            return Effects(sends=[Send(senders, HIERARCHY, "answer", [r, self.text])])
        if todo == _TASK_DOWN:
            return Effects(sends=[Send(org.children[a], HIERARCHY, "task", [r, self.text])])
        # _RESULT_UP
        return Effects(sends=[Send((org.parent[a],), HIERARCHY, "result", [r, self.text])])

    def _again(self, reply: LLMReply) -> Effects:
        """The same call again (its prompt is in the memory window now), unless it can
        never run."""
        if reply.failed == "too_large":
            raise ValueError(f"a call of {reply.tokens_in} prompt tokens can never fit the provider's token limit")
        return self._compose

    def awaiting(self, org: Organisation, agent: int, state: list[Any], received: int) -> str | None:
        """What ``agent`` still waits for once a run is over: the messages of its
        rounds it never received (a run through a lossy network may end so)."""
        expected = expected_receipts(org, agent, self.rounds)
        if received >= expected:
            return None
        return f"{expected - received} more message(s) of {self.rounds} round(s) (received {received} of {expected})"

    # ------------------------------------------------------------------ per organisation kind

    def _star_batch(self, ctx: AgentContext, state: list[Any], packets: list[Packet]) -> None:
        if ctx.agent == ctx.org.boss:
            state[_SENDERS] = list(dict.fromkeys(p.sender for p in packets))  # a repeated ask is answered once
            state[_ROUND] = packets[-1].payload[0]
            state[_TODO] = _ANSWER
            return
        state[_ROUND] += 1
        if state[_ROUND] < self.rounds:
            state[_TODO] = _SEND_ROUND

    def _tree_batch(self, ctx: AgentContext, state: list[Any], packets: list[Packet]) -> None:
        org, a = ctx.org, ctx.agent
        children = org.children.get(a, [])
        for m in packets:
            if m.kind == "task":
                state[_ROUND] = m.payload[0]
                state[_GOT] = 0
                state[_TODO] = _TASK_DOWN if children else _RESULT_UP
            else:
                state[_GOT] += 1
        if children and state[_GOT] == len(children):
            state[_GOT] = 0
            if a != org.boss:
                state[_TODO] = _RESULT_UP
            elif state[_ROUND] + 1 < self.rounds:
                state[_ROUND] += 1
                state[_TODO] = _TASK_DOWN

    def _graph_batch(self, state: list[Any], packets: list[Packet]) -> None:
        got = state[_GOT]
        for p in packets:
            r = p.payload[0]
            if r >= len(got):
                got.extend([0] * (r + 1 - len(got)))
            got[r] += 1
        r = state[_ROUND]
        if 0 < r < self.rounds and self._read_round(state, r - 1):
            state[_TODO] = _SEND_ROUND

    def _read_round(self, state: list[Any], r: int) -> bool:
        """Whether every round-``r`` message addressed to this agent has been read."""
        got = state[_GOT]
        return (got[r] if r < len(got) else 0) == state[_EXPECTED]

    def _graph_send(self, ctx: AgentContext, state: list[Any]) -> Effects:
        r = state[_ROUND]
        payload = [r, self.text]
        sends = [Send(peers, ch, "chat", payload) for ch, peers in ctx.org.contacts(ctx.agent)]
        state[_ROUND] = r + 1
        if r + 1 < self.rounds and self._read_round(state, r):  # nothing to wait for: compose the next round
            state[_TODO] = _SEND_ROUND
            return Effects(sends=sends, llm=self._compose.llm)
        return Effects(sends=sends)
