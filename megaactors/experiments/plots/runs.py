"""Figures of small whole runs: per-agent load, states over virtual time, queue depth
over virtual time."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from megaactors.core.agent import AgentState
from megaactors.experiments.collector import DataCollector
from megaactors.experiments.plots.common import SPARE_COLOURS, STATE_COLOURS, TOPOLOGY_COLOURS, log_axes

if TYPE_CHECKING:
    import pandas as pd

    from megaactors.experiments.collector import Steppable
    from megaactors.runtime.result import RunResult

__all__ = ["ROLE_COLOURS", "load_figure", "queue_figure", "sample_queues", "timeline_figure"]

ROLE_COLOURS = {"boss": "tab:red", "admin": "tab:orange", "agent": "tab:blue"}


def load_figure(results: Mapping[str, RunResult]) -> Figure:
    """Per-agent load in each run: messages handled (sent + received) and LLM tokens
    read, agents ranked from busiest to idlest and coloured by role, so the hub and
    the admins stand out as hotspots. Each row's y range leaves room above the data
    for the busiest agent's label and below it for the legend."""
    fig = Figure(figsize=(4.2 * len(results), 7.5), layout="constrained")
    axes = fig.subplots(2, len(results), squeeze=False, sharey="row")
    extent: list[list[float]] = [[math.inf, 0.0], [math.inf, 0.0]]
    for col, (name, result) in enumerate(results.items()):
        frame = result.agents_frame()
        frame["handled"] = frame["sent"] + frame["received"]
        for row, (column, unit) in enumerate(
            (("handled", "messages sent + received"), ("tokens_in", "LLM tokens read"))
        ):
            ax = axes[row][col]
            ranked = frame.sort_values(column, ascending=False, kind="stable").reset_index(drop=True)
            rank = np.arange(1, len(ranked) + 1)
            positive = ranked[column][ranked[column] > 0]
            if len(positive):
                extent[row] = [min(extent[row][0], positive.min()), max(extent[row][1], positive.max())]
            for role, colour in ROLE_COLOURS.items():
                mine = ranked["role"] == role
                if mine.any():
                    ax.scatter(rank[mine], ranked.loc[mine, column], s=10, color=colour, label=role, zorder=3)
            top = ranked.iloc[0]
            # the busiest agent is named in the empty upper-right corner (ranked curves
            # fall from the upper left), with an arrow to its point
            ax.annotate(
                f"busiest: {top['role']} {int(top['agent'])}, {int(top[column]):,}",
                (1, top[column]),
                xytext=(0.97, 0.97),
                textcoords="axes fraction",
                ha="right",
                va="top",
                fontsize=8,
                arrowprops={"arrowstyle": "->", "color": "0.4", "lw": 0.8},
            )
            log_axes(ax, "agent rank (busiest first)", unit, name if row == 0 else "")
            ax.minorticks_off()  # ten panels of minor log ticks cost more to draw than the data
            ax.legend(fontsize=8, loc="lower left", ncols=3, handletextpad=0.2, columnspacing=0.8)
    for row, (lo, hi) in enumerate(extent):
        if hi > 0:
            pad = 10 ** max(1.0, 0.4 * math.log10(hi / lo))  # decades of room on either side
            axes[row][0].set_ylim(lo / pad, hi * pad)
    n = {r.org.n for r in results.values()}
    fig.suptitle("Per-agent load" + (f", N = {n.pop():,}" if len(n) == 1 else ""))
    return fig


def timeline_figure(result: RunResult, max_agents: int = 60) -> Figure:
    """Each agent's state (Idle, Processing, Response) over virtual time, from a traced
    run. Response is instantaneous in the simulation and is drawn as a tick."""
    if result.trace is None:
        raise ValueError("the run has no trace; run it with trace=True")
    frame = result.trace.transitions_frame()
    org = result.org
    agents = list(range(min(org.n, max_agents)))
    end = float(frame["time"].max()) if len(frame) else 0.0
    fig = Figure(figsize=(10, 1.2 + 0.22 * len(agents)), layout="constrained")
    ax = fig.add_subplot()
    by_agent = {a: rows for a, rows in frame.groupby("agent")}
    width = max(end, 1e-9)
    for a in agents:
        rows = by_agent.get(a)
        spans: dict[str, list[tuple[float, float]]] = {s: [] for s in STATE_COLOURS}
        state, since = AgentState.IDLE.name, 0.0
        ticks = []
        if rows is not None:
            for to, t in zip(rows["to"], rows["time"], strict=True):
                spans[state].append((since, t - since))
                if to == AgentState.RESPONSE.name:
                    ticks.append(t)
                state, since = to, t
        spans[state].append((since, end - since))
        for name, colour in STATE_COLOURS.items():
            if spans[name]:
                ax.broken_barh(spans[name], (a - 0.4, 0.8), facecolors=colour)
        if ticks:
            ax.plot(ticks, [a] * len(ticks), "|", color=STATE_COLOURS["RESPONSE"], ms=7, mew=1.5)
    ax.set_yticks(agents, [f"{a} {org.role(a)}" if org.role(a) != "agent" else str(a) for a in agents], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, width * 1.01)
    ax.set_xlabel("virtual time (seconds)")
    ax.set_ylabel("agent")
    kind = org.kind + (f", G = {len(org.groups[0])}" if org.kind == "two-tier" and org.groups else "")
    shown = f"first {len(agents)} of {org.n}" if org.n > len(agents) else f"N = {org.n}"
    ax.set_title(f"Agent states over virtual time ({kind}, {shown})")
    handles = [Patch(color=c, label=s.capitalize()) for s, c in STATE_COLOURS.items()]
    ax.legend(handles=handles, fontsize=8, loc="upper right", ncols=3)
    return fig


def sample_queues(runtime: Steppable) -> pd.DataFrame:
    """Run a (fresh) simulation event by event, recording after each how many
    messages wait in in-queues (total and the longest queue) and how many agents are
    Processing (a :class:`~megaactors.experiments.collector.DataCollector` collecting
    every event). Each sample costs O(N): meant for small runs. The frame's
    ``attrs["agents"]`` is N."""
    model = DataCollector(every_events=1, agents=False).run(runtime).model_frame()
    frame = model[["events", "time", "queued", "longest_queue", "processing"]].rename(columns={"events": "step"})
    frame.attrs["agents"] = len(runtime.agents)
    return frame


def queue_figure(samples: Mapping[str, pd.DataFrame]) -> Figure:
    """Messages waiting in in-queues over virtual time (top) and agents Processing
    (bottom), one line per run (from :func:`sample_queues`); the title gives N."""
    fig = Figure(figsize=(9, 7), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    for i, (name, frame) in enumerate(samples.items()):
        colour = SPARE_COLOURS[i % len(SPARE_COLOURS)]
        for topology, c in TOPOLOGY_COLOURS.items():
            if name.startswith(topology):
                colour = c
        top.step(frame["time"], frame["queued"], where="post", color=colour, label=f"{name}: all in-queues")
        top.step(
            frame["time"], frame["longest_queue"], where="post", color=colour, ls=":", label=f"{name}: longest queue"
        )
        bottom.step(frame["time"], frame["processing"], where="post", color=colour, label=name)
    sizes = {frame.attrs.get("agents") for frame in samples.values()}
    if len(sizes) == 1 and None not in sizes:
        n = f"N = {sizes.pop():,}"
    else:
        known = [(name, frame.attrs["agents"]) for name, frame in samples.items() if "agents" in frame.attrs]
        n = ", ".join(f"{name}: N = {agents:,}" for name, agents in known)
    top.set_ylabel("messages waiting")
    top.set_title("Queue depth over virtual time" + (f" ({n})" if n else ""))
    top.legend(fontsize=8)
    top.grid(True, alpha=0.3)
    bottom.set_ylabel("agents Processing")
    bottom.set_xlabel("virtual time (seconds)")
    bottom.legend(fontsize=8)
    bottom.grid(True, alpha=0.3)
    return fig
