"""What every figure family shares: saving, fits, series labels, colours and markers,
axes styling and the model-and-prices title of dollar figures."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.figure import Figure

from megaactors.core.llm import PRICES
from megaactors.experiments.closed_forms import OPTIMAL
from megaactors.experiments.result_rows import PARAMS

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

__all__ = [
    "COLUMN",
    "MARKERS",
    "METRICS",
    "SPARE_COLOURS",
    "STATE_COLOURS",
    "TOPOLOGY_COLOURS",
    "FigureJob",
    "exponent_text",
    "figure_and_axes",
    "fit_exponent",
    "log_axes",
    "parallel_only",
    "prepared",
    "price_title",
    "prices_text",
    "rounds_text",
    "save_figure",
    "save_figures",
    "series_labels",
    "spread",
]

METRICS: dict[str, tuple[str, str]] = {
    "messages": ("Messages", "messages"),
    "bytes": ("Bytes on the wire", "bytes (encoded envelopes)"),
    "tokens": ("LLM tokens", "tokens (in + out)"),
    "dollars": ("LLM cost", "cost (USD)"),
}
"""Cost figure name → (title, y-axis label)."""

COLUMN = {"messages": "messages", "bytes": "bytes", "tokens": "tokens", "dollars": "cost_usd"}
TOPOLOGY_COLOURS = {"flat": "tab:red", "star": "tab:orange", "two-tier": "tab:blue", "hierarchy": "tab:purple"}
SPARE_COLOURS = ("tab:green", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray", "black")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
STATE_COLOURS = {"IDLE": "#d9d9d9", "PROCESSING": "tab:blue", "RESPONSE": "tab:orange"}
# parameters that never name a series: the x axis, the spread, and those shown otherwise
_NOT_SERIES = {"agents", "seed", "topology", "group_size", "group_rule", "fanout", "serial", "trace"}


def save_figure(fig: Figure, out: str | Path, name: str, *, dpi: int = 130) -> list[Path]:
    """Write ``fig`` as ``out/name.png`` and ``out/name.svg``; return both paths. (Every
    figure here is laid out by matplotlib's constrained layout, so no tight bounding
    box is computed: that would draw each figure once more.)"""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    fig.savefig(paths[0], dpi=dpi)
    fig.savefig(paths[1], metadata={"Date": None})
    return paths


@dataclass(frozen=True)
class FigureJob:
    """A figure to make and save: ``make(*args, **kwargs)`` saved as ``name``. Jobs whose
    function is defined at module level can run in worker processes."""

    name: str
    make: Callable[..., Figure]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def save(self, out: str | Path) -> list[Path]:
        return save_figure(self.make(*self.args, **self.kwargs), out, self.name)


def save_figures(jobs: Sequence[FigureJob], out: str | Path, workers: int = 0) -> list[Path]:
    """Make and save every job into ``out`` — in ``workers`` processes at once, or in
    this one with ``workers=0`` — and return the paths in job order. Drawing and
    encoding dominate a figure's cost, so this scales with cores."""
    if workers <= 0 or len(jobs) < 2:
        return [p for job in jobs for p in job.save(out)]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(min(workers, len(jobs))) as pool:
        done = list(pool.map(FigureJob.save, jobs, [out] * len(jobs)))
    return [p for paths in done for p in paths]


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


def price_title(model: str, price_in: float, price_out: float) -> str:
    """``"gpt-4o-mini at $0.15 in / $0.60 out per M tokens"``: what a dollar figure's
    title says about the prices behind it (dollars per million tokens)."""
    return f"{model} at ${price_in:,.2f} in / ${price_out:,.2f} out per M tokens"


def prices_text(df: pd.DataFrame) -> str:
    """:func:`price_title` of every model in the rows (their ``price_in`` /
    ``price_out`` columns where present, else the price table), joined by "; ", with
    each ``$`` escaped so that matplotlib does not read it as mathematics."""
    if "model" not in df.columns or df.empty:
        return "model and prices not recorded"
    rows = df.drop_duplicates([c for c in ("model", "price_in", "price_out") if c in df.columns])
    titles = []
    for row in rows.to_dict("records"):
        model = str(row.get("model", ""))
        price_in, price_out = row.get("price_in"), row.get("price_out")
        if price_in is None or price_out is None or price_in != price_in or price_out != price_out:
            if model not in PRICES:
                titles.append(f"{model} (price unknown)")
                continue
            price_in, price_out = PRICES[model].input_per_m, PRICES[model].output_per_m
        titles.append(price_title(model, float(price_in), float(price_out)))
    return "; ".join(dict.fromkeys(titles)).replace("$", r"\$")


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
        colour = TOPOLOGY_COLOURS.get(topology)
        if label not in colours and colour is not None and colour not in colours.values():
            colours[label] = colour
    spare = [c for c in SPARE_COLOURS if c not in colours.values()] or list(SPARE_COLOURS)
    for label in labels:
        if label not in colours:
            colours[label] = spare[len(colours) % len(spare)]
    return colours


def prepared(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with a ``series`` column and a stable ``colour`` and ``marker`` per series;
    series with a single N are left out when others have several (they cannot make a
    curve)."""
    df = _with_tokens(df)
    df["series"] = series_labels(df)
    spans = df.groupby("series")["agents"].transform("nunique")
    if (spans > 1).any():
        df = df[spans > 1].copy()
    order = df.drop_duplicates("series")
    colours = _colours(list(order["series"]), list(order["topology"]))
    df["colour"] = df["series"].map(colours)
    markers = {label: MARKERS[i % len(MARKERS)] for i, label in enumerate(order["series"])}
    df["marker"] = df["series"].map(markers)
    return df


def parallel_only(df: pd.DataFrame) -> pd.DataFrame:
    """Parallel runs where the frame has both (serial runs only matter for makespan)."""
    serial = df["serial"].astype(bool)
    return df[~serial] if (~serial).any() else df


def spread(measured: pd.DataFrame, column: str) -> pd.DataFrame:
    """Mean, min and max of ``column`` over seeds, per N."""
    stats = measured.groupby("agents")[column].agg(["mean", "min", "max"]).sort_index()
    stats.index = stats.index.astype(float)
    return stats.astype(float)


def figure_and_axes(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    """``ax`` and its figure, or a new figure of ``size`` inches with one axes."""
    if ax is not None:
        return ax.get_figure(), ax  # type: ignore[return-value]
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def log_axes(ax: Axes, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)


def exponent_text(b: float | None) -> str:
    return "" if b is None else f"  $\\propto N^{{{b:.2f}}}$"


def rounds_text(df: pd.DataFrame) -> str:
    rounds = sorted({int(r) for r in df["rounds"].dropna()})
    if len(rounds) == 1:
        return f"{rounds[0]} chat round" + ("s" if rounds[0] != 1 else "")
    return "chat rounds"
