"""An organisation as a networkx graph: a node per agent, an edge per pair that may talk."""

from __future__ import annotations

from typing import TYPE_CHECKING

import networkx as nx

from megaactors.core.messages import ADMIN, HIERARCHY, INTRA

if TYPE_CHECKING:
    from megaactors.core.organisation import Organisation

__all__ = ["to_networkx"]


def to_networkx(org: Organisation) -> nx.Graph:
    """An undirected graph: a node per agent (``role``, ``group``, ``admin_of``,
    ``level``, ``parent``) and an edge per pair that may talk (``channel`` is the
    tree, admin or intra-group channel, in that order of preference; ``channels``
    lists all of them). Intended for drawing and analysis of small and medium
    organisations: a group of size s contributes s(s-1)/2 edges."""
    g = nx.Graph(kind=org.kind, fanout=org.fanout)
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
        key = (a, b) if a < b else (b, a)
        edges.setdefault(key, []).append(channel)

    for a in range(org.n):
        if org.parent[a] >= 0:
            link(org.parent[a], a, HIERARCHY)
    admins = org.admins
    for i, a in enumerate(admins):
        for b in admins[i + 1 :]:
            link(a, b, ADMIN)
    for members in org.groups:
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                link(a, b, INTRA)
    for (a, b), channels in edges.items():
        g.add_edge(names[a], names[b], channel=channels[0], channels=tuple(channels))
    return g
