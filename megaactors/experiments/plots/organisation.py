"""The organisation drawn with networkx: groups, admins, the boss and the channels
between them — only those that carried messages when given a run's traffic — with
agents coloured by their state when given one."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from megaactors.core.agent import AgentState
from megaactors.core.messages import ADMIN, HIERARCHY, INTRA
from megaactors.experiments.plots.common import STATE_COLOURS, figure_and_axes

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from megaactors.core.organisation import Organisation

__all__ = ["CHANNEL_STYLES", "organisation_figure"]

CHANNEL_STYLES: dict[str, dict[str, Any]] = {
    INTRA: {"edge_color": "0.75", "width": 0.5, "alpha": 0.6},
    HIERARCHY: {"edge_color": "0.2", "width": 1.2, "alpha": 0.9},
    ADMIN: {"edge_color": "tab:red", "width": 2.2, "alpha": 0.9},
}
"""How each channel's edges are drawn (networkx ``draw_networkx_edges`` options)."""
_CHANNEL_NAMES = {INTRA: "intra-group channel", ADMIN: "admin channel", HIERARCHY: "hierarchy channel"}


def _tree_layout(org: Organisation) -> dict[int, tuple[float, float]]:
    """Radial layout: the boss in the centre, level k on a circle of radius k, each
    subtree in an angular sector proportional to its leaves."""
    children = org.children
    leaves = [1] * org.n
    for a in sorted(range(org.n), key=lambda a: -org.level[a]):
        kids = children.get(a)
        if kids:
            leaves[a] = sum(leaves[k] for k in kids)
    pos: dict[int, tuple[float, float]] = {}
    roots = [a for a in range(org.n) if org.parent[a] < 0]
    stack = []
    total = sum(leaves[r] for r in roots)
    start = 0.0
    for r in roots:
        share = 2 * math.pi * leaves[r] / total
        stack.append((r, start, start + share))
        start += share
    while stack:
        a, lo, hi = stack.pop()
        radius, angle = org.level[a], (lo + hi) / 2
        pos[a] = (radius * math.cos(angle), radius * math.sin(angle)) if radius else (0.0, 0.0)
        at = lo
        for k in children.get(a, []):
            share = (hi - lo) * leaves[k] / leaves[a]
            stack.append((k, at, at + share))
            at += share
    return pos


def _group_layout(org: Organisation) -> dict[int, tuple[float, float]]:
    """Groups on a circle, members around their group's centre, admins innermost."""
    pos: dict[int, tuple[float, float]] = {}
    count = len(org.groups)
    big = 0.0 if count == 1 else max(1.0, count * 0.45)
    for gid, members in enumerate(org.groups):
        theta = 2 * math.pi * gid / count
        cx, cy = big * math.cos(theta), big * math.sin(theta)
        small = 0.25 + 0.06 * len(members) if count > 1 else 1.0
        for i, a in enumerate(members):
            phi = theta + math.pi + 2 * math.pi * i / len(members)  # the admin (i = 0) faces the centre
            pos.setdefault(a, (cx + small * math.cos(phi), cy + small * math.sin(phi)))
    for a in range(org.n):
        pos.setdefault(a, (0.0, 0.0))
    return pos


def organisation_figure(
    org: Organisation,
    *,
    traffic: Mapping[str, int] | None = None,
    states: Sequence[AgentState] | None = None,
    ax: Axes | None = None,
    max_agents: int = 2000,
) -> Figure:
    """The organisation drawn with networkx: admins larger with a black edge, the boss a
    star; the admin channel thick red, the hierarchy (tree) channel dark, the
    intra-group channel light.

    ``traffic`` (messages per channel, e.g. a run's ``ledger.messages_by_channel``)
    draws only the channels that carried messages, and the legend names those left
    out; without it every channel the organisation allows is drawn, and the title
    says so. ``states`` (one per agent) colours agents by state instead of by group.
    """
    import networkx as nx

    if org.n > max_agents:
        raise ValueError(f"too many agents to draw ({org.n:,}); draw an organisation of at most {max_agents:,}")
    if states is not None and len(states) != org.n:
        raise ValueError(f"states has {len(states)} entries for {org.n} agents")
    fig, ax = figure_and_axes(ax, (8, 8))
    graph = org.to_networkx()
    names = org.names or list(range(org.n))
    index = {name: i for i, name in enumerate(names)}
    layout = _tree_layout(org) if org.kind in ("star", "hierarchy") else _group_layout(org)
    pos = {names[a]: xy for a, xy in layout.items()}
    handles: list[Line2D] = []
    silent = []
    for channel in (INTRA, ADMIN, HIERARCHY):
        edges = [(u, v) for u, v, ch in graph.edges(data="channels") if ch and channel in ch]
        if not edges:
            continue
        if traffic is not None and not traffic.get(channel):
            silent.append(_CHANNEL_NAMES[channel].removesuffix(" channel"))
            continue
        style = CHANNEL_STYLES[channel]
        nx.draw_networkx_edges(graph, pos, edgelist=edges, ax=ax, **style)
        count = f": {traffic[channel]:,} messages" if traffic is not None else ""
        handles.append(
            Line2D(
                [], [], color=style["edge_color"], lw=max(1.0, style["width"]), label=_CHANNEL_NAMES[channel] + count
            )
        )
    if silent:
        handles.append(Line2D([], [], ls="", label=f"no messages, not drawn: {', '.join(silent)}"))
    group_colours = _group_colours(len(org.groups))
    for role, size, shape in (("agent", 40, "o"), ("admin", 130, "o"), ("boss", 260, "*")):
        nodes = [v for v in graph.nodes if org.role(index[v]) == role]
        if not nodes:
            continue
        if states is not None:
            colours = [STATE_COLOURS[AgentState(states[index[v]]).name] for v in nodes]
        else:
            colours = [
                group_colours[org.member_group[index[v]]] if org.member_group[index[v]] >= 0 else "tab:red"
                for v in nodes
            ]
        nx.draw_networkx_nodes(
            graph,
            pos,
            nodelist=nodes,
            node_color=colours,
            node_size=size,
            node_shape=shape,
            edgecolors="black" if role != "agent" else "none",
            linewidths=1.2,
            ax=ax,
        )
    colour = "agent (colour: its state)" if states is not None else "agent (colour: its group)"
    if org.admins:
        handles.append(Line2D([], [], marker="o", ls="", color="0.6", mec="black", ms=9, label="admin"))
    handles.append(Line2D([], [], marker="o", ls="", color="0.6", ms=5, label=colour))
    if org.boss is not None:
        handles.append(Line2D([], [], marker="*", ls="", color="0.6", mec="black", ms=12, label="boss"))
    if states is not None:
        counts = {s: sum(1 for x in states if AgentState(x) is s) for s in AgentState}
        handles += [
            Line2D(
                [],
                [],
                marker="o",
                ls="",
                color=STATE_COLOURS[s.name],
                ms=7,
                label=f"{s.name.capitalize()}: {counts[s]}",
            )
            for s in AgentState
        ]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), borderaxespad=0.2)
    s = org.summary()
    drawn = "channels that carried messages" if traffic is not None else "every channel it allows"
    ax.set_title(
        f"{s['kind']} organisation: {s['agents']:,} agents, {s['groups']:,} groups, {s['levels']} level(s)\n({drawn})"
    )
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


def _group_colours(count: int) -> list[Any]:
    from matplotlib import colormaps

    if count <= 20:
        if count <= 10:
            return [colormaps["tab10"](i) for i in range(count)]
        spread = [*range(0, 20, 2), *range(1, 20, 2)]  # tab20 pairs similar hues: take one of each first
        return [colormaps["tab20"](spread[i]) for i in range(count)]
    return [colormaps["hsv"](i / count) for i in range(count)]
