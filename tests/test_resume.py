"""Resume: a run restored from any checkpoint ends exactly as a run never interrupted.

In process: the state of a simulation (agents, queues, calls in flight, locks,
recruits, ledger, trace; copies in transit, crashed agents and seen ids of a network;
token buckets and retries of a provider model) is written as full snapshots and
deltas and restored at random steps over random configurations. Out of process: real ``megaactors run``
processes are killed with SIGKILL at random moments (and some of their resumes
too), and ``megaactors resume`` must print the same JSON as an uninterrupted run,
apart from wall time."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from megaactors import Effects, LLMRequest, Organisation, RunSpec, Send, SimRuntime, ToolCall
from megaactors.core.llm import SimulatedLLM
from megaactors.core.messages import HIERARCHY, INTRA
from megaactors.durable import DurableOptions, open_store, run_durable
from megaactors.durable.checkpointing import Progress
from megaactors.durable.state import DurableSim, StateError
from megaactors.network import FaultSpec, NetworkModel
from megaactors.providers.limits import ProviderModel
from megaactors.runtime.events import superstep_end


class Busy:
    """Recruits (at the start and later), tool calls behind a global lock, and several
    rounds of notes on tree edges and of broadcasts to the whole group."""

    name = "busy"

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def init(self, agent: int, org: Organisation) -> list[Any]:
        return [0, 0, []]

    def on_start(self, ctx: Any, state: list[Any]) -> Effects | None:
        if ctx.agent % 3:
            return None
        cap = ctx.org.fanout
        room = ctx.agent == 0 and (cap is None or len(ctx.org.children.get(0, ())) < cap)
        return Effects(llm=LLMRequest(new_tokens=5, stage="plan"), recruits=1 if room else 0)

    def on_batch(self, ctx: Any, state: list[Any], batch: Any) -> Effects:
        state[2] = [m.id for m in batch][:3]
        if ctx.agent % 2 == 0:
            return Effects(tool=ToolCall("git", 0.3, lock="git", args=[ctx.agent, state[0]], stage="merge"))
        return Effects(llm=LLMRequest(stage="read"))

    def on_tool(self, ctx: Any, state: list[Any], result: Any) -> Effects:
        state[1] += result.result
        cap = ctx.org.fanout
        room = ctx.agent == 0 and (cap is None or len(ctx.org.children.get(0, ())) < cap)
        return Effects(llm=LLMRequest(new_tokens=3, stage="tool"), recruits=1 if room else 0)

    def on_reply(self, ctx: Any, state: list[Any], reply: Any) -> Effects:
        state[0] += 1
        peers = ctx.org.tree_neighbours(ctx.agent)
        if state[0] > self.rounds or not peers:
            return Effects()
        sends = [Send(peers, HIERARCHY, "note", [ctx.agent, state[0], list(ctx.recruited)])]
        group = ctx.org.group_peers(ctx.agent)
        if group and state[0] == 1:  # once: a broadcast, whose recipients a checkpoint recomputes
            sends.append(Send(group, INTRA, "all", [ctx.agent]))
        return Effects(sends=sends)


TOOLS = {"git": lambda args: args[0] * 10 + args[1]}

_LOSSY = FaultSpec(drop=0.1, duplicate=0.1, delay=0.1, delay_s=0.4, crash=0.05, restart_s=0.7, timeout_s=0.6)
NETS: list[dict[str, Any]] = [
    {},
    {"faults": _LOSSY},
    {"network": NetworkModel({"hierarchy": 0.05}, jitter_s=0.1), "faults": FaultSpec(
        duplicate=0.2, dedup=False, crash=0.1, keep="nothing", restart_s=0.5, recover=False)},
    {"provider": ProviderModel(rpm=40, failure_rate=0.2, timeout_s=1.5, max_retries=2, base_s=0.3, seed=3)},
    {"faults": FaultSpec(drop=0.1, crash=0.1, keep="inbox", retries=1, timeout_s=0.3), "network": NetworkModel(
        {"hierarchy": 0.02}), "provider": ProviderModel(tpm=4000, failure_rate=0.1, max_retries=1, base_s=0.2)},
    {"network": NetworkModel({"hierarchy": 0.02}, cross_s=0.05, jitter_s=0.01, machine_count=3), "faults": FaultSpec(
        drop=0.1, duplicate=0.1, crash=0.05, restart_s=0.5, timeout_s=0.3)},
]  # fmt: skip
"""Options of a run through a network with faults and under a provider model."""


def _runtime(
    cls: type, org_args: tuple[int, int], rounds: int, seed: int, serial: bool, cap: int | None, net: int = 0
) -> Any:
    return cls(
        Organisation.hierarchy(*org_args),
        Busy(rounds),
        seed=seed,
        serial=serial,
        max_concurrent_llm=cap,
        trace=True,
        tools=TOOLS,
        **NETS[net],
    )


def _outcome(rt: Any) -> tuple[str, Any]:
    summary = rt.result().summary()
    summary.pop("wall_s")
    trace = rt.trace.as_dict()
    return json.dumps(summary, sort_keys=True), ([a.data for a in rt.agents], trace)


def _heads(rt: Any) -> list[int]:
    """Each agent's first waiting message id (-1: none)."""
    mail = rt.snapshot().mail
    return [mail.head(a) for a in range(len(rt.agents))]


def _wire(x: Any) -> Any:
    return msgpack.unpackb(msgpack.packb(x), strict_map_key=False)


@settings(max_examples=30, deadline=None)
# agents recruited while broadcasts are in the same super-step's delta, and broadcasts without
@example(n=3, fanout=4, rounds=3, seed=1, serial=False, cap=None, window=0.5, fulls=[False], picks=[3, 7, 11],
         genesis=True, net=0)  # fmt: skip
# groups on three machines: message ids, keys of copies between machines and dollars per machine
@example(n=25, fanout=3, rounds=3, seed=2, serial=False, cap=None, window=0.5, fulls=[False, True],
         picks=[3, 19, 33], genesis=False, net=5)  # fmt: skip
# every fault, latency and a provider model at once; an LLM slot freed for a call the limits refuse
@example(n=25, fanout=3, rounds=3, seed=5, serial=False, cap=2, window=0.5, fulls=[False, False, True],
         picks=[5, 17, 40], genesis=True, net=4)  # fmt: skip
# an event due exactly where (floor(t / 0.1) + 1) * 0.1 rounds back to t: the window must still move on
@example(n=17, fanout=2, rounds=2, seed=7, serial=True, cap=2, window=0.1,
         fulls=[False, True, True, True, True, True, True, True], picks=[699], genesis=True, net=4)  # fmt: skip
@given(
    n=st.integers(2, 25),
    fanout=st.integers(2, 4),
    rounds=st.integers(1, 3),
    seed=st.integers(0, 50),
    serial=st.booleans(),
    cap=st.one_of(st.none(), st.integers(1, 3)),
    window=st.sampled_from([0.1, 0.5, 2.0]),
    fulls=st.lists(st.booleans(), min_size=1, max_size=60),
    picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=3),
    genesis=st.booleans(),
    net=st.integers(0, len(NETS) - 1),
)
def test_restoring_any_step_continues_exactly(
    n: int,
    fanout: int,
    rounds: int,
    seed: int,
    serial: bool,
    cap: int | None,
    window: float,
    fulls: list[bool],
    picks: list[int],
    genesis: bool,
    net: int,
) -> None:
    args = ((n, fanout), rounds, seed, serial, cap, net)
    reference = _runtime(SimRuntime, *args)
    reference.run()
    expected = _outcome(reference)
    rt = _runtime(DurableSim, *args)
    rt.start()
    snapshots = [_wire(rt.genesis() if genesis else rt.full())]
    heads = [_heads(rt)]
    i = 0
    while not rt.finished:
        rt.advance(superstep_end(rt.next_event_time, window))
        full = fulls[i % len(fulls)]
        i += 1
        heads.append(_heads(rt))
        snapshots.append(_wire(rt.full() if full else rt.delta()))
    assert _outcome(rt) == expected  # noting changes does not change the run
    if not NETS[net]:  # a run without a network or provider model writes what it always did
        assert not {"net", "queues", "limits", "provider"} & set().union(*snapshots)
        assert all("calls" not in s["agents"] and "replies" not in s["agents"] for s in snapshots if "agents" in s)
    for pick in picks:
        k = pick % len(snapshots)
        base = max(j for j in range(k + 1) if snapshots[j]["kind"] in ("full", "start"))
        restored = _runtime(DurableSim, *args)
        restored.restore_chain(_wire(snapshots[base : k + 1]))
        assert all(type(a) is int for _, _, a in restored.snapshot().events)
        assert _heads(restored) == heads[k], f"in-queues restored at step {k} (full at {base})"
        restored.run()
        assert _outcome(restored) == expected, f"restored at step {k} (full at {base})"


def test_a_fork_may_add_a_network_and_limits_but_not_drop_them() -> None:
    """A full snapshot of a run without a network or provider model, restored under
    both (what ``fork --set`` does), goes on through them; its later deltas restore
    exactly. Dropping them is refused: copies in transit would vanish."""
    args = ((20, 3), 3, 1, False, 2)
    plain = _runtime(DurableSim, *args, 0)
    plain.start()
    for _ in range(4):
        plain.advance(superstep_end(plain.next_event_time, 0.5))
    chain = [_wire(plain.full())]
    rt = _runtime(DurableSim, *args, 4)
    rt.restore_chain(_wire(chain))
    while not rt.finished:
        rt.advance(superstep_end(rt.next_event_time, 0.5))
        chain.append(_wire(rt.delta()))
    expected = _outcome(rt)
    assert rt.result().faults["drop"] and rt.ledger.rate_limited
    for k in (1, len(chain) // 2, len(chain) - 1):
        again = _runtime(DurableSim, *args, 4)
        again.restore_chain(_wire(chain[: k + 1]))
        again.run()
        assert _outcome(again) == expected, f"restored at delta {k}"
    full = _wire(rt.full())
    for net in (0, 1, 3):  # neither, no provider model, no network
        with pytest.raises(StateError, match="these parameters drop"):
            _runtime(DurableSim, *args, net).restore_chain([full])


def test_restore_refuses_what_does_not_fit() -> None:
    rt = DurableSim(Organisation.star(5), Busy(1))
    rt.start()
    full = _wire(rt.full())
    with pytest.raises(StateError, match="holds 6 agents but these parameters build 7"):
        DurableSim(Organisation.star(6), Busy(1)).restore_chain([full])
    with pytest.raises(StateError, match="full snapshot or a genesis"):
        DurableSim(Organisation.star(5), Busy(1)).restore_chain([_wire(rt.delta())])
    with pytest.raises(StateError, match="full snapshot first"):
        DurableSim(Organisation.star(5), Busy(1)).delta()


def test_a_durable_run_needs_the_seeded_llm_it_recomputes_replies_with() -> None:
    from types import SimpleNamespace

    from megaactors.core.llm import TokenModel

    stand_in = SimpleNamespace(tokens=TokenModel(), complete=SimulatedLLM().complete)
    with pytest.raises(StateError, match="seeded simulated LLM, not SimpleNamespace"):
        DurableSim(Organisation.star(5), Busy(1), stand_in)


def test_delta_size_follows_activity_not_history(tmp_path: Path) -> None:
    """Forty identical rounds with the trace on: the history (trace) grows forty-fold,
    deltas stay flat; a quiet tail writes tiny deltas."""
    spec = RunSpec(topology="star", agents=40, rounds=40, seed=2, trace=True, latency_sigma=0.0)
    store = open_store(tmp_path / "s.db", create=True)
    lease = store.create_run("r", spec.as_dict(), {}, version="t", owner="me", lease_s=60)
    progress = Progress()
    run_durable(store, lease, spec, DurableOptions(step_s=0.5, full_ratio=1e9), progress=progress)
    rows = store.list("r")
    deltas = [r.nbytes for r in rows if r.kind == "delta" and r.meta["agents_changed"] > 0]
    assert progress.full_snapshots == 0 and rows[0].kind == "start" and len(deltas) > 60
    third = len(deltas) // 3
    early, late = sum(deltas[:third]) / third, sum(deltas[-third:]) / third
    assert late < 1.3 * early, (early, late)
    # a full snapshot carries the whole trace: it grows with history
    from megaactors.durable.store import decode_state, pack_state

    def full_size(step: int) -> int:
        rt = DurableSim(spec.organisation(), spec.build_behaviour(), spec.llm(), seed=spec.seed, trace=True)
        rt.restore_chain([decode_state(r.state) for r in store.chain("r", step)])
        return len(pack_state(rt.full()))

    assert full_size(rows[-1].step) > 3 * full_size(rows[10].step)
    # one round on 2,000 agents: the busy middle writes big deltas, the quiet tail tiny ones
    spec = RunSpec(topology="two-tier", agents=2000, group_size=20, rounds=1, seed=1)
    lease = store.create_run("q", spec.as_dict(), {}, version="t", owner="me", lease_s=60)
    run_durable(store, lease, spec, DurableOptions(step_s=0.5, full_ratio=1e9))
    sizes = {r.meta["agents_changed"]: r.nbytes for r in store.list("q") if r.kind == "delta"}
    busiest, quietest = max(sizes), min(sizes)
    assert busiest > 500 and quietest < 10
    assert sizes[quietest] * 20 < sizes[busiest]


# ---------------------------------------------------------------------- SIGKILL, for real

SPEC = ("--topology", "two-tier", "--agents", "1500", "--group-size", "12", "--rounds", "6", "--seed", "9")


def _cli(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "megaactors", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _past_first_checkpoint(db: str, run_id: str, proc: subprocess.Popen[str], limit_s: float = 60) -> float:
    """The moment ``run_id`` shows a checkpoint beyond super-step 0 (or ``proc`` ended)."""
    deadline = time.perf_counter() + limit_s
    while proc.poll() is None and time.perf_counter() < deadline:
        try:
            with open_store(db, readonly=True) as store:
                step = store.get_run(run_id).step
        except Exception:  # not created yet
            step = None
        if step:
            break
        time.sleep(0.01)
    return time.perf_counter()


def _strip(out: str) -> dict[str, Any]:
    """A printed summary without its wall time, and without the status ``run --json``
    adds (a checkpointed run has no network: it is ``ok``, with no faults)."""
    summary = json.loads(out)
    summary.pop("wall_s")
    assert summary.pop("status", "ok") == "ok" and not summary.pop("faults", {}) and not summary.pop("stalled", {})
    return summary


def test_sigkill_at_random_moments_then_resume_gives_identical_results(tmp_path: Path) -> None:
    db = str(tmp_path / "kill.db")
    reference = RunSpec(topology="two-tier", agents=1500, group_size=12, rounds=6, seed=9).execute().summary()
    reference.pop("wall_s")
    t0 = time.perf_counter()
    full = _cli("run", *SPEC, "--checkpoint", db, "--run-id", "timing", "--step-seconds", "0.25", "--json")
    working = _past_first_checkpoint(db, "timing", full) - t0
    out, err = full.communicate(timeout=120)
    duration = time.perf_counter() - t0
    assert full.returncode == 0, err
    working = duration - working  # from the first checkpoint past the start to the end
    assert _strip(out) == reference
    rng = random.Random(6)
    resumed_mid_run = killed_resumes = 0
    for trial in range(12):
        run_id = f"t{trial}"
        victim = _cli("run", *SPEC, "--checkpoint", db, "--run-id", run_id, "--step-seconds", "0.25",
                      "--lease", "0.4", "--json")  # fmt: skip
        # mostly once the run has checkpointed past its start (start-up takes seconds on a
        # loaded machine), sometimes anywhere, as early as before the run exists
        if trial % 4 == 3:
            time.sleep(rng.uniform(0.05, duration))
        else:  # soon after the first checkpoint (a sure mid-run kill) or anywhere after it
            _past_first_checkpoint(db, run_id, victim)
            time.sleep(rng.uniform(0.0, working if trial % 4 == 2 else working / 4))
        victim.send_signal(signal.SIGKILL)
        victim.communicate()
        kills = 1
        if trial % 3 == 0:  # kill the first resume too
            second = _cli("resume", "--checkpoint", db, "--run-id", run_id, "--wait", "5", "--lease", "0.4", "--json")
            time.sleep(rng.uniform(0.8, duration + 0.5))
            second.send_signal(signal.SIGKILL)
            second.communicate()
            kills += 1
        with open_store(db, readonly=True) as store:
            try:
                run = store.get_run(run_id)
            except Exception:
                run = None
        if run is None:  # killed before the run existed: nothing to resume, as the CLI says
            gone = _cli("resume", "--checkpoint", db, "--run-id", run_id)
            _, err = gone.communicate(timeout=60)
            assert gone.returncode == 2 and "no run" in err
            continue
        if run.status != "done" and run.step is not None and run.step > 0:
            resumed_mid_run += 1
        if kills == 2 and run.attempts >= 2:
            killed_resumes += 1
        final = _cli("resume", "--checkpoint", db, "--run-id", run_id, "--wait", "5", "--json")
        out, err = final.communicate(timeout=120)
        assert final.returncode == 0, f"trial {trial} ({kills} kill(s)): {err}"
        assert _strip(out) == reference, f"trial {trial}: resumed result differs"
    assert resumed_mid_run >= 4, f"only {resumed_mid_run} trials were killed after a checkpoint and before the end"
    assert killed_resumes >= 1, "no resume was killed after it had claimed its run"


FAULTS = """drop = 0.05
duplicate = 0.05
delay = 0.05
delay_s = 0.5
crash = 0.02
restart_s = 2.0
timeout_s = 3.0
[[partition]]
groups = [0, 1]
start = 2.0
end = 6.0
"""


def test_a_network_faults_and_provider_limits_survive_checkpoints_kills_and_forks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Latency, jitter, every fault (a partition window too) and the provider's limits,
    failures and timeouts: a checkpointed run reports what the plain run does; so does
    one SIGKILLed mid-run (a real process) and resumed; a fork may change them from a
    checkpoint on, not drop the network."""
    from megaactors.cli import main

    def call(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    faults = tmp_path / "faults.toml"
    faults.write_text(FAULTS)
    spec = ("--topology", "two-tier", "--agents", "200", "--group-size", "8", "--rounds", "2", "--seed", "4",
            "--net-latency", "intra=0.05,admin=0.2", "--net-jitter", "0.05", "--faults", str(faults),
            "--rpm", "1500", "--tpm", "400000", "--llm-failure-rate", "0.05", "--llm-timeout-s", "3")  # fmt: skip
    db = str(tmp_path / "net.db")
    victim = _cli("run", *spec, "--checkpoint", db, "--run-id", "killed", "--step-seconds", "0.25", "--lease", "0.4")
    _past_first_checkpoint(db, "killed", victim)
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    code, out, err = call("run", *spec, "--json")
    expected = {**json.loads(out), "wall_s": None}
    seen = expected["faults"]
    assert all(seen[k] for k in ("drop", "duplicate", "delay", "crash", "restart", "partition", "resent"))
    assert all(expected[k] for k in ("rate_limited", "retries", "failed_llm_calls", "llm_timeouts", "llm_errors"))
    code, out, err = call("run", *spec, "--checkpoint", db, "--run-id", "whole", "--step-seconds", "0.5", "--json")
    assert code == 0 and {**json.loads(out), "wall_s": None} == expected, err
    with open_store(db, readonly=True) as store:
        run = store.get_run("killed")
        assert run.status != "done" and run.step, "the kill came too late to test a resume"
        step = str(run.step)
    code, out, err = call("resume", "--checkpoint", db, "--run-id", "killed", "--wait", "5", "--json")
    assert code == 0 and {**json.loads(out), "wall_s": None} == expected, err
    worse = tmp_path / "worse.toml"
    worse.write_text(FAULTS.replace("drop = 0.05", "drop = 0.2"))
    code, out, err = call("fork", "--db", db, "--run-id", "killed", "--step", step, "--new-run-id", "what-if",
                          "--set", "llm_failure_rate=0.3", "--set", f"faults={worse}", "--run", "--json")  # fmt: skip
    assert code == 0, err
    what_if = json.loads(out)
    assert what_if["failed_llm_calls"] > expected["failed_llm_calls"] and what_if["faults"]["drop"] > seen["drop"]
    code, _, err = call("fork", "--db", db, "--run-id", "killed", "--step", step, "--new-run-id", "calm",
                        "--set", "faults=drop=0", "--set", "net_latency=intra=0", "--set", "net_jitter=0")  # fmt: skip
    assert code == 2 and "these parameters drop" in err and "network" in err and len(err.strip().splitlines()) == 1, err


def test_sigkill_signal_really_is_kill() -> None:
    assert signal.SIGKILL == 9 and os.name == "posix"
