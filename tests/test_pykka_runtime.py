"""The pykka runtime's own paths: every agent's start effects run before any agent
takes a batch (without waiting for the calls they start), agents woken in turn
carry rounds without calls to wait for, a message that arrives while its recipient
is busy is taken as the recipient leaves Response, zero-latency LLM calls are never
in flight together, stopping joins every actor thread, and the interpreter's switch
interval is the runtime's own during a run and restored after it."""

from __future__ import annotations

import os
import queue
import sys
import threading
from typing import Any

import pykka
import pytest

from megaactors import (
    BehaviourError,
    ChatRound,
    Effects,
    LatencyModel,
    LLMRequest,
    Organisation,
    ParameterError,
    Send,
    SimulatedLLM,
    expected_messages,
)
from megaactors.core.messages import INTRA
from megaactors.runtime import PykkaRuntime, SimRuntime, threads
from megaactors.runtime.thread_limits import current_cpu
from megaactors.runtime.threads import SWITCH_INTERVAL


def fixed_llm(latency_s: float) -> SimulatedLLM:
    return SimulatedLLM(latency=LatencyModel(median_s=latency_s, sigma=0.0, per_output_token_s=0.0))


class HelloAll:
    """Every agent greets every other at start and counts what each batch holds;
    agents in ``callers`` first make an LLM call (the greeting follows its reply)."""

    name = "hello-all"

    def __init__(self, callers: tuple[int, ...] = ()) -> None:
        self.callers = callers

    def init(self, agent, org):
        return []

    def _hello(self, ctx):
        return Effects(sends=[Send(tuple(p for p in range(ctx.org.n) if p != ctx.agent), INTRA, "hello", ctx.agent)])

    def on_start(self, ctx, state):
        return Effects(llm=LLMRequest(new_tokens=10)) if ctx.agent in self.callers else self._hello(ctx)

    def on_batch(self, ctx, state, batch):
        return Effects(state=[*state, len(batch)])

    def on_reply(self, ctx, state, reply):
        return self._hello(ctx) if ctx.agent in self.callers and reply.call_index == 0 else Effects()


def test_every_start_effect_is_delivered_before_any_agent_takes_a_batch() -> None:
    n = 40
    result = PykkaRuntime(Organisation.flat(n), HelloAll(), fixed_llm(0.0), trace=False).run()
    assert result.states == [[n - 1]] * n  # one batch each, holding every greeting
    assert list(result.ledger.per_agent["batches"]) == [1] * n


@pytest.mark.parametrize("cap", [None, 1])
def test_a_start_effect_that_waits_does_not_hold_the_others_back(cap: int | None) -> None:
    n, callers = 12, (0, 1)
    runtime = PykkaRuntime(
        Organisation.flat(n), HelloAll(callers), fixed_llm(50.0), time_scale=0.01, max_concurrent_llm=cap
    )
    result = runtime.run()
    first_batch = {a: t for a, t in zip(reversed(result.trace.b_agent), reversed(result.trace.b_time), strict=True)}
    quiet = [a for a in range(n) if a not in callers]
    assert all(first_batch[a] < 50.0 for a in quiet)  # the callers' replies (0.5 s each) were not awaited
    assert [sum(s) for s in result.states] == [n - 1] * n  # and every greeting arrived


@pytest.mark.timeout(60)  # a broken hand-off hangs
def test_zero_latency_rounds_are_carried_by_the_wake_hand_off_alone() -> None:
    # no agent ever waits for a call, so each one that goes Idle wakes the next in line
    org = Organisation.two_tier(300, 8)
    got = PykkaRuntime(org, ChatRound(rounds=8), fixed_llm(0.0), trace=False).run()
    ref = SimRuntime(Organisation.two_tier(300, 8), ChatRound(rounds=8), fixed_llm(0.0), trace=False).run()
    assert got.ledger.messages == ref.ledger.messages == expected_messages(org, 8)
    assert got.states == ref.states


def test_actors_with_another_inbox_get_plain_tells(monkeypatch: pytest.MonkeyPatch) -> None:
    # what happens should pykka ignore the runtime's inbox factory: pykka's own queue
    monkeypatch.setattr(threads, "inbox_factory", queue.Queue)
    org = Organisation.two_tier(60, 6)
    runtime = PykkaRuntime(org, ChatRound(rounds=3), fixed_llm(0.0), trace=False)
    got = runtime.run()
    ref = SimRuntime(Organisation.two_tier(60, 6), ChatRound(rounds=3), fixed_llm(0.0), trace=False).run()
    assert runtime.inboxes == [None] * org.n
    assert got.ledger.messages == ref.ledger.messages and got.states == ref.states


class BusyThenNudged:
    """Agent 0 starts with an LLM call; agent 1 sends it one message at once, which
    lands while agent 0 waits for its reply."""

    name = "busy-then-nudged"

    def init(self, agent, org):
        return 0

    def on_start(self, ctx, state):
        if ctx.agent == 0:
            return Effects(llm=LLMRequest(new_tokens=10))
        return Effects(sends=[Send((0,), INTRA, "nudge", ctx.agent)])

    def on_batch(self, ctx, state, batch):
        return Effects(state=state + len(batch))

    def on_reply(self, ctx, state, reply):
        return Effects()


def test_a_message_that_lands_while_busy_is_the_next_batch_without_going_idle() -> None:
    result = PykkaRuntime(Organisation.flat(2), BusyThenNudged(), fixed_llm(5.0), time_scale=0.01).run()
    assert result.states == [1, 0]
    assert list(result.ledger.per_agent["batches"]) == [1, 0]
    moves = [(frm, to) for agent, frm, to, _ in result.trace.transitions() if agent == 0]
    assert moves == [
        ("IDLE", "PROCESSING"),
        ("PROCESSING", "RESPONSE"),
        ("RESPONSE", "PROCESSING"),  # the nudge, taken on the way out of Response
        ("PROCESSING", "RESPONSE"),
        ("RESPONSE", "IDLE"),
    ]
    reply_at = next(t for agent, _, to, t in result.trace.transitions() if agent == 0 and to == "RESPONSE")
    assert list(result.trace.b_agent) == [0] and result.trace.b_time[0] >= reply_at >= 5.0


def test_zero_latency_calls_are_never_in_flight_together() -> None:
    org = Organisation.two_tier(60, 6)
    result = PykkaRuntime(org, ChatRound(rounds=2), fixed_llm(0.0), trace=False).run()
    assert result.ledger.llm_calls > org.n
    assert result.ledger.peak_llm_in_flight == 1
    slow = PykkaRuntime(Organisation.two_tier(60, 6), ChatRound(rounds=2), fixed_llm(1.0), time_scale=0.005).run()
    assert slow.ledger.peak_llm_in_flight > 1


def test_stopping_joins_every_actor_thread() -> None:
    before = set(threading.enumerate())
    runtime = PykkaRuntime(Organisation.two_tier(40, 5), ChatRound(rounds=1), fixed_llm(0.0))
    runtime.run()
    threads = [actor.thread for actor in runtime.actors]
    assert len(threads) == 40 and all(t is not None and not t.is_alive() for t in threads)
    assert all(actor.actor_stopped.is_set() for actor in runtime.actors)
    assert set(threading.enumerate()) == before
    assert pykka.ActorRegistry.get_all() == []


class SeesSwitchInterval:
    """Every agent records the interpreter's switch interval from its own thread."""

    name = "sees-switch-interval"

    def init(self, agent, org):
        return None

    def on_start(self, ctx, state):
        return Effects(sends=[Send(tuple(p for p in range(ctx.org.n) if p != ctx.agent), INTRA, "hi", ctx.agent)])

    def on_batch(self, ctx, state, batch):
        return Effects(state=sys.getswitchinterval())

    def on_reply(self, ctx, state, reply):
        return Effects()


@pytest.mark.parametrize("interval", [SWITCH_INTERVAL, 0.02, None])
def test_the_switch_interval_holds_during_the_run_and_is_restored(interval: float | None) -> None:
    before = sys.getswitchinterval()
    result = PykkaRuntime(Organisation.flat(4), SeesSwitchInterval(), switch_interval=interval).run()
    assert result.states == pytest.approx([before if interval is None else interval] * 4)  # kept in microseconds
    assert sys.getswitchinterval() == before


def test_the_switch_interval_is_restored_when_an_agent_fails() -> None:
    before = sys.getswitchinterval()

    class Fails(SeesSwitchInterval):
        def on_batch(self, ctx, state, batch):
            raise ValueError("unreadable")

    with pytest.raises(BehaviourError, match="unreadable"):
        PykkaRuntime(Organisation.flat(4), Fails()).run()
    assert sys.getswitchinterval() == before


@pytest.mark.parametrize("bad", [0, -0.01, float("inf"), float("nan"), "0.05", True])
def test_a_bad_switch_interval_is_refused(bad: Any) -> None:
    with pytest.raises(ParameterError, match="switch interval"):
        PykkaRuntime(Organisation.flat(2), ChatRound(), switch_interval=bad)


class SeesCpus(SeesSwitchInterval):
    """Every agent records the CPUs its own thread may run on."""

    def on_batch(self, ctx, state, batch):
        return Effects(state=sorted(os.sched_getaffinity(0)))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("one_cpu", [True, False, None])
def test_one_cpu_puts_every_actor_on_one_cpu_and_restores_the_callers(one_cpu: bool | None) -> None:
    before = os.sched_getaffinity(0)
    kw = {} if one_cpu is None else {"one_cpu": one_cpu}  # None: the default, on
    result = PykkaRuntime(Organisation.flat(4), SeesCpus(), **kw).run()
    if one_cpu is False:
        assert result.states == [sorted(before)] * 4
    else:
        assert len(result.states[0]) == 1 and result.states[0][0] in before
        assert result.states == [result.states[0]] * 4
    assert os.sched_getaffinity(0) == before
    chat = PykkaRuntime(Organisation.two_tier(30, 5), ChatRound(), seed=2, **kw).run()
    assert chat.ledger.messages == SimRuntime(Organisation.two_tier(30, 5), ChatRound(), seed=2).run().ledger.messages


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("cpu", sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [])
def test_current_cpu_is_the_one_the_thread_runs_on(cpu: int) -> None:
    """What lets side-by-side processes keep to different CPUs: each takes the one it is on."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})  # moves this thread there before it returns
    try:
        assert current_cpu() == cpu
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_a_bad_one_cpu_is_refused(bad: Any) -> None:
    with pytest.raises(ParameterError, match="one_cpu"):
        PykkaRuntime(Organisation.flat(2), ChatRound(), one_cpu=bad)
