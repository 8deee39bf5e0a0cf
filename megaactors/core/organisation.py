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

A *graph* organisation (kind ``graph``: any communication graph, read from a file,
generated or given as networkx, see :mod:`megaactors.core.org_graph`) routes by its
edges instead: ``a`` may message ``b`` on a channel only along an edge ``a → b`` on
that channel; groups, admins, boss and levels, when the graph gives them, only name
roles.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from megaactors.core.graph import CommunicationGraph
from megaactors.core.messages import ADMIN, CHANNELS, HIERARCHY, INTRA
from megaactors.core.peer_view import member_position, without
from megaactors.errors import OrganisationError, RecruitError, RouteError

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["GRAPH_PREFIX", "KINDS", "Organisation", "OrganisationError", "RecruitError", "RouteError"]

KINDS = ("flat", "star", "two-tier", "hierarchy", "custom", "graph")
GRAPH_PREFIX = "graph:"
"""A topology ``graph:PATH`` reads the organisation from a graph file."""


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
        self.graph: CommunicationGraph | None = None
        """The edges that route a ``graph`` organisation (``None``: the rules above)."""
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
        if self.graph is not None:
            self.graph.add_agent()
            if parent >= 0:  # a recruit and its recruiter are linked both ways
                self.graph.add_edge(parent, aid, HIERARCHY)
                self.graph.add_edge(aid, parent, HIERARCHY)
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
    def generated(cls, family: str, n: int, degree: float, rewire: float = 0.0, seed: int = 0) -> Organisation:
        """A generated graph organisation: ``small-world`` (Watts–Strogatz, ``degree``
        neighbours, rewiring probability ``rewire``), ``scale-free`` (Barabási–Albert,
        ``degree`` edges per new node) or ``random`` (Erdős–Rényi, mean ``degree``);
        undirected, every edge on the intra-group channel, the same for the same seed."""
        from megaactors.core.graph_families import generate

        _positive("agents", n)
        u, v = generate(family, n, degree, rewire, seed)
        if len(u) == 0:
            raise OrganisationError(f"{family}: the generated graph has no edges (raise --degree)")
        org = cls("graph")
        org.parent, org.level = [-1] * n, [0] * n
        org.member_group, org.admin_group = [-1] * n, [-1] * n
        org.graph = CommunicationGraph(n, u, v, directed=False)
        return org

    @classmethod
    def from_networkx(cls, graph: nx.Graph, fanout: int | None = None) -> Organisation:
        """An organisation from any networkx graph: an edge is the permission to
        message (one way when directed); ``parent``, ``group`` and ``role`` node
        attributes name the boss, admins and levels (see :mod:`megaactors.core.org_graph`).
        Node names are kept in ``names`` and restored by :meth:`to_networkx`."""
        from megaactors.core.org_graph import from_networkx

        return from_networkx(graph, fanout)

    @classmethod
    def from_file(cls, path: str | Path) -> Organisation:
        """An organisation from a graph file: GraphML, GML, node-link JSON or an edge
        list, by extension (see :mod:`megaactors.core.graph_files`)."""
        from megaactors.core.graph_files import read_organisation

        return read_organisation(path)

    @classmethod
    def build(
        cls,
        topology: str,
        n: int,
        group_size: int | None = None,
        fanout: int | None = None,
        *,
        degree: float | None = None,
        rewire: float = 0.0,
        seed: int = 0,
    ) -> Organisation:
        """Build a topology by name: a built-in one, a generated graph family (which
        takes ``degree``, ``rewire`` and ``seed``) or ``graph:PATH`` (a graph file)."""
        from megaactors.core.graph_families import FAMILIES

        if topology.startswith(GRAPH_PREFIX):
            return cls.from_file(topology[len(GRAPH_PREFIX) :])
        if topology in FAMILIES:
            if degree is None:
                raise OrganisationError(f"{topology} needs a degree")
            return cls.generated(topology, n, degree, rewire, seed)
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
        raise OrganisationError(
            f"unknown topology {topology!r}; expected one of flat, star, two-tier, hierarchy, "
            f"{', '.join(FAMILIES)} or {GRAPH_PREFIX}PATH"
        )

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
        if self.graph is not None:
            return self.graph.peers(a, INTRA)
        mg, ag = self.member_group[a], self.admin_group[a]
        peers = _without(self.groups[mg], a) if mg >= 0 else []
        if ag >= 0 and ag != mg:
            peers.extend(_without(self.groups[ag], a))
        return peers

    def group_peers_view(self, a: int) -> Sequence[int]:
        """:meth:`group_peers`, as a read-only :class:`~megaactors.core.peer_view.Without`
        view of the group's member list when ``a`` is a member of one group only (no
        list is made: a broadcast's recipients, which the postman recognises at once);
        a list otherwise. The view is for a send made now: it reads the member list as
        it will stand, and members join at its end."""
        if self.graph is None:
            mg, ag = self.member_group[a], self.admin_group[a]
            if mg >= 0 and not 0 <= ag != mg:
                members = self.groups[mg]
                try:
                    return without(members, member_position(members, a), len(members))
                except ValueError:  # not among its group's members: as group_peers says
                    pass
        return self.group_peers(a)

    def admin_peers(self, a: int) -> list[int]:
        """Everyone ``a`` may reach on the admin channel."""
        if self.graph is not None:
            return self.graph.peers(a, ADMIN)
        if self.admin_group[a] < 0:
            return []
        return _without(self.admins, a)

    def admin_peers_view(self, a: int) -> Sequence[int]:
        """:meth:`admin_peers`, as a read-only :class:`~megaactors.core.peer_view.Without`
        view of :attr:`admins` when ``a`` is an admin (no list is made; see
        :meth:`group_peers_view`); a list otherwise."""
        ag = self.admin_group[a] if self.graph is None else -1
        if ag >= 0:
            admins = self.admins
            if admins[ag] == a:  # each group's admin, in group order
                return without(admins, ag, len(admins))
        return self.admin_peers(a)

    def tree_neighbours(self, a: int) -> list[int]:
        """Parent (if any) then recruits of ``a``: the hierarchy channel (on a graph
        organisation: whoever its edges let it reach on that channel)."""
        if self.graph is not None:
            return self.graph.peers(a, HIERARCHY)
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

    def contacts(self, a: int) -> list[tuple[str, list[int]]]:
        """Everyone ``a`` may message, each once, by channel: on a graph organisation
        its out-edges; otherwise each agent on the first of the intra-group, admin
        and hierarchy channels that allows it. Channels with nobody are left out."""
        if self.graph is not None:
            return self.graph.contacts(a)
        out = []
        covered: set[int] = set()
        for channel in CHANNELS:
            peers = [b for b in self.peers(a, channel) if b not in covered]
            if peers:
                out.append((channel, peers))
                covered.update(peers)
        return out

    def in_degree(self, a: int) -> int:
        """How many agents may message ``a`` (counting each channel of a graph
        organisation's edges): what one message from everyone who may costs it."""
        if self.graph is not None:
            return self.graph.in_degree(a)
        return sum(len(peers) for _, peers in self.contacts(a))  # every other rule is symmetric

    def route_error(self, sender: int, recipient: int, channel: str) -> str | None:
        """Why ``sender`` may not send to ``recipient`` on ``channel``, or ``None``."""
        n = len(self.parent)
        if not (isinstance(sender, int) and 0 <= sender < n):
            return f"unknown sender {sender!r}"
        if not (isinstance(recipient, int) and 0 <= recipient < n):
            return f"unknown recipient {recipient!r}"
        if sender == recipient:
            return f"agent {sender} cannot send to itself"
        if self.graph is not None:  # along an edge: on its channel, or one the roles allow
            on = self.graph.channel_of(sender, recipient)
            if on is None:
                return f"no edge {sender} -> {recipient} in the communication graph"
            if channel == on or self._rule_error(sender, recipient, channel) is None:
                return None
            return f"the edge {sender} -> {recipient} is on channel {on!r}, not {channel!r}"
        return self._rule_error(sender, recipient, channel)

    def _rule_error(self, sender: int, recipient: int, channel: str) -> str | None:
        """Why the channel rules of groups, admins and parents forbid the send, or ``None``."""
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
            **({"edges": self.graph.edge_count} if self.graph is not None else {}),
        }

    def __repr__(self) -> str:
        s = self.summary()
        return f"Organisation({s['kind']}, agents={s['agents']}, groups={s['groups']}, levels={s['levels']})"

    def same_structure(self, other: Organisation) -> bool:
        """True if both organisations route identically."""
        if (self.graph is None) != (other.graph is None):
            return False
        if self.graph is not None and other.graph is not None:
            mine, theirs = self.graph.edges(), other.graph.edges()
            if self.graph.n != other.graph.n or not all(map(np.array_equal, mine, theirs)):
                return False
        return (
            self.member_group == other.member_group
            and self.admin_group == other.admin_group
            and self.parent == other.parent
            and self.boss == other.boss
        )

    # ------------------------------------------------------------------ networkx

    def to_networkx(self) -> nx.Graph:
        """A graph of who may talk to whom (see :func:`megaactors.core.org_graph.to_networkx`)."""
        from megaactors.core.org_graph import to_networkx

        return to_networkx(self)


def _without(members: list[int], a: int) -> list[int]:
    """``members`` without ``a`` (copied by slices, not element by element; where
    ``a`` sits found by :func:`~megaactors.core.peer_view.member_position`)."""
    if not members:
        return []
    try:
        i = member_position(members, a)
    except ValueError:  # not a member
        return list(members)
    return members[:i] + members[i + 1 :]
