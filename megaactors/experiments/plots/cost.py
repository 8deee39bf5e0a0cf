"""Cost figures from sweep rows: cost versus N, makespan versus N, cost versus group
size, and :func:`plot_results` saving every figure the rows allow."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from megaactors.experiments.closed_forms import closed_form_messages, optimal_group_size
from megaactors.experiments.plots.common import (
    COLUMN,
    METRICS,
    FigureJob,
    exponent_text,
    figure_and_axes,
    fit_exponent,
    log_axes,
    parallel_only,
    prepared,
    prices_text,
    rounds_text,
    save_figures,
    spread,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

__all__ = [
    "coinciding",
    "cost_figure",
    "cost_overview_figure",
    "figure_jobs",
    "group_size_figure",
    "makespan_figure",
    "plot_results",
]

SAME_LINE = 0.02
"""Series whose means differ by less than this fraction at every common N (at least
two) are drawn as one line would be: told apart by marker, line style and legend."""


def coinciding(curves: dict[str, pd.Series]) -> dict[str, str]:
    """For each series (label → mean per N, in drawing order) that lies on an earlier
    one within :data:`SAME_LINE`, the label of the first such earlier series."""
    on: dict[str, str] = {}
    labels = list(curves)
    for i, label in enumerate(labels):
        mine = curves[label]
        for other in labels[:i]:
            theirs = curves[other]
            common = mine.index.intersection(theirs.index)
            if len(common) < 2:
                continue
            a, b = mine.loc[common].to_numpy(float), theirs.loc[common].to_numpy(float)
            if np.all(np.abs(a - b) <= SAME_LINE * np.maximum(np.abs(b), 1e-300)):
                on[label] = on.get(other, other)
                break
    return on


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
    fig, ax = figure_and_axes(ax, (7.5, 5.2))
    data = prepared(parallel_only(df))
    column = COLUMN[metric]
    groups = list(data.groupby("series", sort=False))
    means = {
        str(label): spread(rows[rows["status"] == "ok"], column)["mean"]
        for label, rows in groups
        if (rows["status"] == "ok").any()
    }
    on = coinciding(means)
    drawn = False
    for label, rows in groups:
        colour, marker = rows["colour"].iloc[0], rows["marker"].iloc[0]
        measured = rows[rows["status"] == "ok"]
        skipped = rows[rows["status"] == "skipped"]
        last = None
        if len(measured):
            stats = spread(measured, column)
            b = fit_exponent(stats.index, stats["mean"])
            other = on.get(str(label))
            ax.plot(
                stats.index,
                stats["mean"],
                marker=marker,
                color=colour,
                ms=5 if other is None else 9,
                lw=1.6,
                ls="-" if other is None else (0, (4, 3)),
                mfc="none",
                zorder=2 if other is None else 3,
                label=f"{label}{exponent_text(b)}" + ("" if other is None else f" (on the {other} line)"),
            )
            ax.fill_between(stats.index, stats["min"], stats["max"], color=colour, alpha=0.2, lw=0)
            drawn = True
            n_last = stats.index.max()
            per_message = spread(measured, "messages").loc[n_last, "mean"]
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
    title = f"{title} versus number of agents ({rounds_text(df)})"
    if metric == "dollars":
        title += "\n" + prices_text(df)
    log_axes(ax, "agents N", f"{ylabel} per run", title)
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


def makespan_figure(df: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """Virtual makespan versus N, log–log: parallel runs solid, serial (one agent
    Processing at a time) dashed, one colour per organisation."""
    fig, ax = figure_and_axes(ax, (7.5, 5.2))
    data = prepared(df[df["status"] == "ok"])
    groups = list(data.groupby(["series", "serial"], sort=False))
    labels = [f"{label}, {'serial' if serial else 'parallel'}" for (label, serial), _ in groups]
    on = coinciding(
        {name: spread(rows, "virtual_time_s")["mean"] for name, (_, rows) in zip(labels, groups, strict=True)}
    )
    for name, ((_, serial), rows) in zip(labels, groups, strict=True):
        stats = spread(rows, "virtual_time_s")
        b = fit_exponent(stats.index, stats["mean"])
        colour, marker = rows["colour"].iloc[0], rows["marker"].iloc[0]
        other = on.get(name)
        ax.plot(
            stats.index,
            stats["mean"],
            ls="--" if serial else ("-" if other is None else (0, (4, 3))),
            marker=marker,
            mfc="none" if serial or other is not None else colour,
            color=colour,
            ms=5 if other is None else 9,
            lw=1.5,
            zorder=2 if other is None else 3,
            label=f"{name}{exponent_text(b)}" + ("" if other is None else f" (on the {other} line)"),
        )
        ax.fill_between(stats.index, stats["min"], stats["max"], color=colour, alpha=0.18, lw=0)
    log_axes(ax, "agents N", "makespan (virtual seconds)", f"Makespan versus number of agents ({rounds_text(df)})")
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
        log_axes(ax, "group size G (agents per group)", unit, "")
        ax.legend(fontsize=8, loc="upper center")
    left.set_title(f"Messages versus group size, N = {agents:,}")
    right.set_title(f"LLM cost versus group size, N = {agents:,}\n{prices_text(rows)}")
    fig.suptitle(f"Two-tier organisation: the cost-minimising group size ({rounds_text(rows)})")
    return fig


def figure_jobs(df: pd.DataFrame) -> list[FigureJob]:
    """Every figure the sweep rows allow, as jobs for :func:`save_figures`."""
    usable = df[df["status"].isin(("ok", "skipped"))]
    if usable.empty:
        return []
    jobs = [FigureJob(metric, cost_figure, (usable, metric)) for metric in METRICS]
    jobs.append(FigureJob("coordination_cost", cost_overview_figure, (usable,)))
    if (df["status"] == "ok").any():
        jobs.append(FigureJob("makespan", makespan_figure, (df,)))
    fixed = df[(df["topology"] == "two-tier") & (df["status"] == "ok") & (df["group_rule"] == "fixed")]
    if len(fixed) and fixed.groupby("agents")["group_size"].nunique().max() >= 3:
        jobs.append(FigureJob("group_size", group_size_figure, (df,)))
    return jobs


def plot_results(df: pd.DataFrame, out: str | Path, *, workers: int = 0) -> list[Path]:
    """Every figure the sweep rows allow, as PNG and SVG in ``out`` (drawn in
    ``workers`` processes at once, or in this one); returns the paths."""
    return save_figures(figure_jobs(df), out, workers)
