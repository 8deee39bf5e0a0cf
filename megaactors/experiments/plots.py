"""Figures of coordination cost, from sweep rows and from small traced runs.

Every function returns a :class:`matplotlib.figure.Figure` (made without pyplot, so
nothing global is touched; Jupyter displays it) and :func:`save_figure` writes it as
PNG and SVG. From sweep rows (:func:`megaactors.experiments.sweep.load_results`):

* :func:`cost_figure` — messages, bytes, tokens or dollars versus N on log–log axes,
  one line per organisation with its fitted scaling exponent, the spread over seeds
  as a band, and the closed form drawn (dashed) where runs were skipped as infeasible;
* :func:`makespan_figure` — virtual makespan versus N, parallel and serial;
* :func:`group_size_figure` — two-tier cost versus group size at a fixed N, measured
  optimum beside the closed-form one;
* :func:`plot_results` — all of the above that the rows allow, saved into a directory.

From small runs: :func:`load_figure` (per-agent load), :func:`timeline_figure` (states
over virtual time), :func:`queue_figure` with :func:`sample_queues` (queue depth over
time) and :func:`organisation_figure` (the organisation drawn with networkx).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from megaactors.core.agent import AgentState
from megaactors.core.messages import ADMIN, HIERARCHY, INTRA
from megaactors.experiments.sweep import OPTIMAL, PARAMS, closed_form_messages, optimal_group_size

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

    from megaactors.core.organisation import Organisation
    from megaactors.runtime.result import RunResult
    from megaactors.runtime.sim import SimRuntime

__all__ = [
    "METRICS",
    "cost_figure",
    "cost_overview_figure",
    "fit_exponent",
    "group_size_figure",
    "load_figure",
    "makespan_figure",
    "organisation_figure",
    "plot_results",
    "queue_figure",
    "sample_queues",
    "save_figure",
    "series_labels",
    "timeline_figure",
]

METRICS: dict[str, tuple[str, str]] = {
    "messages": ("Messages", "messages"),
    "bytes": ("Bytes on the wire", "bytes (encoded envelopes)"),
    "tokens": ("LLM tokens", "tokens (in + out)"),
    "dollars": ("LLM cost", "cost (USD)"),
}
"""Cost figure name → (title, y-axis label)."""

_COLUMN = {"messages": "messages", "bytes": "bytes", "tokens": "tokens", "dollars": "cost_usd"}
_TOPOLOGY_COLOURS = {"flat": "tab:red", "star": "tab:orange", "two-tier": "tab:blue", "hierarchy": "tab:purple"}
_SPARE_COLOURS = ("tab:green", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray", "black")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
_ROLE_COLOURS = {"boss": "tab:red", "admin": "tab:orange", "agent": "tab:blue"}
_STATE_COLOURS = {"IDLE": "#e8e8e8", "PROCESSING": "tab:blue", "RESPONSE": "tab:orange"}
# parameters that never name a series: the x axis, the spread, and those shown otherwise
_NOT_SERIES = {"agents", "seed", "topology", "group_size", "group_rule", "fanout", "serial", "trace"}


# ---------------------------------------------------------------------- helpers


def save_figure(fig: Figure, out: str | Path, name: str) -> list[Path]:
    """Write ``fig`` as ``out/name.png`` and ``out/name.svg``; return both paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    fig.savefig(paths[0], dpi=130, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight", metadata={"Date": None})
    return paths


def fit_exponent(agents: Sequence[float], values: Sequence[float]) -> float | None:
    """Least-squares slope of log(value) against log(N): the scaling exponent
    (``None`` with fewer than two distinct positive points)."""
    x = np.asarray(agents, dtype=float)
    y = np.asarray(values, dtype=float)
    keep = (x > 0) & (y > 0) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(np.unique(x)) < 2:
        return None
    slope, _ = np.polyfit(np.log(x), np.log(y), 1)
    return float(slope)


def _with_tokens(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["tokens"] = df["tokens_in"].astype("float64") + df["tokens_out"].astype("float64")
    return df


def _base_label(row: Mapping[str, Any]) -> str:
    topology = row["topology"]
    if topology == "two-tier":
        return "two-tier, optimal G" if row["group_rule"] == OPTIMAL else f"two-tier, G = {int(row['group_size'])}"
    if topology == "hierarchy":
        return f"hierarchy, fan-out {int(row['fanout'])}"
    return str(topology)


def series_labels(df: pd.DataFrame) -> pd.Series:
    """One label per row naming its series: the organisation (two-tier with its group
    size or "optimal G", hierarchy with its fan-out) plus every other parameter that
    varies in ``df`` (seeds, N and serial excepted)."""
    import pandas as pd

    varying = [
        c for c in df.columns if c in PARAMS and c not in _NOT_SERIES and df[c].astype(str).nunique(dropna=False) > 1
    ]
    labels = []
    for row in df.to_dict("records"):
        extra = [f"{c}={row[c]}" for c in varying]
        labels.append(", ".join([_base_label(row), *extra]))
    return pd.Series(labels, index=df.index, dtype=object)


def _colours(labels: Sequence[str], topologies: Sequence[str]) -> dict[str, str]:
    """The first series of each topology gets the topology's colour, others spare ones."""
    colours: dict[str, str] = {}
    for label, topology in zip(labels, topologies, strict=True):
        colour = _TOPOLOGY_COLOURS.get(topology)
        if label not in colours and colour is not None and colour not in colours.values():
            colours[label] = colour
    spare = [c for c in _SPARE_COLOURS if c not in colours.values()] or list(_SPARE_COLOURS)
    for label in labels:
        if label not in colours:
            colours[label] = spare[len(colours) % len(spare)]
    return colours


def _prepared(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with a ``series`` column and a stable ``colour`` per series; series with a
    single N are left out when others have several (they cannot make a curve)."""
    df = _with_tokens(df)
    df["series"] = series_labels(df)
    spans = df.groupby("series")["agents"].transform("nunique")
    if (spans > 1).any():
        df = df[spans > 1].copy()
    order = df.drop_duplicates("series")
    colours = _colours(list(order["series"]), list(order["topology"]))
    df["colour"] = df["series"].map(colours)
    markers = {label: _MARKERS[i % len(_MARKERS)] for i, label in enumerate(order["series"])}
    df["marker"] = df["series"].map(markers)
    return df


def _parallel_only(df: pd.DataFrame) -> pd.DataFrame:
    """Parallel runs where the frame has both (serial runs only matter for makespan)."""
    serial = df["serial"].astype(bool)
    return df[~serial] if (~serial).any() else df


def _spread(measured: pd.DataFrame, column: str) -> pd.DataFrame:
    """Mean, min and max of ``column`` over seeds, per N."""
    stats = measured.groupby("agents")[column].agg(["mean", "min", "max"]).sort_index()
    stats.index = stats.index.astype(float)
    return stats.astype(float)


def _log_axes(ax: Axes, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)


def _exponent_text(b: float | None) -> str:
    return "" if b is None else f"  $\\propto N^{{{b:.2f}}}$"


def _rounds_text(df: pd.DataFrame) -> str:
    rounds = sorted({int(r) for r in df["rounds"].dropna()})
    if len(rounds) == 1:
        return f"{rounds[0]} chat round" + ("s" if rounds[0] != 1 else "")
    return "chat rounds"


# ---------------------------------------------------------------------- cost versus N


def cost_figure(df: pd.DataFrame, metric: str = "messages", *, ax: Axes | None = None) -> Figure:
    """``metric`` (one of :data:`METRICS`) versus N, log–log, one line per series.

    The line is the mean over seeds, the band their min–max spread; the legend gives
    the fitted exponent of the measured points. Where a series' runs were skipped as
    infeasible, the closed form continues it (dashed): exact for messages; for the
    other metrics the closed-form messages times the metric per message measured at
    the series' largest run.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    fig, ax = _figure_and_axes(ax, (7.5, 5.2))
    data = _prepared(_parallel_only(df))
    column = _COLUMN[metric]
    drawn = False
    for label, rows in data.groupby("series", sort=False):
        colour, marker = rows["colour"].iloc[0], rows["marker"].iloc[0]
        measured = rows[rows["status"] == "ok"]
        skipped = rows[rows["status"] == "skipped"]
        last = None
        if len(measured):
            stats = _spread(measured, column)
            b = fit_exponent(stats.index, stats["mean"])
            ax.plot(
                stats.index,
                stats["mean"],
                marker=marker,
                color=colour,
                ms=5,
                lw=1.6,
                mfc="none",
                label=f"{label}{_exponent_text(b)}",
            )
            ax.fill_between(stats.index, stats["min"], stats["max"], color=colour, alpha=0.2, lw=0)
            drawn = True
            n_last = stats.index.max()
            per_message = _spread(measured, "messages").loc[n_last, "mean"]
            ratio = stats.loc[n_last, "mean"] / per_message if per_message else math.nan
            last = (n_last, stats.loc[n_last, "mean"], ratio)
        beyond = skipped.drop_duplicates("agents").sort_values("agents")
        if last is not None:
            beyond = beyond[beyond["agents"].astype(float) > last[0]]
        if len(beyond) and (metric == "messages" or last is not None):
            n = beyond["agents"].astype(float).to_numpy()
            y = beyond["expected_messages"].astype(float).to_numpy()
            if metric != "messages":
                y = y * last[2]  # type: ignore[index]
            if last is not None:
                n, y = np.concatenate([[last[0]], n]), np.concatenate([[last[1]], y])
            start = f" beyond N = {int(last[0]):,}" if last is not None else ""
            ax.plot(n, y, "--", color=colour, lw=1.4, label=f"{label}: closed form{start} (not run)")
            drawn = True
    title, ylabel = METRICS[metric]
    _log_axes(ax, "agents N", f"{ylabel} per run", f"{title} versus number of agents ({_rounds_text(df)})")
    if drawn:
        ax.legend(fontsize=8, loc="upper left")
    return fig


def cost_overview_figure(df: pd.DataFrame) -> Figure:
    """Messages, bytes, tokens and dollars versus N in one 2×2 figure."""
    fig = Figure(figsize=(14, 10.5), layout="constrained")
    for ax, metric in zip(fig.subplots(2, 2).flat, METRICS, strict=True):
        cost_figure(df, metric, ax=ax)
    fig.suptitle("Coordination cost versus number of agents (line: mean over seeds; band: spread)")
    return fig


def _figure_and_axes(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.get_figure(), ax  # type: ignore[return-value]
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def makespan_figure(df: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """Virtual makespan versus N, log–log: parallel runs solid, serial (one agent
    Processing at a time) dashed, one colour per organisation."""
    fig, ax = _figure_and_axes(ax, (7.5, 5.2))
    data = _prepared(df[df["status"] == "ok"])
    for (label, serial), rows in data.groupby(["series", "serial"], sort=False):
        stats = _spread(rows, "virtual_time_s")
        b = fit_exponent(stats.index, stats["mean"])
        colour, marker = rows["colour"].iloc[0], rows["marker"].iloc[0]
        mode = "serial" if serial else "parallel"
        ax.plot(
            stats.index,
            stats["mean"],
            ls="--" if serial else "-",
            marker=marker,
            mfc="none" if serial else colour,
            color=colour,
            ms=5,
            lw=1.5,
            label=f"{label}, {mode}{_exponent_text(b)}",
        )
        ax.fill_between(stats.index, stats["min"], stats["max"], color=colour, alpha=0.18, lw=0)
    _log_axes(ax, "agents N", "makespan (virtual seconds)", f"Makespan versus number of agents ({_rounds_text(df)})")
    if len(data):
        ax.legend(fontsize=8, loc="center right")
    return fig


def group_size_figure(df: pd.DataFrame, agents: int | None = None) -> Figure:
    """Two-tier messages and dollars versus group size G at a fixed N (by default the N
    with the most group sizes measured): measured points with their spread, the closed
    form ``Σ sᵢ(sᵢ−1) + a(a−1)`` over every G, the measured optimum beside the
    closed-form one."""
    rows = df[(df["topology"] == "two-tier") & (df["status"] == "ok") & (df["group_rule"] == "fixed")]
    rows = rows[~rows["serial"].astype(bool)] if (~rows["serial"].astype(bool)).any() else rows
    if agents is None:
        counts = rows.groupby("agents")["group_size"].nunique()
        if counts.empty:
            raise ValueError("no measured two-tier runs with a fixed group size")
        agents = int(counts.idxmax())
    rows = rows[rows["agents"] == agents]
    if rows["group_size"].nunique() < 2:
        raise ValueError(f"need two-tier runs with at least two group sizes at N = {agents}")
    rounds = int(rows["rounds"].iloc[0])
    fig = Figure(figsize=(13, 5), layout="constrained")
    left, right = fig.subplots(1, 2)
    g_all = np.arange(1, agents + 1)
    closed = np.array([closed_form_messages("two-tier", agents, int(g), rounds) for g in g_all], dtype=float)
    g_opt = optimal_group_size(agents)
    lo, hi = int(rows["group_size"].min()), int(rows["group_size"].max())
    span = (g_all >= lo) & (g_all <= hi)
    left.plot(g_all[span], closed[span], "-", color="0.55", lw=1, label="closed form  Σ sᵢ(sᵢ−1) + a(a−1)")
    for ax, column, unit in ((left, "messages", "messages per run"), (right, "cost_usd", "LLM cost per run (USD)")):
        stats = rows.groupby("group_size")[column].agg(["mean", "min", "max"]).sort_index().astype(float)
        g = stats.index.astype(float)
        ax.errorbar(
            g,
            stats["mean"],
            yerr=[stats["mean"] - stats["min"], stats["max"] - stats["mean"]],
            fmt="o",
            color="tab:blue",
            ms=5,
            capsize=3,
            label="measured (mean, spread over seeds)",
        )
        best = int(stats["mean"].idxmin())
        ax.axvline(best, color="tab:green", lw=2, alpha=0.8, label=f"measured optimum G = {best}")
        ax.axvline(g_opt, color="tab:red", ls="--", lw=1.5, label=f"closed-form optimum G = {g_opt}")
        ax.axvline(
            (2 * agents) ** (1 / 3), color="tab:red", ls=":", lw=1, label=f"(2N)^(1/3) = {(2 * agents) ** (1 / 3):.1f}"
        )
        _log_axes(ax, "group size G (agents per group)", unit, "")
        ax.legend(fontsize=8, loc="upper center")
    left.set_title(f"Messages versus group size, N = {agents:,}")
    right.set_title(f"LLM cost versus group size, N = {agents:,}")
    fig.suptitle(f"Two-tier organisation: the cost-minimising group size ({_rounds_text(rows)})")
    return fig


def plot_results(df: pd.DataFrame, out: str | Path) -> list[Path]:
    """Every figure the sweep rows allow, as PNG and SVG in ``out``; returns the paths."""
    paths: list[Path] = []
    usable = df[df["status"].isin(("ok", "skipped"))]
    if usable.empty:
        return paths
    figures: list[tuple[str, Figure]] = [(metric, cost_figure(usable, metric)) for metric in METRICS]
    figures.append(("coordination_cost", cost_overview_figure(usable)))
    if (df["status"] == "ok").any():
        figures.append(("makespan", makespan_figure(df)))
    fixed = df[(df["topology"] == "two-tier") & (df["status"] == "ok") & (df["group_rule"] == "fixed")]
    if len(fixed) and fixed.groupby("agents")["group_size"].nunique().max() >= 3:
        figures.append(("group_size", group_size_figure(df)))
    for name, fig in figures:
        paths.extend(save_figure(fig, out, name))
    return paths


# ---------------------------------------------------------------------- small runs


def load_figure(results: Mapping[str, RunResult]) -> Figure:
    """Per-agent load in each run: messages handled (sent + received) and LLM tokens
    read, agents ranked from busiest to idlest and coloured by role, so the hub and
    the admins stand out as hotspots."""
    fig = Figure(figsize=(4.2 * len(results), 7.5), layout="constrained")
    axes = fig.subplots(2, len(results), squeeze=False, sharey="row")
    for col, (name, result) in enumerate(results.items()):
        frame = result.agents_frame()
        frame["handled"] = frame["sent"] + frame["received"]
        for row, (column, unit) in enumerate(
            (("handled", "messages sent + received"), ("tokens_in", "LLM tokens read"))
        ):
            ax = axes[row][col]
            ranked = frame.sort_values(column, ascending=False, kind="stable").reset_index(drop=True)
            rank = np.arange(1, len(ranked) + 1)
            for role, colour in _ROLE_COLOURS.items():
                mine = ranked["role"] == role
                if mine.any():
                    ax.scatter(rank[mine], ranked.loc[mine, column], s=10, color=colour, label=role, zorder=3)
            top = ranked.iloc[0]
            ax.annotate(
                f"{top['role']} {int(top['agent'])}: {int(top[column]):,}",
                (1, top[column]),
                xytext=(8, -4),
                textcoords="offset points",
                fontsize=8,
            )
            _log_axes(ax, "agent rank (busiest first)", unit, name if row == 0 else "")
            ax.legend(fontsize=8, loc="best")
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
        spans: dict[str, list[tuple[float, float]]] = {s: [] for s in _STATE_COLOURS}
        state, since = AgentState.IDLE.name, 0.0
        ticks = []
        if rows is not None:
            for to, t in zip(rows["to"], rows["time"], strict=True):
                spans[state].append((since, t - since))
                if to == AgentState.RESPONSE.name:
                    ticks.append(t)
                state, since = to, t
        spans[state].append((since, end - since))
        for name, colour in _STATE_COLOURS.items():
            if spans[name]:
                ax.broken_barh(spans[name], (a - 0.4, 0.8), facecolors=colour)
        if ticks:
            ax.plot(ticks, [a] * len(ticks), "|", color=_STATE_COLOURS["RESPONSE"], ms=7, mew=1.5)
    ax.set_yticks(agents, [f"{a} {org.role(a)}" if org.role(a) != "agent" else str(a) for a in agents], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, width * 1.01)
    ax.set_xlabel("virtual time (seconds)")
    ax.set_ylabel("agent")
    kind = org.kind + (f", G = {len(org.groups[0])}" if org.kind == "two-tier" and org.groups else "")
    shown = f"first {len(agents)} of {org.n}" if org.n > len(agents) else f"N = {org.n}"
    ax.set_title(f"Agent states over virtual time ({kind}, {shown})")
    handles = [Patch(color=c, label=s.capitalize()) for s, c in _STATE_COLOURS.items()]
    ax.legend(handles=handles, fontsize=8, loc="upper right", ncols=3)
    return fig


def sample_queues(runtime: SimRuntime) -> pd.DataFrame:
    """Run a (fresh) simulation event by event, recording after each how many
    messages wait in in-queues (total and the longest queue) and how many agents are
    Processing. Each sample costs O(N): meant for small runs."""
    import pandas as pd

    samples: list[tuple[int, float, int, int, int]] = []

    def sample() -> None:
        depths = list(map(runtime.queued, range(len(runtime.agents))))
        busy = sum(1 for a in runtime.agents if a.state is AgentState.PROCESSING)
        samples.append((runtime.steps, runtime.now, sum(depths), max(depths, default=0), busy))

    runtime.start()
    sample()
    while runtime.step():
        sample()
    return pd.DataFrame(samples, columns=["step", "time", "queued", "longest_queue", "processing"])


def queue_figure(samples: Mapping[str, pd.DataFrame]) -> Figure:
    """Messages waiting in in-queues over virtual time (top) and agents Processing
    (bottom), one line per run (from :func:`sample_queues`)."""
    fig = Figure(figsize=(9, 7), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    for i, (name, frame) in enumerate(samples.items()):
        colour = _SPARE_COLOURS[i % len(_SPARE_COLOURS)]
        for topology, c in _TOPOLOGY_COLOURS.items():
            if name.startswith(topology):
                colour = c
        top.step(frame["time"], frame["queued"], where="post", color=colour, label=f"{name}: all in-queues")
        top.step(
            frame["time"], frame["longest_queue"], where="post", color=colour, ls=":", label=f"{name}: longest queue"
        )
        bottom.step(frame["time"], frame["processing"], where="post", color=colour, label=name)
    top.set_ylabel("messages waiting")
    top.set_title("Queue depth over virtual time")
    top.legend(fontsize=8)
    top.grid(True, alpha=0.3)
    bottom.set_ylabel("agents Processing")
    bottom.set_xlabel("virtual time (seconds)")
    bottom.legend(fontsize=8)
    bottom.grid(True, alpha=0.3)
    return fig


# ---------------------------------------------------------------------- the organisation


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


def organisation_figure(org: Organisation, *, ax: Axes | None = None, max_agents: int = 2000) -> Figure:
    """The organisation drawn with networkx: groups coloured, admins larger with a black
    edge, the admin channel in thick red, the hierarchy (tree) channel dark, the
    intra-group channel light."""
    import networkx as nx

    if org.n > max_agents:
        raise ValueError(f"too many agents to draw ({org.n:,}); draw an organisation of at most {max_agents:,}")
    fig, ax = _figure_and_axes(ax, (8, 8))
    graph = org.to_networkx()
    names = org.names or list(range(org.n))
    index = {name: i for i, name in enumerate(names)}
    layout = _tree_layout(org) if org.kind in ("star", "hierarchy") else _group_layout(org)
    pos = {names[a]: xy for a, xy in layout.items()}
    styles = {
        INTRA: {"edge_color": "0.75", "width": 0.5, "alpha": 0.6},
        HIERARCHY: {"edge_color": "0.2", "width": 1.2, "alpha": 0.9},
        ADMIN: {"edge_color": "tab:red", "width": 2.2, "alpha": 0.9},
    }
    for channel in (INTRA, ADMIN, HIERARCHY):
        edges = [(u, v) for u, v, ch in graph.edges(data="channels") if ch and channel in ch]
        if edges:
            nx.draw_networkx_edges(graph, pos, edgelist=edges, ax=ax, **styles[channel])
    cmap = _group_colours(len(org.groups))
    for role, size, shape in (("agent", 40, "o"), ("admin", 130, "o"), ("boss", 260, "*")):
        nodes = [v for v in graph.nodes if org.role(index[v]) == role]
        if not nodes:
            continue
        colours = [cmap[org.member_group[index[v]]] if org.member_group[index[v]] >= 0 else "tab:red" for v in nodes]
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
    handles = [
        Line2D([], [], color="0.75", lw=1, label="intra-group channel"),
        Line2D([], [], color="tab:red", lw=2.2, label="admin channel"),
        Line2D([], [], color="0.25", lw=1, label="hierarchy channel"),
        Line2D([], [], marker="o", ls="", color="0.6", mec="black", ms=9, label="admin"),
        Line2D([], [], marker="o", ls="", color="0.6", ms=5, label="agent (colour: its group)"),
    ]
    if org.boss is not None:
        handles.append(Line2D([], [], marker="*", ls="", color="tab:red", mec="black", ms=12, label="boss"))
    ax.legend(handles=handles, fontsize=8, loc="upper right")
    s = org.summary()
    ax.set_title(f"{s['kind']} organisation: {s['agents']:,} agents, {s['groups']:,} groups, {s['levels']} level(s)")
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
