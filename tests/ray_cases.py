"""Cases on a real two-node Ray cluster (run by tests/test_ray.py inside a network namespace)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_cluster import LocalRayCluster, namespace_processes, require_namespace
from test_aio_mailboxes import GOSSIP_ORGS, check_gossip
from test_live_runtimes import (
    FailsOnReply,
    RecruitsOnStart,
    check_scrambled_chat,
    fixed_llm,
    starts_of,
)

from megaactors import Effects, Interrupt, LLMRequest, Organisation
from megaactors.behaviours.chat_round import ChatRound
from megaactors.cli import main
from megaactors.errors import BehaviourError, ParameterError
from megaactors.experiments import ray_sweep
from megaactors.experiments.sweep import execute, run_sweep
from megaactors.providers.limits import ProviderModel
from megaactors.runtime import AsyncioRuntime, SimRuntime
from megaactors.runtime.aio_shards import ShardError
from megaactors.runtime.ray_cluster import ray_session

require_namespace()


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    c = LocalRayCluster()
    try:
        c.start(workers=0, cpus=1)
        c.add_node(cpus=2)  # three CPUs: three shards fit
        yield c
    finally:
        c.stop()


def megaactors(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=timeout)


def rows(out: Path) -> list[dict[str, str]]:
    with (out / "results.csv").open() as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------- sweeps


def test_a_sweep_on_the_cluster_gives_the_rows_of_the_process_pool(cluster: LocalRayCluster, tmp_path: Path) -> None:
    grid = {"topology": ["two-tier", "star"], "agents": [40, 80], "seed": [1, 2]}
    on_ray = run_sweep(grid, tmp_path / "ray", executor="ray", address=cluster.address, progress=False)
    here = run_sweep(grid, tmp_path / "pool", workers=2, progress=False)
    figures = ["topology", "agents", "seed", "status", "messages", "bytes", "llm_calls", "tokens_in", "cost_usd"]
    assert on_ray[figures].equals(here[figures])
    assert (on_ray["status"] == "ok").all() and len(rows(tmp_path / "ray")) == 8
    # a wider grid resumes: the 8 rows stay, only the new runs execute
    wider = run_sweep({**grid, "agents": [40, 80, 120]}, tmp_path / "ray", executor="ray", address=cluster.address,
                      progress=False)  # fmt: skip
    kept = wider[wider["agents"] != 120].reset_index(drop=True)
    assert len(wider) == 12 and list(kept["run_s"]) == list(on_ray["run_s"])


def _dies_on_seed_13(params: dict[str, Any]) -> dict[str, Any]:
    if params["seed"] == 13:
        os.kill(os.getpid(), signal.SIGKILL)  # every attempt: the worker process is lost
    return execute(params)


def test_a_run_whose_worker_is_always_lost_becomes_an_error_row(cluster: LocalRayCluster) -> None:
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # this module is not on the nodes
    recorded: dict[int, dict[str, Any]] = {}
    runs = [(seed, {"topology": "star", "agents": 10, "seed": seed}) for seed in (1, 13, 2)]
    ray_sweep.run_on_ray(runs, _dies_on_seed_13, recorded.__setitem__, address=cluster.address)
    assert sorted(recorded) == [1, 2, 13]
    assert recorded[1]["status"] == recorded[2]["status"] == "ok" and recorded[1]["messages"] == 18
    assert recorded[13]["status"] == "error" and "lost 4 times" in recorded[13]["detail"]


def test_the_sweep_command_on_an_address(cluster: LocalRayCluster, tmp_path: Path) -> None:
    out = megaactors("sweep", "--topology", "star", "--agents", "10,20", "--executor", "ray", "--address",
                     cluster.address, "-o", str(tmp_path), "-q", "--no-plots")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [r["messages"] for r in rows(tmp_path)] == ["18", "38"]


def test_without_an_address_the_command_starts_and_stops_a_local_ray(cluster: LocalRayCluster, tmp_path: Path) -> None:
    before = set(namespace_processes())
    out = subprocess.run(
        [sys.executable, "-m", "megaactors", "sweep", "--topology", "star", "--agents", "10", "--executor", "ray",
         "-o", str(tmp_path), "-q", "--no-plots"],
        capture_output=True, text=True, timeout=300, env=cluster.env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [r["messages"] for r in rows(tmp_path)] == ["18"]
    time.sleep(2)
    assert set(namespace_processes()) <= before  # the local instance is gone


def test_bad_addresses_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for address, needle in (("127.0.0.1:1", "cannot reach a Ray cluster at 127.0.0.1:1"), ("nowhere", "HOST:PORT")):
        started = time.monotonic()
        out = megaactors("sweep", "--agents", "10", "--executor", "ray", "--address", address, "-o", str(tmp_path))
        assert out.returncode == 2 and time.monotonic() - started < 60
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], out.stderr
        assert not (tmp_path / "results.csv").exists()


# ---------------------------------------------------------------------- live runs sharded over Ray actors


def _figures(result: Any) -> tuple[Any, ...]:
    led = result.ledger
    per_agent = tuple(tuple(led.per_agent[c]) for c in ("sent", "received"))
    return led.messages, led.bytes, dict(led.messages_by_channel), per_agent, result.states


class _NotesItsNode:
    """Each agent asks for a human at start, makes one LLM call and keeps the Ray node
    it ran on as its state."""

    name = "notes-its-node"

    def init(self, agent: int, org: Organisation) -> str:
        return ""

    def on_start(self, ctx: Any, state: str) -> Effects:
        return Effects(llm=LLMRequest(new_tokens=1), interrupt=Interrupt(f"agent {ctx.agent} here"))

    def on_reply(self, ctx: Any, state: str, reply: Any) -> Effects:
        import ray

        return Effects(state=ray.get_runtime_context().get_node_id())

    def on_batch(self, ctx: Any, state: str, batch: Any) -> Effects:
        return Effects()


class _KilledOnReply(ChatRound):
    """Agent 50's process (its shard's actor) is killed (SIGKILL) on its first LLM reply."""

    def on_reply(self, ctx: Any, state: Any, reply: Any) -> Any:
        if ctx.agent == 50:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().on_reply(ctx, state, reply)


def _actors() -> list[int]:
    return namespace_processes("ray::ShardActor") + namespace_processes("ray::IdAllocator")


def _no_actors_left() -> bool:
    deadline = time.monotonic() + 30
    while _actors() and time.monotonic() < deadline:
        time.sleep(0.2)
    return _actors() == []


@pytest.fixture(scope="class")
def connected(cluster: LocalRayCluster) -> Iterator[None]:
    """The Ray this process is connected to, for a class of cases (runs without an address use it)."""
    import ray

    for module in (__name__, "test_live_runtimes", "test_aio_mailboxes"):  # not on the nodes' path
        ray.cloudpickle.register_pickle_by_value(sys.modules[module])
    with ray_session(cluster.address):
        yield


@pytest.mark.usefixtures("connected")
class TestLiveShards:
    """Live runs sharded over the cluster's nodes (the head has one CPU, the second node
    two: up to 3 shards fit), each Ray run combining what it can check: each costs seconds."""

    @pytest.mark.parametrize(
        ("make", "shards", "provider"),
        [
            # group rate limits: each shard holds whole groups, hence whole token buckets
            (lambda: Organisation.two_tier(150, 12), 2, ProviderModel(rpm=6, scope="group", seed=1)),
            (lambda: Organisation.hierarchy(60, 3), 3, None),  # flat: below, with broadcasts and scrambled sends
        ],
        ids=["two-tier-rate-limited", "hierarchy"],
    )
    def test_a_sharded_run_agrees_with_the_simulation(self, make: Any, shards: int, provider: Any) -> None:
        ref = SimRuntime(make(), ChatRound(2), seed=5, provider=provider).run()
        got = AsyncioRuntime(make(), ChatRound(2), seed=5, provider=provider, shards=shards, time_scale=0.002).run()
        assert _figures(got) == _figures(ref)
        b = got.ledger
        assert (b.rate_limited > 0) == (ref.ledger.rate_limited > 0) == (provider is not None)
        calls, batches = b.per_agent["llm_calls"], b.per_agent["batches"]
        assert [calls[i] - batches[i] for i in range(got.org.n)] == starts_of(got.org, 2)
        assert b.tokens_in == sum(b.per_agent["tokens_in"]) and b.by_stage["chat"]["llm_calls"] == b.llm_calls
        assert len(got.trace) >= 3 * got.org.n - sum(1 for s in starts_of(got.org, 2) if not s)  # every shard's
        times = list(got.trace.t_time)
        assert times == sorted(times)

    def test_broadcasts_reach_every_peer_once_with_the_simulations_counts(self) -> None:
        check_gossip(GOSSIP_ORGS["flat"], shards=3)

    def test_every_copy_keeps_its_own_message_id_across_three_shards(self) -> None:
        check_scrambled_chat(shards=3)

    def test_shards_spread_over_the_nodes_and_their_interrupts_are_gathered(self) -> None:
        import ray

        deadline = time.monotonic() + 30  # SPREAD is best effort: let the last run's CPUs come back first
        while ray.available_resources().get("CPU", 0) < ray.cluster_resources()["CPU"]:
            assert time.monotonic() < deadline, ray.available_resources()
            time.sleep(0.2)
        placed = AsyncioRuntime(Organisation.two_tier(24, 4), _NotesItsNode(), time_scale=0.002, shards=2).run()
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert set(placed.states) == nodes and len(nodes) == 2  # one shard on each node
        assert sorted(placed.interrupts) == [(a, f"agent {a} here") for a in range(24)]

    def test_what_fails_in_a_shard_stops_every_shard_and_is_raised(self) -> None:
        org = Organisation.two_tier(120, 6)
        failing = AsyncioRuntime(org, FailsOnReply(100, "reply"), llm=fixed_llm(1.0), time_scale=0.02, shards=2)
        with pytest.raises(BehaviourError, match=r"agent 100: behaviour 'fails-on-reply' failed on LLM reply 1"):
            failing.run()
        assert _no_actors_left()  # every shard's actor is gone, and the id allocator
        with pytest.raises(ParameterError, match="agent 0: recruiting needs one process"):  # as a named tool lock
            AsyncioRuntime(Organisation.hierarchy(2, 3), RecruitsOnStart(), shards=2).run()
        with pytest.raises(ShardError, match=r"shard 1's Ray actor was lost"):
            AsyncioRuntime(Organisation.two_tier(60, 12), _KilledOnReply(2), time_scale=0.002, shards=2).run()
        assert _no_actors_left()


def test_the_run_command_on_the_cluster_equals_one_process_and_the_simulation(
    cluster: LocalRayCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--topology", "two-tier", "--agents", "150", "--group-size", "12", "--rounds", "2", "--seed",
            "5", "--json"]  # fmt: skip
    live = [*argv, "--runtime", "asyncio", "--time-scale", "0.002"]
    on_ray = megaactors(*live, "--shards", "2", "--address", cluster.address)
    assert on_ray.returncode == 0, on_ray.stderr
    summaries = [json.loads(on_ray.stdout)]
    for args in (live, argv):  # one process, the simulation
        assert main(args) == 0
        summaries.append(json.loads(capsys.readouterr().out))
    figures = ("messages", "bytes", "messages_by_channel", "agents")  # calls vary with batching, live
    assert [{k: s[k] for k in figures} for s in summaries[1:]] == [{k: summaries[0][k] for k in figures}] * 2


# ---------------------------------------------------------------------- the sharded simulation


def test_the_sharded_simulation_on_the_cluster_equals_the_in_process_one(cluster: LocalRayCluster) -> None:
    argv = ["run", "-n", "120", "-g", "10", "-r", "2", "--machines", "4", "--net-latency", "intra=0.01,cross=0.05",
            "--net-jitter", "0.002", "--shards", "2", "--json"]  # fmt: skip
    on_ray = megaactors(*argv, "--address", cluster.address)
    here = megaactors(*argv)
    assert on_ray.returncode == 0 and here.returncode == 0, on_ray.stderr + here.stderr
    ray_summary, local_summary = json.loads(on_ray.stdout), json.loads(here.stdout)
    ray_summary.pop("wall_s"), local_summary.pop("wall_s")
    assert ray_summary == local_summary and ray_summary["messages"] > 0


def test_a_sharded_simulation_checkpointed_on_the_cluster_resumes_without_it(
    cluster: LocalRayCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from megaactors.cli import main

    argv = ["-n", "120", "-g", "10", "-r", "2", "--machines", "4", "--net-latency", "intra=0.01,cross=0.05"]
    db = str(tmp_path / "runs.db")
    whole = megaactors("run", *argv, "--shards", "2", "--address", cluster.address, "--checkpoint", db,
                       "--run-id", "r", "--checkpoint-every", "40", "--json")  # fmt: skip
    assert whole.returncode == 0, whole.stderr
    summaries = [json.loads(whole.stdout)]
    assert main(["fork", "--db", db, "--run-id", "r", "--step", "40", "--new-run-id", "again"]) == 0
    capsys.readouterr()
    for command in (
        ["resume", "--checkpoint", db, "--run-id", "again", "--shard-backend", "inprocess"],
        ["run", *argv],
    ):
        assert main([*command, "--json"]) == 0
        summaries.append(json.loads(capsys.readouterr().out))
    for s in summaries:
        s.pop("wall_s")
    assert summaries[0] == summaries[1] == summaries[2] and summaries[0]["messages"] > 0


def test_a_node_lost_mid_sweep_costs_only_its_runs_in_flight(cluster: LocalRayCluster, tmp_path: Path) -> None:
    """Last: it kills the cluster's second node (runs of 40,000 agents, a few seconds
    each: long enough to be seen running there before the sweep ends)."""
    victim = cluster.nodes[-1]
    seeds = ",".join(str(s) for s in range(1, 7))
    sweep = subprocess.Popen(
        [sys.executable, "-m", "megaactors", "sweep", "--topology", "two-tier", "--agents", "40000", "--seed", seeds,
         "--executor", "ray", "--address", cluster.address, "-o", str(tmp_path), "-q", "--no-plots"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not cluster.running_on(victim, "ray::execute") and time.monotonic() < deadline:
        assert sweep.poll() is None, sweep.communicate()
        time.sleep(0.05)
    assert cluster.running_on(victim, "ray::execute"), "no run reached the second node"
    cluster.kill(victim)
    _, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 0, err
    written = rows(tmp_path)
    assert sorted(int(r["seed"]) for r in written) == list(range(1, 7))  # each once, none lost
    assert all(r["status"] == "ok" and r["messages"] == r["expected_messages"] for r in written)
