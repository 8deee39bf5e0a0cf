"""MegaAgent §2–§3 in simulation: the mechanism obeys its rules, the scenarios are
calibrated, and the report is computed from runs."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from megaactors import AgentState, BehaviourError, Effects, Organisation, RecruitError, RouteError, Send, SimRuntime
from megaactors.behaviours.megaagent import (
    MegaAgent,
    Monitoring,
    OuterLoop,
    RetryLimitError,
    StageTokens,
    TokenPlan,
    TreePlan,
    Work,
)
from megaactors.core.messages import ADMIN, HIERARCHY, INTRA
from megaactors.megaagent.calibration import calibrate, stage_targets
from megaactors.megaagent.scenarios import GOBANG, POLICY, SCENARIOS, ApiLimits, measure, policy_plan

SMALL_GOBANG = GOBANG.but(work=replace(GOBANG.work, task_calls=6, deliveries=2))
"""Gobang's tree and mechanism with a short worker loop."""
SMALL_POLICY = POLICY.but(plan=policy_plan(100))
"""Boss → 9 ministers → 90 experts."""


class Recording:
    """Runs a behaviour unchanged and keeps every send it asks for."""

    def __init__(self, inner: MegaAgent) -> None:
        self.inner = inner
        self.name = inner.name
        self.sends: list[tuple[int, str, tuple[int, ...], str]] = []

    def _log(self, ctx, eff):
        if eff is not None:
            self.sends.extend((ctx.agent, s.channel, tuple(s.recipients), s.kind) for s in eff.sends)
        return eff

    def init(self, agent, org):
        return self.inner.init(agent, org)

    def on_start(self, ctx, state):
        return self._log(ctx, self.inner.on_start(ctx, state))

    def on_batch(self, ctx, state, batch):
        return self._log(ctx, self.inner.on_batch(ctx, state, batch))

    def on_reply(self, ctx, state, reply):
        return self._log(ctx, self.inner.on_reply(ctx, state, reply))

    def on_tool(self, ctx, state, result):
        return self._log(ctx, self.inner.on_tool(ctx, state, result))


def recorded_run(scenario, seed=1):
    rec = Recording(scenario.behaviour(seed))
    org = scenario.organisation()
    result = SimRuntime(org, rec, scenario.llm(seed), seed=seed).run()
    return result, rec.sends


# ---------------------------------------------------------------------- the tree


def test_tree_plans_split_every_agent_and_respect_their_fanouts() -> None:
    assert TreePlan(7, (2, 2)).per_level() == [1, 2, 4]
    assert policy_plan(590).per_level() == [1, 9, 580]
    assert sorted(policy_plan(590).split(590, 0)) == [65] * 5 + [66] * 4
    assert TreePlan.flat(19).per_level() == [1, 18]
    for n in (2, 10, 31, 100, 1000, 12345):
        plan = TreePlan.balanced(n, 5)
        assert sum(plan.per_level()) == n
        assert plan.capacity >= n > TreePlan._capacity(plan.fanouts[:-1])  # shallowest tree that holds n
        sizes = plan.split(n, 0)
        assert sum(sizes) == n - 1 and len(sizes) <= 5 and max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="100 agents do not fit in a tree with fan-outs"):
        TreePlan(100, (2, 2))


def test_bad_parameters_are_named() -> None:
    with pytest.raises(ValueError, match="3 deliveries need at least as many task calls"):
        Work(task_calls=2, deliveries=3)
    with pytest.raises(ValueError, match="checklist failure probability must be a probability"):
        Monitoring(checklist_failure=1.5)
    with pytest.raises(ValueError, match="new tokens must be an integer >= 1"):
        StageTokens(0, 10)
    with pytest.raises(ValueError, match="unknown variant 'w/o boss'"):
        GOBANG.variant("w/o boss")
    behaviour = SMALL_GOBANG.behaviour(1)
    with pytest.raises(BehaviourError, match="starts from a lone boss"):
        SimRuntime(Organisation.hierarchy(5, 2), behaviour).run()


# ---------------------------------------------------------------------- the mechanism


@pytest.mark.parametrize("scenario", [SMALL_GOBANG, SMALL_POLICY], ids=["gobang", "policy"])
def test_every_send_obeys_the_routing_rules(scenario) -> None:
    result, sends = recorded_run(scenario)
    org = result.org
    assert sum(len(r) for _, _, r, _ in sends) == result.ledger.messages
    ordinary = [a for a in range(org.n) if org.admin_group[a] < 0]
    assert ordinary, "the scenario has workers"
    for sender, channel, recipients, kind in sends:
        for r in recipients:
            assert org.route_error(sender, r, channel) is None, (sender, r, channel, kind)
        if org.admin_group[sender] < 0:  # an ordinary agent: its own group only
            own = org.groups[org.member_group[sender]]
            assert all(r in own for r in recipients), (sender, recipients)
            assert channel == INTRA or (channel == HIERARCHY and recipients == (org.parent[sender],))
    by_channel = result.ledger.messages_by_channel
    assert by_channel[INTRA] > 0 and by_channel[ADMIN] > 0 and by_channel[HIERARCHY] > 0


class Trespasser(MegaAgent):
    """Workers also chat with a worker of another group."""

    def _deliver(self, ctx, state):
        eff = super()._deliver(ctx, state)
        org, a = ctx.org, ctx.agent
        if org.admin_group[a] < 0:
            cousins = [b for b in range(org.n) if org.admin_group[b] < 0 and org.parent[b] != org.parent[a]]
            if cousins:
                return Effects(sends=[*eff.sends, Send((cousins[0],), INTRA, "gossip", "hi")])
        return eff


def test_a_worker_messaging_outside_its_group_is_refused() -> None:
    sc = SMALL_GOBANG
    behaviour = Trespasser(sc.plan, sc.tokens, sc.work, sc.monitoring, seed=1)
    with pytest.raises(RouteError, match="not in the same group"):
        SimRuntime(sc.organisation(), behaviour, sc.llm(1), seed=1).run()


def test_agents_are_recruited_during_the_run_within_the_fanout_cap() -> None:
    runtime = SMALL_POLICY.runtime(1, trace=True)
    assert runtime.org.n == 1  # a lone boss at the start
    result = runtime.run()
    org = result.org
    assert org.n == 100 and org.depth() + 1 == 3
    assert measure(result)["agents_per_level"] == SMALL_POLICY.plan.per_level() == [1, 9, 90]
    assert max(len(c) for c in org.children.values()) <= SMALL_POLICY.cap == org.fanout
    first_move = {}
    for a, _, _, t in result.trace.transitions():
        first_move.setdefault(a, t)
    deepest = [a for a in range(org.n) if org.level[a] == 2]
    assert min(first_move[a] for a in deepest) > 0  # they did not exist at time 0
    with pytest.raises(RecruitError, match="fan-out cap of 5 reached"):
        SMALL_POLICY.but(fanout_cap=5).run(1)


def test_without_failures_there_are_no_retries_and_the_messages_add_up() -> None:
    sc = SMALL_GOBANG.but(monitoring=Monitoring(checklist_failure=0, review_failure=0, boss_failure=0))
    result, sends = recorded_run(sc)
    org, led = result.org, result.ledger
    assert sum(s["retries"] for s in result.states) == 0
    assert not any(kind == "retry" for *_, kind in sends)
    workers = sum(1 for a in range(org.n) if org.admin_group[a] < 0)
    admins = sum(1 for a in range(org.n) if org.admin_group[a] >= 0 and a != org.boss)
    d = sc.work.deliveries
    # a task to everyone but the boss; per worker d deliveries and d - 1 answers; one result per admin
    assert led.messages_by_channel[HIERARCHY] == (org.n - 1) + workers * (2 * d - 1) + admins
    siblings = sum(len(c) for c in org.children.values() if len(c) > 1)
    assert led.messages_by_channel[INTRA] + led.messages_by_channel[ADMIN] == siblings
    flaky = measure(SMALL_GOBANG.but(monitoring=Monitoring(0.4, 0.4, 0.4)).run(1))
    assert flaky["retries"] > 0 and flaky["llm_calls"] > measure(result)["llm_calls"]


@pytest.mark.parametrize(
    ("monitoring", "why"),
    [
        (Monitoring(checklist_failure=1.0), "its checklist failed"),
        (Monitoring(checklist_failure=0.0, review_failure=1.0), "its parent rejected its work"),
    ],
)
def test_certain_failure_ends_the_run_at_the_retry_cap(monitoring, why) -> None:
    with pytest.raises(BehaviourError, match=rf"failed validation 31 times \({why}\): retry cap of 30 reached") as err:
        SMALL_GOBANG.but(monitoring=monitoring).run(1)
    assert isinstance(err.value.__cause__, RetryLimitError)
    with pytest.raises(BehaviourError, match="failed validation 4 times"):
        SMALL_GOBANG.but(monitoring=replace(monitoring, retry_cap=3)).run(1)


def test_retries_stay_under_the_cap() -> None:
    result = SMALL_POLICY.but(monitoring=Monitoring(0.5, 0.5, 0.5, retry_cap=30)).run(2)
    retries = [s["retries"] for s in result.states]
    assert sum(retries) > 50 and max(retries) <= 30


def test_serial_mode_never_has_two_agents_processing() -> None:
    parallel = SMALL_GOBANG.run(1, trace=True)
    serial = SMALL_GOBANG.variant("no_parallelism").run(1, trace=True)
    assert serial.trace.max_concurrent(AgentState.PROCESSING) == 1
    assert parallel.trace.max_concurrent(AgentState.PROCESSING) > 1
    led = serial.ledger
    # one agent at a time and never idle in between: the makespan is all the work, back to back
    assert led.virtual_time_s == pytest.approx(led.llm_time_s + led.tool_time_s)
    assert led.lock_wait_s == 0
    assert led.virtual_time_s > 1.5 * parallel.ledger.virtual_time_s


def test_the_git_mutex_contention_shows_in_the_makespan() -> None:
    # without prefill latency, timing cannot change what the agents do, only when
    sc = SMALL_POLICY.but(latency=replace(SMALL_POLICY.latency, prefill_s_per_token=0.0))
    locked = sc.run(1).ledger
    free = sc.but(work=replace(sc.work, git_lock=False)).run(1).ledger
    assert locked.lock_wait_s > 0 and free.lock_wait_s == 0
    assert locked.tool_calls == free.tool_calls
    assert locked.virtual_time_s > free.virtual_time_s


def test_ablations_change_what_they_say() -> None:
    flat = SMALL_POLICY.variant("no_hierarchy", 19).run(1)
    assert flat.org.n == 19 and flat.org.depth() == 1
    assert sum(1 for g in flat.org.admin_group if g >= 0) == 1  # the boss alone
    assert flat.ledger.messages_by_channel[ADMIN] == 0
    quiet = measure(SMALL_POLICY.variant("no_monitoring").run(1))
    full = measure(SMALL_POLICY.run(1))
    assert quiet["retries"] == 0 < full["retries"] and quiet["llm_calls"] < full["llm_calls"]


def test_same_seed_same_run_other_seed_other_run() -> None:
    a, b = measure(SMALL_POLICY.run(3)), measure(SMALL_POLICY.run(3))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert measure(SMALL_POLICY.run(4))["makespan_s"] != a["makespan_s"]


# ---------------------------------------------------------------------- the reference code's mechanisms


def _no_prefill(sc):
    return sc.but(latency=replace(sc.latency, prefill_s_per_token=0.0))


def test_a_review_reads_every_delivery_it_covers_and_prefill_makes_it_slower() -> None:
    sc = _no_prefill(SMALL_POLICY).but(monitoring=Monitoring(0, 0, 0))
    plain, reading = sc.but(work=replace(sc.work, review_tokens=0)), sc.but(work=replace(sc.work, review_tokens=500))
    a, b = measure(plain.run(1)), measure(reading.run(1))
    deliveries = plain.plan.agents - 1  # one result per agent but the boss, each reviewed once
    assert b["llm_calls"] == a["llm_calls"] and b["makespan_s"] == a["makespan_s"]  # no prefill: same timing
    # every delivery's 500 tokens enter exactly one review prompt (and then the memory of later calls)
    assert b["stages"]["task_solving"]["tokens_in"] - a["stages"]["task_solving"]["tokens_in"] >= 500 * deliveries
    slow = reading.but(latency=replace(reading.latency, prefill_s_per_token=1e-4))
    assert measure(slow.run(1))["llm_time_s"] > b["llm_time_s"] + 1e-4 * 500 * deliveries * 0.9


def test_polling_delays_every_batch_and_costs_the_serial_run_most() -> None:
    sc = _no_prefill(SMALL_GOBANG)
    polled = sc.but(work=replace(sc.work, poll_s=2.0))
    base_serial, polled_serial = sc.variant("no_parallelism").run(1), polled.variant("no_parallelism").run(1)
    waits = polled_serial.ledger.tool_time_s - base_serial.ledger.tool_time_s
    assert 0 < waits < 2.0 * polled_serial.ledger.tool_calls  # each poll waits part of 2 s
    # one agent at a time: the serial makespan is its work, polls included
    assert polled_serial.ledger.virtual_time_s == pytest.approx(
        polled_serial.ledger.llm_time_s + polled_serial.ledger.tool_time_s
    )
    assert polled_serial.ledger.virtual_time_s > base_serial.ledger.virtual_time_s


def test_a_write_conflicts_only_after_waiting_for_the_mutex() -> None:
    sc = SMALL_POLICY.but(work=replace(SMALL_POLICY.work, conflict_probability=0.5, task_calls=2, git_s=1.0))
    parallel = measure(sc.run(1))
    serial = measure(sc.variant("no_parallelism").run(1))
    unlocked = measure(sc.but(work=replace(sc.work, git_lock=False)).run(1))
    assert parallel["conflicts"] > 0 and parallel["lock_wait_s"] > 0
    assert serial["conflicts"] == 0 and unlocked["conflicts"] == 0  # nobody committed in between
    plain = measure(sc.but(work=replace(sc.work, conflict_probability=0.0)).run(1))
    assert parallel["llm_calls"] > plain["llm_calls"]
    # every write conflicting is a livelock under contention: the retry cap ends it
    with pytest.raises(BehaviourError, match="its git writes kept conflicting"):
        sc.but(work=replace(sc.work, conflict_probability=1.0)).run(1)


def test_the_outer_loop_joins_each_round_and_then_proofreads() -> None:
    sc = _no_prefill(SMALL_GOBANG)
    plain = sc.run(1)
    everyone = sc.but(outer_loop=OuterLoop(enabled=True, stale_todo=(1.0, 1.0), reminder_calls=3, poll_s=0.0))
    looped = everyone.run(1, trace=True)
    n = looped.org.n
    assert all(s["reported"] == 2 for s in looped.states[1:])  # every agent took part in both rounds
    boss_children = len(looped.states[0]["children"])
    extra = looped.ledger.llm_calls - plain.ledger.llm_calls
    assert extra == 2 * n * 3 + boss_children + 2  # two reminders per agent, then the boss's proofreading
    assert looped.ledger.virtual_time_s > plain.ledger.virtual_time_s
    nobody = sc.but(outer_loop=OuterLoop(enabled=True, stale_todo=(0.0,), proofread=False, poll_s=0.0)).run(1)
    assert nobody.ledger.llm_calls == plain.ledger.llm_calls  # a round with every TODO list empty costs no call
    assert nobody.ledger.messages == plain.ledger.messages + 2 * (n - 1)  # the round down and "done" back up
    with pytest.raises(ValueError, match="stale TODO probability of round 2 must be a probability"):
        OuterLoop(stale_todo=(0.5, 2.0))


def test_a_cap_on_calls_in_flight_is_kept() -> None:
    capped = SMALL_POLICY.but(limits=ApiLimits(max_concurrent_llm=3)).run(1)
    assert capped.ledger.peak_llm_in_flight == 3 < SMALL_POLICY.run(1).ledger.peak_llm_in_flight
    with pytest.raises(ValueError, match="max_concurrent_llm must be an integer >= 1"):
        ApiLimits(max_concurrent_llm=0)


# ---------------------------------------------------------------------- calibration


@pytest.mark.parametrize("name", ["gobang", "policy"])
def test_calibration_reproduces_the_papers_stage_split(name: str) -> None:
    cal = calibrate(SCENARIOS[name], seed=1)
    stages = measure(cal.scenario.run(1))["stages"]
    for stage, (tokens_in, tokens_out) in stage_targets(name).items():
        if any(f"stage {stage} exceeds" in note for note in cal.notes):
            # its prompt is down to 1 token: memory and messages alone overshoot, and say so
            assert cal.as_dict()["per_call"][stage]["new_tokens"] == 1
            assert stages[stage]["tokens_in"] > tokens_in, stage
        else:
            assert stages[stage]["tokens_in"] == pytest.approx(tokens_in, rel=0.01), stage
        assert stages[stage]["tokens_out"] == pytest.approx(tokens_out, rel=0.05), stage
    other = calibrate(SCENARIOS[name], seed=1, targets={s: (2 * i, 2 * o) for s, (i, o) in stage_targets(name).items()})
    assert measure(other.scenario.run(1))["tokens_in"] == pytest.approx(
        2 * sum(stage_targets(name)[s][0] for s in stage_targets(name)), rel=0.05
    )


def test_token_plan_is_read_per_stage() -> None:
    plan = TokenPlan(StageTokens(5, 6), StageTokens(7, 8), StageTokens(9, 10))
    assert plan.stage("merging") == StageTokens(9, 10)
