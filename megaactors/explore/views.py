"""The explorer's figures: a run as it stands (the organisation coloured by state, queue
depths beside it) and its series so far (from a :class:`DataCollector`)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from megaactors.core.agent import AgentState
from megaactors.experiments.plots.common import STATE_COLOURS, prices_text
from megaactors.experiments.plots.organisation import organisation_figure

if TYPE_CHECKING:
    import pandas as pd

    from megaactors.core.organisation import Organisation

__all__ = ["BARS_UP_TO", "png", "series_figure", "state_figure"]

BARS_UP_TO = 1_000
"""In-queues are drawn as one bar per agent up to this N, as an outline beyond."""


def png(fig: Figure, dpi: int = 72) -> bytes:
    """The figure as PNG bytes (for an ``ipywidgets.Image``)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def state_figure(
    org: Organisation,
    states: Sequence[AgentState],
    queues: Sequence[int],
    traffic: dict[str, int],
    *,
    time_s: float,
    events: int,
    max_drawn: int = 400,
) -> Figure:
    """The organisation with agents coloured by state and only the channels that have
    carried messages so far (left; a note instead beyond ``max_drawn`` agents), and
    each agent's in-queue depth coloured by its state (right; beyond
    :data:`BARS_UP_TO` agents an outline, with Processing agents ticked beneath)."""
    # a fixed layout: constrained layout would double the cost of every redraw
    fig = Figure(figsize=(12, 5.6))
    grid = fig.add_gridspec(1, 2, width_ratios=(1.15, 1), left=0.01, right=0.97, bottom=0.1, top=0.88, wspace=0.6)
    left, right = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
    if org.n <= max_drawn:
        organisation_figure(org, states=states, traffic=traffic, ax=left)
    else:
        left.axis("off")
        left.text(
            0.5,
            0.5,
            f"{org.n:,} agents: too many to draw (at most {max_drawn:,});\nqueue depths and series are shown",
            ha="center",
            va="center",
            transform=left.transAxes,
        )
    depth = np.asarray(queues, dtype=float)
    if org.n <= BARS_UP_TO:
        colours = [STATE_COLOURS[AgentState(s).name] for s in states]
        right.bar(np.arange(org.n), depth, width=1.0, color=colours, edgecolor="none")
    else:  # thousands of bars draw slowly: one outline, Processing agents marked beneath it
        right.fill_between(np.arange(org.n), depth, step="mid", color="0.45", lw=0)
        busy = np.flatnonzero(np.asarray(states) == AgentState.PROCESSING)
        right.plot(busy, np.zeros(len(busy)), "|", color=STATE_COLOURS["PROCESSING"], ms=6)
    right.set_xlim(-0.5, org.n - 0.5)
    right.set_ylim(0, max(1.0, float(depth.max(initial=0)) * 1.1))
    right.set_xlabel("agent")
    right.set_ylabel("messages waiting in its in-queue")
    counts = {s: sum(1 for x in states if AgentState(x) is s) for s in AgentState}
    right.legend(
        handles=[Patch(color=STATE_COLOURS[s.name], label=f"{s.name.capitalize()}: {counts[s]}") for s in AgentState],
        fontsize=8,
        loc="upper right",
    )
    right.set_title(
        f"In-queues at t = {time_s:.3f} s (virtual), after {events:,} events\n{int(depth.sum()):,} messages waiting"
    )
    return fig


def series_figure(model: pd.DataFrame, rows_for_prices: pd.DataFrame | None = None) -> Figure:
    """Agents Processing and messages waiting (left), and messages and dollars so far
    (right), over virtual time, one point per collection."""
    fig = Figure(figsize=(12, 3.6))
    fig.subplots_adjust(left=0.06, right=0.93, bottom=0.15, top=0.83, wspace=0.3)
    left, right = fig.subplots(1, 2)
    t = model["time"]
    left.step(t, model["processing"], where="post", color=STATE_COLOURS["PROCESSING"], label="agents Processing")
    left.step(t, model["queued"], where="post", color="0.3", ls="--", label="messages waiting (all in-queues)")
    left.set_xlabel("virtual time (seconds)")
    left.set_ylabel("count")
    left.set_title("States and queues over time")
    left.legend(fontsize=8, loc="upper right")
    right.step(t, model["messages"], where="post", color="tab:purple", label="messages sent")
    right.set_xlabel("virtual time (seconds)")
    right.set_ylabel("messages sent so far", color="tab:purple")
    dollars = right.twinx()
    dollars.step(t, model["cost_usd"], where="post", color="tab:green", label="LLM cost (USD)")
    dollars.set_ylabel("LLM cost so far (USD)", color="tab:green")
    title = "Messages and dollars so far"
    if rows_for_prices is not None:
        title += "\n" + prices_text(rows_for_prices)
    right.set_title(title, fontsize=10)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    return fig
