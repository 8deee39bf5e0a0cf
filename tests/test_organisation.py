"""Organisations: builders, routing rules, recruitment and networkx in/out."""

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from megaactors.core.messages import ADMIN, CHANNELS, HIERARCHY, INTRA
from megaactors.core.organisation import Organisation, OrganisationError, RecruitError, RouteError

orgs = st.one_of(
    st.integers(1, 40).map(Organisation.flat),
    st.integers(1, 40).map(Organisation.star),
    st.builds(Organisation.two_tier, st.integers(2, 60), st.integers(1, 12), st.booleans()),
    st.builds(Organisation.hierarchy, st.integers(1, 80), st.integers(2, 6)),
)


def test_two_tier_groups_and_admins() -> None:
    org = Organisation.two_tier(23, 5)
    assert [len(g) for g in org.groups] == [5, 5, 5, 5, 3]
    assert org.admins == [0, 5, 10, 15, 20]
    assert org.role(0) == "admin" and org.role(1) == "agent"
    assert org.summary()["levels"] == 2


def test_hierarchy_is_a_complete_tree_with_levels() -> None:
    org = Organisation.hierarchy(13, 3)
    assert org.boss == 0
    assert org.children[0] == [1, 2, 3] and org.children[1] == [4, 5, 6]
    assert org.level[12] == 2 and org.depth() == 2
    assert all(len(c) <= 3 for c in org.children.values())


@given(orgs, st.data())
def test_ordinary_agents_cannot_reach_outside_their_group(org: Organisation, data: st.DataObject) -> None:
    a = data.draw(st.integers(0, org.n - 1))
    b = data.draw(st.integers(0, org.n - 1))
    channel = data.draw(st.sampled_from(CHANNELS))
    allowed = org.route_error(a, b, channel) is None
    if allowed and channel == INTRA and org.role(a) == "agent":
        assert org.member_group[a] in (org.member_group[b], org.admin_group[b])
    if allowed and channel == ADMIN:
        assert org.is_admin(a) and org.is_admin(b)
    if allowed and channel == HIERARCHY:
        assert org.parent[a] == b or org.parent[b] == a
    if not allowed:
        with pytest.raises(RouteError, match="disallowed route"):
            org.check_route(a, b, channel)
    assert org.route_error(a, a, channel) is not None


@given(orgs)
def test_peers_are_exactly_the_allowed_routes(org: Organisation) -> None:
    for channel in CHANNELS:
        for a in range(org.n):
            peers = set(org.peers(a, channel))
            allowed = {b for b in range(org.n) if org.route_error(a, b, channel) is None}
            assert peers == allowed


def test_two_tier_members_of_different_groups_cannot_talk() -> None:
    org = Organisation.two_tier(10, 5)
    with pytest.raises(RouteError, match="not in the same group"):
        org.check_route(1, 6, INTRA)
    with pytest.raises(RouteError, match="only between admins"):
        org.check_route(1, 5, ADMIN)
    org.check_route(0, 5, ADMIN)


def test_recruitment_respects_the_fanout_cap() -> None:
    org = Organisation.hierarchy(1, 2)
    a, b = org.recruit(0), org.recruit(0)
    assert org.children[0] == [a, b] and org.level[a] == 1
    with pytest.raises(RecruitError, match="fan-out cap of 2"):
        org.recruit(0)
    c = org.recruit(a)
    assert org.is_admin(a) and org.member_group[c] == org.admin_group[a]
    org.check_route(c, a, INTRA)
    with pytest.raises(RouteError):
        org.check_route(c, b, INTRA)


@pytest.mark.parametrize("bad", [0, -3, "7", 2.5])
def test_builders_reject_impossible_sizes(bad: object) -> None:
    with pytest.raises(OrganisationError, match="agents must be an integer"):
        Organisation.flat(bad)  # type: ignore[arg-type]
    with pytest.raises(OrganisationError, match="fanout"):
        Organisation.hierarchy(10, 1)


@given(orgs)
def test_networkx_round_trip(org: Organisation) -> None:
    g = org.to_networkx()
    assert g.number_of_nodes() == org.n
    back = Organisation.from_networkx(g)
    assert back.same_structure(org)
    assert back.kind == org.kind


def test_edges_carry_their_channel() -> None:
    g = Organisation.two_tier(6, 3).to_networkx()
    assert g.edges[0, 3]["channel"] == ADMIN
    assert g.edges[3, 4]["channel"] in (INTRA, HIERARCHY)
    assert not g.has_edge(1, 4)


def test_from_a_users_grouped_graph_respects_its_edges() -> None:
    g = nx.Graph()
    g.add_node("ceo", role="boss")
    for team in ("red", "blue"):
        g.add_node(f"{team}-lead", group=team, role="admin")
        for i in range(3):
            g.add_node(f"{team}-{i}", group=team)
            g.add_edge(f"{team}-lead", f"{team}-{i}")  # a sparse group: a star around its lead
        g.add_edge("ceo", f"{team}-lead")
    g.add_edge("red-lead", "blue-lead")
    org = Organisation.from_networkx(g)
    idx = {name: i for i, name in enumerate(org.names)}
    assert org.kind == "graph" and org.boss == idx["ceo"] and len(org.groups) == 2
    assert org.role(idx["red-lead"]) == "admin" and org.level[idx["red-0"]] == 2
    org.check_route(idx["red-0"], idx["red-lead"], INTRA)
    org.check_route(idx["red-lead"], idx["blue-lead"], ADMIN)
    org.check_route(idx["ceo"], idx["blue-lead"], HIERARCHY)
    with pytest.raises(RouteError, match="no edge"):  # same group, but the graph has no edge
        org.check_route(idx["red-0"], idx["red-1"], INTRA)
    with pytest.raises(RouteError, match="is on channel 'admin', not 'intra'"):
        org.check_route(idx["red-lead"], idx["blue-lead"], INTRA)
    assert sorted(org.group_peers(idx["red-lead"])) == sorted(idx[f"red-{i}"] for i in range(3))
    assert set(org.to_networkx().nodes) == set(g.nodes)
    assert Organisation.from_networkx(org.to_networkx()).same_structure(org)


def test_a_tree_is_a_graph_and_parents_make_it_a_hierarchy() -> None:
    tree = nx.balanced_tree(2, 3)
    plain = Organisation.from_networkx(tree)
    assert plain.kind == "graph" and plain.n == 15 and plain.boss is None
    plain.check_route(1, 3, INTRA)
    nx.set_node_attributes(tree, {v: (v - 1) // 2 if v else None for v in tree}, "parent")
    org = Organisation.from_networkx(tree)
    assert org.boss == 0 and org.depth() == 3
    org.check_route(1, 3, HIERARCHY)
    with pytest.raises(RouteError):  # siblings share a group, but the tree has no edge between them
        org.check_route(3, 4, INTRA)


def test_graphs_without_nodes_or_edges_are_refused() -> None:
    with pytest.raises(OrganisationError, match="no nodes"):
        Organisation.from_networkx(nx.Graph())
    with pytest.raises(OrganisationError, match="no edges"):
        Organisation.from_networkx(nx.empty_graph(5))
    with pytest.raises(OrganisationError, match="self-loop at node 2"):
        Organisation.from_networkx(nx.Graph([(1, 2), (2, 2)]))
    Organisation.from_networkx(nx.cycle_graph(5)).check_route(0, 4, INTRA)
