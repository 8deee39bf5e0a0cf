"""Figures of the §3 reproduction: paper against simulation.

Every function returns a matplotlib :class:`~matplotlib.figure.Figure` built without
pyplot (so importing this module never changes a notebook's backend) and, given a
path, also writes it as PNG.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from megaactors.behaviours.megaagent import STAGES
from megaactors.core.agent import AgentState
from megaactors.core.trace import Trace

__all__ = ["ablation_figure", "gantt_figure", "occupancy_figure", "save", "stage_figure", "timeline_figure"]

_PAPER, _SIM = "#7f7f7f", "#1f77b4"
_LABELS = {"planning": "planning", "task_solving": "task solving", "merging": "merging"}
_VARIANT_LABELS = {
    "full": "full",
    "no_parallelism": "w/o parallelism",
    "no_hierarchy": "w/o hierarchy",
    "no_monitoring": "w/o monitoring",
    "no_git_mutex": "w/o git mutex\n(not in paper)",
}


def save(fig: Figure, path: Path | None) -> Figure:
    """Write ``fig`` as PNG when a path is given; return it."""
    if path is not None:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    return fig


def stage_figure(scenarios: dict[str, dict[str, Any]], path: Path | None = None) -> Figure:
    """Input and output tokens per stage, paper against simulation, one panel per scenario."""
    fig = Figure(figsize=(6 * len(scenarios), 4.2))
    axes = fig.subplots(1, len(scenarios), squeeze=False)
    for ax, (name, sc) in zip(axes[0], scenarios.items(), strict=True):
        x = np.arange(len(STAGES) * 2)
        paper = [sc["paper"]["stages"][s][k] for s in STAGES for k in ("tokens_in", "tokens_out")]
        ours = [sc["stages"][s][k] for s in STAGES for k in ("tokens_in", "tokens_out")]
        ax.bar(x - 0.2, paper, 0.4, color=_PAPER, label="paper")
        ax.bar(x + 0.2, ours, 0.4, color=_SIM, label="simulation")
        ax.set_xticks(x, [f"{_LABELS[s]}\n{k}" for s in STAGES for k in ("in", "out")], fontsize=8)
        ax.set(yscale="log", ylabel="tokens", title=f"{name}: tokens per stage ({sc['paper']['table']})")
        ax.legend()
        ax.grid(True, axis="y", which="both", alpha=0.3)
    return save(fig, path)


def ablation_figure(scenarios: dict[str, dict[str, Any]], path: Path | None = None) -> Figure:
    """Makespan of every ablation, paper against simulation (mean and 95 % interval
    over seeds), one panel per scenario. A paper figure that is a lower bound is drawn
    as a hatched bar with an arrow, not as a value."""
    fig = Figure(figsize=(6.5 * len(scenarios), 4.4))
    axes = fig.subplots(1, len(scenarios), squeeze=False)
    for ax, (name, sc) in zip(axes[0], scenarios.items(), strict=True):
        rows = sc["ablations"]
        names = list(rows)
        x = np.arange(len(names))
        for i, v in enumerate(names):
            paper, bound = rows[v]["paper_makespan_s"], rows[v]["paper_is_lower_bound"]
            if paper:
                ax.bar(
                    i - 0.2,
                    paper,
                    0.4,
                    color="white" if bound else _PAPER,
                    edgecolor=_PAPER,
                    hatch="//" if bound else None,
                )
                if bound:
                    ax.annotate(
                        "", (i - 0.2, paper * 2.2), (i - 0.2, paper), arrowprops={"arrowstyle": "->", "color": _PAPER}
                    )
                    ax.text(i - 0.2, paper * 2.4, f"> {paper:,.0f}\n(stopped)", ha="center", fontsize=7, color=_PAPER)
        mk = [rows[v]["makespan_s"] for v in names]
        means = np.array([m["mean"] for m in mk])
        err = np.array([[m["mean"] - m["lo"] for m in mk], [m["hi"] - m["mean"] for m in mk]])
        ax.bar(x + 0.2, means, 0.4, color=_SIM, yerr=err, capsize=3)
        values = [*means, *(rows[v]["paper_makespan_s"] for v in names if rows[v]["paper_makespan_s"])]
        labels = [f"{_VARIANT_LABELS[v]}\n{rows[v]['agents']['mean']:,.0f} agents" for v in names]
        ax.set_xticks(x, labels, fontsize=8)
        ax.set(
            yscale="log",
            ylim=(min(values) / 2, max(values) * 5),
            ylabel="makespan (s, log scale)",
            title=f"{name}: ablations ({sc['paper']['ablation_table']})",
        )
        handles = [
            Patch(color=_PAPER, label="paper"),
            Patch(facecolor="white", edgecolor=_PAPER, hatch="//", label="paper, lower bound"),
            Patch(color=_SIM, label="simulation (mean, 95 % CI)"),
        ]
        ax.legend(handles=handles, fontsize=7, loc="upper right")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    return save(fig, path)


def gantt_figure(scenarios: dict[str, dict[str, Any]], path: Path | None = None) -> Figure:
    """Stage windows (first call start to last call end), paper against simulation
    (the simulation's bar spans the seeds' mean window; whiskers their range)."""
    fig = Figure(figsize=(6.5 * len(scenarios), 3.6), layout="constrained")
    axes = fig.subplots(1, len(scenarios), squeeze=False)
    for ax, (name, sc) in zip(axes[0], scenarios.items(), strict=True):
        for row, stage in enumerate(STAGES):
            p0, p1 = sc["paper"]["stages"][stage]["window_s"]
            ax.broken_barh([(p0, p1 - p0)], (row + 0.05, 0.4), color=_PAPER)
            w = sc["stage_windows"][stage]
            s0, s1 = w["start"]["mean"], w["end"]["mean"]
            ax.broken_barh([(s0, max(s1 - s0, 1e-9))], (row - 0.45, 0.4), color=_SIM)
            ax.errorbar(
                [s1], [row - 0.25], xerr=[[s1 - w["end"]["min"]], [w["end"]["max"] - s1]], fmt="none", color="black"
            )
        ax.set_yticks(range(len(STAGES)), [_LABELS[s] for s in STAGES])
        handles = [
            Patch(color=_SIM, label="simulation (mean; whisker: range of the end over seeds)"),
            Patch(color=_PAPER, label="paper"),
        ]
        ax.set(xlabel="time (s)", title=f"{name}: stage windows ({sc['paper']['table']})")
        ax.invert_yaxis()
        ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncols=2)
        ax.grid(True, axis="x", alpha=0.3)
    return save(fig, path)


def occupancy_figure(panels: dict[str, dict[str, Any]], path: Path | None = None) -> Figure:
    """Agents Idle and Processing over time, and how many of the Processing ones wait
    for the git mutex (one panel per run; Response is instantaneous in simulation)."""
    fig = Figure(figsize=(6.5 * len(panels), 3.8))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (title, occ) in zip(axes[0], panels.items(), strict=True):
        t = occ["time_s"]
        ax.stackplot(
            t,
            occ["processing"] - occ["waiting_for_mutex"],
            occ["waiting_for_mutex"],
            occ["idle"],
            colors=[_SIM, "#d62728", "#dddddd"],
            labels=["Processing (LLM or tool)", "Processing, waiting for the git mutex", "Idle"],
            step="post",
        )
        ax.set(xlabel="virtual time (s)", ylabel="agents that have started", title=title)
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(True, alpha=0.3)
    return save(fig, path)


def timeline_figure(trace: Trace, roles: Sequence[str], title: str, path: Path | None = None) -> Figure:
    """Processing intervals of every agent over virtual time."""
    starts: dict[int, float] = {}
    spans: dict[int, list[tuple[float, float]]] = {}
    for a, f, t, tm in zip(trace.t_agent, trace.t_from, trace.t_to, trace.t_time, strict=True):
        if t == AgentState.PROCESSING:
            starts[a] = tm
        elif f == AgentState.PROCESSING:
            spans.setdefault(a, []).append((starts.pop(a), tm))
    agents = sorted(spans)
    fig = Figure(figsize=(10, 0.45 * len(agents) + 1.5))
    ax = fig.subplots()
    colors = {"boss": "#d62728", "admin": "#ff7f0e", "agent": "#1f77b4"}
    for row, a in enumerate(agents):
        bars = [(s, max(e - s, 1e-9)) for s, e in spans[a]]
        ax.broken_barh(bars, (row - 0.4, 0.8), color=colors.get(roles[a], "#1f77b4"))
    ax.set_yticks(range(len(agents)), [f"{a} ({roles[a]})" for a in agents], fontsize=8)
    ax.set(xlabel="virtual time (s)", title=title)
    ax.grid(True, axis="x", alpha=0.3)
    return save(fig, path)
