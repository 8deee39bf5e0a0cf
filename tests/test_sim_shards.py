"""The simulation sharded by machine: the same result for K = 1, 2, 4 shards and
as the unsharded simulation with the same network settings, and what it refuses."""

from __future__ import annotations

import json
import pickle

import msgpack
import networkx as nx
import pytest

from megaactors import ChatRound, Organisation
from megaactors.cli import main
from megaactors.core.behaviour import UNCHANGED
from megaactors.core.llm import LatencyModel, SimulatedLLM
from megaactors.errors import ParameterError
from megaactors.network import FaultSpec, NetworkModel
from megaactors.providers.limits import ProviderModel
from megaactors.runtime.options import RuntimeOptions
from megaactors.runtime.sim import SimRuntime
from megaactors.runtime.sim_shards import ShardedSimulation


def graph_org() -> Organisation:
    g = nx.connected_watts_strogatz_graph(40, 4, 0.2, seed=3)
    for node in g.nodes:
        g.nodes[node]["group"] = node % 8
    return Organisation.from_networkx(g)


ORGS = {
    "two-tier with a boss": lambda: Organisation.two_tier(60, 8, boss=True),
    "hierarchy": lambda: Organisation.hierarchy(80, 4),
    "graph": graph_org,
}


def outcome(result) -> dict:
    """Everything a run reports but its wall time."""
    ledger = result.ledger
    return {
        "summary": {k: v for k, v in result.summary().items() if k != "wall_s"},
        "cost_usd": ledger.cost_usd,
        "llm_time_s": ledger.llm_time_s,
        "per_agent": {c: list(col) for c, col in ledger.per_agent.items()},
        "cost_per_agent": list(ledger.cost_per_agent),
        "states": result.states,
        "stalled": result.stalled,
    }


def assert_same_for_every_k(make_org, network: NetworkModel, llm=None, rounds: int = 2, seed: int = 5) -> dict:
    unsharded = outcome(
        SimRuntime(make_org(), ChatRound(rounds=rounds), llm, seed=seed, trace=False, network=network).run()
    )
    for k in (1, 2, 4):
        sharded = ShardedSimulation(make_org(), ChatRound(rounds=rounds), llm, seed=seed, network=network, shards=k)
        assert outcome(sharded.run()) == unsharded, f"{k} shard(s)"
        assert sharded.windows > 1
    return unsharded


@pytest.mark.parametrize("jitter", [0.0, 0.004])
@pytest.mark.parametrize("kind", sorted(ORGS))
def test_sharded_equals_unsharded(kind: str, jitter: float) -> None:
    network = NetworkModel({"intra": 0.01, "admin": 0.02, "hierarchy": 0.03}, 0.05, jitter, machine_count=4)
    out = assert_same_for_every_k(ORGS[kind], network)
    summary = out["summary"]
    assert summary["messages"] > 0 and 0 < summary["peak_llm_in_flight"] < summary["llm_calls"]


def test_shards_in_this_process_run_with_the_collector_paused() -> None:
    """As SimRuntime.run: no cyclic collection while shards run (with a million agents
    each full pass walks every object), and the collector as it was afterwards."""
    import gc

    collections: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    network = NetworkModel({"intra": 0.01, "admin": 0.02}, 0.05, 0.002, machine_count=2)
    runtime = ShardedSimulation(Organisation.two_tier(3000, 27), ChatRound(), seed=1, network=network, shards=2)
    threshold = gc.get_threshold()
    gc.collect()
    gc.set_threshold(100)  # a collection every 100 allocations, were the collector on
    gc.callbacks.append(seen)
    during: list[int] = []  # collections so far, after each window
    try:
        result = runtime.run(on_window=lambda _: during.append(len(collections)))
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*threshold)
    assert result.ledger.messages > 50_000 and len(during) > 10
    assert during[-1] == 0
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_shard_actor_keeps_the_collector_off_in_its_process() -> None:
    """A Ray actor's process runs one shard: the collector is off for its life."""
    import gc

    from megaactors.runtime.sim_shards_ray import ShardActor

    network = NetworkModel({"intra": 0.01, "admin": 0.02}, 0.05, 0.0, machine_count=2)
    options = RuntimeOptions.build(None, seed=1, network=network, trace=False)
    try:
        actor = ShardActor(Organisation.two_tier(60, 8), ChatRound(), SimulatedLLM(seed=1), options, [0], [0, 1])
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        assert actor.start().next_time > 0
    finally:
        gc.enable()
        gc.unfreeze()


def test_engineered_ties_go_the_same_way_for_every_k() -> None:
    """Every call takes exactly 1 s and every copy exactly 0.05 s: events tie in time
    all the time, within and across machines."""
    fixed = SimulatedLLM(seed=2, latency=LatencyModel(sigma=0.0, per_output_token_s=0.0))
    network = NetworkModel(
        dict.fromkeys(("intra", "admin", "hierarchy"), 0.05), 0.05, machines=(0, 1, 2, 3, 0, 1, 2, 3)
    )
    assert_same_for_every_k(lambda: Organisation.two_tier(64, 8, boss=True), network, fixed, rounds=3)


def test_a_run_on_one_machine_keeps_its_ids() -> None:
    """Machine 0 numbers from 0; machine 1 from its own range (ids decide bytes)."""
    org = Organisation.two_tier(20, 5)
    one = SimRuntime(org, ChatRound(), trace=False, network=NetworkModel({"intra": 0.01}, 0.05, machine_count=1))
    plain = SimRuntime(Organisation.two_tier(20, 5), ChatRound(), trace=False, network=NetworkModel({"intra": 0.01}))
    assert one.run().summary()["bytes"] == plain.run().summary()["bytes"]
    two = SimRuntime(
        Organisation.two_tier(20, 5), ChatRound(), trace=False, network=NetworkModel({}, 0.05, machine_count=2)
    )
    two.run()
    ids = two.snapshot().machines[0]  # type: ignore[index]
    assert ids[0] < 1 << 28 <= ids[1]


BAD = [
    (dict(network=None), "needs groups placed on machines"),
    (dict(network=NetworkModel({"intra": 0.01}, 0.0, machine_count=2)), "latency between machines > 0"),
    (dict(network=NetworkModel({}, 0.05, machine_count=2), shards=3), "must not exceed the machines (2)"),
    (dict(network=NetworkModel({}, 0.05, machine_count=1)), "two or more machines"),
    (dict(serial=True), "serial mode"),
    (dict(max_concurrent_llm=4), "max_concurrent_llm"),
    (dict(provider=ProviderModel(rpm=100)), "provider model"),
    (dict(faults=FaultSpec(drop=0.1)), "faults"),
    (dict(backend="threads"), "shard backend"),
]


@pytest.mark.parametrize(("changes", "message"), BAD)
def test_refused(changes: dict, message: str) -> None:
    args = {"network": NetworkModel({}, 0.05, machine_count=4), "shards": 2, **changes}
    with pytest.raises(ParameterError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ShardedSimulation(Organisation.two_tier(40, 8), ChatRound(), trace=False, **args)


def test_more_shards_than_groups_is_refused() -> None:
    network = NetworkModel({}, 0.05, machine_count=8)
    with pytest.raises(ParameterError, match=r"must not exceed the groups \(3\)"):
        ShardedSimulation(Organisation.two_tier(9, 3), ChatRound(), network=network, shards=4)


def test_cli_sharded_run_equals_the_unsharded_one(capsys) -> None:
    argv = ["run", "-n", "90", "-g", "9", "-r", "2", "--machines", "3", "--net-latency", "intra=0.01,cross=0.05"]
    assert main([*argv, "--net-jitter", "0.002", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*argv, "--net-jitter", "0.002", "--shards", "3", "--json"]) == 0
    sharded = json.loads(capsys.readouterr().out)
    plain.pop("wall_s"), sharded.pop("wall_s")
    assert sharded == plain


CLI_BAD = [
    (["--shards", "2"], "needs groups placed on machines"),
    (["--shards", "2", "--machines", "4", "--net-latency", "intra=0.01"], "latency between machines > 0"),
    (["--shards", "5", "--machines", "4", "--net-latency", "cross=0.05"], "must not exceed the machines (4)"),
    (["--shards", "2", "--machines", "4", "--net-latency", "cross=0.05", "--serial"], "serial mode"),
    (
        ["--shards", "2", "--machines", "4", "--net-latency", "cross=0.05", "--max-concurrent-llm", "3"],
        "max_concurrent",
    ),
    (["--shards", "2", "--machines", "4", "--net-latency", "cross=0.05", "--runtime", "pykka"], "--runtime pykka"),
    (
        ["--shards", "2", "--machines", "4", "--net-latency", "cross=0.05", "--shard-backend", "processes"],
        "unknown shard_backend 'processes'",
    ),
    (["--shards", "2", "--machines", "4", "--net-latency", "cross=0.05", "--faults", "drop=0.1"], "faults"),
    (["--shards", "0"], "shards"),
    (["--shard-backend", "ray"], "go with --shards"),
    (["--shards", "2", "--machines", "4", "--net-latency", "cross=0.05", "--address", "127.0.0.1:1"], "Ray"),
    (["--shards", "2", "--machines", "4", "--net-latency", "cross=0.05", "--address", "nowhere"], "HOST:PORT"),
]


@pytest.mark.parametrize(("argv", "message"), CLI_BAD)
def test_cli_refuses_in_one_line(argv: list[str], message: str, capsys) -> None:
    try:
        code = main(["run", "-n", "40", "-g", "5", *argv])
    except SystemExit as exc:  # refused while parsing the options
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_the_unchanged_marker_survives_pickling() -> None:
    """Shards on Ray receive behaviours by pickle; the marker is compared by identity."""
    assert pickle.loads(pickle.dumps(UNCHANGED)) is UNCHANGED


def _wire(x):
    return msgpack.unpackb(msgpack.packb(x), strict_map_key=False)


def test_a_sharded_run_resumes_from_its_checkpoints() -> None:
    network = NetworkModel({"intra": 0.01, "admin": 0.02}, 0.05, 0.004, machine_count=4)

    def sharded() -> ShardedSimulation:
        return ShardedSimulation(Organisation.two_tier(60, 8, boss=True), ChatRound(rounds=2), seed=3, network=network,
                                 shards=2)  # fmt: skip

    expected = outcome(sharded().run())
    checkpoints: list[dict] = []
    assert outcome(sharded().run(checkpoint_every=7, on_checkpoint=lambda c: checkpoints.append(_wire(c)))) == expected
    assert len(checkpoints) >= 3
    for checkpoint in (checkpoints[0], checkpoints[len(checkpoints) // 2], checkpoints[-1]):
        resumed = sharded()
        assert outcome(resumed.run(resume_from=checkpoint)) == expected
    with pytest.raises(ParameterError, match="of 2 shard"):
        ShardedSimulation(Organisation.two_tier(60, 8, boss=True), ChatRound(rounds=2), seed=3, network=network,
                          shards=4).run(resume_from=checkpoints[0])  # fmt: skip
