"""Organisations as graphs: networkx out (:func:`to_networkx`) and any graph in
(:func:`from_networkx`, :func:`from_edges`).

A graph read in is a communication graph: an edge is the permission to message
(one way in a directed graph), isolated nodes are agents nobody can reach, and
optional node attributes refine it:

* ``parent`` — the node it reports to: levels (depth below a root) and, without
  groups, the groups of a recruitment tree (each node with children administers
  itself and its children);
* ``group`` — nodes with the same value form a group; its admin is the node whose
  ``role`` is ``admin``, else its first node; without parents, admins report to
  the boss and members to their admin;
* ``role`` — ``boss`` (at most one) or ``admin``; without roles, the root of the
  parents' tree, when there is one, is the boss.

The edges decide who may message whom in every case. Each edge has one channel,
the one a chat round uses on it: its ``channel`` attribute (or the first of
``channels``), else the intra-group channel inside a group, the admin channel
between admins, the hierarchy channel between a node and its parent, and the
intra-group channel otherwise. Along an edge the channels its two ends' roles allow
(as in a built-in organisation) may be used too. A graph whose edges are
exactly the pairs its attributes' organisation lets talk (what :func:`to_networkx`
writes) comes back as that organisation, of its ``kind``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from itertools import combinations
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from megaactors.core.graph import CHANNEL_CODES, CommunicationGraph
from megaactors.core.messages import ADMIN, CHANNELS, HIERARCHY, INTRA
from megaactors.errors import OrganisationError

if TYPE_CHECKING:
    from megaactors.core.organisation import Organisation

__all__ = ["from_edges", "from_networkx", "to_networkx"]

_INTRA, _ADMIN, _HIERARCHY = CHANNEL_CODES[INTRA], CHANNEL_CODES[ADMIN], CHANNEL_CODES[HIERARCHY]


def to_networkx(org: Organisation) -> nx.Graph:
    """A graph of who may talk to whom: a node per agent (``role``, ``group``,
    ``admin_of``, ``level``, ``parent``) and an edge per pair that may talk
    (``channel`` is the tree, admin or intra-group channel, in that order of
    preference; ``channels`` lists all of them). Undirected, except for a directed
    communication graph (a :class:`~networkx.DiGraph`, one edge per permission).
    Intended for drawing and analysis of small and medium organisations: a group of
    size s contributes s(s-1)/2 edges."""
    directed = org.graph is not None and org.graph.directed
    g: nx.Graph = (nx.DiGraph if directed else nx.Graph)(kind=org.kind, fanout=org.fanout)
    names = org.names or list(range(org.n))
    for a in range(org.n):
        parent = org.parent[a]
        g.add_node(
            names[a],
            role=org.role(a),
            group=org.member_group[a],
            admin_of=org.admin_group[a],
            level=org.level[a],
            parent=names[parent] if parent >= 0 else None,
        )
    edges: dict[tuple[int, int], list[str]] = {}

    def link(a: int, b: int, channel: str) -> None:
        key = (a, b) if directed or a < b else (b, a)
        edges.setdefault(key, []).append(channel)

    if org.graph is not None:
        src, dst, chan = org.graph.edges()
        for a, b, c in zip(src.tolist(), dst.tolist(), chan.tolist(), strict=True):
            if directed or a < b:
                link(a, b, CHANNELS[c])
        preference = {HIERARCHY: 0, ADMIN: 1, INTRA: 2}
        for key in edges:
            edges[key].sort(key=preference.__getitem__)
    else:
        for a in range(org.n):
            if org.parent[a] >= 0:
                link(org.parent[a], a, HIERARCHY)
        for a, b in combinations(org.admins, 2):
            link(a, b, ADMIN)
        for members in org.groups:
            for a, b in combinations(members, 2):
                link(a, b, INTRA)
    for (a, b), channels in edges.items():
        g.add_edge(names[a], names[b], channel=channels[0], channels=tuple(channels))
    return g


def from_networkx(graph: nx.Graph, fanout: int | None = None) -> Organisation:
    """An organisation from any networkx graph (see the module docstring)."""
    if graph.number_of_nodes() == 0:
        raise OrganisationError("the graph has no nodes")
    nodes = list(graph.nodes)
    index = {v: i for i, v in enumerate(nodes)}
    src, dst, chan = [], [], []
    for u, v, data in graph.edges(data=True):
        channels = _edge_channels(u, v, data)
        for c in channels or (-1,):
            src.append(index[u])
            dst.append(index[v])
            chan.append(c)
    kind = graph.graph.get("kind", "custom")
    return from_edges(
        nodes,
        np.array(src, dtype=np.int64),
        np.array(dst, dtype=np.int64),
        np.array(chan, dtype=np.int64),
        directed=graph.is_directed(),
        attrs=[graph.nodes[v] for v in nodes],
        kind=kind if isinstance(kind, str) else "custom",
        fanout=fanout if fanout is not None else graph.graph.get("fanout"),
    )


def from_edges(
    names: Sequence[Hashable],
    sources: np.ndarray,
    targets: np.ndarray,
    channels: np.ndarray | None = None,
    *,
    directed: bool,
    attrs: Sequence[Mapping[str, Any]] | None = None,
    kind: str = "custom",
    fanout: int | None = None,
) -> Organisation:
    """An organisation from edge arrays over ``len(names)`` agents (``channels``:
    codes of :data:`~megaactors.core.graph.CHANNEL_CODES`, ``-1`` where the edge's
    channel is to be derived; ``attrs``: each node's attributes)."""
    from megaactors.core.organisation import KINDS, Organisation

    n = len(names)
    if n == 0:
        raise OrganisationError("the graph has no nodes")
    org = _structure(Organisation, list(names), attrs)
    org.fanout = fanout
    chan = np.full(len(sources), -1, dtype=np.int64) if channels is None else np.asarray(channels, dtype=np.int64)
    described = attrs is not None and any(key in a for a in attrs for key in ("parent", "group", "role"))
    if described and _routes_exactly(org, sources, targets, directed):
        org.kind = kind if kind in KINDS and kind != "graph" else "custom"
        return org
    if len(sources) == 0:
        raise OrganisationError(
            f"the graph has {n:,} node(s) and no edges: an edge is the permission to message, "
            "so no agent could message another"
        )
    derive = chan < 0
    if derive.any():
        chan = chan.copy()
        chan[derive] = _derived_channels(org, sources[derive], targets[derive])
    org.graph = CommunicationGraph(n, sources, targets, chan, directed=directed, names=names)
    org.kind = "graph"
    return org


# ---------------------------------------------------------------------- attributes


def _edge_channels(u: Any, v: Any, data: Mapping[str, Any]) -> list[int]:
    """Channel codes an edge's ``channel``/``channels`` attributes name (empty: derive)."""
    named: list[Any] = []
    if "channels" in data:
        value = data["channels"]
        named = list(value) if isinstance(value, (list, tuple)) else str(value).replace(",", " ").split()
    elif "channel" in data:
        named = [data["channel"]]
    codes = []
    for name in named:
        if name not in CHANNEL_CODES:
            raise OrganisationError(f"edge {u!r}-{v!r} names channel {name!r}; channels are {', '.join(CHANNELS)}")
        codes.append(CHANNEL_CODES[name])
    return codes


def _structure(cls: type[Organisation], nodes: list[Hashable], attrs: Sequence[Mapping[str, Any]] | None) -> Any:
    """Groups, admins, boss, parents and levels from the nodes' attributes."""
    n = len(nodes)
    org = cls("custom")
    org.names = nodes
    org.parent, org.level = [-1] * n, [0] * n
    org.member_group, org.admin_group = [-1] * n, [-1] * n
    if attrs is None:
        return org
    index = {v: i for i, v in enumerate(nodes)}
    bosses = [i for i, a in enumerate(attrs) if a.get("role") == "boss"]
    if len(bosses) > 1:
        raise OrganisationError(f"more than one node has role 'boss': {[nodes[i] for i in bosses[:5]]}")
    has_parents = any(a.get("parent") is not None for a in attrs)
    if has_parents:
        _set_parents(org, nodes, index, [a.get("parent") for a in attrs])
    if all("group" in a and "admin_of" in a for a in attrs):  # as to_networkx writes them
        _restore_groups(org, attrs)
    elif any(a.get("group") is not None for a in attrs):
        _set_groups(org, attrs, bosses, with_parents=has_parents)
    elif has_parents:  # a recruitment tree: each node with children administers them
        for i in sorted(org.children):
            gid = len(org.groups)
            org.groups.append([i, *org.children[i]])
            org.admin_group[i] = gid
            for c in org.children[i]:
                org.member_group[c] = gid
    roots = [i for i in range(n) if org.parent[i] < 0 and org.children.get(i)]
    inferred = roots[0] if has_parents and len(roots) == 1 and not any("role" in a for a in attrs) else None
    org.boss = bosses[0] if bosses else inferred
    return org


def _set_parents(org: Any, nodes: list[Hashable], index: dict[Hashable, int], parents: list[Any]) -> None:
    for i, p in enumerate(parents):
        if p is not None and p not in index:
            raise OrganisationError(f"node {nodes[i]!r} names parent {p!r}, which is not in the graph")
        if p is not None:
            pi = index[p]
            org.parent[i] = pi
            org.children.setdefault(pi, []).append(i)
    # levels, parents before children: walk down from the roots
    stack = [i for i in range(len(nodes)) if org.parent[i] < 0]
    seen = 0
    while stack:
        i = stack.pop()
        seen += 1
        for c in org.children.get(i, ()):
            org.level[c] = org.level[i] + 1
            stack.append(c)
    if seen != len(nodes):
        raise OrganisationError("the 'parent' attributes contain a cycle")


def _restore_groups(org: Any, attrs: Sequence[Mapping[str, Any]]) -> None:
    """Groups exactly as ``group``/``admin_of`` say (what :func:`to_networkx` writes)."""
    try:
        org.member_group = [int(a["group"]) for a in attrs]
        org.admin_group = [int(a["admin_of"]) for a in attrs]
    except (TypeError, ValueError) as exc:
        raise OrganisationError(f"'group' and 'admin_of' attributes must be group numbers: {exc}") from None
    org.groups = [[] for _ in range(1 + max(max(org.member_group), max(org.admin_group)))]
    for i, g in enumerate(org.admin_group):
        if g >= 0:
            if org.groups[g]:
                raise OrganisationError(f"group {g} has more than one admin")
            org.groups[g].append(i)
    for i, g in enumerate(org.member_group):
        if g >= 0 and org.admin_group[i] != g:
            org.groups[g].append(i)
    empty = [g for g, members in enumerate(org.groups) if members and org.admin_group[members[0]] != g]
    if empty:
        raise OrganisationError(f"group {empty[0]} has members but no node with 'admin_of' = {empty[0]}")


def _set_groups(org: Any, attrs: Sequence[Mapping[str, Any]], bosses: list[int], *, with_parents: bool) -> None:
    """Groups from ``group`` keys, each led by its ``role == "admin"`` node (else its
    first); without parents, admins report to the boss and members to their admin."""
    keys: dict[Any, list[int]] = {}
    for i, a in enumerate(attrs):
        if a.get("group") is not None and i not in bosses:
            keys.setdefault(a["group"], []).append(i)
    boss = bosses[0] if bosses else None
    for key, members in keys.items():
        admins = [i for i in members if attrs[i].get("role") == "admin"]
        if len(admins) > 1:
            raise OrganisationError(f"group {key!r} has {len(admins)} admins; expected one")
        admin = admins[0] if admins else members[0]
        gid = len(org.groups)
        ordered = [admin] + [i for i in members if i != admin]
        org.groups.append(ordered)
        org.admin_group[admin] = gid
        for i in ordered:
            org.member_group[i] = gid
        if with_parents:
            continue
        if boss is not None:
            org.parent[admin] = boss
            org.children.setdefault(boss, []).append(admin)
        base = 1 if boss is not None else 0
        org.level[admin] = base
        for i in ordered[1:]:
            org.parent[i] = admin
            org.level[i] = base + 1
            org.children.setdefault(admin, []).append(i)


# ---------------------------------------------------------------------- edges


def _derived_channels(org: Any, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Intra-group inside a group, admin between admins, hierarchy between a node and
    its parent, intra-group otherwise (the chat round's order on built-in organisations)."""
    parent = np.asarray(org.parent, dtype=np.int64)
    mg = np.asarray(org.member_group, dtype=np.int64)
    ag = np.asarray(org.admin_group, dtype=np.int64)
    tree = (parent[dst] == src) | (parent[src] == dst)
    share = ((mg[src] >= 0) & ((mg[src] == mg[dst]) | (mg[src] == ag[dst]))) | (
        (ag[src] >= 0) & ((ag[src] == mg[dst]) | (ag[src] == ag[dst]))
    )
    admins = (ag[src] >= 0) & (ag[dst] >= 0)
    return np.where(share, _INTRA, np.where(admins, _ADMIN, np.where(tree, _HIERARCHY, _INTRA)))


def _routes_exactly(org: Any, src: np.ndarray, dst: np.ndarray, directed: bool) -> bool:
    """True if the pairs the edges link are exactly the pairs ``org`` lets talk."""
    n = org.n
    keys = np.unique(np.minimum(src, dst) * n + np.maximum(src, dst))
    if directed:
        forward = np.unique(src * n + dst)
        if not np.array_equal(forward, np.unique(dst * n + src)):
            return False
    limit = len(keys)
    pairs: set[int] = set()

    def add(a: int, b: int) -> bool:
        pairs.add(a * n + b if a < b else b * n + a)
        return len(pairs) <= limit

    for a in range(n):
        if org.parent[a] >= 0 and not add(org.parent[a], a):
            return False
    for members in (org.admins, *org.groups):
        for a, b in combinations(members, 2):
            if not add(a, b):
                return False
    return len(pairs) == limit and np.array_equal(np.fromiter(sorted(pairs), dtype=np.int64, count=limit), keys)
