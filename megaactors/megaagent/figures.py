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

from megaactors.behaviours.megaagent import STAGES
from megaactors.core.agent import AgentState
from megaactors.core.trace import Trace
from megaactors.megaagent.complexity import CURVES

__all__ = ["ablation_figure", "complexity_figure", "stage_figure", "timeline_figure"]

_PAPER, _SIM = "#7f7f7f", "#1f77b4"
_LABELS = {"planning": "planning", "task_solving": "task solving", "merging": "merging"}
_VARIANT_LABELS = {
    "full": "full",
    "no_parallelism": "w/o parallelism",
    "no_hierarchy": "w/o hierarchy",
    "no_monitoring": "w/o monitoring",
    "no_git_mutex": "w/o git mutex\n(not in paper)",
}


def _save(fig: Figure, path: Path | None) -> Figure:
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
    return _save(fig, path)


def ablation_figure(scenarios: dict[str, dict[str, Any]], path: Path | None = None) -> Figure:
    """Makespan of every ablation, paper against simulation, one panel per scenario."""
    fig = Figure(figsize=(6.5 * len(scenarios), 4.2))
    axes = fig.subplots(1, len(scenarios), squeeze=False)
    for ax, (name, sc) in zip(axes[0], scenarios.items(), strict=True):
        rows = sc["ablations"]
        names = list(rows)
        x = np.arange(len(names))
        paper = [rows[v]["paper_makespan_s"] or 0 for v in names]
        ours = [rows[v]["makespan_s"] for v in names]
        ax.bar(x - 0.2, paper, 0.4, color=_PAPER, label="paper")
        ax.bar(x + 0.2, ours, 0.4, color=_SIM, label="simulation")
        ax.set_xticks(x, [f"{_VARIANT_LABELS[v]}\n{rows[v]['agents']} agents" for v in names], fontsize=8)
        ax.set(
            yscale="log", ylabel="makespan (s, log scale)", title=f"{name}: ablations ({sc['paper']['ablation_table']})"
        )
        ax.legend()
        ax.grid(True, axis="y", which="both", alpha=0.3)
    return _save(fig, path)


def complexity_figure(rows: Sequence[dict[str, Any]], fits: dict[str, Any], path: Path | None = None) -> Figure:
    """Makespan versus N: all curves on log–log axes, and the parallel curve against log N."""
    fig = Figure(figsize=(12.5, 4.6))
    left, right = fig.subplots(1, 2)
    styles = {
        "parallel": ("o-", "#1f77b4", "parallel"),
        "serial": ("s-", "#d62728", "serial (one agent Processing at a time)"),
        "parallel_git_lock": ("^--", "#2ca02c", "parallel, git operations behind one mutex"),
    }
    for curve in CURVES:
        pts = sorted((r["agents"], r["makespan_s"]) for r in rows if r["curve"] == curve)
        if not pts:
            continue
        n = np.array([p[0] for p in pts], dtype=float)
        y = np.array([p[1] for p in pts], dtype=float)
        marker, color, label = styles[curve]
        exponent = fits.get(curve, {}).get("exponent")
        suffix = f" (slope {exponent:.2f})" if exponent is not None else ""
        left.plot(n, y, marker, color=color, label=label + suffix)
        if curve == "parallel" and "parallel" in fits:
            f = fits["parallel"]["log"]
            right.plot(n, y, "o", color=color, label="parallel (simulated)")
            grid = np.logspace(np.log10(n.min()), np.log10(n.max()), 50)
            right.plot(
                grid,
                f["a"] + f["b_per_decade"] * np.log10(grid),
                "-",
                color="black",
                label=f"fit {f['a']:.0f} + {f['b_per_decade']:.0f}·log10 N (R² {f['r2']:.3f})",
            )
        if curve == "serial" and "serial" in fits:
            c = fits["serial"]["proportional"]
            grid = np.logspace(np.log10(n.min()), np.log10(n.max()), 50)
            left.plot(grid, c["c_per_agent"] * grid, ":", color=color, label=f"fit {c['c_per_agent']:.1f} s × N")
    left.set(xscale="log", yscale="log", xlabel="agents N", ylabel="makespan (s, virtual)", title="Makespan versus N")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    right.set(
        xscale="log", xlabel="agents N (log scale)", ylabel="makespan (s, linear scale)", title="Parallel: a + b·log N"
    )
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=8)
    return _save(fig, path)


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
    return _save(fig, path)
