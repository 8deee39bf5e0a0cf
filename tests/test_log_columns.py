"""What a reader of a channel log gets without visiting the packets: the column of
leading payload fields behind ``Batch.leads``, and the bulk scan that finds the Idle
members of a group of consecutive ids. Each must equal what walking the packets or
the recipients gives."""

from __future__ import annotations

import random
from typing import Any

from megaactors import ChatRound, Organisation, SimRuntime
from megaactors.core.messages import INTRA, Batch, Packet, lead
from megaactors.runtime.mailboxes import ChannelLog, Mailboxes, Without, gather, leads


def packet(sender: int, first_id: int, payload: Any) -> Packet:
    return Packet(sender, INTRA, "chat", payload, None, 0.0, first_id, [9])


def deferred(log: ChannelLog, reader: int) -> Batch:
    part, count, _ = log.take(reader)  # type: ignore[misc]
    return Batch.deferred(reader, count, gather, [part], leads)


def test_lead_is_the_first_field_of_a_list_or_tuple_payload_and_none_otherwise() -> None:
    assert [lead(p) for p in ([3, "x"], (4,), [], "text", {"a": 1}, None, 7)] == [3, 4, None, None, None, None, None]


def test_a_deferred_batch_lists_the_leads_of_its_packets_in_order_without_its_readers_own_posts() -> None:
    log = ChannelLog()
    for a in (0, 1, 2):
        log.subscribe(a)
    payloads: list[Any] = [[0, "a"], "human text", (5, "b"), [], [1, "c"], [2]]
    senders = [0, 1, 2, 1, 0, 1]  # 1 posts while it has unread entries: they are skipped when it reads
    for i, (s, p) in enumerate(zip(senders, payloads, strict=True)):
        log.post(packet(s, i, p), s)
    for reader in (0, 1, 2):
        batch = deferred(log, reader)
        got = batch.leads()
        assert got == [lead(p.payload) for p in batch.packets]  # the packets, gathered after: the same
        assert len(got) == len(batch) == sum(s != reader for s in senders[1 if reader == 0 else 0 :])
    assert deferred_leads_survive_a_trim()


def deferred_leads_survive_a_trim() -> bool:
    """A slice taken before the log drops what everyone has read keeps its leads."""
    log = ChannelLog()
    log.subscribe(0)
    log.subscribe(1)
    for i in range(300):
        log.post(packet(0, i, [i % 7, "t"]), 0)
    early = deferred(log, 1)
    for i in range(300, 700):  # the log trims past its first entries (1 has read them)
        log.post(packet(0, i, [i % 7, "t"]), 0)
    assert log.base > 0
    late = deferred(log, 1)
    return early.leads() == [i % 7 for i in range(300)] and late.leads() == [i % 7 for i in range(300, 700)]


def test_a_batch_of_several_parts_or_listed_packets_finds_its_leads_from_the_packets() -> None:
    log = ChannelLog()
    log.subscribe(1)
    log.post(packet(0, 1, [7, "x"]), 0)
    part, count, _ = log.take(1)  # type: ignore[misc]
    private = [packet(2, 0, [6])]
    batch = Batch.deferred(1, count + 1, gather, [private, part], leads)
    assert batch.leads() == [6, 7]  # by message id across the parts
    assert Batch(1, [packet(0, 0, (3,)), packet(0, 1, "hi")]).leads() == [3, None]


def test_the_leads_of_several_parts_are_in_message_id_order_as_gather_lists_the_packets() -> None:
    # a reader of two logs (a group's and the admins') and a private in-queue, the
    # parts interleaving or not, its own posts among them: the leads, put in order
    # by the packets' ids alone, equal the leads of the packets gather lists
    rng = random.Random(5)
    for case in range(200):
        logs = [ChannelLog(), ChannelLog()]
        for log in logs:
            for a in (0, 1):
                log.subscribe(a)
        private: list[Packet] = []
        interleave = case % 2 == 0
        for i in range(rng.randint(2, 40)):
            where = rng.randrange(3) if interleave else min(2, i * 3 // 40)
            sender = rng.choice((0, 2))  # 0 is the reader: its own posts are skipped
            payload: Any = rng.choice(([i % 5, "t"], (i % 3,), "text", []))
            if where == 2:
                private.append(packet(2, i, payload))
            else:
                logs[where].post(packet(sender, i, payload), sender)
        parts: list[Any] = [private] if private else []
        parts += [taken[0] for taken in (log.take(0) for log in logs) if taken is not None]
        if len(parts) < 2:
            continue
        assert leads(parts) == [lead(p.payload) for p in gather([list(p) if type(p) is list else p for p in parts])]


def test_the_mesh_chat_round_reads_the_same_rounds_from_the_column() -> None:
    # two rounds: the second round's batches are counted by round, from the column
    org = Organisation.two_tier(60, 7)
    result = SimRuntime(org, ChatRound(2), trace=False).run()
    assert result.ledger.messages == 2 * sum(len(g) * (len(g) - 1) for g in org.groups) + 2 * 9 * 8
    assert all(state[1] == state[5] for state in result.states)  # every message of round 2 counted


def test_asyncio_batches_read_their_leads_from_the_logs_as_from_the_packets() -> None:
    from megaactors.runtime import AsyncioRuntime

    seen: list[tuple[list, list]] = []

    class Recording(ChatRound):
        def on_batch(self, ctx, state, batch):  # type: ignore[no-untyped-def]
            leads_first = batch.leads()  # before anything lists the packets
            seen.append((leads_first, [lead(p.payload) for p in batch.packets]))
            return super().on_batch(ctx, state, batch)

    org = Organisation.two_tier(60, 7)
    result = AsyncioRuntime(org, Recording(2), trace=False).run()
    expected = SimRuntime(org, ChatRound(2), trace=False).run()
    assert result.ledger.messages == expected.ledger.messages and result.states == expected.states
    assert len(seen) > 60 and all(from_logs == from_packets for from_logs, from_packets in seen)
    assert sum(map(len, (from_logs for from_logs, _ in seen))) == result.ledger.messages


def test_share_gives_a_range_for_a_group_of_consecutive_ids_and_the_list_otherwise() -> None:
    org = Organisation.two_tier(12, 4)
    mail = Mailboxes(org, [[] for _ in range(org.n)], lazy=True)
    assert mail.share(Packet(5, INTRA, "chat", [0], None, 0.0, 0, [4, 6, 7])) == range(4, 8)
    org.groups[1][:] = [4, 6, 5, 7]  # the same ids, not in order: the list itself
    mail = Mailboxes(org, [[] for _ in range(org.n)], lazy=True)
    assert mail.share(Packet(5, INTRA, "chat", [0], None, 0.0, 0, [4, 6, 7])) == [4, 6, 5, 7]


def test_the_bulk_wake_queues_the_same_agents_in_the_same_order_as_the_walk() -> None:
    rng = random.Random(3)
    org = Organisation.two_tier(400, 40)
    members = org.groups[3]
    span = range(members[0], members[-1] + 1)
    for trial in range(200):
        sender = rng.choice(members)
        recipients = Without(members, members.index(sender), len(members))
        awake = bytearray(rng.random() < 0.6 for _ in range(org.n))
        awake[sender] = trial % 5 != 0  # now and then an Idle sender: the walk decides
        runs = []
        for wake in ("_wake_span", "_wake_idle"):
            rt = SimRuntime(org, ChatRound(), trace=False)
            rt._awake = bytearray(awake)
            getattr(rt, wake)(*((span, recipients) if wake == "_wake_span" else (recipients,)))
            runs.append((list(rt._ready), rt._awake))
        assert runs[0] == runs[1]
        assert runs[0][0] == [r for r in recipients if not awake[r]]
