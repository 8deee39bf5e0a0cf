"""Graph organisations: edges route, files and generated families build them, and the
chat round sends exactly one message along every directed edge per round."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megaactors import ChatRound, Organisation, OrganisationError, RouteError, SimulatedLLM, expected_messages
from megaactors.core.graph import CommunicationGraph
from megaactors.core.graph_families import family_edge_count, random_graph, scale_free, small_world
from megaactors.core.messages import ADMIN, HIERARCHY, INTRA
from megaactors.runtime import RUNTIMES, SimRuntime


class RecordingChatRound(ChatRound):
    """The chat round, noting (sender, recipient) of every message read."""

    def __init__(self, rounds: int) -> None:
        super().__init__(rounds)
        self.pairs: list[tuple[int, int]] = []

    def on_batch(self, ctx: Any, state: Any, batch: Any) -> Any:
        self.pairs += [(m.sender, ctx.agent) for m in batch]
        return super().on_batch(ctx, state, batch)


def edge_multiset(org: Organisation) -> Counter[tuple[int, int]]:
    assert org.graph is not None
    src, dst, _ = org.graph.edges()
    return Counter(zip(src.tolist(), dst.tolist(), strict=True))


@st.composite
def graphs(draw: st.DrawFn) -> nx.Graph:
    """Small random graphs, directed or not, with isolated nodes allowed and at least one edge."""
    n = draw(st.integers(2, 14))
    directed = draw(st.booleans())
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b and (directed or a < b)]
    chosen = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=len(pairs), unique=True))
    g = nx.DiGraph() if directed else nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(chosen)
    return g


@settings(max_examples=60, deadline=None)
@given(graphs(), st.integers(1, 3), st.integers(0, 2**32))
def test_chat_round_sends_one_message_along_every_directed_edge(g: nx.Graph, rounds: int, seed: int) -> None:
    org = Organisation.from_networkx(g)
    directed_edges = g.number_of_edges() * (1 if g.is_directed() else 2)
    assert org.kind == "graph" and org.graph is not None and org.graph.edge_count == directed_edges
    behaviour = RecordingChatRound(rounds)
    result = SimRuntime(org, behaviour, SimulatedLLM(seed=seed), seed=seed, trace=False).run()
    assert result.ledger.messages == expected_messages(org, rounds) == rounds * directed_edges
    # every message travelled along an edge, and every edge carried one per round
    assert Counter(behaviour.pairs) == Counter({e: rounds for e in edge_multiset(org)})
    for a in range(org.n):
        assert result.ledger.per_agent["sent"][a] == rounds * org.graph.out_degree(a)
        assert result.ledger.per_agent["received"][a] == rounds * org.graph.in_degree(a)


@settings(max_examples=8, deadline=None)
@given(graphs(), st.integers(1, 2))
def test_every_runtime_agrees_on_random_graphs(g: nx.Graph, rounds: int) -> None:
    results = {}
    for name in sorted(RUNTIMES):
        org = Organisation.from_networkx(g)
        results[name] = RUNTIMES[name](org, ChatRound(rounds), SimulatedLLM(seed=3), seed=3, trace=False).run()
    ref = results["sim"]
    for name, got in results.items():
        assert got.ledger.messages == ref.ledger.messages, name
        assert got.ledger.messages_by_channel == ref.ledger.messages_by_channel, name
        assert got.ledger.bytes == ref.ledger.bytes, name
        assert list(got.ledger.per_agent["received"]) == list(ref.ledger.per_agent["received"]), name
        assert got.states == ref.states, name


def test_the_karate_club_round_costs_156_messages() -> None:
    org = Organisation.from_networkx(nx.karate_club_graph())
    assert org.n == 34 and org.graph is not None and org.graph.edge_count == 156
    for rounds in (1, 2):
        assert SimRuntime(org, ChatRound(rounds), seed=1).run().ledger.messages == 156 * rounds
    org.check_route(0, 1, INTRA)
    with pytest.raises(RouteError, match="no edge 0 -> 9"):
        org.check_route(0, 9, INTRA)


@pytest.mark.parametrize("seed", range(12))
def test_generated_families_have_their_edge_counts_and_the_round_costs_them(seed: int) -> None:
    cases = [
        ("small-world", 60 + seed, 4, small_world(60 + seed, 4, 0.3, seed)),  # n k / 2 edges
        ("scale-free", 80 + seed, 3, scale_free(80 + seed, 3, seed)),  # m (n - m)
        ("random", 70 + seed, 5.0, random_graph(70 + seed, 5.0, seed)),  # binomial: its own count
    ]
    for family, n, degree, (u, v) in cases:
        org = Organisation.generated(family, n, degree, rewire=0.3, seed=seed)
        assert len(set(zip(np.minimum(u, v).tolist(), np.maximum(u, v).tolist(), strict=True))) == len(u)
        assert org.graph is not None and org.graph.edge_count == 2 * len(u)
        if family != "random":
            assert len(u) == family_edge_count(family, n, degree)
        result = SimRuntime(org, ChatRound(1), seed=seed, trace=False).run()
        assert result.ledger.messages == 2 * len(u) == expected_messages(org)


def test_generation_is_seeded_and_the_random_family_has_the_mean_degree() -> None:
    a, b = scale_free(500, 2, 7), scale_free(500, 2, 7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(scale_free(500, 2, 8)[1], a[1])
    degrees = [2 * len(random_graph(2000, 6.0, s)[0]) / 2000 for s in range(5)]
    assert abs(np.mean(degrees) - 6.0) < 0.1
    with pytest.raises(OrganisationError, match="even"):
        Organisation.generated("small-world", 10, 3)
    with pytest.raises(OrganisationError, match="whole number"):
        Organisation.generated("scale-free", 10, 2.5)
    with pytest.raises(OrganisationError, match="mean degree"):
        Organisation.generated("random", 10, 20)


def test_a_directed_edge_goes_one_way_and_channels_come_from_roles() -> None:
    g = nx.DiGraph([("lead", "a"), ("a", "lead"), ("lead", "b"), ("lead", "other"), ("other", "lead")])
    nx.set_node_attributes(g, {"lead": "t", "a": "t", "b": "t"}, "group")
    nx.set_node_attributes(g, {"lead": "admin", "other": "admin"}, "role")
    nx.set_node_attributes(g, {"other": "u"}, "group")
    org = Organisation.from_networkx(g)
    idx = {name: i for i, name in enumerate(org.names or [])}
    org.check_route(idx["lead"], idx["b"], INTRA)
    with pytest.raises(RouteError, match="no edge"):
        org.check_route(idx["b"], idx["lead"], INTRA)
    assert org.graph is not None and org.graph.channel_of(idx["lead"], idx["other"]) == ADMIN
    org.check_route(idx["a"], idx["lead"], HIERARCHY)  # a member may use the tree channel to its admin too
    back = Organisation.from_networkx(org.to_networkx())
    assert back.same_structure(org) and back.to_networkx().is_directed()


def test_edge_channel_attributes_and_recruits_on_a_graph() -> None:
    g = nx.Graph()
    g.add_edge(0, 1, channel="admin")
    g.add_edge(1, 2)
    org = Organisation.from_networkx(g)
    assert org.graph is not None and org.graph.channel_of(0, 1) == ADMIN and org.graph.channel_of(1, 2) == INTRA
    with pytest.raises(OrganisationError, match="names channel 'gossip'"):
        Organisation.from_networkx(nx.Graph([(0, 1, {"channel": "gossip"})]))
    new = org.recruit(2)
    org.check_route(2, new, HIERARCHY)
    org.check_route(new, 2, HIERARCHY)
    assert org.graph.edge_count == 6 and org.in_degree(new) == 1


def test_the_compressed_graph_rejects_bad_edges() -> None:
    with pytest.raises(OrganisationError, match=r"outside 0\.\.2"):
        CommunicationGraph(3, [0], [3], directed=True)
    with pytest.raises(OrganisationError, match="self-loop at node 'x'"):
        CommunicationGraph(2, [1], [1], directed=False, names=["w", "x"])
    g = CommunicationGraph(3, [0, 0, 1], [1, 1, 2], directed=True)  # a repeated edge is one edge
    assert g.edge_count == 2 and g.peers(0, INTRA) == [1] and g.in_degree(2) == 1


# ---------------------------------------------------------------------- files


def _karate_files(tmp_path: Path) -> dict[str, Path]:
    g = nx.karate_club_graph()
    paths = {ext: tmp_path / f"karate.{ext}" for ext in ("graphml", "gml", "json", "edgelist", "csv")}
    nx.write_graphml(g, paths["graphml"])
    nx.write_gml(g, paths["gml"])
    paths["json"].write_text(json.dumps(nx.node_link_data(g, edges="links")))
    nx.write_edgelist(g, paths["edgelist"], data=False)
    paths["csv"].write_text("source,target\n" + "\n".join(f"{u},{v}" for u, v in g.edges) + "\n")
    return paths


def test_every_graph_file_format_reads_the_same_organisation(tmp_path: Path) -> None:
    for ext, path in _karate_files(tmp_path).items():
        org = Organisation.from_file(path)
        assert org.n == 34 and org.graph is not None and org.graph.edge_count == 156, ext
        assert SimRuntime(org, ChatRound(1), seed=2).run().ledger.messages == 156, ext


def test_edge_lists_direction_isolated_nodes_and_channels(tmp_path: Path) -> None:
    path = tmp_path / "team.txt"
    path.write_text("# directed\n# a comment\n1 2\n2 3 admin\n3 1 1.5\n7\n")
    org = Organisation.from_file(path)
    assert org.names == [1, 2, 3, 7] and org.graph is not None and org.graph.directed
    assert org.graph.edge_count == 3 and org.in_degree(3) == 0  # 7 is isolated
    assert org.graph.channel_of(1, 2) == ADMIN and org.graph.channel_of(0, 1) == INTRA


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("bad.graphml", '<graphml><graph edgedefault="undirected">\n<node id="a"/>\n<edge source="a"\n</graphml>',
         "line 4: malformed GraphML"),
        ("bad.gml", "graph [\n node [ id 0 ]\n node [ id 1 \n", "malformed GML"),
        ("bad.json", '{"nodes": [\n{"id": 1},\n]}', "line 3: malformed JSON"),
        ("loop.edgelist", "1 2\n2 3\n3 3\n", "line 3: self-loop at node '3'"),
        ("none.edgelist", "# nothing\n", "no nodes"),
        ("lonely.edgelist", "1\n2\n", "no edges"),
        ("graph.xyz", "1 2\n", "unknown graph file type '.xyz'"),
        ("binary.txt", b"1 2\n\xff\xfe\n", "line 2: not UTF-8"),
    ],
)  # fmt: skip
def test_bad_graph_files_name_the_file_and_line(tmp_path: Path, name: str, content: Any, needle: str) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(OrganisationError) as info:
        Organisation.from_file(path)
    assert needle in str(info.value) and str(path) in str(info.value)
    with pytest.raises(OrganisationError, match="cannot read the graph file"):
        Organisation.from_file(tmp_path / "missing.graphml")
    (tmp_path / "folder.gml").mkdir(exist_ok=True)
    with pytest.raises(OrganisationError, match="is a directory"):
        Organisation.from_file(tmp_path / "folder.gml")


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_the_command_line_runs_and_sweeps_graphs(tmp_path: Path) -> None:
    path = _karate_files(tmp_path)["gml"]
    out = _cli("run", "--topology", f"graph:{path}", "--rounds", "2", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["messages"] == 312 and summary["agents"] == 34 and summary["topology"] == f"graph:{path}"
    sweep = _cli("sweep", "--topology", "small-world,scale-free,random", "--agents", "40,80", "--degree", "4",
                 "--seed", "1,2", "--out", str(tmp_path / "s"), "--no-plots", "-q", "-j", "1")  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr
    with open(tmp_path / "s" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 12
    for row in rows:
        n = int(row["agents"])
        closed = {"small-world": 4 * n, "scale-free": 2 * 4 * (n - 4)}.get(row["topology"])
        if closed is not None:
            assert int(row["messages"]) == int(row["expected_messages"]) == closed
        assert row["group_size"] == row["fanout"] == "" and float(row["degree"]) == 4.0
        assert row["rewire"] == ("0.1" if row["topology"] == "small-world" else "")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--topology", "graph:{dir}/missing.gml"), "cannot read the graph file"),
        (("--topology", "graph:{dir}/loop.edgelist"), "line 2: self-loop"),
        (("--topology", "small-world", "--degree", "3"), "even"),
        (("--topology", "random", "--agents", "5", "--degree", "0.01"), "no edges"),
        (("--topology", "mesh"), "unknown topology 'mesh'"),
    ],
)
def test_bad_graph_input_is_one_line_and_exit_code_2_with_nothing_written(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    (tmp_path / "loop.edgelist").write_text("1 2\n2 2\n")
    db = tmp_path / "runs.db"
    for command in (("run",), ("run", "--checkpoint", str(db), "--run-id", "x"), ("submit", "--db", str(db))):
        out = _cli(*command, *(a.format(dir=tmp_path) for a in args))
        assert out.returncode == 2, (command, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (command, out.stderr)
    assert sorted(os.listdir(tmp_path)) == ["loop.edgelist"]


def test_a_send_along_no_edge_or_on_no_channel_is_a_route_error_on_every_runtime() -> None:
    from megaactors import Effects, Send

    class Stray:
        name = "stray"

        def __init__(self, recipients: list[int], channel: str) -> None:
            self.recipients, self.channel = recipients, channel

        def init(self, agent: int, org: Organisation) -> None:
            return None

        def on_start(self, ctx: Any, state: Any) -> Any:
            return Effects(sends=[Send(self.recipients, self.channel, "x", 1)]) if ctx.agent == 0 else None

        def on_batch(self, ctx: Any, state: Any, batch: Any) -> Any:
            return Effects()

        def on_reply(self, ctx: Any, state: Any, reply: Any) -> Any:
            return Effects()

    for name in sorted(RUNTIMES):
        for recipients, channel, needle in [
            ([5], INTRA, "no edge 0 -> 5"),
            ([1], "gossip", "not 'gossip'"),
            ([1, 1], INTRA, "twice"),
            ([], INTRA, "no recipient"),
        ]:
            org = Organisation.from_networkx(nx.path_graph(8))
            with pytest.raises(RouteError, match=needle):
                RUNTIMES[name](org, Stray(recipients, channel), SimulatedLLM(), trace=False).run()
