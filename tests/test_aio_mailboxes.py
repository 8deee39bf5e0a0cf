"""Shared channel logs as in-queues (megaactors.runtime.mailboxes) and the postman's
broadcast fast path: every message reaches exactly its recipients, with the ids and
bytes of per-recipient delivery, on one process or several."""

from __future__ import annotations

import random
from typing import Any

import pytest

from megaactors import Effects, Organisation, RouteError, Send
from megaactors.core.behaviour import NOTHING, ToolCall
from megaactors.core.ledger import Ledger
from megaactors.core.messages import ADMIN, HIERARCHY, INTRA, Message, Packet, encode, int_size
from megaactors.runtime import AsyncioRuntime, SimRuntime
from megaactors.runtime.mailboxes import ChannelLog, Mailboxes, Without
from megaactors.runtime.postman import Postman, check_routes, is_broadcast

# ---------------------------------------------------------------------- one log


def packet(sender: int, first_id: int, recipients: list[int], payload: Any = "x") -> Packet:
    return Packet(sender, INTRA, "chat", payload, None, 0.0, first_id, recipients)


def test_a_log_hands_each_reader_what_it_has_not_read_without_its_own_posts() -> None:
    log = ChannelLog()
    for a in (0, 1, 2):
        log.subscribe(a)
    p0 = packet(0, 0, [1, 2])
    log.post(p0, 0)  # 0 had read everything: its cursor moves past its own post
    assert log.cursors[0] == 1 and log.unread(0) == 0 and log.unread(1) == 1
    p1 = packet(1, 2, [0, 2], payload="a longer payload")
    log.post(p1, 1)  # 1 has p0 unread: its own post is skipped when it reads
    p2 = packet(2, 4, [0, 1])
    log.post(p2, 2)
    assert (log.unread(0), log.unread(1), log.unread(2)) == (2, 2, 2)
    got, nbytes = log.read(1)
    assert got == [p0, p2] and nbytes == p0.copy_bytes + p2.copy_bytes
    assert log.unread(1) == 0 and log.read(1) == ([], 0)
    got, nbytes = log.read(2)
    assert got == [p0, p1] and nbytes == p0.copy_bytes + p1.copy_bytes
    assert log.read(0)[0] == [p1, p2]
    assert log.packets == [] and log.base == log.end == 3  # read by everyone: dropped


def test_a_late_subscriber_starts_at_the_end_and_a_log_drops_only_what_all_have_read() -> None:
    log = ChannelLog()
    log.subscribe(0)
    log.subscribe(1)
    posts = [packet(0, 2 * i, [1]) for i in range(200)]
    for p in posts:
        log.post(p, 0)
    assert log.base == 0 and len(log.packets) == 200  # 1 has read nothing: nothing dropped
    log.subscribe(2)
    assert log.unread(2) == 0
    got, nbytes = log.read(1)
    assert got == posts and nbytes == sum(p.copy_bytes for p in posts)
    late = [packet(0, 1000 + i, [1, 2]) for i in range(100)]
    for p in late:
        log.post(p, 0)
    assert log.base >= 200  # the first posts, read by everyone, are gone
    assert log.read(2)[0] == late and log.read(1)[0] == late


def test_a_without_view_is_the_list_it_stands_for() -> None:
    members = [3, 5, 8, 13, 21, 34]
    view = Without(members, 2, 5)  # the first five but 8
    expected = [3, 5, 13, 21]
    assert len(view) == 4 and list(view) == expected and view == expected and view == tuple(expected)
    assert [view[i] for i in range(-4, 4)] == expected[-4:] + expected
    assert view[1:3] == [5, 13] and view.index(21) == 3 and 13 in view and 8 not in view
    bounds = (None, -5, -1, 0, 1, 2, 3, 4, 9)
    slices = [slice(a, b, c) for a in bounds for b in bounds for c in (None, 2, -1)]
    assert all(view[s] == expected[s] for s in slices)
    with pytest.raises(IndexError):
        view[4]
    members.append(55)  # a recruit joins later: the view keeps what it was
    assert list(view) == expected and view != expected[:-1]


@pytest.mark.parametrize("make", [lambda: Organisation.two_tier(300, 7), lambda: Organisation.hierarchy(40, 3)])
def test_compacting_a_broadcast_keeps_its_recipients_and_message_ids(make: Any) -> None:
    org = make()
    mail = Mailboxes(org, [[] for _ in range(org.n)])
    postman = Postman(org, Ledger(org.n))
    compacted = 0
    for a in range(org.n):
        for channel in (INTRA, ADMIN):
            peers = org.peers(a, channel)
            if peers:
                postman.next_message_id = 1000  # no id size boundary inside the send: one packet
                (p,) = postman.stamp(a, Send(list(peers), channel, "m", 0), 0.0)
                ids = [p.message_id(r) for r in peers]
                mail.compact(p)
                compacted += isinstance(p.recipients, Without)
                assert p.recipients == peers and [p.message_id(r) for r in peers] == ids
    assert compacted > org.n // 2


# ---------------------------------------------------------------------- the postman


@pytest.mark.parametrize(
    "make",
    [
        lambda: Organisation.two_tier(40, 6),
        lambda: Organisation.two_tier(30, 7, boss=True),
        lambda: Organisation.hierarchy(40, 3),
        lambda: Organisation.flat(9),
    ],
    ids=["two-tier", "two-tier-boss", "hierarchy", "flat"],
)
def test_broadcasts_are_recognised_and_nothing_else(make: Any) -> None:
    org = make()
    seen = 0
    for a in range(org.n):
        for channel in (INTRA, ADMIN):
            peers = org.peers(a, channel)
            if not peers:
                continue
            seen += 1
            assert is_broadcast(org, a, peers, channel) and check_routes(org, a, list(peers), channel)
            assert not is_broadcast(org, a, tuple(peers), channel)  # only lists, compared at C speed
            assert not is_broadcast(org, a, peers, HIERARCHY if channel == INTRA else INTRA)
            if len(peers) > 1:
                assert not is_broadcast(org, a, peers[::-1], channel)
                assert not check_routes(org, a, peers[1:], channel)
    assert seen


def test_the_broadcast_fast_path_still_refuses_every_disallowed_route() -> None:
    org = Organisation.two_tier(40, 6)
    member, admin, other_admin = 1, 0, 6
    with pytest.raises(RouteError, match="admin channel is only between admins"):
        check_routes(org, member, org.admin_peers(admin), ADMIN)
    with pytest.raises(RouteError, match="not in the same group"):
        check_routes(org, member, org.group_peers(other_admin), INTRA)
    with pytest.raises(RouteError, match="twice"):
        check_routes(org, admin, [*org.group_peers(admin), 1], INTRA)
    with pytest.raises(RouteError, match="cannot send to itself"):
        check_routes(org, admin, [admin, *org.group_peers(admin)], INTRA)
    with pytest.raises(RouteError, match="unknown recipient"):
        check_routes(org, admin, [*org.admin_peers(admin), 40], ADMIN)


def envelope_bytes(packets: list[Packet]) -> int:
    return sum(len(encode(p.message(r))) for p in packets for r in p.recipients)


@pytest.mark.parametrize("sender", [65449, 65575, 65596, 65702], ids=["admin", "member", "admin-past", "admin-far"])
def test_a_broadcast_costs_the_bytes_of_its_envelopes_across_id_size_boundaries(sender: int) -> None:
    org = Organisation.two_tier(65800, 126)  # one group straddles id 65536, where ids grow to 5 bytes
    ledger = Ledger(org.n)
    postman = Postman(org, ledger, next_message_id=65500)  # the message ids cross 65536 too
    for channel in (INTRA, ADMIN):
        peers = org.peers(sender, channel)
        if not peers:
            continue
        before = ledger.bytes
        packets = postman.stamp(sender, Send(peers, channel, "chat", [1, "hello"]), 2.5)
        assert postman.broadcast
        assert ledger.bytes - before == envelope_bytes(packets)
    postman.stamp(sender, Send([sender - 1], INTRA, "chat", 0), 3.0)
    assert not postman.broadcast


@pytest.mark.parametrize(
    "make",
    [lambda: Organisation.two_tier(300, 7), lambda: Organisation.hierarchy(40, 3)],
    ids=["two-tier", "hierarchy"],
)
def test_a_group_broadcast_is_stamped_as_the_same_send_in_another_order(make: Any) -> None:
    """A broadcast to a sender's group (decided and sized in one pass when the sender is
    in that group alone) costs the bytes of its envelopes, as the same recipients in
    another order do through the general route check; also once the group has grown. The
    postman names that group and the sender's place in it (only for such a broadcast)."""
    org = make()
    ledger = Ledger(org.n)
    postman = Postman(org, ledger, next_message_id=100)  # the ids cross 128 and 256 on the way
    grouped = 0
    for grow in (False, True):
        if grow:
            org.recruit(org.groups[1][0] if org.kind == "two-tier" else org.n - 1)  # a leaf of the hierarchy
            ledger.grow(org.n)
        for a in range(org.n):
            peers = org.group_peers(a)
            if len(peers) < 2:
                continue
            one_group = org.admin_group[a] in (-1, org.member_group[a])
            for recipients, broadcast in ((peers, True), (peers[::-1], False)):
                before = ledger.bytes
                packets = postman.stamp(a, Send(list(recipients), INTRA, "chat", [2, "text"]), 1.0)
                assert postman.broadcast is broadcast
                assert ledger.bytes - before == envelope_bytes(packets)
                if not broadcast or not one_group:
                    assert postman.group == -1
                elif postman.group >= 0:  # the group and where its sender stands, for the runtime
                    assert org.groups[postman.group][postman.position] == a
                    grouped += 1
    if org.kind == "two-tier":  # its groups are consecutive ids: most broadcasts take the one-group path
        assert grouped > org.n // 2
    with pytest.raises(RouteError):  # a whole group, but not the sender's
        postman.stamp(org.groups[0][1], Send(org.group_peers(org.groups[1][1]), INTRA, "chat", 0), 2.0)


# ---------------------------------------------------------------------- many logs and private queues


def test_mailboxes_deliver_what_per_recipient_queues_would_in_id_order() -> None:
    org = Organisation.hierarchy(50, 3)  # middle agents are in two groups
    rng = random.Random(7)
    inboxes: list[list[Packet]] = [[] for _ in range(org.n)]
    mail = Mailboxes(org, inboxes)
    postman = Postman(org, Ledger(org.n))
    expected: dict[int, list[tuple[int, int]]] = {a: [] for a in range(org.n)}
    taken: dict[int, list[tuple[int, int]]] = {a: [] for a in range(org.n)}
    copy_bytes = dict.fromkeys(range(org.n), 0)
    envelopes = dict.fromkeys(range(org.n), 0)
    broadcasts = 0
    for step in range(600):
        a = rng.randrange(org.n)
        channel = rng.choice((INTRA, INTRA, ADMIN, HIERARCHY))
        peers = org.peers(a, channel)
        if not peers:
            continue
        if rng.random() < 0.3:
            peers = rng.sample(peers, rng.randint(1, len(peers)))
        packets = postman.stamp(a, Send(peers, channel, "m", step), float(step))
        if postman.broadcast and len(packets) == 1:
            broadcasts += 1
            mail.post(packets[0])
        else:
            for p in packets:
                for r in p.recipients:
                    inboxes[r].append(p)
        for p in packets:
            for r in p.recipients:
                expected[r].append((p.message_id(r), a))
                envelopes[r] += len(encode(p.message(r)))
        if rng.random() < 0.5:
            b = rng.randrange(org.n)
            queued = mail.queued(b)
            assert mail.pending(b) == (queued > 0)
            got, nbytes = mail.take(b)
            assert len(got) == queued
            ids = [p.message_id(b) for p in got]
            assert ids == sorted(ids)
            assert all(p.sender != b for p in got)
            taken[b].extend((p.message_id(b), p.sender) for p in got)
            copy_bytes[b] += nbytes
            assert not mail.pending(b) and mail.queued(b) == 0
    for b in range(org.n):
        got, nbytes = mail.take(b)
        taken[b].extend((p.message_id(b), p.sender) for p in got)
        copy_bytes[b] += nbytes
        assert taken[b] == expected[b]  # each message exactly once, in id order
    assert broadcasts > 50
    # the bytes: copy_bytes plus the recipient's id, per message, are the envelopes
    assert all(copy_bytes[b] + len(taken[b]) * int_size(b) == envelopes[b] for b in range(org.n))


# ---------------------------------------------------------------------- in a run


class Gossip:
    """Each agent broadcasts on its channels ``rounds`` times: at start, then each
    time it has heard every peer's previous round; it records every (id, sender) it
    is handed and checks each batch."""

    name = "gossip"

    def __init__(self, rounds: int = 3, sharded: bool = False) -> None:
        self.rounds = rounds
        self.sharded = sharded

    def init(self, agent: int, org: Organisation) -> list[Any]:
        return [0, []]

    def _sends(self, ctx: Any, state: list[Any]) -> Effects:
        org, a = ctx.org, ctx.agent
        channels = [ch for ch in (INTRA, ADMIN) if org.peers(a, ch)]
        degree = sum(len(org.peers(a, ch)) for ch in channels)
        sends = []
        while state[0] < self.rounds and len(state[1]) >= state[0] * degree:
            state[0] += 1
            sends += [Send(org.peers(a, ch), ch, "g", [a, state[0]]) for ch in channels]
        return Effects(sends=sends)

    def on_start(self, ctx: Any, state: list[Any]) -> Effects | None:
        return self._sends(ctx, state)

    def on_batch(self, ctx: Any, state: list[Any], batch: Any) -> Effects:
        ids = [m.id for m in batch]
        assert all(m.recipient == ctx.agent != m.sender for m in batch)
        assert ids == sorted(ids) or self.sharded  # one process: arrival order is id order
        state[1].extend((m.id, m.sender, m.channel, m.payload[1]) for m in batch)
        return self._sends(ctx, state)

    def on_reply(self, ctx: Any, state: list[Any], reply: Any) -> Effects:
        return NOTHING


GOSSIP_ORGS = {
    "two-tier": lambda: Organisation.two_tier(90, 8),
    "flat": lambda: Organisation.flat(14),
    "hierarchy": lambda: Organisation.hierarchy(40, 3),
}


@pytest.mark.parametrize("topology", sorted(GOSSIP_ORGS))
def test_broadcasts_reach_every_peer_once_with_the_simulations_counts(topology: str) -> None:
    check_gossip(GOSSIP_ORGS[topology], shards=1)  # over shards: tests/ray_cases.py


def check_gossip(make: Any, shards: int) -> None:
    ref = SimRuntime(make(), Gossip()).run()
    got = AsyncioRuntime(make(), Gossip(sharded=shards > 1), shards=shards).run()
    org = got.org
    a, b = ref.ledger, got.ledger
    assert (b.messages, b.bytes, b.messages_by_channel) == (a.messages, a.bytes, a.messages_by_channel)
    for column in ("sent", "received"):
        assert list(b.per_agent[column]) == list(a.per_agent[column])
    assert sum(b.per_agent["bytes_received"]) == b.bytes  # per agent it depends on which ids it got
    for agent, (sent, seen) in enumerate(got.states):
        assert sent == 3
        sizes = [len(encode(Message.of(i, s, agent, ch, "g", [s, k]))) for i, s, ch, k in seen]
        assert b.per_agent["bytes_received"][agent] == sum(sizes)
        heard = sorted(s for _, s, _, _ in seen)
        assert heard == sorted([s for s in range(org.n) for ch in (INTRA, ADMIN) if agent in org.peers(s, ch)] * 3)
    ids = sorted(i for _, seen in got.states for i, *_ in seen)
    assert ids == list(range(b.messages))  # every message handed over exactly once


class Founder:
    """Agent 0 broadcasts to its group, recruits one more member once agent 1 pings
    it, then broadcasts again; everyone records the payloads it is handed."""

    name = "founder"

    def init(self, agent: int, org: Organisation) -> list[Any]:
        return []

    def on_start(self, ctx: Any, state: list[Any]) -> Effects | None:
        org, a = ctx.org, ctx.agent
        if a == 0:
            return Effects(sends=[Send(org.group_peers(0), INTRA, "news", "first")])
        return Effects(sends=[Send([0], HIERARCHY, "ping", "ping")])

    def on_batch(self, ctx: Any, state: list[Any], batch: Any) -> Effects:
        state.extend(m.payload for m in batch)
        if ctx.agent == 0 and "ping" in state and ctx.org.n == 2:
            return Effects(recruits=1, tool=ToolCall("pause", 0.0))
        return Effects()

    def on_tool(self, ctx: Any, state: list[Any], result: Any) -> Effects:
        assert ctx.recruited == [2]
        return Effects(sends=[Send(ctx.org.group_peers(0), INTRA, "news", "second")])

    def on_reply(self, ctx: Any, state: list[Any], reply: Any) -> Effects:
        return NOTHING


def test_a_recruit_reads_only_what_is_broadcast_after_it_joins() -> None:
    result = AsyncioRuntime(Organisation.hierarchy(2, 4), Founder()).run()
    assert result.org.n == 3 and result.org.group_peers(0) == [1, 2]
    assert result.states == [["ping"], ["first", "second"], ["second"]]
    assert list(result.ledger.per_agent["received"]) == [1, 2, 1]
