"""Organisations: groups, admins, a boss, hierarchy levels and the routing rules.

Agents are numbered ``0 .. n-1``. Each group has exactly one admin. An agent is a
*member* of at most one group and the *admin* of at most one group (in a hierarchy an
agent that recruited becomes the admin of a sub-group while staying a member of its
recruiter's group). Tree edges (``parent``) link a boss to admins and admins to the
agents they recruited.

Routing (MegaAgent §2.2.2, enforced here although the reference code does not):

* ``intra``: sender and recipient share a group (as members or as its admin);
* ``admin``: both administer a group;
* ``hierarchy``: one is the other's parent.

Ordinary agents therefore cannot reach anyone outside their group.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable
from typing import Any

import networkx as nx

from megaactors.core.messages import ADMIN, CHANNELS, HIERARCHY, INTRA
from megaactors.errors import OrganisationError, RecruitError, RouteError

__all__ = ["KINDS", "Organisation", "OrganisationError", "RecruitError", "RouteError"]

KINDS = ("flat", "star", "two-tier", "hierarchy", "custom")


def _positive(name: str, value: int, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise OrganisationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class Organisation:
    """Who may talk to whom: groups, admins, boss and tree edges."""

    def __init__(self, kind: str = "custom", fanout: int | None = None) -> None:
        if kind not in KINDS:
            raise OrganisationError(f"unknown organisation kind {kind!r}; expected one of {KINDS}")
        self.kind = kind
        self.fanout = fanout
        """Cap on agents recruited per agent (``None``: no cap)."""
        self.member_group: list[int] = []
        self.admin_group: list[int] = []
        self.parent: list[int] = []
        self.level: list[int] = []
        self.groups: list[list[int]] = []
        """Members of each group, its admin first."""
        self.children: dict[int, list[int]] = {}
        self.boss: int | None = None
        self.names: list[Hashable] | None = None
        """Original node names when built from a user's graph."""
        self._admins: list[int] | None = None

    # ------------------------------------------------------------------ building

    @property
    def n(self) -> int:
        """Number of agents."""
        return len(self.parent)

    def add_agent(self, parent: int = -1, member_group: int = -1) -> int:
        """Append an agent; return its id."""
        aid = len(self.parent)
        self.parent.append(parent)
        self.level.append(self.level[parent] + 1 if parent >= 0 else 0)
        self.member_group.append(member_group)
        self.admin_group.append(-1)
        if parent >= 0:
            self.children.setdefault(parent, []).append(aid)
        if member_group >= 0:
            self.groups[member_group].append(aid)
        return aid

    def add_group(self, admin: int) -> int:
        """Make ``admin`` the admin of a new group; return the group id."""
        if self.admin_group[admin] >= 0:
            raise OrganisationError(f"agent {admin} already administers group {self.admin_group[admin]}")
        gid = len(self.groups)
        self.groups.append([admin])
        self.admin_group[admin] = gid
        if self.member_group[admin] < 0:
            self.member_group[admin] = gid
        return gid

    def recruit(self, recruiter: int) -> int:
        """Create an agent recruited by ``recruiter`` at run time (MegaAgent §2.1).

        The recruiter becomes the admin of a sub-group if it is not one yet, and the
        recruit joins that group one level below it.
        """
        self._check_agent(recruiter)
        taken = len(self.children.get(recruiter, ()))
        if self.fanout is not None and taken >= self.fanout:
            raise RecruitError(f"agent {recruiter} cannot recruit: fan-out cap of {self.fanout} reached")
        gid = self.admin_group[recruiter]
        if gid < 0:
            gid = len(self.groups)
            self.groups.append([recruiter])
            self.admin_group[recruiter] = gid
        return self.add_agent(parent=recruiter, member_group=gid)

    @classmethod
    def flat(cls, n: int) -> Organisation:
        """One group of ``n`` agents where everyone may talk to everyone."""
        _positive("agents", n)
        org = cls("flat")
        org.groups.append([])
        for _ in range(n):
            org.add_agent(member_group=0)
        org.admin_group[0] = 0
        return org

    @classmethod
    def star(cls, n: int) -> Organisation:
        """A hub (agent 0) and ``n - 1`` spokes that talk only to the hub."""
        _positive("agents", n)
        org = cls("star")
        org.add_agent()
        org.boss = 0
        for _ in range(n - 1):
            org.add_agent(parent=0)
        return org

    @classmethod
    def two_tier(cls, n: int, group_size: int, boss: bool = False) -> Organisation:
        """Groups of ``group_size`` (the last may be smaller), the first member of each
        the admin; admins talk on the admin channel; optionally a boss above them
        (agent 0, in no group)."""
        _positive("agents", n)
        _positive("group size", group_size)
        org = cls("two-tier")
        top = -1
        workers = n
        if boss:
            if n < 2:
                raise OrganisationError("a two-tier organisation with a boss needs at least 2 agents")
            top = org.add_agent()
            org.boss = top
            workers = n - 1
        for start in range(0, workers, group_size):
            size = min(group_size, workers - start)
            admin = org.add_agent(parent=top)
            gid = org.add_group(admin)
            for _ in range(size - 1):
                org.add_agent(parent=admin, member_group=gid)
        return org

    @classmethod
    def hierarchy(cls, n: int, fanout: int) -> Organisation:
        """A complete ``fanout``-ary recruitment tree of ``n`` agents filled level by
        level: agent 0 is the boss, every agent with recruits administers the group
        made of itself and its recruits."""
        _positive("agents", n)
        _positive("fanout", fanout, 2)
        org = cls("hierarchy", fanout=fanout)
        org.add_agent()
        org.boss = 0
        for _ in range(1, n):
            org.recruit((org.n - 1) // fanout)
        return org

    @classmethod
    def build(cls, topology: str, n: int, group_size: int | None = None, fanout: int | None = None) -> Organisation:
        """Build one of the built-in topologies by name."""
        if topology == "flat":
            return cls.flat(n)
        if topology == "star":
            return cls.star(n)
        if topology == "two-tier":
            if group_size is None:
                raise OrganisationError("two-tier needs a group size")
            return cls.two_tier(n, group_size)
        if topology == "hierarchy":
            if fanout is None:
                raise OrganisationError("hierarchy needs a fanout")
            return cls.hierarchy(n, fanout)
        raise OrganisationError(f"unknown topology {topology!r}; expected one of flat, star, two-tier, hierarchy")

    # ------------------------------------------------------------------ queries

    def _check_agent(self, a: int) -> None:
        if not isinstance(a, int) or not 0 <= a < len(self.parent):
            raise OrganisationError(f"no agent {a!r} in an organisation of {len(self.parent)} agents")

    def is_admin(self, a: int) -> bool:
        """True if ``a`` administers a group."""
        return self.admin_group[a] >= 0

    def role(self, a: int) -> str:
        """``boss``, ``admin`` or ``agent``."""
        if a == self.boss:
            return "boss"
        return "admin" if self.admin_group[a] >= 0 else "agent"

    @property
    def admins(self) -> list[int]:
        """Admins of every group, in group order."""
        if self._admins is None or len(self._admins) != len(self.groups):
            self._admins = [g[0] for g in self.groups]
        return self._admins

    def group_peers(self, a: int) -> list[int]:
        """Everyone ``a`` may reach on the intra-group channel."""
        mg, ag = self.member_group[a], self.admin_group[a]
        peers = _without(self.groups[mg], a) if mg >= 0 else []
        if ag >= 0 and ag != mg:
            peers.extend(_without(self.groups[ag], a))
        return peers

    def admin_peers(self, a: int) -> list[int]:
        """Everyone ``a`` may reach on the admin channel."""
        if self.admin_group[a] < 0:
            return []
        return _without(self.admins, a)

    def tree_neighbours(self, a: int) -> list[int]:
        """Parent (if any) then recruits of ``a``: the hierarchy channel."""
        up = [self.parent[a]] if self.parent[a] >= 0 else []
        return up + self.children.get(a, [])

    def peers(self, a: int, channel: str) -> list[int]:
        """Everyone ``a`` may reach on ``channel``."""
        if channel == INTRA:
            return self.group_peers(a)
        if channel == ADMIN:
            return self.admin_peers(a)
        if channel == HIERARCHY:
            return self.tree_neighbours(a)
        raise OrganisationError(f"unknown channel {channel!r}; expected one of {CHANNELS}")

    def route_error(self, sender: int, recipient: int, channel: str) -> str | None:
        """Why ``sender`` may not send to ``recipient`` on ``channel``, or ``None``."""
        n = len(self.parent)
        if not (isinstance(sender, int) and 0 <= sender < n):
            return f"unknown sender {sender!r}"
        if not (isinstance(recipient, int) and 0 <= recipient < n):
            return f"unknown recipient {recipient!r}"
        if sender == recipient:
            return f"agent {sender} cannot send to itself"
        if channel == INTRA:
            groups = {self.member_group[sender], self.admin_group[sender]} - {-1}
            if self.member_group[recipient] in groups or self.admin_group[recipient] in groups:
                return None
            return (
                f"{self.role(sender)} {sender} may not message {self.role(recipient)} {recipient}: "
                f"not in the same group (ordinary agents cannot talk outside their group)"
            )
        if channel == ADMIN:
            if self.admin_group[sender] >= 0 and self.admin_group[recipient] >= 0:
                return None
            return (
                f"admin channel is only between admins: {sender} is {self.role(sender)}, "
                f"{recipient} is {self.role(recipient)}"
            )
        if channel == HIERARCHY:
            if self.parent[recipient] == sender or self.parent[sender] == recipient:
                return None
            return f"agents {sender} and {recipient} are not linked in the hierarchy"
        return f"unknown channel {channel!r}"

    def check_route(self, sender: int, recipient: int, channel: str) -> None:
        """Raise :class:`RouteError` unless the send is allowed."""
        reason = self.route_error(sender, recipient, channel)
        if reason is not None:
            raise RouteError(f"disallowed route on channel {channel!r}: {reason}")

    def depth(self) -> int:
        """Number of hierarchy levels below the top (0 for a flat organisation)."""
        return max(self.level, default=0)

    def summary(self) -> dict[str, Any]:
        """Counts that describe the organisation."""
        return {
            "kind": self.kind,
            "agents": self.n,
            "groups": len(self.groups),
            "admins": sum(1 for g in self.admin_group if g >= 0),
            "levels": self.depth() + 1,
            "boss": self.boss,
        }

    def __repr__(self) -> str:
        s = self.summary()
        return f"Organisation({s['kind']}, agents={s['agents']}, groups={s['groups']}, levels={s['levels']})"

    def same_structure(self, other: Organisation) -> bool:
        """True if both organisations route identically."""
        return (
            self.member_group == other.member_group
            and self.admin_group == other.admin_group
            and self.parent == other.parent
            and self.boss == other.boss
        )

    # ------------------------------------------------------------------ networkx

    def to_networkx(self) -> nx.Graph:
        """An undirected graph of who may talk to whom (see :func:`megaactors.core.org_graph.to_networkx`)."""
        from megaactors.core.org_graph import to_networkx

        return to_networkx(self)

    @classmethod
    def from_networkx(cls, graph: nx.Graph, fanout: int | None = None) -> Organisation:
        """Build an organisation from a user's graph.

        * Every node has a ``parent`` attribute (``None`` at the root): the tree it
          describes (as :meth:`to_networkx` writes it);
        * else every node but the boss has a ``group`` attribute: those groups, the
          node with ``role == "admin"`` (or the first) as each group's admin and the
          node with ``role == "boss"`` (optional) above the admins;
        * else the graph is a tree: a hierarchy rooted at the node with
          ``role == "boss"``, or at the graph's centre.

        Node names are kept in ``names`` and restored by :meth:`to_networkx`.
        """
        if graph.number_of_nodes() == 0:
            raise OrganisationError("the graph has no nodes")
        nodes = list(graph.nodes)
        attrs = graph.nodes
        kind = graph.graph.get("kind", "custom")
        if kind not in KINDS:
            kind = "custom"
        fanout = fanout if fanout is not None else graph.graph.get("fanout")
        if all("parent" in attrs[v] for v in nodes):
            org = cls._from_parents(nodes, {v: attrs[v]["parent"] for v in nodes}, kind, fanout)
            cls._restore_groups(org, nodes, attrs)
        elif any("group" in attrs[v] for v in nodes):
            org = cls._from_groups(nodes, attrs)
        else:
            undirected = graph.to_undirected(as_view=True) if graph.is_directed() else graph
            if not nx.is_tree(undirected):
                raise OrganisationError(
                    "cannot read an organisation from this graph: give every node a 'group' "
                    "attribute, or a 'parent' attribute, or pass a tree"
                )
            bosses = [v for v in nodes if attrs[v].get("role") == "boss"]
            if graph.is_directed() and not bosses:
                bosses = [v for v in nodes if graph.in_degree(v) == 0]
            root = bosses[0] if bosses else nx.center(undirected)[0]
            parents: dict[Hashable, Hashable | None] = {root: None}
            parents.update({child: par for par, child in nx.bfs_edges(undirected, root)})
            org = cls._from_parents(nodes, parents, "hierarchy", fanout)
        org.names = nodes
        return org

    @classmethod
    def _from_parents(
        cls, nodes: list[Hashable], parents: dict[Hashable, Hashable | None], kind: str, fanout: int | None
    ) -> Organisation:
        index = {v: i for i, v in enumerate(nodes)}
        roots = [v for v in nodes if parents[v] is None]
        for v in nodes:
            p = parents[v]
            if p is not None and p not in index:
                raise OrganisationError(f"node {v!r} names parent {p!r}, which is not in the graph")
        # parents before children: walk from the roots
        order: list[Hashable] = []
        kids: dict[Hashable, list[Hashable]] = {}
        for v in nodes:
            if parents[v] is not None:
                kids.setdefault(parents[v], []).append(v)
        stack = list(reversed(roots))
        while stack:
            v = stack.pop()
            order.append(v)
            stack.extend(reversed(kids.get(v, [])))
        if len(order) != len(nodes):
            raise OrganisationError("the 'parent' attributes contain a cycle")
        org = cls(kind, fanout=None)
        org.parent = [-1] * len(nodes)
        org.level = [0] * len(nodes)
        org.member_group = [-1] * len(nodes)
        org.admin_group = [-1] * len(nodes)
        for v in order:
            i, p = index[v], parents[v]
            if p is not None:
                pi = index[p]
                org.parent[i] = pi
                org.level[i] = org.level[pi] + 1
                org.children.setdefault(pi, []).append(i)
        for i in sorted(org.children):
            gid = len(org.groups)
            org.groups.append([i, *org.children[i]])
            org.admin_group[i] = gid
            for c in org.children[i]:
                org.member_group[c] = gid
        if len(roots) == 1:
            org.boss = index[roots[0]]
        org.fanout = fanout
        return org

    @staticmethod
    def _restore_groups(org: Organisation, nodes: list[Hashable], attrs: Any) -> None:
        """Use explicit ``group``/``admin_of``/``role`` attributes written by :meth:`to_networkx`."""
        if not all("group" in attrs[v] and "admin_of" in attrs[v] for v in nodes):
            return
        count = 1 + max(max(attrs[v]["group"], attrs[v]["admin_of"]) for v in nodes)
        org.groups = [[] for _ in range(count)]
        org._admins = None
        org.member_group = [int(attrs[v]["group"]) for v in nodes]
        org.admin_group = [int(attrs[v]["admin_of"]) for v in nodes]
        for i in range(len(nodes)):
            if org.admin_group[i] >= 0:
                org.groups[org.admin_group[i]].insert(0, i)
        for i in range(len(nodes)):
            g = org.member_group[i]
            if g >= 0 and org.admin_group[i] != g:
                org.groups[g].append(i)
        bosses = [i for i, v in enumerate(nodes) if attrs[v].get("role") == "boss"]
        org.boss = bosses[0] if bosses else None

    @classmethod
    def _from_groups(cls, nodes: list[Hashable], attrs: Any) -> Organisation:
        bosses = [v for v in nodes if attrs[v].get("role") == "boss"]
        if len(bosses) > 1:
            raise OrganisationError(f"more than one node has role 'boss': {bosses[:5]}")
        missing = [v for v in nodes if "group" not in attrs[v] and v not in bosses]
        if missing:
            raise OrganisationError(f"nodes without a 'group' attribute: {missing[:5]}")
        keys: dict[Hashable, list[Hashable]] = {}
        for v in nodes:
            if v not in bosses:
                keys.setdefault(attrs[v]["group"], []).append(v)
        index = {v: i for i, v in enumerate(nodes)}
        org = cls("custom")
        n = len(nodes)
        org.parent, org.level = [-1] * n, [0] * n
        org.member_group, org.admin_group = [-1] * n, [-1] * n
        boss = index[bosses[0]] if bosses else None
        org.boss = boss
        for members in keys.values():
            admins = [v for v in members if attrs[v].get("role") == "admin"]
            if len(admins) > 1:
                raise OrganisationError(f"group {attrs[members[0]]['group']!r} has {len(admins)} admins; expected one")
            admin = index[admins[0] if admins else members[0]]
            gid = len(org.groups)
            ordered = [admin] + [index[v] for v in members if index[v] != admin]
            org.groups.append(ordered)
            org.admin_group[admin] = gid
            for i in ordered:
                org.member_group[i] = gid
            if boss is not None:
                org.parent[admin] = boss
                org.children.setdefault(boss, []).append(admin)
            base = 1 if boss is not None else 0
            org.level[admin] = base
            for i in ordered[1:]:
                org.parent[i] = admin
                org.level[i] = base + 1
                org.children.setdefault(admin, []).append(i)
        return org


def _without(members: list[int], a: int) -> list[int]:
    """``members`` without ``a`` (copied by slices, not element by element). Where
    ``a`` sits is guessed first from consecutive or sorted ids, then searched."""
    i = a - members[0] if members else -1
    if not 0 <= i < len(members) or members[i] != a:
        i = bisect_left(members, a)
        if i == len(members) or members[i] != a:
            try:
                i = members.index(a)
            except ValueError:
                return list(members)
    return members[:i] + members[i + 1 :]
