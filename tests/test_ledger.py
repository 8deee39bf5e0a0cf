"""Ledger parts: a run's ledger split by agent ranges and added back together."""

from __future__ import annotations

from array import array

from megaactors import ChatRound, Organisation, SimRuntime
from megaactors.core.ledger import Ledger


def test_parts_added_back_give_the_whole_ledger() -> None:
    org = Organisation.two_tier(300, 12)
    whole = SimRuntime(org, ChatRound(rounds=2), seed=3, trace=False).run().ledger
    cut = 137
    merged = Ledger(org.n)
    for lo, hi in ((0, cut), (cut, org.n)):
        part = whole.part(slice(lo, hi))
        assert len(part["per_agent"]["sent"]) == hi - lo
        merged.add_part(part, slice(lo, hi))
    # each part carried the whole run's totals, so they count twice; columns once
    assert merged.messages == 2 * whole.messages
    assert merged.by_stage["chat"]["llm_calls"] == 2 * whole.llm_calls
    assert merged.peak_queue_depth == whole.peak_queue_depth
    assert merged.peak_llm_in_flight == 2 * whole.peak_llm_in_flight
    for c, col in whole.per_agent.items():
        assert merged.per_agent[c] == col, c
    assert merged.cost_per_agent == whole.cost_per_agent


def test_parts_of_disjoint_counts_add_up_exactly() -> None:
    a, b = Ledger(4), Ledger(4)
    a.messages, a.bytes, a.cost_usd = 5, 50, 0.25
    b.messages, b.bytes, b.cost_usd = 7, 70, 0.5
    a.messages_by_channel["intra"] = 5
    b.messages_by_channel["admin"] = 7
    a.per_agent["sent"][0:2] = array("q", [2, 3])
    b.per_agent["sent"][2:4] = array("q", [4, 3])
    total = Ledger(4)
    total.add_part(a.part(slice(0, 2)), slice(0, 2))
    total.add_part(b.part(slice(2, 4)), slice(2, 4))
    assert (total.messages, total.bytes, total.cost_usd) == (12, 120, 0.75)
    assert total.messages_by_channel["intra"] == 5 and total.messages_by_channel["admin"] == 7
    assert list(total.per_agent["sent"]) == [2, 3, 4, 3]


def test_a_part_with_a_human_channel_adds_it() -> None:
    """Human messages have a channel of their own, beyond the organisation's: a part
    that counted some adds them as it adds the others."""
    from megaactors.core.messages import HUMAN

    a, b = Ledger(2), Ledger(2)
    a.messages_by_channel[HUMAN], a.bytes_by_channel[HUMAN] = 2, 30
    b.messages_by_channel[HUMAN], b.bytes_by_channel[HUMAN] = 1, 12
    b.messages_by_channel["intra"] = 4
    total = Ledger(2)
    total.add_part(a.part(slice(0, 1)), slice(0, 1))
    total.add_part(b.part(slice(1, 2)), slice(1, 2))
    assert total.messages_by_channel[HUMAN] == 3 and total.bytes_by_channel[HUMAN] == 42
    assert total.messages_by_channel["intra"] == 4


def test_journaled_columns_fold_to_the_sums_added_one_by_one() -> None:
    """Per-agent counts go through journals folded in bulk (numpy, past a few dozen
    entries; cell by cell below): the columns read back are the sums added one by one,
    dollars bit for bit, however the journal was cut."""
    import random

    from megaactors.core.agent_columns import FOLD_AT, AgentColumns
    from megaactors.core.llm import LLMReply

    rng = random.Random(5)
    n = 50
    ledger = Ledger(n)
    calls, tin, cost = array("q", bytes(8 * n)), array("q", bytes(8 * n)), array("d", bytes(8 * n))
    for i in range(FOLD_AT + 777):  # one fold by the writer, the rest when read
        agent, tokens, dollars = rng.randrange(n), rng.randrange(10, 5000), rng.random() * 1e-3
        ledger.record_llm(agent, LLMReply(tokens, 60, 1.0, dollars, "chat", i))
        calls[agent] += 1
        tin[agent] += tokens
        cost[agent] += dollars
        if i == 10:  # a read with a short journal pending folds it cell by cell
            assert ledger.per_agent["llm_calls"][agent] == calls[agent]
    assert ledger.per_agent["llm_calls"] == calls and ledger.per_agent["tokens_in"] == tin
    assert ledger.cost_per_agent.tobytes() == cost.tobytes()
    assert sum(ledger.per_agent["tokens_out"]) == 60 * (FOLD_AT + 777)
    columns = AgentColumns(2)
    columns.sends[0].append(1), columns.sends[1].append(3), columns.sends[2].append(90)
    columns.grow(4)  # a pending entry is folded before the columns grow
    assert list(columns.columns["sent"]) == [0, 3, 0, 0] and list(columns.columns["bytes_sent"]) == [0, 90, 0, 0]
    assert not any(columns.sends)


def test_a_call_recorded_by_its_figures_counts_as_one_recorded_by_its_reply() -> None:
    from megaactors.core.llm import LLMReply

    by_reply, by_figures = Ledger(3), Ledger(3)
    for i, (agent, tokens, dollars) in enumerate([(0, 310, 1e-4), (2, 5000, 3.3e-4), (0, 77, 2.5e-5)]):
        by_reply.record_llm(agent, LLMReply(tokens, 60, 1.5 + i, dollars, "chat" if i else "plan", i))
        by_figures.record_call(agent, tokens, 60, dollars, 1.5 + i, "chat" if i else "plan")
    org = Organisation.flat(3)
    assert by_figures.summary(org) == by_reply.summary(org)
    assert by_figures.cost_per_agent.tobytes() == by_reply.cost_per_agent.tobytes()
