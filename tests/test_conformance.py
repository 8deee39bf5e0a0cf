"""Every runtime in ``RUNTIMES`` agrees with the simulation on the same scenarios.

A runtime joins this suite by registering itself in ``megaactors.runtime.RUNTIMES``.
Message counts (total, per channel, per agent) and total bytes must be identical to
the simulation's for the same seed (message ids are consecutive from 0 everywhere,
so the bytes do not depend on delivery order), and so must the final agent states
of the chat round, which do not depend on arrival order. LLM calls and tokens may
differ only through batching, which the ledger's ``batches`` column shows: in the
chat round every start and every batch costs exactly one call.
"""

from __future__ import annotations

import itertools
from typing import Any

import networkx as nx
import pytest
from sample_behaviours import Faulty, GitUser, Recruiter, ToolLoop, Trespasser

from megaactors import (
    AgentContext,
    AgentState,
    BehaviourError,
    ChatRound,
    LatencyModel,
    Organisation,
    RouteError,
    SimulatedLLM,
    expected_messages,
)
from megaactors.runtime import RUNTIMES

RUNTIME_NAMES = sorted(RUNTIMES)


def run(name: str, org: Organisation, behaviour: Any, seed: int = 0, llm: Any = None, **kw: Any):
    cls = RUNTIMES[name]
    options = {"seed": seed, "max_concurrent_llm": None, "serial": False, "trace": True, **kw}
    return cls(org, behaviour, llm or SimulatedLLM(seed=seed), **options).run()


def slow_llm() -> SimulatedLLM:
    """5 s per call: on a live runtime (10 ms per virtual second by default) 50 ms of
    wall time, long enough for every agent to start before the first call ends."""
    return SimulatedLLM(latency=LatencyModel(median_s=5.0, sigma=0.0, per_output_token_s=0.0))


ORGANISATIONS = {
    "flat-9": lambda: Organisation.flat(9),
    "star-25": lambda: Organisation.star(25),
    "two-tier-120-g9": lambda: Organisation.two_tier(120, 9),
    "two-tier-boss-40-g6": lambda: Organisation.two_tier(40, 6, boss=True),
    "hierarchy-60-k3": lambda: Organisation.hierarchy(60, 3),
    # graph organisations: one message along every directed edge
    "karate-club-34": lambda: Organisation.from_networkx(nx.karate_club_graph()),
    "small-world-40-k4": lambda: Organisation.generated("small-world", 40, 4, rewire=0.2, seed=5),
    "scale-free-50-m2": lambda: Organisation.generated("scale-free", 50, 2, seed=5),
    "directed-ring-24": lambda: Organisation.from_networkx(
        nx.DiGraph([(i, (i + 1) % 24) for i in range(24)] + [(i, (i + 5) % 24) for i in range(0, 24, 3)])
    ),
}


def starts(org: Organisation, rounds: int) -> list[int]:
    """1 for every agent whose chat-round start effects make an LLM call."""
    behaviour = ChatRound(rounds)
    return [
        int(behaviour.on_start(AgentContext(a, org, 0.0), behaviour.init(a, org)) is not None) for a in range(org.n)
    ]


@pytest.mark.parametrize("name", RUNTIME_NAMES)
@pytest.mark.parametrize("org_name", sorted(ORGANISATIONS))
@pytest.mark.parametrize("rounds", [1, 2])
def test_chat_round_agrees_with_the_simulation(name: str, org_name: str, rounds: int) -> None:
    seed = 7 + rounds
    ref = run("sim", ORGANISATIONS[org_name](), ChatRound(rounds), seed)
    got = run(name, ORGANISATIONS[org_name](), ChatRound(rounds), seed)
    a, b = ref.ledger, got.ledger
    assert b.messages == a.messages == expected_messages(got.org, rounds)
    assert b.messages_by_channel == a.messages_by_channel
    assert b.bytes == a.bytes
    if a.messages <= 128:  # every id is one byte: nothing depends on the order
        assert b.bytes_by_channel == a.bytes_by_channel
    for column in ("sent", "received"):
        assert list(b.per_agent[column]) == list(a.per_agent[column])
    assert got.states == ref.states
    # LLM calls differ only through batching: one per start plus one per batch, per agent
    first = starts(got.org, rounds)
    calls, batches = b.per_agent["llm_calls"], b.per_agent["batches"]
    assert [calls[i] - batches[i] for i in range(got.org.n)] == first
    assert b.llm_calls == sum(first) + sum(batches)
    assert b.tokens_out == b.llm_calls * SimulatedLLM().tokens.output_tokens
    assert sum(b.per_agent["tokens_in"]) == b.tokens_in
    # no batch is empty, and the trace saw every batch the ledger counted
    assert got.trace is not None and min(got.trace.b_size) >= 1
    assert len(got.trace.b_size) == sum(batches) and sum(got.trace.b_size) == b.messages
    assert got.ledger.virtual_time_s > 0


@pytest.mark.parametrize("name", RUNTIME_NAMES)
def test_serial_mode_never_has_two_agents_processing(name: str) -> None:
    org = Organisation.two_tier(24, 6)
    serial = run(name, org, ChatRound(), seed=3, serial=True)
    parallel = run(name, Organisation.two_tier(24, 6), ChatRound(), seed=3)
    assert serial.trace.max_concurrent(AgentState.PROCESSING) == 1
    assert parallel.trace.max_concurrent(AgentState.PROCESSING) > 1
    assert serial.ledger.messages == parallel.ledger.messages == expected_messages(org)
    assert serial.ledger.virtual_time_s > 3 * parallel.ledger.virtual_time_s


@pytest.mark.parametrize("name", RUNTIME_NAMES)
@pytest.mark.parametrize("cap", [1, 3])
def test_llm_cap_bounds_calls_in_flight(name: str, cap: int) -> None:
    org = Organisation.two_tier(12, 4)
    capped = run(name, org, ChatRound(), llm=slow_llm(), max_concurrent_llm=cap)
    assert capped.ledger.peak_llm_in_flight == cap
    assert capped.ledger.messages == expected_messages(org)
    assert run(name, Organisation.two_tier(12, 4), ChatRound(), llm=slow_llm()).ledger.peak_llm_in_flight > cap


@pytest.mark.parametrize("name", RUNTIME_NAMES)
def test_function_call_loop_keeps_the_agent_processing(name: str) -> None:
    result = run(name, Organisation.flat(5), ToolLoop(4), llm=slow_llm())
    assert result.ledger.by_stage["plan"]["llm_calls"] == 1
    assert result.ledger.by_stage["tool"]["llm_calls"] == 3
    moves = [(f, t) for a, f, t, _ in result.trace.transitions() if a == 0]
    assert moves == [
        ("IDLE", "PROCESSING"),
        ("PROCESSING", "RESPONSE"),
        ("RESPONSE", "PROCESSING"),
        ("PROCESSING", "RESPONSE"),
        ("RESPONSE", "IDLE"),
    ]
    ((when, payloads),) = result.states[0]["batches"]
    assert payloads == [1, 2, 3, 4]
    assert when >= result.ledger.llm_time_s * 0.99  # the batch waited for the whole loop


@pytest.mark.parametrize("name", RUNTIME_NAMES)
def test_a_failing_behaviour_names_the_agent_and_the_message(name: str) -> None:
    with pytest.raises(BehaviourError, match=r"agent 0: behaviour 'tool-loop' failed on a batch of 4 .*id=.*boom"):
        run(name, Organisation.flat(5), Faulty(1))


@pytest.mark.parametrize("name", RUNTIME_NAMES)
def test_a_disallowed_send_raises_a_route_error(name: str) -> None:
    with pytest.raises(RouteError, match="agent 1 may not message agent 4: not in the same group"):
        run(name, Organisation.two_tier(6, 3), Trespasser(1))


@pytest.mark.parametrize("name", RUNTIME_NAMES)
def test_recruited_agents_join_the_run(name: str) -> None:
    org = Organisation.hierarchy(1, 3)
    result = run(name, org, Recruiter())
    assert org.n == 3 and result.states == [[1, 2], ["hi"], ["hi"]]
    assert result.ledger.messages == 2 and len(result.ledger.per_agent["received"]) == 3


@pytest.mark.parametrize("name", RUNTIME_NAMES)
def test_a_global_lock_serialises_tool_calls(name: str) -> None:
    tools = {"git-commit": lambda who: f"commit by {who}"}
    result = run(name, Organisation.flat(4), GitUser(), tools=tools)
    assert [s[0] for s in result.states] == [f"commit by {a}" for a in range(4)]
    assert result.ledger.tool_calls == 4 and result.ledger.tool_time_s == pytest.approx(20.0)
    spans = sorted((s[1], s[2]) for s in result.states)
    # live runtimes measure wall time, and an event loop may fire a timer up to its
    # clock resolution early (libuv counts whole milliseconds from a time it caches per
    # turn): allow 2 ms of wall time, 0.2 virtual seconds at the default time scale,
    # against tool calls of 5 s that would overlap by whole seconds if the lock failed
    slack = 0.2
    assert all(end <= nxt_start + slack for (_, end), (nxt_start, _) in itertools.pairwise(spans))
    assert all(end - start >= 5.0 - slack for start, end in spans)
    # one holder at a time: the makespan is at least the four durations, and someone waited
    assert result.ledger.virtual_time_s >= 20.0 - slack
    assert result.ledger.lock_wait_s >= 0 + 5 + 10 + 15 - 4 * slack
