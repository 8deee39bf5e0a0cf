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

from megaactors import Effects, LLMRequest, Organisation
from megaactors.behaviours.chat_round import ChatRound
from megaactors.errors import BehaviourError
from megaactors.experiments import ray_sweep
from megaactors.experiments.sweep import execute, run_sweep
from megaactors.runtime import AsyncioRuntime, SimRuntime
from megaactors.runtime.ray_cluster import ray_session

require_namespace()


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    c = LocalRayCluster()
    try:
        yield c.start(workers=1, cpus=1)
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


def test_a_live_run_sharded_over_the_cluster_equals_one_process_and_socket_pairs(cluster: LocalRayCluster) -> None:
    """Two shards of one CPU on two nodes of one CPU: one shard on each."""

    def run(**sharding: Any) -> Any:
        org = Organisation.two_tier(150, 12)
        return AsyncioRuntime(org, ChatRound(2), seed=5, time_scale=0.002, **sharding).run()

    on_ray = run(shards=2, transport="ray", address=cluster.address)
    assert _figures(on_ray) == _figures(run()) == _figures(run(shards=2))
    assert _figures(on_ray) == _figures(SimRuntime(Organisation.two_tier(150, 12), ChatRound(2), seed=5).run())
    assert len(on_ray.trace) > 3 * 150  # merged from both shards
    out = megaactors("run", "--runtime", "asyncio", "--topology", "two-tier", "--agents", "150", "--group-size", "12",
                     "--rounds", "2", "--seed", "5", "--time-scale", "0.002", "--shards", "2", "--address",
                     cluster.address, "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert (summary["messages"], summary["bytes"]) == (on_ray.ledger.messages, on_ray.ledger.bytes)


class _FailsOnSecondReply(ChatRound):
    """Agent 100 (on the second shard) raises on its second LLM reply."""

    def on_reply(self, ctx: Any, state: Any, reply: Any) -> Any:
        if ctx.agent == 100 and reply.call_index == 1:
            raise ValueError("no answer")
        return super().on_reply(ctx, state, reply)


class _NotesItsNode:
    """Each agent makes one LLM call and keeps the Ray node it ran on as its state."""

    name = "notes-its-node"

    def init(self, agent: int, org: Organisation) -> str:
        return ""

    def on_start(self, ctx: Any, state: str) -> Effects:
        return Effects(llm=LLMRequest(new_tokens=1))

    def on_reply(self, ctx: Any, state: str, reply: Any) -> Effects:
        import ray

        return Effects(state=ray.get_runtime_context().get_node_id())

    def on_batch(self, ctx: Any, state: str, batch: Any) -> Effects:
        return Effects()


def test_shards_spread_over_the_nodes_and_an_exception_in_one_stops_all(cluster: LocalRayCluster) -> None:
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # this module is not on the nodes
    org = Organisation.two_tier(150, 12)
    with ray_session(cluster.address):  # a run with no address uses the Ray this process is connected to
        placed = AsyncioRuntime(org, _NotesItsNode(), time_scale=0.002, shards=2, transport="ray").run()
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert set(placed.states) == nodes and len(nodes) == 2  # one shard on each node
        runtime = AsyncioRuntime(org, _FailsOnSecondReply(3), seed=5, time_scale=0.02, shards=2, transport="ray")
        with pytest.raises(BehaviourError, match=r"agent 100: .* failed on LLM reply 1: ValueError\('no answer'\)"):
            runtime.run()
        deadline = time.monotonic() + 30
        while _actors() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _actors() == []  # every shard's actor is gone, and the id allocator


def _actors() -> list[int]:
    return namespace_processes("ray::ShardActor") + namespace_processes("ray::IdAllocator")


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
    """Last: it kills the cluster's second node."""
    victim = cluster.nodes[-1]
    seeds = ",".join(str(s) for s in range(1, 7))
    sweep = subprocess.Popen(
        [sys.executable, "-m", "megaactors", "sweep", "--topology", "two-tier", "--agents", "6000", "--seed", seeds,
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
