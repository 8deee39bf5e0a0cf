"""The network and faults in the simulation: closed forms, binomial bounds over
seeds, determinism, recovery, crashes, partitions, stalled runs, and bad specs."""

from __future__ import annotations

import json
import math
import signal
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megaactors import ChatRound, Organisation
from megaactors.behaviours.chat_round import expected_messages, expected_receipts
from megaactors.cli import main
from megaactors.errors import ParameterError
from megaactors.network import FaultSpec, NetworkModel, Partition, parse_faults, parse_latency, parse_machines
from megaactors.runtime.sim import SimRuntime


def run(org, rounds=1, seed=0, **options):
    return SimRuntime(org, ChatRound(rounds=rounds), seed=seed, trace=False, **options).run()


def same(summary):
    return {k: v for k, v in summary.items() if k != "wall_s"}


def delivered(result):
    return sum(result.ledger.per_agent["received"])


# ---------------------------------------------------------------------- the model


def test_latency_and_machines_parse():
    assert parse_latency("intra=0.005,admin=0.05,cross=0.1") == ({"intra": 0.005, "admin": 0.05}, 0.1)
    assert parse_latency("0.2") == ({"intra": 0.2, "admin": 0.2, "hierarchy": 0.2}, 0.2)
    assert parse_machines("3") == (None, 3)
    assert parse_machines("0,0,1") == ((0, 0, 1), None)


def test_lookahead_is_the_cross_machine_minimum():
    assert NetworkModel({"intra": 0.01}, cross_s=0.07, machine_count=4).lookahead_s == 0.07
    assert NetworkModel({"intra": 0.01, "admin": 0.02, "hierarchy": 0.03}).lookahead_s == 0.01


def test_least_latency_and_the_event_calendar_width():
    from megaactors.core.llm import LatencyModel, SimulatedLLM
    from megaactors.runtime.sim_queues import event_width

    placed = NetworkModel({"intra": 0.01, "admin": 0.0}, cross_s=0.004, machine_count=2)
    assert placed.least_latency_s == 0.004
    assert NetworkModel({"intra": 0.01}, cross_s=0.004).least_latency_s == 0.01  # not placed: no cross copies
    assert NetworkModel(jitter_s=0.1).least_latency_s == 0.0
    llm = SimulatedLLM(latency=LatencyModel(median_s=0.8))
    assert event_width(llm, None) == event_width(llm, NetworkModel(jitter_s=0.1)) == 0.05
    assert event_width(llm, placed) == 0.004
    assert event_width(llm, NetworkModel({"intra": 2.0})) == 0.05


def test_copies_that_cannot_fail_take_the_short_way_with_the_same_result():
    """A fault spec that never strikes (a partition long after the run) sends every
    copy through the per-copy decisions; without it, a latency-only run sends them
    packet by packet: both must give the same run, copy for copy."""
    net = NetworkModel({"intra": 0.01, "admin": 0.0, "hierarchy": 0.3}, cross_s=0.05, jitter_s=0.002, machine_count=2)
    never = FaultSpec(partitions=(Partition(1e6, 2e6, machines=(1,)),))
    for org in (lambda: Organisation.two_tier(60, 6), lambda: Organisation.hierarchy(40, 3)):
        short = SimRuntime(org(), ChatRound(rounds=2), seed=5, trace=True, network=net)
        long = SimRuntime(org(), ChatRound(rounds=2), seed=5, trace=True, network=net, faults=never)
        assert short.network_delivery.latency_only and not long.network_delivery.latency_only
        a, b = short.run(), long.run()
        assert same(a.summary()) == same(b.summary())
        assert a.ledger.agent_rows(a.org) == b.ledger.agent_rows(b.org)
        assert a.trace.as_dict() == b.trace.as_dict() and a.states == b.states


def test_no_network_and_no_faults_is_the_plain_simulation():
    org = Organisation.two_tier(30, 5)
    plain = run(org, rounds=2, seed=3).summary()
    quiet = SimRuntime(
        Organisation.two_tier(30, 5),
        ChatRound(rounds=2),
        seed=3,
        trace=False,
        network=NetworkModel(),
        faults=FaultSpec(),
    )
    assert quiet.network_delivery is None
    assert same(quiet.run().summary()) == same(plain)


def test_uniform_latency_shifts_a_full_tree_by_two_hops_per_level():
    """A hierarchy of depth 2 (1 + 3 + 9 agents): every message on every root-leaf-root
    path is L later, so the makespan grows by exactly 4 L."""
    latency = 0.25
    base = run(Organisation.hierarchy(13, 3), seed=1)
    slow = run(Organisation.hierarchy(13, 3), seed=1, network=NetworkModel({"hierarchy": latency}))
    assert slow.ledger.virtual_time_s == pytest.approx(base.ledger.virtual_time_s + 4 * latency)
    assert slow.ledger.messages == base.ledger.messages == expected_messages(Organisation.hierarchy(13, 3))


def test_cross_machine_messages_take_the_cross_latency():
    org = Organisation.star(5)  # hub and spokes in no group: all on machine 0
    net = NetworkModel({"hierarchy": 0.0}, cross_s=1.0, machine_count=2)
    assert run(org, network=net).ledger.virtual_time_s == run(Organisation.star(5)).ledger.virtual_time_s
    two = Organisation.two_tier(8, 4)
    far = run(two, network=NetworkModel(cross_s=20.0, machine_count=2))
    near = run(Organisation.two_tier(8, 4), network=NetworkModel(cross_s=20.0, machines=(0, 0)))
    assert near.ledger.virtual_time_s == run(Organisation.two_tier(8, 4)).ledger.virtual_time_s
    assert far.ledger.virtual_time_s > 20.0 > near.ledger.virtual_time_s


# ---------------------------------------------------------------------- closed forms over seeds


def test_duplicates_follow_the_binomial_law_and_are_ignored():
    p, seeds = 0.1, range(20)
    sent = dups = 0
    for seed in seeds:
        r = run(Organisation.two_tier(40, 8), seed=seed, faults=FaultSpec(duplicate=p))
        sent += r.ledger.messages
        dups += r.faults["duplicate"]
        assert r.faults["duplicates_ignored"] == r.faults["duplicate"]
        assert delivered(r) == r.ledger.messages == expected_messages(r.org)
        assert r.status == "ok"
    sigma = math.sqrt(sent * p * (1 - p))
    assert abs(dups - p * sent) < 4 * sigma


def test_duplicates_reach_the_behaviour_without_dedup():
    r = run(Organisation.flat(12), seed=2, faults=FaultSpec(duplicate=0.3, dedup=False))
    assert r.faults["duplicate"] > 0
    assert delivered(r) == r.ledger.messages + r.faults["duplicate"]


def test_drops_without_recovery_leave_exactly_the_dropped_copies_undelivered():
    p, sent, dropped = 0.05, 0, 0
    for seed in range(20):
        r = run(Organisation.flat(20), seed=seed, faults=FaultSpec(drop=p, recover=False))
        assert delivered(r) == r.ledger.messages - r.faults["drop"]
        assert r.faults["undelivered"] == r.faults["drop"]
        sent += r.ledger.messages
        dropped += r.faults["drop"]
        assert (r.status == "stalled") == (r.faults["drop"] > 0)
    assert abs(dropped - p * sent) < 4 * math.sqrt(sent * p * (1 - p))


def test_a_stalled_run_names_each_agent_and_what_it_waits_for():
    r = run(Organisation.two_tier(20, 5), rounds=2, seed=1, faults=FaultSpec(drop=0.2, recover=False))
    assert r.status == "stalled" and r.stalled
    for agent, waits in r.stalled.items():
        got = r.ledger.per_agent["received"][agent]
        assert got < expected_receipts(r.org, agent, 2)
        assert f"received {got} of" in waits
    summary = r.summary()
    assert summary["status"] == "stalled" and summary["faults"]["drop"] > 0


# ---------------------------------------------------------------------- recovery


@pytest.mark.parametrize("topology", ["flat", "star", "two-tier", "hierarchy"])
def test_recovery_delivers_every_message_once(topology):
    org = Organisation.build(topology, 30, 5, 3)
    base = run(org, rounds=2, seed=4)
    r = run(Organisation.build(topology, 30, 5, 3), rounds=2, seed=4, faults=FaultSpec(drop=0.1, duplicate=0.05))
    assert r.status == "ok" and not r.stalled
    assert r.ledger.messages == base.ledger.messages  # fault-free work, re-sends counted apart
    assert delivered(r) == r.ledger.messages
    assert r.faults["resent"] == r.faults["drop"] > 0
    assert r.ledger.virtual_time_s > base.ledger.virtual_time_s


def test_delay_costs_time_not_messages():
    base = run(Organisation.two_tier(30, 5), seed=5)
    r = run(Organisation.two_tier(30, 5), seed=5, faults=FaultSpec(delay=1.0, delay_s=2.0))
    assert r.faults["delay"] == r.ledger.messages == base.ledger.messages
    assert r.ledger.virtual_time_s >= base.ledger.virtual_time_s + 2.0


@pytest.mark.parametrize("keep", ["state", "inbox", "nothing"])
def test_crashed_agents_restart_and_the_run_ends(keep):
    r = run(Organisation.two_tier(30, 5), rounds=2, seed=6, faults=FaultSpec(crash=0.2, keep=keep, restart_s=3.0))
    assert r.faults["crash"] > 0 and r.faults["restart"] == r.faults["crash"]
    if keep != "nothing":
        assert r.status == "ok"
        assert delivered(r) == r.ledger.messages


def test_a_crash_loop_ends_with_the_agent_down():
    r = run(Organisation.two_tier(20, 5), seed=1, faults=FaultSpec(crash=1.0, keep="inbox", restarts=2, restart_s=1.0))
    assert r.status == "stalled"
    assert r.faults["crash"] == 3 * len([a for a in r.stalled if "stays down" in r.stalled[a]])
    assert all("crashed 3 times" in r.stalled[a] for a in r.stalled if "stays down" in r.stalled[a])


def test_a_partition_delays_the_run_until_it_heals():
    org = Organisation.two_tier(20, 5)
    spec = FaultSpec(partitions=(Partition(0.0, 30.0, groups=(0, 1)),), timeout_s=4.0, retries=20)
    r = run(org, seed=7, faults=spec)
    assert r.faults["partition"] > 0 and r.status == "ok"
    assert r.ledger.virtual_time_s >= 30.0
    cut = run(Organisation.two_tier(20, 5), seed=7, faults=FaultSpec(partitions=spec.partitions, recover=False))
    assert cut.status == "stalled"


def test_same_seed_same_faults():
    spec = parse_faults("drop=0.05,duplicate=0.05,delay=0.1,crash=0.05,restart_s=2")
    net = NetworkModel({"intra": 0.01, "admin": 0.05}, cross_s=0.05, jitter_s=0.02, machine_count=3)

    def once(seed):
        return same(run(Organisation.two_tier(40, 5), rounds=2, seed=seed, faults=spec, network=net).summary())

    assert once(1) == once(1)
    assert once(1) != once(2)


def test_snapshot_mid_run_resumes_identically():
    spec = FaultSpec(drop=0.1, duplicate=0.1, crash=0.05, restart_s=2.0)
    net = NetworkModel({"intra": 0.02, "admin": 0.1}, jitter_s=0.05)

    def fresh():
        return SimRuntime(Organisation.two_tier(30, 5), ChatRound(rounds=3), seed=8, network=net, faults=spec)

    whole = same(fresh().run().summary())
    first = fresh()
    first.start()
    first.advance(6.0)
    second = fresh()
    second.restore(first.snapshot())
    assert same(second.run().summary()) == whole


# ---------------------------------------------------------------------- no spec hangs

_SPECS = st.builds(
    FaultSpec,
    drop=st.floats(0, 1),
    duplicate=st.floats(0, 1),
    delay=st.floats(0, 1),
    delay_s=st.floats(0, 5),
    llm=st.floats(0, 0.9),
    crash=st.floats(0, 1),
    restart_s=st.floats(0, 5),
    restarts=st.integers(0, 3),
    keep=st.sampled_from(["state", "inbox", "nothing"]),
    recover=st.booleans(),
    timeout_s=st.floats(0.01, 5),
    retries=st.integers(0, 4),
    dedup=st.booleans(),
    partitions=st.lists(
        st.builds(
            lambda g, a, b: Partition(min(a, b), max(a, b) + 0.1, groups=tuple(g)),
            st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True),
            st.floats(0, 20),
            st.floats(0, 20),
        ),
        max_size=2,
    ).map(tuple),
)


def _hang(signum, frame):
    raise TimeoutError("the run did not end within 20 s")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_SPECS, seed=st.integers(0, 2**16), topology=st.sampled_from(["flat", "star", "two-tier", "hierarchy"]))
def test_no_fault_spec_makes_a_run_hang(spec, seed, topology):
    if topology != "two-tier":  # only two-tier has groups to partition
        spec = replace(spec, partitions=())
    signal.signal(signal.SIGALRM, _hang)
    signal.alarm(20)  # a hard bound: a hanging run is interrupted, and fails
    try:
        r = run(Organisation.build(topology, 16, 4, 3), rounds=2, seed=seed, faults=spec)
    finally:
        signal.alarm(0)
    assert r.status in ("ok", "stalled")
    assert (r.status == "stalled") == bool(r.stalled)


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("drop=1.5", "drop must be a probability in [0, 1]"),
        ("duplicate=-0.1", "duplicate must be a probability"),
        ("drop.lan=0.1", "unknown channel 'lan'"),
        ("jitter=1", "unknown key 'jitter'"),
        ("keep=disk", "keep must be one of state, inbox, nothing"),
        ("drop", "'drop' is not NAME=VALUE"),
    ],
)
def test_bad_inline_specs(text, words):
    with pytest.raises(ParameterError, match=None) as info:
        parse_faults(text)
    assert words in str(info.value)


def test_spec_files(tmp_path):
    toml = tmp_path / "f.toml"
    toml.write_text(
        "drop = 0.01\n[channel.admin]\ndrop = 0.2\n[[window]]\nstart = 1\nend = 2\nduplicate = 0.5\n"
        "[[partition]]\nmachines = [1]\nstart = 0\nend = 5\n"
    )
    spec = parse_faults(str(toml))
    assert spec.probability("drop", "admin", 0.0) == 0.2
    assert spec.probability("drop", "intra", 0.0) == 0.01
    assert spec.probability("duplicate", "intra", 1.5) == 0.5
    assert spec.probability("duplicate", "intra", 2.0) == 0.0
    assert spec.partitions == (Partition(0.0, 5.0, machines=(1,)),)
    as_json = tmp_path / "f.json"
    as_json.write_text(json.dumps({"drop": 0.01, "channel": {"admin": {"drop": 0.2}}}))
    assert parse_faults(str(as_json)).channels == {"admin": {"drop": 0.2}}


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("bad.toml", "drop = 0.1\ncrash = = 2\n", "line 2"),
        ("bad.json", '{"drop": 0.1,\n "crash": }', "line 2"),
        ("range.toml", "drop = 0.1\n\nduplicate = 3\n", "line 3: duplicate must be a probability"),
        ("chan.toml", "[channel.lan]\ndrop = 0.1\n", "line 1: unknown channel 'lan'"),
    ],
)
def test_bad_spec_files_name_file_and_line(tmp_path, name, text, words):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ParameterError) as info:
        parse_faults(str(path))
    assert str(path) in str(info.value) and words in str(info.value)


def test_partition_naming_missing_groups_or_machines():
    with pytest.raises(ParameterError, match=r"group\(s\) \[7\]"):
        run(Organisation.two_tier(20, 5), faults=FaultSpec(partitions=(Partition(0, 1, groups=(7,)),)))
    with pytest.raises(ParameterError, match=r"machine\(s\) \[2\]"):
        run(
            Organisation.two_tier(20, 5),
            faults=FaultSpec(partitions=(Partition(0, 1, machines=(2,)),)),
            network=NetworkModel(machine_count=2),
        )


@pytest.mark.parametrize(
    "argv",
    [
        ["--faults", "drop=2"],
        ["--faults", "drop.wan=0.1"],
        ["--net-latency", "intra=fast"],
        ["--net-latency", "lan=0.1"],
        ["--machines", "0,1"],  # 4 groups, 2 placed
        ["--net-jitter", "-1"],
        ["--faults", "missing.toml"],
    ],
)
def test_cli_bad_network_input_is_one_line_and_exit_2(argv, capsys, tmp_path):
    try:
        code = main(["run", "-n", "20", "-g", "5", *argv])
    except SystemExit as exc:  # refused while parsing the options
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("megaactors") and ": error: " in err and "\n" not in err


def test_cli_json_reports_status_and_faults(capsys):
    assert main(["run", "-n", "20", "-g", "5", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["status"] == "ok" and plain["faults"] == {}
    argv = ["run", "-n", "20", "-g", "5", "-r", "2", "--faults", "drop=0.2,recover=false", "--json"]
    assert main(argv) == 0
    faulty = json.loads(capsys.readouterr().out)
    assert faulty["status"] == "stalled" and faulty["faults"]["drop"] > 0 and faulty["stalled"]
    assert main(argv[:-1]) == 0
    text = capsys.readouterr().out
    assert "status        stalled" in text and "waits for" in text


def test_cli_network_options(capsys, tmp_path: Path):
    spec = tmp_path / "faults.toml"
    spec.write_text("drop = 0.05\n[[partition]]\nmachines = [0]\nstart = 0\nend = 3\n")
    argv = ["run", "-n", "20", "-g", "5", "--machines", "2", "--net-latency", "intra=0.01,cross=0.05"]
    assert main([*argv, "--net-jitter", "0.01", "--faults", str(spec), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok" and out["faults"]["partition"] > 0


# ---------------------------------------------------------------------- live runtimes


def test_serial_asyncio_drops_and_repeats_the_copies_the_simulation_does():
    from megaactors.runtime import RUNTIMES

    spec = FaultSpec(drop=0.05, duplicate=0.1, recover=False)
    results = [
        RUNTIMES[name](
            Organisation.two_tier(24, 6), ChatRound(rounds=2), seed=3, serial=True, time_scale=0.001, faults=spec
        ).run()
        for name in ("sim", "asyncio")
    ]
    sim, live = results
    assert live.faults == sim.faults and sim.faults["drop"] > 0
    assert live.status == sim.status == "stalled" and live.stalled == sim.stalled
    assert list(live.ledger.per_agent["received"]) == list(sim.ledger.per_agent["received"])
    assert live.states == sim.states


@pytest.mark.parametrize("name", ["asyncio", "pykka"])
def test_live_runtimes_drop_and_repeat_copies(name):
    from megaactors.runtime import RUNTIMES

    def live(spec):
        return RUNTIMES[name](Organisation.two_tier(24, 6), ChatRound(), seed=1, time_scale=0.001, faults=spec).run()

    dup = live(FaultSpec(duplicate=0.2, dedup=False))
    assert dup.status == "ok" and dup.faults["duplicate"] > 0
    assert delivered(dup) == dup.ledger.messages + dup.faults["duplicate"]
    lossy = live(FaultSpec(drop=0.2, recover=False))
    assert delivered(lossy) == lossy.ledger.messages - lossy.faults["drop"]
    assert lossy.status == "stalled" and lossy.faults["drop"] > 0


@pytest.mark.parametrize(
    ("name", "options", "words"),
    [
        ("asyncio", {"faults": FaultSpec(crash=0.1)}, "crash need --runtime sim"),
        ("pykka", {"faults": FaultSpec(drop=0.1)}, "recover (with drop: set recover=false)"),
        ("asyncio", {"network": NetworkModel({"intra": 0.1})}, "network latency and machines need --runtime sim"),
        ("step", {"faults": FaultSpec(duplicate=0.1)}, "does not inject faults"),
    ],
)
def test_live_runtimes_refuse_what_they_cannot_do(name, options, words):
    from megaactors.runtime import RUNTIMES

    with pytest.raises(ParameterError) as info:
        RUNTIMES[name](Organisation.two_tier(12, 4), ChatRound(), **options)
    assert words in str(info.value)


def test_results_of_an_earlier_version_load_with_the_network_parameters_at_their_defaults(tmp_path):
    import csv
    import io

    from megaactors.experiments.result_rows import read_rows
    from megaactors.experiments.sweep import run_sweep

    run_sweep({"topology": "two-tier", "agents": 30, "group_size": 5}, tmp_path / "s", workers=1, progress=False)
    rows = list(csv.reader(io.StringIO((tmp_path / "s" / "results.csv").read_text())))
    new = {"net_latency", "net_jitter", "machines", "faults"}
    keep = [i for i, column in enumerate(rows[0]) if column not in new]
    old = io.StringIO()
    csv.writer(old).writerows([[r[i] for i in keep] for r in rows])
    (row,) = read_rows(io.StringIO(old.getvalue()), "old.csv")
    assert (
        row["net_jitter"] == 0.0
        and row["faults"] is None
        and row["messages"] == expected_messages(Organisation.two_tier(30, 5))
    )


def test_megaagent_recovers_from_lost_and_repeated_copies_and_reports_a_stall():
    from megaactors.megaagent.scenarios import GOBANG

    def once(spec):
        return SimRuntime(GOBANG.organisation(), GOBANG.behaviour(1), GOBANG.llm(1), seed=1, faults=spec).run()

    base = SimRuntime(GOBANG.organisation(), GOBANG.behaviour(1), GOBANG.llm(1), seed=1).run()
    recovered = once(FaultSpec(drop=0.05, duplicate=0.1))
    assert recovered.status == "ok" and recovered.faults["resent"] == recovered.faults["drop"] > 0
    assert recovered.ledger.messages == base.ledger.messages
    cut = once(FaultSpec(drop=0.1, recover=False))
    assert cut.status == "stalled"
    assert cut.faults["undelivered"] == cut.faults["drop"] > 0
    assert cut.stalled and all("lost for good" in w for w in cut.stalled.values())


def test_groups_formed_during_a_run_are_placed_round_robin():
    from megaactors.network import FaultDecisions

    org = Organisation.star(4)  # the hub recruits: its new group is group 0, beyond the 0 placed
    decisions = FaultDecisions(0, org, NetworkModel(cross_s=0.1, machine_count=3), FaultSpec())
    two = Organisation.two_tier(6, 3)
    placed = FaultDecisions(0, two, NetworkModel(cross_s=0.1, machine_count=2), FaultSpec())
    two.recruit(1)  # agent 1 (a member of group 0) forms group 2
    assert [placed.machine(a) for a in range(two.n)] == [0, 0, 0, 1, 1, 1, 2 % 2]
    recruit = org.recruit(0)
    assert decisions.machine(recruit) == decisions.machine(0) == 0
