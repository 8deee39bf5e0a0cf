"""Figures of the reproduction's sweeps: makespan versus N, the sensitivity tornado
and the candidate mechanisms. Built without pyplot, like :mod:`.figures`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from megaactors.megaagent.figures import save

__all__ = ["complexity_figure", "mechanism_figure", "tornado_figure"]

_FIT_LABEL = {"depth": "a + b·depth", "log": "a + b·log N", "sqrt": "a + b·√N", "linear": "a + b·N", "power": "a·N^b"}


def _predict(model: str, fit: dict[str, float], n: np.ndarray, levels: np.ndarray) -> np.ndarray:
    x = {"depth": levels, "log": np.log10(n), "sqrt": np.sqrt(n), "linear": n}.get(model)
    if x is None:
        return fit["a"] * n ** fit["b"]
    return fit["a"] + fit["b"] * x


def _curve(ax: Any, entry: dict[str, Any], color: str, label: str, style: str = "o-") -> None:
    pts = entry["points"]
    n = np.array([p["agents"] for p in pts], dtype=float)
    mean = np.array([p["makespan_s"]["mean"] for p in pts])
    lo = np.array([p["makespan_s"]["lo"] for p in pts])
    hi = np.array([p["makespan_s"]["hi"] for p in pts])
    models = entry.get("models")
    if models:
        best = models["best_aic"]
        label += f" — best {_FIT_LABEL[best]}, power b = {models['models']['power']['b']:.2f}"
    ax.plot(n, mean, style, color=color, label=label, markersize=4)
    ax.fill_between(n, lo, hi, color=color, alpha=0.25)


def complexity_figure(summary: dict[str, Any], main_fanout: int, path: Path | None = None) -> Figure:
    """Three panels: the main fan-out's curves (parallel, serial, git mutex); the
    parallel curve for every fan-out; the paper's three-level regime with its fits."""
    fig = Figure(figsize=(17, 4.8), layout="constrained")
    left, middle, right = fig.subplots(1, 3)
    colors = {"parallel": "#1f77b4", "serial": "#d62728", "parallel_git_lock": "#2ca02c"}
    names = {
        "parallel": "parallel",
        "serial": "serial (one agent Processing at a time)",
        "parallel_git_lock": "parallel, git behind one mutex",
    }
    for curve, color in colors.items():
        entry = summary.get(f"fanout{main_fanout}/{curve}")
        if entry:
            _curve(left, entry, color, names[curve])
    left.set(xscale="log", yscale="log", xlabel="agents N", ylabel="makespan (s)", title=f"Fan-out {main_fanout}")
    palette = ["#9467bd", "#1f77b4", "#ff7f0e", "#8c564b"]
    fanouts = sorted({int(k[6:].split("/")[0]) for k in summary if k.startswith("fanout") and k.endswith("/parallel")})
    for f, color in zip(fanouts, palette, strict=False):
        _curve(middle, summary[f"fanout{f}/parallel"], color, f"fan-out {f}")
    middle.set(xscale="log", xlabel="agents N (log)", ylabel="makespan (s)", title="Parallel, balanced trees")
    three = summary.get("three_levels")
    if three:
        _curve(right, three, "#17becf", "three levels, fan-out √N")
        pts = three["points"]
        n = np.array([p["agents"] for p in pts], dtype=float)
        levels = np.array([p["levels"] for p in pts], dtype=float)
        for model, style in (("log", ":"), ("sqrt", "--"), ("power", "-.")):
            fit = three["models"]["models"][model]
            right.plot(
                n,
                _predict(model, fit, n, levels),
                style,
                color="black",
                label=f"{_FIT_LABEL[model]} (ΔAIC {fit['delta_aic']:.0f})",
            )
    right.set(xscale="log", xlabel="agents N (log)", ylabel="makespan (s)", title="The paper's regime: 3 levels")
    for ax in (left, middle, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return save(fig, path)


def tornado_figure(sensitivity: dict[str, Any], path: Path | None = None) -> Figure:
    """Per scenario: the range of mean makespan and speed-up over each axis's plausible
    range, widest on top, against the calibrated value and the paper's."""
    fig = Figure(figsize=(13, 3.2 * len(sensitivity) + 0.8), layout="constrained")
    axes = fig.subplots(len(sensitivity), 2, squeeze=False)
    for row, (name, sens) in enumerate(sensitivity.items()):
        for col, (key, label, paper_key) in enumerate(
            (("makespan_s", "makespan (s)", "paper_makespan_s"), ("speedup", "parallel speed-up (×)", "paper_speedup"))
        ):
            ax = axes[row][col]
            base = sens["base"][key]
            axes_rows = sorted(sens["axes"], key=lambda a: abs(a["high"][key] - a["low"][key]))
            for i, a in enumerate(axes_rows):
                lo, hi = a["low"][key], a["high"][key]
                ax.barh(i, lo - base, left=base, color="#1f77b4", height=0.6)
                ax.barh(i, hi - base, left=base, color="#ff7f0e", height=0.6)
            ax.set_yticks(range(len(axes_rows)), [a["label"] for a in axes_rows], fontsize=7)
            ax.axvline(base, color="black", lw=1)
            paper = sens[paper_key]
            line = ax.axvline(paper, color="#7f7f7f", ls="--", label=f"paper {paper:,.2f}".rstrip("0").rstrip("."))
            handles = [Patch(color="#1f77b4", label="low end"), Patch(color="#ff7f0e", label="high end"), line]
            ax.set(xlabel=label, title=f"{name}: {label}")
            ax.legend(handles=handles, fontsize=7)
            ax.grid(True, axis="x", alpha=0.3)
    return save(fig, path)


def mechanism_figure(mechanisms: dict[str, Any], path: Path | None = None) -> Figure:
    """Speed-up of every candidate mechanism (mean and 95 % CI over seeds), with the
    parallel run's mean concurrency (the bound) and the paper's speed-up."""
    fig = Figure(figsize=(6.5 * len(mechanisms), 4.4))
    axes = fig.subplots(1, len(mechanisms), squeeze=False)
    for ax, (name, mech) in zip(axes[0], mechanisms.items(), strict=True):
        rows = mech["rows"]
        x = np.arange(len(rows))
        sp = [r["result"]["speedup"] for r in rows]
        mean = np.array([s["mean"] for s in sp])
        err = np.array([[s["mean"] - s["lo"] for s in sp], [s["hi"] - s["mean"] for s in sp]])
        ax.bar(x, mean, 0.6, yerr=err, capsize=3, color="#1f77b4", label="speed-up (mean, 95 % CI)")
        conc = [r["result"]["mean_concurrency"]["mean"] for r in rows]
        ax.plot(x, conc, "k_", markersize=22, mew=2, label="parallel run's mean concurrency (bound)")
        paper = mech["paper_speedup"]
        ax.axhline(
            paper,
            color="#7f7f7f",
            ls="--",
            label=("paper ≥ " if mech["paper_is_lower_bound"] else "paper ") + f"{paper:.2f}×",
        )
        ax.set_xticks(x, [r["name"].replace("_", "\n") for r in rows], fontsize=7)
        ax.set(ylabel="serial / parallel makespan", title=f"{name}: candidate mechanisms")
        ax.legend(fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    return save(fig, path)
