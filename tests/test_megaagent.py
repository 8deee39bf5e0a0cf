"""MegaAgent §2–§3 in simulation: the mechanism obeys its rules, the scenarios are
calibrated, and the report is computed from runs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from megaactors import AgentState, BehaviourError, Effects, Organisation, RecruitError, RouteError, Send, SimRuntime
from megaactors.behaviours.megaagent import (
    MegaAgent,
    Monitoring,
    RetryLimitError,
    StageTokens,
    TokenPlan,
    TreePlan,
    Work,
)
from megaactors.core.messages import ADMIN, HIERARCHY, INTRA
from megaactors.megaagent.calibration import calibrate, stage_targets
from megaactors.megaagent.complexity import fit, sweep
from megaactors.megaagent.reproduce import reproduce_section3
from megaactors.megaagent.scenarios import GOBANG, POLICY, SCENARIOS, measure, policy_plan

ROOT = Path(__file__).resolve().parents[1]

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


# ---------------------------------------------------------------------- calibration and complexity


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


def test_fits_recover_known_curves() -> None:
    rows = [{"curve": "parallel", "agents": n, "makespan_s": 40 + 25 * math.log10(n)} for n in (10, 100, 1000, 10000)]
    rows += [{"curve": "serial", "agents": n, "makespan_s": 3.5 * n} for n in (10, 100, 1000, 10000)]
    f = fit(rows)
    assert f["parallel"]["log"]["b_per_decade"] == pytest.approx(25) and f["parallel"]["log"]["r2"] == pytest.approx(1)
    assert f["serial"]["proportional"]["c_per_agent"] == pytest.approx(3.5) and f["serial"][
        "exponent"
    ] == pytest.approx(1)
    assert f["claim_holds"]
    flipped = [dict(r, curve={"parallel": "serial", "serial": "parallel"}[r["curve"]]) for r in rows]
    assert not fit(flipped)["claim_holds"]


def test_makespan_grows_like_log_n_in_parallel_and_like_n_in_serial() -> None:
    rows = sweep(SMALL_POLICY, agents=(10, 100, 1000, 3000), fanout=5, curves=("parallel", "serial"))
    f = fit(rows)
    assert f["serial"]["exponent"] > 0.85 and f["parallel"]["exponent"] < 0.4
    assert f["parallel"]["log"]["r2"] > f["parallel"]["linear"]["r2"]
    assert [r["levels"] for r in rows if r["curve"] == "parallel"] == [3, 4, 6, 6]


# ---------------------------------------------------------------------- the report


def test_the_report_is_computed_from_runs(tmp_path: Path) -> None:
    report = reproduce_section3(tmp_path / "one", seed=1, agents=(10, 30, 100), spread=2)
    saved = json.loads((tmp_path / "one" / "report.json").read_text())
    assert saved["scenarios"].keys() == {"gobang", "policy"}
    for name in ("gobang", "policy"):
        s = saved["scenarios"][name]
        for key in ("agents", "levels", "makespan_s", "serial_makespan_s", "parallel_speedup", "tokens_in"):
            assert key in s
        assert set(s["stages"]) == {"planning", "task_solving", "merging"}
        # the same numbers from fresh runs of the calibrated scenario
        sc = calibrate(SCENARIOS[name], seed=1).scenario
        full, serial = measure(sc.run(1)), measure(sc.variant("no_parallelism").run(1))
        assert s["makespan_s"] == full["makespan_s"] and s["serial_makespan_s"] == serial["makespan_s"]
        assert s["tokens_in"] == full["tokens_in"] and s["cost_usd"] == full["cost_usd"]
        assert s["parallel_speedup"] == round(serial["makespan_s"] / full["makespan_s"], 3)
        assert s["stages"]["merging"]["tokens_out"] == full["stages"]["merging"]["tokens_out"]
        assert s["max_processing_serial"] == 1
        assert f"{s['makespan_s']:,.0f}" in (tmp_path / "one" / "report.md").read_text()
    assert saved["complexity"]["slopes"]["serial_exponent"] > 0.8
    assert (
        saved["complexity"]["slopes"]["parallel_s_per_decade"]
        == report["complexity"]["slopes"]["parallel_s_per_decade"]
    )
    for png in saved["figures"].values():
        assert (tmp_path / "one" / png).stat().st_size > 10_000
    other = reproduce_section3(tmp_path / "two", seed=2, agents=(10, 30, 100), spread=1)
    for name in ("gobang", "policy"):
        assert other["scenarios"][name]["makespan_s"] != report["scenarios"][name]["makespan_s"]


def megaactors(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=120)


def test_command_line_writes_the_report_and_rejects_bad_input(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = megaactors("reproduce", "section3", "--out", str(out), "--agents", "10,30,100", "--seeds", "1", "--quiet")
    assert done.returncode == 0, done.stderr
    assert (out / "report.md").exists() and "parallel speed-up" in done.stdout
    assert json.loads((out / "report.json").read_text())["complexity"]["agents"] == [10, 30, 100]
    for bad, message in [
        (["--agents", "10,100"], "at least three distinct values"),
        (["--agents", "10,x,100"], "comma-separated integers"),
        (["--fanout", "1", "--agents", "10,30,100"], "--fanout must be >= 2"),
    ]:
        proc = megaactors("reproduce", "section3", "--out", str(tmp_path / "bad"), *bad)
        assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    a_file = tmp_path / "file"
    a_file.write_text("x")
    proc = megaactors("reproduce", "section3", "--out", str(a_file), "--agents", "10,30,100")
    assert proc.returncode == 2 and "is not a directory" in proc.stderr


def test_experiment_script_is_the_command(tmp_path: Path) -> None:
    script = ROOT / "experiments" / "section3.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path), "--agents", "10,30,100", "--seeds", "1", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "report.json").read_text())["scenarios"]["policy"]["agents"] == 590


def test_token_plan_is_read_per_stage() -> None:
    plan = TokenPlan(StageTokens(5, 6), StageTokens(7, 8), StageTokens(9, 10))
    assert plan.stage("merging") == StageTokens(9, 10)
