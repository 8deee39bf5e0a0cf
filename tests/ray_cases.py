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

from megaactors.experiments import ray_sweep
from megaactors.experiments.sweep import execute, run_sweep

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
