"""The live runtimes (asyncio tasks, pykka threads): clean start and stop, errors
that end the run instead of hanging it, real waits scaled by ``time_scale``, and
the pykka runtime's refusal of more threads than the machine can hold."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import subprocess
import sys
import threading
import time
from typing import Any

import pykka
import pytest

from megaactors import (
    AgentContext,
    BehaviourError,
    ChatRound,
    Effects,
    LatencyModel,
    LLMRequest,
    Organisation,
    ParameterError,
    RunSpec,
    Send,
    SimRuntime,
    SimulatedLLM,
    ToolCall,
    expected_messages,
)
from megaactors.core.messages import INTRA
from megaactors.network import FaultSpec
from megaactors.providers.limits import ProviderModel
from megaactors.runtime import AsyncioRuntime, PykkaRuntime
from megaactors.runtime.aio_shards import shard_bounds
from megaactors.runtime.threads import thread_capacity

LIVE = {"asyncio": AsyncioRuntime, "pykka": PykkaRuntime}


def fixed_llm(latency_s: float) -> SimulatedLLM:
    return SimulatedLLM(latency=LatencyModel(median_s=latency_s, sigma=0.0, per_output_token_s=0.0))


def quiet_threads() -> set[threading.Thread]:
    return set(threading.enumerate())


class FailsOnReply:
    """A chat round in which agent ``victim`` raises on its second LLM reply while
    every other agent is busy with calls in flight."""

    name = "fails-on-reply"

    def __init__(self, victim: int, where: str = "reply") -> None:
        self.inner = ChatRound(rounds=3)
        self.victim = victim
        self.where = where

    def init(self, agent, org):
        return {"chat": self.inner.init(agent, org), "replies": 0}

    def on_start(self, ctx, state):
        if self.where == "start" and ctx.agent == self.victim:
            raise KeyError("no plan")
        return self.inner.on_start(ctx, state["chat"])

    def on_batch(self, ctx, state, batch):
        if self.where == "batch" and ctx.agent == self.victim:
            raise ValueError("unreadable")
        return self.inner.on_batch(ctx, state["chat"], batch)

    def on_reply(self, ctx, state, reply):
        state["replies"] += 1
        if self.where == "reply" and ctx.agent == self.victim and state["replies"] == 2:
            raise RuntimeError("model output did not parse")
        return self.inner.on_reply(ctx, state["chat"], reply)


@pytest.mark.parametrize("name", sorted(LIVE))
def test_a_run_leaves_no_thread_task_or_actor_behind(name: str) -> None:
    before = quiet_threads()
    org = Organisation.two_tier(80, 8)
    result = LIVE[name](org, ChatRound(rounds=2), time_scale=0.002).run()
    assert result.ledger.messages == expected_messages(org, 2)
    assert quiet_threads() == before
    assert pykka.ActorRegistry.get_all() == []


def test_asyncio_runs_inside_a_running_loop_and_leaves_no_task() -> None:
    org = Organisation.two_tier(60, 6)

    async def main() -> tuple[Any, set[asyncio.Task[Any]]]:
        runtime = AsyncioRuntime(org, ChatRound(), time_scale=0.002)
        result = await runtime.run_async()
        assert runtime.tasks == set()  # each task ended with the activation it drove
        return result, asyncio.all_tasks() - {asyncio.current_task()}

    result, left = asyncio.run(main())
    assert left == set()
    assert result.ledger.messages == expected_messages(org)


@pytest.mark.parametrize("name", sorted(LIVE))
@pytest.mark.parametrize(
    ("where", "needle"),
    [
        ("reply", r"agent 13: behaviour 'fails-on-reply' failed on LLM reply 1: RuntimeError\('model output"),
        ("batch", r"agent 13: behaviour 'fails-on-reply' failed on a batch of \d+ message\(s\) \(first: Message\(id="),
        ("start", r"agent 13: behaviour 'fails-on-reply' failed in on_start: KeyError\('no plan'\)"),
    ],
)
def test_an_exception_in_a_behaviour_ends_the_run_naming_agent_and_message(name: str, where: str, needle: str) -> None:
    before = quiet_threads()
    org = Organisation.two_tier(60, 6)
    runtime = LIVE[name](org, FailsOnReply(13, where), llm=fixed_llm(1.0), time_scale=0.02)
    t0 = time.monotonic()
    with pytest.raises(BehaviourError, match=needle):
        runtime.run()
    # the other agents were in the middle of 1 s (20 ms) calls: the run ended at once
    assert time.monotonic() - t0 < 5.0
    assert quiet_threads() == before
    assert pykka.ActorRegistry.get_all() == []
    if name == "asyncio":
        assert all(task.done() for task in runtime.tasks)


class BadTool:
    name = "bad-tool"

    def init(self, agent, org):
        return None

    def on_start(self, ctx, state):
        return Effects(tool=ToolCall("lint", duration_s=0.5, lock="repo")) if ctx.agent == 2 else None

    def on_batch(self, ctx, state, batch):
        return Effects()

    def on_reply(self, ctx, state, reply):
        return Effects()

    def on_tool(self, ctx, state, result):
        return Effects()


@pytest.mark.parametrize("name", sorted(LIVE))
def test_a_failing_tool_names_the_agent_and_the_tool(name: str) -> None:
    def lint(args: Any) -> None:
        raise OSError("disk full")

    runtime = LIVE[name](Organisation.flat(4), BadTool(), tools={"lint": lint}, time_scale=0.01)
    with pytest.raises(BehaviourError, match=r"agent 2: behaviour 'bad-tool' failed on tool 'lint': OSError"):
        runtime.run()


@pytest.mark.parametrize("name", sorted(LIVE))
def test_latency_is_really_waited_and_reported_in_virtual_seconds(name: str) -> None:
    # every agent composes (one 1 s call), then reads its one batch (another 1 s call)
    scale = 0.05
    result = LIVE[name](Organisation.flat(3), ChatRound(), llm=fixed_llm(1.0), time_scale=scale).run()
    assert result.ledger.virtual_time_s >= 2.0
    assert result.ledger.wall_s >= 2.0 * scale
    assert result.ledger.virtual_time_s < 2.0 + 6.0  # generous: a loaded machine adds wall time
    assert result.ledger.llm_time_s == pytest.approx(result.ledger.llm_calls * 1.0)


@pytest.mark.parametrize("name", sorted(LIVE))
@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), "fast"])
def test_a_bad_time_scale_is_refused(name: str, bad: Any) -> None:
    with pytest.raises(ParameterError, match="time scale must be a finite number > 0"):
        LIVE[name](Organisation.flat(2), ChatRound(), time_scale=bad)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("tick", [0.0, 0.005])
def test_asyncio_event_loops_and_coalesced_timers_agree(loop: str, tick: float) -> None:
    org = Organisation.two_tier(90, 9)
    runtime = AsyncioRuntime(org, ChatRound(2), llm=fixed_llm(1.0), time_scale=0.01, event_loop=loop, timer_tick_s=tick)
    result = runtime.run()
    assert result.ledger.messages == expected_messages(org, 2)
    assert result.ledger.virtual_time_s >= 3.0  # compose, then at least two reads in sequence


def test_asyncio_refuses_an_unknown_event_loop() -> None:
    with pytest.raises(ParameterError, match="unknown event loop 'trio'"):
        AsyncioRuntime(Organisation.flat(2), ChatRound(), event_loop="trio")


def test_thread_capacity_reads_the_kernel_limits() -> None:
    cap = thread_capacity()
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    assert 0 < cap["capacity"] < pid_max
    assert cap["pid_max"] == pid_max - cap["threads_in_use"]
    assert cap["capacity"] <= min(v for k, v in cap.items() if k not in ("capacity", "threads_in_use") and v)


def test_pykka_refuses_more_agents_than_the_machine_has_threads_before_starting_any() -> None:
    before = quiet_threads()
    n = thread_capacity()["capacity"] + 1
    with pytest.raises(
        ParameterError, match=r"agents: the pykka runtime needs one thread per agent .* got [\d,]+ agents"
    ):
        PykkaRuntime(Organisation.star(n), ChatRound())
    assert quiet_threads() == before
    assert pykka.ActorRegistry.get_all() == []


def megaactors(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=120)


def test_cli_refuses_too_many_pykka_agents_with_one_line_and_exit_code_2() -> None:
    n = thread_capacity()["capacity"] + 2000
    out = megaactors("run", "--runtime", "pykka", "--topology", "star", "--agents", str(n))
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "the pykka runtime needs one thread per agent" in lines[0]


@pytest.mark.parametrize("runtime", ["asyncio", "pykka"])
def test_cli_runs_live_runtimes_with_a_time_scale(runtime: str) -> None:
    args = ["run", "--topology", "two-tier", "--agents", "120", "--group-size", "10", "--seed", "2", "--json"]
    live = megaactors(*args, "--runtime", runtime, "--time-scale", "0.002")
    sim = megaactors(*args, "--runtime", "sim", "--time-scale", "0.002")  # ignored by the simulation
    assert live.returncode == 0 and sim.returncode == 0, live.stderr + sim.stderr
    a, b = json.loads(live.stdout), json.loads(sim.stdout)
    assert a["runtime"] == runtime and b["runtime"] == "sim"
    for key in ("messages", "messages_by_channel", "bytes", "agents", "groups"):
        assert a[key] == b[key]
    assert a["llm_calls"] == a["batches"] + 120  # every agent composes once, then one call per batch


@pytest.mark.parametrize("value", ["0", "-2", "inf"])
def test_cli_refuses_a_bad_time_scale(value: str) -> None:
    out = megaactors("run", "--runtime", "asyncio", "--time-scale", value)
    assert out.returncode == 2 and out.stdout == ""
    assert "time_scale must be a finite number > 0" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_run_spec_passes_runtime_options_through() -> None:
    spec = RunSpec(topology="flat", agents=4, runtime="asyncio", latency_sigma=0.0, per_output_token_s=0.0)
    result = spec.execute(time_scale=0.01)
    assert result.runtime == "asyncio" and result.ledger.virtual_time_s >= 2.0


class Chatty:
    """Every agent sends one message to each peer at start, with no LLM call."""

    name = "chatty"

    def init(self, agent, org):
        return 0

    def on_start(self, ctx, state):
        peers = [b for b in range(ctx.org.n) if b != ctx.agent]
        return Effects(sends=[Send(peers, INTRA, "hello", ctx.agent)])

    def on_batch(self, ctx, state, batch):
        return Effects(state=state + len(batch))

    def on_reply(self, ctx, state, reply):
        return Effects()


@pytest.mark.parametrize("name", sorted(LIVE))
def test_messages_arriving_together_are_taken_as_batches(name: str) -> None:
    org = Organisation.flat(40)
    result = LIVE[name](org, Chatty()).run()
    assert result.states == [39] * 40
    batches = result.ledger.per_agent["batches"]
    assert all(1 <= b <= 39 for b in batches)
    assert sum(result.ledger.per_agent["received"]) == 40 * 39
    assert result.ledger.llm_calls == 0 and result.ledger.peak_queue_depth >= 2
    assert min(result.trace.b_size) >= 1  # a wake-up never hands over an empty in-queue


def test_a_recruit_beyond_the_fanout_cap_ends_the_run() -> None:
    class Greedy:
        name = "greedy"

        def init(self, agent, org):
            return None

        def on_start(self, ctx, state):
            return Effects(recruits=4, llm=LLMRequest(new_tokens=1)) if ctx.agent == 0 else None

        def on_batch(self, ctx, state, batch):
            return Effects()

        def on_reply(self, ctx, state, reply):
            return Effects()

    for cls in LIVE.values():
        with pytest.raises(Exception, match="fan-out cap of 3 reached"):
            cls(Organisation.hierarchy(1, 3), Greedy()).run()


# ---------------------------------------------------------------------- the asyncio runtime sharded
# (the sharded runs are Ray actors: tests/ray_cases.py; here what is decided before Ray starts)


def starts_of(org: Organisation, rounds: int) -> list[int]:
    behaviour = ChatRound(rounds)
    return [
        int(behaviour.on_start(AgentContext(a, org, 0.0), behaviour.init(a, org)) is not None) for a in range(org.n)
    ]


def test_shards_cut_at_group_boundaries() -> None:
    org = Organisation.two_tier(300, 12)
    bounds = shard_bounds(org, 2)
    assert bounds[0] == 0 and bounds[-1] == 300 and bounds[1] % 12 == 0 and abs(bounds[1] - 150) <= 6
    assert shard_bounds(Organisation.flat(10), 3) == [0, 3, 7, 10]


class RecruitsOnStart(ChatRound):
    def on_start(self, ctx, state):
        return Effects(recruits=1, llm=LLMRequest(new_tokens=1)) if ctx.agent == 0 else None


def test_sharded_rate_limits_are_per_group_or_refused() -> None:
    # each shard keeps its own token buckets: a run-wide limit would count once per shard
    org = Organisation.two_tier(20, 5)
    with pytest.raises(ParameterError, match="limit-scope run would be applied once per shard"):
        AsyncioRuntime(org, ChatRound(), shards=2, provider=ProviderModel(rpm=60))
    with pytest.raises(ParameterError, match="group 0 spans two shards"):
        AsyncioRuntime(Organisation.two_tier(20, 20), ChatRound(), shards=2, provider=ProviderModel(tpm=1e6,
                       scope="group"))  # fmt: skip
    AsyncioRuntime(org, ChatRound(), shards=2, provider=ProviderModel(rpm=6, scope="group"))  # groups cut whole
    AsyncioRuntime(org, ChatRound(), shards=2, provider=ProviderModel(failure_rate=0.1))  # per call: shardable


def test_sharding_refuses_what_needs_one_process() -> None:
    org = Organisation.two_tier(20, 5)
    with pytest.raises(ParameterError, match="serial mode and max_concurrent_llm need one process"):
        AsyncioRuntime(org, ChatRound(), serial=True, shards=2)
    with pytest.raises(ParameterError, match="serial mode and max_concurrent_llm need one process"):
        AsyncioRuntime(org, ChatRound(), max_concurrent_llm=2, shards=2)
    with pytest.raises(ParameterError, match="shards must be an integer >= 1"):
        AsyncioRuntime(org, ChatRound(), shards=0)
    with pytest.raises(ParameterError, match="faults need a single-process asyncio run"):
        AsyncioRuntime(org, ChatRound(), shards=2, faults=FaultSpec(duplicate=0.1))  # refused before it runs
    with pytest.raises(ParameterError, match="faults need a single-process asyncio run"):
        AsyncioRuntime(org, ChatRound(), shards=2, faults=FaultSpec(llm=0.1))
    with pytest.raises(ParameterError, match="address: a Ray cluster runs shards; give shards=2 or more"):
        AsyncioRuntime(org, ChatRound(), address="127.0.0.1:6379")
    with pytest.raises(ParameterError, match="3 shards for 2 agents"):
        AsyncioRuntime(Organisation.flat(2), ChatRound(), shards=3).run()

    async def inside_a_loop() -> None:
        await AsyncioRuntime(org, ChatRound(), shards=2).run_async()

    with pytest.raises(ParameterError, match="call run"):
        asyncio.run(inside_a_loop())
    assert multiprocessing.active_children() == []


# ---------------------------------------------------------------------- megaactors bench async-vs-threads


def test_bench_async_vs_threads_reports_both_sides_as_json() -> None:
    out = megaactors("bench", "async-vs-threads", "--calls", "60", "--latency-ms", "200", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert set(report) == {"asyncio", "threads"}
    for side in report.values():
        assert {"wall_s", "peak_rss_mb"} <= set(side)
        assert side["llm_calls"] == 60 and side["peak_in_flight"] == 60  # all calls were concurrent
        assert side["wall_s"] >= 0.2 and side["calls_s"] >= 0.2 and side["peak_rss_mb"] > 10


def test_bench_async_vs_threads_prints_a_table() -> None:
    out = megaactors("bench", "async-vs-threads", "--calls", "30", "--latency-ms", "10")
    assert out.returncode == 0, out.stderr
    assert "30 simulated LLM calls of 10 ms started at once" in out.stdout
    assert "asyncio" in out.stdout and "threads" in out.stdout and "KB per call" in out.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--calls", "0"], "calls must be an integer >= 1"),
        (["--latency-ms", "-5"], "latency_ms must be a finite number >= 0"),
        (["--calls", "10000000"], "calls: threads need one thread per call"),
        (["--calls", "x"], "calls: 'x' is not an integer"),
    ],
)
def test_bench_refuses_bad_input_with_one_line_and_exit_code_2(args: list[str], needle: str) -> None:
    out = megaactors("bench", "async-vs-threads", *args)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


class ScrambledChat:
    """Every agent messages its peers in a scrambled order; recipients record ids."""

    name = "scrambled-chat"

    def init(self, agent, org):
        return []

    def on_start(self, ctx, state):
        peers = [b for b in range(ctx.org.n) if b != ctx.agent]
        peers = peers[1::2][::-1] + peers[::2]
        return Effects(sends=[Send(peers, INTRA, "hello", ctx.agent)])

    def on_batch(self, ctx, state, batch):
        return Effects(state=[*state, *((m.id, m.sender, m.recipient) for m in batch)])

    def on_reply(self, ctx, state, reply):
        return Effects()


def check_scrambled_chat(shards: int) -> None:
    """Every copy keeps its own message id (across shards too: tests/ray_cases.py)."""
    org = Organisation.flat(13)
    result = AsyncioRuntime(org, ScrambledChat(), shards=shards).run()
    seen = [entry for state in result.states for entry in state]
    assert sorted(i for i, _, _ in seen) == list(range(13 * 12))  # each id exactly once
    assert all(recipient == a for a, state in enumerate(result.states) for _, _, recipient in state)
    assert sorted((s, r) for _, s, r in seen) == sorted((s, r) for s in range(13) for r in range(13) if s != r)
    assert result.ledger.bytes == SimRuntime(Organisation.flat(13), ScrambledChat()).run().ledger.bytes


def test_every_copy_keeps_its_own_message_id() -> None:
    check_scrambled_chat(shards=1)


@pytest.mark.parametrize("name", sorted(LIVE))
@pytest.mark.parametrize("options", [{}, {"max_concurrent_llm": 3}, {"serial": True}], ids=["plain", "slots", "serial"])
@pytest.mark.parametrize("trace", [False, True])
def test_the_plain_cycle_is_chosen_once_and_agrees_with_the_simulation(
    name: str, options: dict[str, Any], trace: bool
) -> None:
    org = Organisation.two_tier(60, 6)
    ref = SimRuntime(Organisation.two_tier(60, 6), ChatRound(3), fixed_llm(0.0), trace=False).run()
    rt = LIVE[name](org, ChatRound(3), fixed_llm(0.0), trace=trace, **options)
    got = rt.run()
    assert rt.plain is (not options)  # no gate: every woken agent runs the plain cycle
    a, b = ref.ledger, got.ledger
    assert (b.messages, b.bytes, b.messages_by_channel) == (a.messages, a.bytes, a.messages_by_channel)
    for column in ("sent", "received"):  # per-agent bytes follow the order ids are handed out in
        assert list(b.per_agent[column]) == list(a.per_agent[column])
    assert got.states == ref.states
    calls, batches = b.per_agent["llm_calls"], b.per_agent["batches"]
    assert [calls[i] - batches[i] for i in range(org.n)] == starts_of(org, 3)
    assert b.peak_llm_in_flight >= 1 and all(agent.phase.name == "IDLE" for agent in rt.agents)
    assert (got.trace is not None) is trace


def test_asyncio_takes_no_batch_before_every_start_effect_has_reached_its_first_wait() -> None:
    # zero-latency calls: each agent's start effects send round 0 without waiting, so
    # only the barrier keeps an agent from reading what the agents started before it
    # sent, then the rest: every agent reads its one round in one batch, as in the
    # simulation's order
    org = Organisation.two_tier(60, 6)
    result = AsyncioRuntime(org, ChatRound(1), fixed_llm(0.0), trace=False).run()
    assert result.ledger.messages == expected_messages(org)
    assert list(result.ledger.per_agent["batches"]) == [1] * org.n
    assert list(result.ledger.per_agent["llm_calls"]) == [2] * org.n  # composing, then reading


class CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the futures and task steps it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.futures = self.handles = 0

    def create_future(self) -> asyncio.Future[Any]:
        self.futures += 1
        return super().create_future()

    def call_soon(self, callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
        self.handles += 1
        return super().call_soon(callback, *args, context=context)


def test_asyncio_runs_activations_that_wait_for_nothing_without_a_task_or_future() -> None:
    org = Organisation.two_tier(60, 6)
    loop = CountingLoop()
    try:
        runtime = AsyncioRuntime(org, ChatRound(10), fixed_llm(0.0), trace=False)
        result = loop.run_until_complete(runtime.run_async())
    finally:
        loop.close()
    batches = sum(result.ledger.per_agent["batches"])
    assert result.ledger.messages == expected_messages(org, 10) and batches >= 8 * org.n
    # no task, no future per agent or per batch: the run's own few, and one callback
    # per wake-up pass (a turn of the loop), however many activations each runs
    assert loop.futures <= 5
    assert loop.handles <= 40 < batches


def test_asyncio_activations_that_wait_for_an_llm_slot_are_driven_on_by_their_tasks() -> None:
    # one LLM slot: every call waits in the slot's line, and the run still ends with
    # every message read (each wait begun in the wake-up pass, awaited by the task)
    org = Organisation.two_tier(24, 4)
    result = AsyncioRuntime(org, ChatRound(2), fixed_llm(0.5), max_concurrent_llm=1, time_scale=0.001).run()
    assert result.ledger.messages == expected_messages(org, 2)
    assert result.ledger.peak_llm_in_flight == 1
    assert all(state[1] == state[5] for state in result.states)
