"""The ``megaagent`` behaviour: MegaAgent's mechanism on any organisation with admins."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import networkx as nx
import pytest

from megaactors import Organisation, RunSpec
from megaactors.behaviours import registry
from megaactors.behaviours.megaagent.organised import OrganisedMegaAgent, Structure
from megaactors.core.llm import SimulatedLLM
from megaactors.errors import BehaviourLoadError, OrganisationError
from megaactors.runtime.sim import SimRuntime

QUIET = {"monitoring": False}
"""No validation failures: every delivery is accepted, so messages have a closed form."""


def grouped_graph() -> nx.Graph:
    """Two groups on a sparse graph: admins a0 and b0 under the boss, members linked
    to their admin (both ways) and in a chain among themselves."""
    g = nx.Graph()
    g.add_node("boss", role="boss")
    for group in "ab":
        g.add_node(f"{group}0", group=group, role="admin")
        g.add_edge("boss", f"{group}0")
        for i in range(1, 5):
            g.add_node(f"{group}{i}", group=group)
            g.add_edge(f"{group}0", f"{group}{i}")
            if i > 1:
                g.add_edge(f"{group}{i - 1}", f"{group}{i}")
    return g


ORGANISATIONS = {
    "two-tier": lambda: Organisation.two_tier(23, 5),
    "two-tier-boss": lambda: Organisation.two_tier(23, 5, boss=True),
    "hierarchy": lambda: Organisation.hierarchy(31, 3),
    "flat": lambda: Organisation.flat(7),
    "graph-groups": lambda: Organisation.from_networkx(grouped_graph()),
}


def run(org: Organisation, seed: int = 0, **params: object) -> object:
    behaviour = OrganisedMegaAgent(seed=seed, **params)  # type: ignore[arg-type]
    return SimRuntime(org, behaviour, SimulatedLLM(seed=seed), seed=seed).run()


@pytest.mark.parametrize("name", sorted(ORGANISATIONS))
def test_every_agent_with_a_manager_gets_a_task_and_delivers_once(name: str) -> None:
    org = ORGANISATIONS[name]()
    s = Structure(org)
    result = run(org, **QUIET)
    reporting = [a for a in range(org.n) if s.manager[a] >= 0]
    assert reporting, "the organisation has teams"
    sent = result.ledger.per_agent["sent"]
    received = result.ledger.per_agent["received"]
    behaviour = OrganisedMegaAgent()
    notes = sum(behaviour.sibling(org, s.team[s.manager[a]], s.team[s.manager[a]].index(a)) >= 0 for a in reporting)
    # one task down and one result up per reporting agent, plus a note to a sibling
    assert result.ledger.messages == 2 * len(reporting) + notes
    for a in range(org.n):
        if s.manager[a] < 0 and not s.team[a]:
            assert sent[a] == received[a] == 0  # in nobody's team: idle
    # every admin at the top planned and merged: one merge per agent with a team
    assert result.ledger.by_stage["merging"]["llm_calls"] == sum(1 for a in range(org.n) if s.team[a])
    assert result.ledger.by_stage["planning"]["llm_calls"] == 3 * sum(1 for a in range(org.n) if s.team[a])


def test_the_structure_follows_parents_then_groups() -> None:
    org = Organisation.two_tier(11, 5, boss=True)  # boss 0; admins 1, 6; members below
    s = Structure(org)
    assert s.roots == [0]
    assert s.team[0] == [1, 6] and s.team[1] == [2, 3, 4, 5] and s.team[6] == [7, 8, 9, 10]
    assert s.size[0] == 11 and s.size[1] == 5 and s.level[7] == 2
    flat = Structure(Organisation.flat(4))
    assert flat.roots == [0] and flat.team[0] == [1, 2, 3] and flat.down[(0, 1)] == "intra"
    graph = Structure(Organisation.from_networkx(grouped_graph()))
    assert len(graph.roots) == 1 and graph.size[graph.roots[0]] == 11


def test_on_a_sparse_group_notes_go_only_along_edges() -> None:
    org = Organisation.from_networkx(grouped_graph())
    result = run(org, **QUIET)
    by_channel = result.ledger.messages_by_channel
    # every message traveled along an edge: the run did not raise a RouteError, and
    # members' notes went to a neighbour in their chain
    assert by_channel["intra"] >= 8 and result.ledger.messages == sum(by_channel.values())


def test_monitoring_retries_cost_messages_and_are_reproducible() -> None:
    org = Organisation.two_tier(30, 6, boss=True)
    quiet = run(org, seed=3, **QUIET).ledger
    a = run(Organisation.two_tier(30, 6, boss=True), seed=3).ledger
    b = run(Organisation.two_tier(30, 6, boss=True), seed=3).ledger
    assert a.messages == b.messages and a.cost_usd == b.cost_usd and a.virtual_time_s == b.virtual_time_s
    assert a.messages > quiet.messages and a.llm_calls > quiet.llm_calls


def _one_way_group() -> Organisation:
    """A directed graph where the admin may message its member but not the other way."""
    g = nx.DiGraph()
    g.add_node("a", group=1, role="admin")
    g.add_node("m", group=1)
    g.add_edge("a", "m")
    return Organisation.from_networkx(g)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Organisation.star(10), "needs an organisation with admins; this star organisation has none"),
        (lambda: Organisation.generated("random", 30, 3, seed=1), "this graph organisation has none"),
        (_one_way_group, "agent 1 cannot message agent 0 on any channel"),
    ],
)
def test_organisations_it_cannot_run_on_are_refused_naming_why(build: Callable[[], Organisation], message: str) -> None:
    with pytest.raises(OrganisationError, match=message):
        OrganisedMegaAgent().check_organisation(build())


def test_registered_with_plain_parameters_and_the_run_seed() -> None:
    assert registry.installed()["megaagent"] == "megaactors.behaviours.megaagent.organised:OrganisedMegaAgent"
    info = registry.describe("megaagent", ["seed"])
    assert info["parameters"]["seed"] == {"default": 0, "run_parameter": True}
    assert list(info["parameters"]["task_solving"]["default"]) == [500, 150]
    spec = RunSpec.from_dict({"topology": "hierarchy", "agents": 13, "fanout": 3, "behaviour": "megaagent",
                              "seed": 4, "behaviour.task_calls": 2, "behaviour.monitoring": False})  # fmt: skip
    behaviour = spec.build_behaviour()
    assert behaviour.seed == 4 and behaviour.work.task_calls == 2 and not behaviour.monitoring.enabled
    with pytest.raises(BehaviourLoadError, match=r"planning must be \[prompt tokens, reply tokens\]"):
        RunSpec.from_dict({"behaviour": "megaagent", "behaviour.planning": 5})


def megaactors(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=300)


def test_the_command_line_runs_it_and_refuses_an_organisation_without_admins(tmp_path: Path) -> None:
    out = megaactors("run", "--behaviour", "megaagent", "--topology", "two-tier", "--agents", "20", "--group-size",
                     "5", "--behaviour-param", "monitoring=false", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["behaviour"] == "megaagent" and summary["behaviour_params"] == {"monitoring": False}
    assert summary["messages"] == 2 * 16 + 16  # tasks, results and a note per member (admins are roots)
    refused = megaactors("run", "--behaviour", "megaagent", "--topology", "star", "--agents", "10",
                         "--checkpoint", str(tmp_path / "r.db"), "--run-id", "x")  # fmt: skip
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "needs an organisation with admins" in refused.stderr
    assert not list(tmp_path.iterdir())


def test_a_checkpointed_run_gives_the_plain_run_s_result(tmp_path: Path) -> None:
    spec = ("--behaviour", "megaagent", "--topology", "two-tier", "--agents", "24", "--group-size", "6", "--seed", "2")
    plain = megaactors("run", *spec, "--json")
    durable = megaactors("run", *spec, "--checkpoint", str(tmp_path / "r.db"), "--run-id", "m", "--json")
    assert plain.returncode == durable.returncode == 0, (plain.stderr, durable.stderr)
    a, b = json.loads(plain.stdout), json.loads(durable.stdout)
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b and a["behaviour"] == "megaagent"
