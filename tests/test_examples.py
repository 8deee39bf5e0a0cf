"""The example behaviours a user can copy (``examples/``): they do what they say, on
every runtime, from Python and from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from megaactors import Organisation, OrganisationError, SimulatedLLM
from megaactors.runtime import RUNTIMES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

from gossip import Gossip, spread  # noqa: E402
from task_queue import TaskQueue  # noqa: E402


def run(name: str, org: Organisation, behaviour: object, seed: int = 1):
    return RUNTIMES[name](org, behaviour, SimulatedLLM(seed=seed), seed=seed, trace=False).run()


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_gossip_converges_to_the_same_numbers_on_every_runtime(name: str) -> None:
    org = Organisation.generated("small-world", 40, 4, rewire=0.2, seed=2)
    first = run("sim", org, Gossip(rounds=1, seed=2))
    ref = run("sim", Organisation.generated("small-world", 40, 4, rewire=0.2, seed=2), Gossip(rounds=12, seed=2))
    got = run(name, Organisation.generated("small-world", 40, 4, rewire=0.2, seed=2), Gossip(rounds=12, seed=2))
    assert got.states == ref.states and got.ledger.messages == ref.ledger.messages == 12 * org.graph.edge_count
    start = [s["start"] for s in ref.states]
    assert spread(ref.states) < 0.2 * spread(first.states) < 0.2 * (max(start) - min(start))
    mean = sum(start) / len(start)
    assert all(abs(s["value"] - mean) < 0.1 * (max(start) - min(start)) for s in ref.states)


def test_gossip_on_the_karate_club_agrees_within_each_round() -> None:
    org = Organisation.from_networkx(nx.karate_club_graph())
    result = run("sim", org, Gossip(rounds=20, seed=5))
    start = [s["start"] for s in result.states]
    assert spread(result.states) < 0.05 * (max(start) - min(start)) and all(s["round"] == 21 for s in result.states)


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_the_task_queue_passes_every_task_of_every_manager(name: str) -> None:
    org = Organisation.two_tier(30, 6)
    result = run(name, org, TaskQueue(tasks=9, failure=0.25, seed=3))
    managers = [s for a, s in enumerate(result.states) if org.is_admin(a)]
    assert len(managers) == 5 and all(m["passed"] == 9 and m["todo"] == 0 for m in managers)
    solved = sum(s["solved"] for s in result.states)
    failed = sum(m["failed"] for m in managers)
    assert solved == 5 * 9 + failed == result.ledger.tool_calls
    assert result.ledger.messages == 2 * solved  # a task and its report
    assert failed > 0  # a quarter of the tests fail, and those tasks are handed out again


def test_the_task_queue_runs_on_a_graph_with_groups_and_refuses_one_without() -> None:
    g = nx.Graph()
    for team in ("a", "b"):
        g.add_node(f"{team}-lead", group=team, role="admin")
        for i in range(4):
            g.add_node(f"{team}{i}", group=team)
            g.add_edge(f"{team}-lead", f"{team}{i}")
    g.add_edge("a-lead", "b-lead")
    result = run("sim", Organisation.from_networkx(g), TaskQueue(tasks=6, seed=1))
    assert sorted(s["passed"] for s in result.states if s["passed"]) == [6, 6]
    with pytest.raises(OrganisationError, match="needs admins"):
        TaskQueue().check_organisation(Organisation.generated("scale-free", 20, 2))


def test_the_examples_run_from_the_command_line() -> None:
    for args in (
        ["--behaviour", "gossip:Gossip", "--topology", "small-world", "--agents", "60", "--rounds", "4"],
        ["--behaviour", "task_queue:TaskQueue", "--agents", "24", "--group-size", "6", "--behaviour-param", "tasks=5"],
    ):
        out = subprocess.run([sys.executable, "-m", "megaactors", "run", *args, "--json"], cwd=EXAMPLES,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["messages"] > 0
