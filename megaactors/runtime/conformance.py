"""The runtime contract as a suite any runtime can run (needs pytest: the ``dev`` extra).

Every runtime must agree with the simulation on the same scenarios: message counts
(total, per channel, per agent) and total bytes identical for the same seed (message
ids are consecutive from 0 everywhere, so the bytes do not depend on delivery
order), and so must the final agent states of the chat round, which do not depend on
arrival order. LLM calls and tokens may differ only through batching, which the
ledger's ``batches`` column shows: in the chat round every start and every batch
costs exactly one call. Serial mode, the LLM cap, the function-call loop, errors
that name the agent, routing, recruiting and tool locks are checked too.

A runtime runs the whole suite with one fixture, ``runtime``, that gives its class
(or any callable ``(org, behaviour, llm, options) -> Runtime``)::

    from megaactors.runtime.conformance import RuntimeConformance

    class TestMyRuntime(RuntimeConformance):
        @pytest.fixture
        def runtime(self):
            return MyRuntime
"""

from __future__ import annotations

import itertools
from typing import Any

import networkx as nx
import pytest

from megaactors.behaviours.chat_round import ChatRound, expected_messages
from megaactors.behaviours.megaagent.organised import OrganisedMegaAgent
from megaactors.core.agent import Phase
from megaactors.core.behaviour import AgentContext, Effects, Interrupt, LLMRequest, Send, ToolCall
from megaactors.core.llm import LatencyModel, SimulatedLLM
from megaactors.core.messages import INTRA
from megaactors.core.organisation import Organisation
from megaactors.errors import BehaviourError, RouteError
from megaactors.network import FaultSpec
from megaactors.providers.limits import ProviderModel
from megaactors.runtime.options import RuntimeFactory, RuntimeOptions
from megaactors.runtime.result import RunResult
from megaactors.runtime.sim import SimRuntime

__all__ = [
    "ORGANISATIONS",
    "Faulty",
    "GitUser",
    "Interrupter",
    "NoToolHook",
    "Recruiter",
    "RuntimeConformance",
    "RuntimeFactory",
    "Thinker",
    "ToolLoop",
    "Trespasser",
    "run",
]


def run(
    runtime: RuntimeFactory, org: Organisation, behaviour: Any, seed: int = 0, llm: Any = None, **kw: Any
) -> RunResult:
    """One traced run of ``behaviour`` over ``org`` on ``runtime``."""
    options = RuntimeOptions(seed=seed, trace=True, **kw)
    return runtime(org, behaviour, llm or SimulatedLLM(seed=seed), options).run()


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


def _karate_groups() -> Organisation:
    """The karate club split into its two clubs (the ``club`` attribute as ``group``),
    each club's founder (0 or 33) its admin, linked to every member of its club: a
    sparse graph of groups whose edges route every message."""
    g = nx.karate_club_graph()
    founders = {g.nodes[0]["club"]: 0, g.nodes[33]["club"]: 33}
    for v, club in list(g.nodes(data="club")):
        g.nodes[v]["group"] = club
        if v in (0, 33):
            g.nodes[v]["role"] = "admin"
        else:
            g.add_edge(v, founders[club])
    return Organisation.from_networkx(g)


MEGAAGENT_ORGANISATIONS = {
    "two-tier-boss-40-g6": ORGANISATIONS["two-tier-boss-40-g6"],
    "hierarchy-60-k3": ORGANISATIONS["hierarchy-60-k3"],
    "karate-groups-34": _karate_groups,
}


def starts(org: Organisation, rounds: int) -> list[int]:
    """1 for every agent whose chat-round start effects make an LLM call."""
    behaviour = ChatRound(rounds)
    return [
        int(behaviour.on_start(AgentContext(a, org, 0.0), behaviour.init(a, org)) is not None) for a in range(org.n)
    ]


# ---------------------------------------------------------------------- the scenarios' behaviours


class ToolLoop:
    """Agent 0 thinks in a loop of ``calls`` LLM calls; the others message it at once."""

    name = "tool-loop"

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def init(self, agent, org):
        return {"left": 0, "batches": []}

    def on_start(self, ctx, state):
        if ctx.agent == 0:
            state["left"] = self.calls
            return Effects(llm=LLMRequest(new_tokens=5, stage="plan"))
        return Effects(sends=[Send([0], INTRA, "note", ctx.agent)])

    def on_batch(self, ctx, state, batch):
        state["batches"].append((ctx.now, sorted(m.payload for m in batch)))
        return Effects()

    def on_reply(self, ctx, state, reply):
        state["left"] -= 1
        if state["left"]:
            return Effects(llm=LLMRequest(new_tokens=20, stage="tool"))
        return Effects()


class Thinker:
    """Every agent makes ``calls`` LLM calls in a row from its start, messaging nobody;
    a failed reply is asked again. Its call indices do not depend on timing."""

    name = "thinker"

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def init(self, agent, org):
        return [0, 0]  # answered, failed

    def on_start(self, ctx, state):
        return Effects(llm=LLMRequest(new_tokens=10, stage="think"))

    def on_batch(self, ctx, state, batch):
        return Effects()

    def on_reply(self, ctx, state, reply):
        state[1 if reply.failed else 0] += 1
        if state[0] < self.calls:
            return Effects(llm=LLMRequest(new_tokens=0, stage="think"))
        return Effects()


class Faulty(ToolLoop):
    def on_batch(self, ctx, state, batch):
        raise ValueError("boom")


class Trespasser(ToolLoop):
    def on_start(self, ctx, state):
        if ctx.agent == 1:
            return Effects(sends=[Send([4], INTRA, "gossip", None)])
        return None


class Recruiter:
    name = "recruiter"

    def init(self, agent, org):
        return []

    def on_start(self, ctx, state):
        return Effects(recruits=2, llm=LLMRequest(new_tokens=1)) if ctx.agent == 0 else None

    def on_batch(self, ctx, state, batch):
        return Effects(state=[*state, *(m.payload for m in batch)])

    def on_reply(self, ctx, state, reply):
        return Effects(sends=[Send(ctx.recruited, INTRA, "welcome", "hi")], state=list(ctx.recruited))


class Interrupter(ToolLoop):
    """:class:`ToolLoop` whose agents ask for a human: the others as they start, agent 0
    when its loop ends."""

    name = "interrupter"

    def on_start(self, ctx, state):
        eff = super().on_start(ctx, state)
        if ctx.agent:
            eff.interrupt = Interrupt(f"agent {ctx.agent} started")
        return eff

    def on_reply(self, ctx, state, reply):
        eff = super().on_reply(ctx, state, reply)
        if not state["left"]:
            eff.interrupt = Interrupt("loop done")
        return eff


class NoToolHook(ToolLoop):
    """Agent 0 asks for a tool but the behaviour has no ``on_tool``."""

    name = "no-tool-hook"

    def on_start(self, ctx, state):
        return Effects(tool=ToolCall("lint", duration_s=1.0)) if ctx.agent == 0 else None


class GitUser:
    """Every agent commits once through one global lock, then sends nothing."""

    name = "git-user"

    def init(self, agent, org):
        return None

    def on_start(self, ctx, state):
        return Effects(tool=ToolCall("git-commit", duration_s=5.0, lock="git", args=ctx.agent))

    def on_batch(self, ctx, state, batch):
        return Effects()

    def on_reply(self, ctx, state, reply):
        return Effects()

    def on_tool(self, ctx, state, result):
        return Effects(state=(result.result, result.started_s, result.finished_s, result.waited_s))


class RuntimeConformance:
    """Every test of the runtime contract; subclass it and define ``runtime``."""

    @pytest.fixture
    def runtime(self) -> RuntimeFactory:
        raise NotImplementedError("a runtime's test class defines the runtime fixture")

    @pytest.mark.parametrize("org_name", sorted(ORGANISATIONS))
    @pytest.mark.parametrize("rounds", [1, 2])
    def test_chat_round_agrees_with_the_simulation(self, runtime: RuntimeFactory, org_name: str, rounds: int) -> None:
        seed = 7 + rounds
        ref = run(SimRuntime, ORGANISATIONS[org_name](), ChatRound(rounds), seed)
        got = run(runtime, ORGANISATIONS[org_name](), ChatRound(rounds), seed)
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

    @pytest.mark.parametrize("org_name", ["two-tier-boss-40-g6", "hierarchy-60-k3", "karate-groups-34"])
    def test_megaagent_agrees_with_the_simulation(self, runtime: RuntimeFactory, org_name: str) -> None:
        """The MegaAgent mechanism on a given organisation, without validation failures
        (which reviewer draws which failure depends on arrival order): the same
        messages from and to each agent, and the same tool calls, on every runtime."""
        build = MEGAAGENT_ORGANISATIONS[org_name]
        ref = run(SimRuntime, build(), OrganisedMegaAgent(seed=3, monitoring=False), 3, llm=slow_llm())
        got = run(runtime, build(), OrganisedMegaAgent(seed=3, monitoring=False), 3, llm=slow_llm())
        a, b = ref.ledger, got.ledger
        assert b.messages == a.messages > 0 and b.messages_by_channel == a.messages_by_channel
        assert b.bytes == a.bytes
        for column in ("sent", "received"):
            assert list(b.per_agent[column]) == list(a.per_agent[column]), column
        assert b.tool_calls == a.tool_calls and b.tool_time_s == pytest.approx(a.tool_time_s)
        assert b.by_stage["merging"]["llm_calls"] == a.by_stage["merging"]["llm_calls"]
        assert [s["accepted"] for s in got.states] == [s["accepted"] for s in ref.states]

    def test_serial_mode_never_has_two_agents_processing(self, runtime: RuntimeFactory) -> None:
        org = Organisation.two_tier(24, 6)
        serial = run(runtime, org, ChatRound(), seed=3, serial=True)
        parallel = run(runtime, Organisation.two_tier(24, 6), ChatRound(), seed=3)
        assert serial.trace is not None and parallel.trace is not None
        assert serial.trace.max_concurrent(Phase.PROCESSING) == 1
        assert parallel.trace.max_concurrent(Phase.PROCESSING) > 1
        assert serial.ledger.messages == parallel.ledger.messages == expected_messages(org)
        assert serial.ledger.virtual_time_s > 3 * parallel.ledger.virtual_time_s

    @pytest.mark.parametrize("cap", [1, 3])
    def test_llm_cap_bounds_calls_in_flight(self, runtime: RuntimeFactory, cap: int) -> None:
        org = Organisation.two_tier(12, 4)
        capped = run(runtime, org, ChatRound(), llm=slow_llm(), max_concurrent_llm=cap)
        assert capped.ledger.peak_llm_in_flight == cap
        assert capped.ledger.messages == expected_messages(org)
        assert run(runtime, Organisation.two_tier(12, 4), ChatRound(), llm=slow_llm()).ledger.peak_llm_in_flight > cap

    def test_function_call_loop_keeps_the_agent_processing(self, runtime: RuntimeFactory) -> None:
        result = run(runtime, Organisation.flat(5), ToolLoop(4), llm=slow_llm())
        assert result.ledger.by_stage["plan"]["llm_calls"] == 1
        assert result.ledger.by_stage["tool"]["llm_calls"] == 3
        assert result.trace is not None
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

    def test_a_failing_behaviour_names_the_agent_and_the_message(self, runtime: RuntimeFactory) -> None:
        with pytest.raises(BehaviourError, match=r"agent 0: behaviour 'tool-loop' failed on a batch of 4 .*id=.*boom"):
            run(runtime, Organisation.flat(5), Faulty(1))

    def test_a_tool_call_without_an_on_tool_hook_is_refused(self, runtime: RuntimeFactory) -> None:
        with pytest.raises(BehaviourError, match="agent 0: behaviour 'no-tool-hook' asked for tool 'lint' but has no"):
            run(runtime, Organisation.flat(3), NoToolHook(1))

    def test_a_disallowed_send_raises_a_route_error(self, runtime: RuntimeFactory) -> None:
        with pytest.raises(RouteError, match="agent 1 may not message agent 4: not in the same group"):
            run(runtime, Organisation.two_tier(6, 3), Trespasser(1))

    def test_recruited_agents_join_the_run(self, runtime: RuntimeFactory) -> None:
        org = Organisation.hierarchy(1, 3)
        result = run(runtime, org, Recruiter())
        assert org.n == 3 and result.states == [[1, 2], ["hi"], ["hi"]]
        assert result.ledger.messages == 2 and len(result.ledger.per_agent["received"]) == 3

    def test_an_interrupt_without_a_checkpoint_is_recorded_and_the_run_goes_on(self, runtime: RuntimeFactory) -> None:
        result = run(runtime, Organisation.flat(4), Interrupter(3))
        plain = run(runtime, Organisation.flat(4), ToolLoop(3))
        assert sorted(result.interrupts) == [(0, "loop done"), (1, "agent 1 started"), (2, "agent 2 started"),
                                             (3, "agent 3 started")]  # fmt: skip

        def read(r: RunResult) -> list[list[int]]:  # what each agent read, whenever it read it
            return [sorted(p for _, payloads in state["batches"] for p in payloads) for state in r.states]

        assert read(result) == read(plain) == [[1, 2, 3], [], [], []]
        for total in ("messages", "bytes", "llm_calls", "tokens_in"):
            assert getattr(result.ledger, total) == getattr(plain.ledger, total), total
        assert result.summary()["interrupts"] and "interrupts" not in plain.summary()

    def test_a_global_lock_serialises_tool_calls(self, runtime: RuntimeFactory) -> None:
        tools = {"git-commit": lambda who: f"commit by {who}"}
        result = run(runtime, Organisation.flat(4), GitUser(), tools=tools)
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

    def test_provider_failures_agree_with_the_simulation(self, runtime: RuntimeFactory) -> None:
        # failures and timeouts are drawn per (agent, call, attempt): the same everywhere
        provider = ProviderModel(failure_rate=0.3, timeout_s=3.0, max_retries=1, base_s=0.5, seed=5)
        ref = run(SimRuntime, Organisation.flat(8), Thinker(4), seed=5, provider=provider)
        got = run(runtime, Organisation.flat(8), Thinker(4), seed=5, provider=provider)
        summary = got.ledger.provider_summary()
        assert summary == ref.ledger.provider_summary()
        assert summary["llm_errors"] > 0 and summary["llm_timeouts"] > 0 and summary["failed_llm_calls"] > 0
        assert summary["retries"] == summary["llm_errors"] + summary["llm_timeouts"] - summary["failed_llm_calls"]
        assert got.states == ref.states and got.ledger.llm_calls == 8 * 4
        assert sum(s[1] for s in got.states) == summary["failed_llm_calls"]  # the behaviour saw each failed call

    def test_injected_llm_faults_take_the_retry_path(self, runtime: RuntimeFactory) -> None:
        # an injected fault is drawn per (agent, call, attempt) beside the provider's own
        # errors, retried the same way: the same counts everywhere
        provider = ProviderModel(failure_rate=0.1, max_retries=1, base_s=0.5, seed=6)
        faults = FaultSpec(llm=0.3)
        ref = run(SimRuntime, Organisation.flat(8), Thinker(4), seed=6, provider=provider, faults=faults)
        got = run(runtime, Organisation.flat(8), Thinker(4), seed=6, provider=provider, faults=faults)
        summary = got.ledger.provider_summary()
        assert summary == ref.ledger.provider_summary() and got.faults == ref.faults
        assert got.faults is not None and got.faults["llm"] > 0 and summary["llm_errors"] > 0
        assert summary["retries"] == got.faults["llm"] + summary["llm_errors"] - summary["failed_llm_calls"]
        assert got.states == ref.states and got.status == "ok"

    def test_rate_limits_keep_the_chat_round_whole(self, runtime: RuntimeFactory) -> None:
        provider = ProviderModel(rpm=30, max_retries=2, base_s=0.5, seed=2)
        ref = run(SimRuntime, Organisation.two_tier(24, 6), ChatRound(), seed=2, provider=provider)
        got = run(runtime, Organisation.two_tier(24, 6), ChatRound(), seed=2, provider=provider)
        assert got.ledger.messages == ref.ledger.messages == expected_messages(got.org)
        assert got.states == ref.states
        assert ref.ledger.rate_limited > 0  # the limit binds (where the live runtimes' clocks may differ)
        # no more calls answered than the bucket holds plus what it refilled
        assert got.ledger.llm_calls <= 30 + got.ledger.virtual_time_s / 2 + 1

    def test_repeated_copies_are_ignored_and_lost_ones_counted(self, runtime: RuntimeFactory) -> None:
        """With faults (a runtime that injects them): duplicates ignored by message id
        leave the run as it was; copies dropped for good are exactly the ones missing."""
        if not getattr(runtime, "applies_faults", False):
            pytest.skip("this runtime does not inject faults")
        ref = run(runtime, Organisation.two_tier(24, 6), ChatRound(2), 5)
        dup = run(runtime, Organisation.two_tier(24, 6), ChatRound(2), 5, faults=FaultSpec(duplicate=0.3))
        assert dup.faults is not None and dup.faults["duplicates_ignored"] == dup.faults["duplicate"] > 0
        assert list(dup.ledger.per_agent["received"]) == list(ref.ledger.per_agent["received"])
        assert dup.states == ref.states and dup.status == "ok"
        lossy = run(runtime, Organisation.two_tier(24, 6), ChatRound(2), 5, faults=FaultSpec(drop=0.1, recover=False))
        assert lossy.faults is not None and lossy.faults["drop"] > 0
        assert sum(lossy.ledger.per_agent["received"]) == lossy.ledger.messages - lossy.faults["drop"]
        assert lossy.status == "stalled" and lossy.stalled
