"""The deterministic simulation runtime: closed forms, determinism, the state
machine in motion, serial mode, the LLM cap and the ledger's arithmetic."""

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sample_behaviours import Faulty, GitUser, Recruiter, ToolLoop, Trespasser

from megaactors import (
    AgentState,
    Batch,
    BehaviourError,
    ChatRound,
    Effects,
    Organisation,
    RouteError,
    RunSpec,
    Send,
    SimRuntime,
    encode,
    expected_messages,
)
from megaactors.core.messages import INTRA


def run(org, behaviour=None, **kw):
    return SimRuntime(org, behaviour or ChatRound(), **kw).run()


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 31, 64, 100])
@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_flat_star_hierarchy_closed_forms(n: int, rounds: int) -> None:
    assert run(Organisation.flat(n), ChatRound(rounds)).ledger.messages == n * (n - 1) * rounds
    assert run(Organisation.star(n), ChatRound(rounds)).ledger.messages == 2 * (n - 1) * rounds
    for k in (2, 3, 5):
        assert run(Organisation.hierarchy(n, k), ChatRound(rounds)).ledger.messages == 2 * (n - 1) * rounds


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.integers(1, 50), st.integers(1, 3), st.integers(0, 5))
def test_two_tier_closed_form(n: int, g: int, rounds: int, seed: int) -> None:
    org = Organisation.two_tier(n, g)
    sizes = [len(grp) for grp in org.groups]
    a = len(sizes)
    closed = sum(s * (s - 1) for s in sizes) + a * (a - 1)
    result = run(org, ChatRound(rounds), seed=seed)
    assert result.ledger.messages == closed * rounds == expected_messages(org, rounds)
    by = result.ledger.messages_by_channel
    assert by["intra"] == sum(s * (s - 1) for s in sizes) * rounds
    assert by["admin"] == a * (a - 1) * rounds


def test_two_tier_with_a_boss_adds_two_messages_per_admin() -> None:
    org = Organisation.two_tier(31, 6, boss=True)
    a = len(org.groups)
    r = run(org)
    assert r.ledger.messages_by_channel["hierarchy"] == 2 * a
    assert r.ledger.messages == expected_messages(org)


@pytest.mark.parametrize("topology", ["flat", "star", "two-tier", "hierarchy"])
def test_same_seed_same_results_byte_for_byte(topology: str) -> None:
    spec = RunSpec(topology=topology, agents=120, group_size=7, fanout=3, rounds=2, seed=11)
    a, b = spec.execute().summary(), spec.execute().summary()
    a.pop("wall_s"), b.pop("wall_s")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    c = RunSpec(topology=topology, agents=120, group_size=7, fanout=3, rounds=2, seed=12).execute().summary()
    assert c["virtual_time_s"] != a["virtual_time_s"]


def test_every_byte_is_an_encoded_message() -> None:
    seen: list[int] = []

    class Recording(ChatRound):
        def on_batch(self, ctx, state, batch: Batch):
            seen.extend(len(encode(m)) for m in batch)
            return super().on_batch(ctx, state, batch)

    org = Organisation.two_tier(300, 9)
    result = run(org, Recording(rounds=2))
    assert len(seen) == result.ledger.messages
    assert sum(seen) == result.ledger.bytes == sum(result.ledger.bytes_by_channel.values())


def test_per_agent_and_per_level_columns_add_up_to_the_totals() -> None:
    org = Organisation.hierarchy(200, 4)
    result = run(org, ChatRound(2))
    led = result.ledger
    pa = led.per_agent
    assert sum(pa["sent"]) == sum(pa["received"]) == led.messages
    assert sum(pa["bytes_sent"]) == sum(pa["bytes_received"]) == led.bytes
    assert sum(pa["llm_calls"]) == led.llm_calls and sum(pa["tokens_in"]) == led.tokens_in
    assert sum(led.cost_per_agent) == pytest.approx(led.cost_usd)
    levels = led.by_level(org)
    assert sum(row["agents"] for row in levels.values()) == org.n
    assert sum(row["sent"] for row in levels.values()) == led.messages
    assert led.tokens_in > led.llm_calls * 300  # system prompt plus memory and batch


def test_serial_mode_never_has_two_agents_processing() -> None:
    org = Organisation.two_tier(60, 6)
    parallel = run(org, seed=3)
    serial = run(org, seed=3, serial=True)
    assert serial.trace.max_concurrent(AgentState.PROCESSING) == 1
    assert parallel.trace.max_concurrent(AgentState.PROCESSING) > 1
    assert serial.ledger.messages == parallel.ledger.messages
    # one agent at a time and no idle gaps: the makespan is the sum of all LLM latencies
    assert serial.ledger.virtual_time_s == pytest.approx(serial.ledger.llm_time_s)
    assert serial.ledger.virtual_time_s > 5 * parallel.ledger.virtual_time_s


@pytest.mark.parametrize("cap", [1, 3, 10])
def test_llm_cap_bounds_calls_in_flight(cap: int) -> None:
    org = Organisation.two_tier(50, 5)
    capped = run(org, max_concurrent_llm=cap)
    assert capped.ledger.peak_llm_in_flight == cap
    if cap == 1:
        assert capped.ledger.virtual_time_s == pytest.approx(capped.ledger.llm_time_s)
    assert run(org).ledger.peak_llm_in_flight > cap


def test_function_call_loop_and_messages_waiting_for_the_next_batch() -> None:
    org = Organisation.flat(5)
    result = run(org, ToolLoop(4))
    assert result.ledger.by_stage["plan"]["llm_calls"] == 1
    assert result.ledger.by_stage["tool"]["llm_calls"] == 3
    # agent 0 stayed in Processing through its loop, then took everything in one batch
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
    assert when == pytest.approx(result.ledger.llm_time_s)


def test_a_failing_behaviour_names_the_agent_and_the_message() -> None:
    with pytest.raises(BehaviourError, match=r"agent 0: behaviour 'tool-loop' failed on a batch of 4 .*id=.*boom"):
        run(Organisation.flat(5), Faulty(1))


def test_a_disallowed_send_raises_a_route_error() -> None:
    with pytest.raises(RouteError, match="agent 1 may not message agent 4: not in the same group"):
        run(Organisation.two_tier(6, 3), Trespasser(1))


def test_recruited_agents_join_the_run() -> None:
    org = Organisation.hierarchy(1, 3)
    result = run(org, Recruiter())
    assert org.n == 3 and result.states == [[1, 2], ["hi"], ["hi"]]
    assert result.ledger.messages == 2 and len(result.ledger.per_agent["received"]) == 3


def test_a_global_lock_serialises_tool_calls_and_contention_shows_in_the_makespan() -> None:
    org = Organisation.flat(4)
    result = SimRuntime(org, GitUser(), tools={"git-commit": lambda who: f"commit by {who}"}).run()
    assert result.ledger.virtual_time_s == pytest.approx(20.0)
    assert result.ledger.lock_wait_s == pytest.approx(0 + 5 + 10 + 15)
    assert [s[0] for s in result.states] == [f"commit by {a}" for a in range(4)]
    spans = sorted((s[1], s[2]) for s in result.states)
    assert all(end <= nxt_start for (_, end), (nxt_start, _) in itertools.pairwise(spans))
    no_tools = SimRuntime(org, GitUser()).run()
    assert no_tools.ledger.tool_calls == 4 and no_tools.states[0][0] is None


def test_start_and_step_expose_super_steps() -> None:
    rt = SimRuntime(Organisation.two_tier(30, 5), ChatRound())
    rt.start()
    assert rt.steps == 0 and not rt.finished
    while rt.step():
        pass
    assert rt.finished and rt.steps == rt.ledger.llm_calls
    assert rt.result().ledger.messages == expected_messages(rt.org)


@pytest.mark.parametrize(
    ("recipients", "needle"),
    [
        ([2, 2], "lists recipient 2 twice"),
        ([-1], "unknown recipient -1"),
        ([99], "unknown recipient 99"),
        (["x"], "recipients must be agent ids"),
        ([], "to no recipient"),
        ([0], "cannot send to itself"),
    ],
)
def test_malformed_sends_are_route_errors(recipients: list, needle: str) -> None:
    class Sender(ToolLoop):
        def on_start(self, ctx, state):
            return Effects(sends=[Send(recipients, INTRA, "x", None)]) if ctx.agent == 0 else None

    with pytest.raises(RouteError, match=needle):
        run(Organisation.flat(4), Sender(1))


@pytest.mark.parametrize(
    "make",
    [lambda: Organisation.two_tier(600, 9), lambda: Organisation.hierarchy(300, 4), lambda: Organisation.star(50)],
    ids=["two-tier", "hierarchy", "star"],
)
def test_a_run_makes_no_reference_cycles_for_the_paused_collector_to_miss(make) -> None:
    import gc

    import megaactors

    package = str(Path(megaactors.__file__).parent)

    def ours(o: object) -> bool:  # an object of megaactors, or a function/frame of its code
        code = getattr(o, "__code__", None) or getattr(o, "f_code", None) or getattr(o, "gi_code", None)
        return type(o).__module__.startswith("megaactors") or (
            code is not None and code.co_filename.startswith(package)
        )

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds stays in gc.garbage to be looked at
    try:
        result = run(make(), ChatRound(2), trace=True)
        del result
        gc.collect()
        # other threads of the test process (a server of an earlier test) may make garbage
        # meanwhile: only the run's own objects count
        cyclic = [o for o in gc.garbage if ours(o)]
        assert not cyclic, f"{len(cyclic)} objects in reference cycles, e.g. {cyclic[:3]!r}"
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_a_batch_from_the_logs_is_counted_without_listing_its_packets() -> None:
    seen = []

    class Counting(ChatRound):
        def on_batch(self, ctx, state, batch: Batch):
            seen.append((len(batch), batch._packets is None, batch.nbytes()))
            return super().on_batch(ctx, state, batch)

    org = Organisation.two_tier(40, 8)
    result = run(org, Counting(1))
    assert seen and all(deferred for _, deferred, _ in seen)  # counted first, listed only when asked
    assert sum(n for n, _, _ in seen) == result.ledger.messages
    assert sum(b for _, _, b in seen) == result.ledger.bytes


def test_queue_state_rebuilt_from_heads_and_live_packets_continues_the_run_exactly() -> None:
    def summary(result):
        return {k: v for k, v in result.summary().items() if k != "wall_s"}

    reference = summary(run(Organisation.two_tier(60, 7), ChatRound(2), seed=3))
    rt = SimRuntime(Organisation.two_tier(60, 7), ChatRound(2), seed=3, trace=False)
    rt.start()
    rt.advance(2.2)
    n = len(rt.agents)
    heads, live = [rt.mail.head(a) for a in range(n)], rt.mail.live()
    queued = list(map(rt.queued, range(n)))
    assert sum(queued) > 0 and any(h >= 0 for h in heads)
    rt.mail.refill([live[i] for i in sorted(live)], heads)
    assert [rt.mail.head(a) for a in range(n)] == heads and list(map(rt.queued, range(n))) == queued
    assert summary(rt.run()) == reference
