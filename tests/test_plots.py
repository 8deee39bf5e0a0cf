"""Figures: what they draw is what the rows and runs say."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection, PathCollection

from megaactors import AgentState, Organisation, RunSpec, SimRuntime
from megaactors.experiments.plots import (
    METRICS,
    cost_figure,
    fit_exponent,
    group_size_figure,
    load_figure,
    makespan_figure,
    organisation_figure,
    plot_results,
    queue_figure,
    sample_queues,
    save_figure,
    series_labels,
    timeline_figure,
)
from megaactors.experiments.sweep import closed_form_messages, optimal_group_size, run_sweep


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    grid = [
        {"topology": ["flat", "star"], "agents": [10, 30, 100, 300], "seed": [1, 2]},
        {"topology": "two-tier", "agents": [10, 30, 100, 300], "group_size": [5, "optimal"], "seed": [1, 2]},
        {"topology": "star", "agents": [10, 30, 100], "seed": [1, 2], "serial": True},
        {"topology": "two-tier", "agents": 200, "group_size": [2, 4, 6, 7, 9, 14, 20, 40], "seed": [1, 2]},
    ]
    return run_sweep(grid, None, workers=2, max_messages=20_000, progress=False)


def legend_texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def line(fig, label: str):
    found = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == label]
    assert len(found) == 1, (label, [ln.get_label() for ax in fig.axes for ln in ax.get_lines()])
    return found[0]


def test_fit_exponent_recovers_a_power_law() -> None:
    n = np.array([10, 100, 1000, 10_000])
    assert fit_exponent(n, 3 * n**1.5) == pytest.approx(1.5)
    assert fit_exponent(n, n * (n - 1)) == pytest.approx(2.0, abs=0.02)
    assert fit_exponent([10], [5]) is None
    assert fit_exponent([10, 10], [5, 6]) is None


def test_series_labels_name_the_organisation_and_what_varies() -> None:
    df = pd.DataFrame(
        {
            "topology": ["two-tier", "two-tier", "hierarchy", "flat"],
            "group_rule": ["fixed", "optimal", "", ""],
            "group_size": [10, 13, 10, 10],
            "fanout": [5, 5, 3, 5],
            "agents": [100, 1000, 100, 100],
            "seed": [1, 2, 3, 4],
            "model": ["gpt-4o", "gpt-4o", "gpt-4o-mini", "gpt-4o"],
            "rounds": [1, 1, 1, 1],
        }
    )
    assert list(series_labels(df)) == [
        "two-tier, G = 10, model=gpt-4o",
        "two-tier, optimal G, model=gpt-4o",
        "hierarchy, fan-out 3, model=gpt-4o-mini",
        "flat, model=gpt-4o",
    ]


@pytest.mark.parametrize("metric", list(METRICS))
def test_cost_figure_draws_each_organisation_with_its_exponent(rows: pd.DataFrame, metric: str) -> None:
    fig = cost_figure(rows, metric)
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert ax.get_xlabel() == "agents N" and "per run" in ax.get_ylabel()
    column = {"messages": "messages", "bytes": "bytes", "dollars": "cost_usd", "tokens": None}[metric]
    parallel = rows[(rows["status"] == "ok") & ~rows["serial"]]
    texts = legend_texts(fig)
    for label, topology, rule in (("star", "star", ""), ("two-tier, optimal G", "two-tier", "optimal")):
        mine = parallel[(parallel["topology"] == topology) & (parallel["group_rule"] == rule)]
        if column is None:
            values = (mine["tokens_in"] + mine["tokens_out"]).groupby(mine["agents"]).mean()
        else:
            values = mine.groupby("agents")[column].mean()
        b = fit_exponent(values.index, values.to_numpy(dtype=float))
        text = f"{label}  $\\propto N^{{{b:.2f}}}$"
        assert text in texts
        drawn = line(fig, text)
        assert list(drawn.get_xdata()) == list(values.index)
        assert np.allclose(drawn.get_ydata(), values.to_numpy(dtype=float))
    # the one-N group-size runs are no curve, the serial runs are only in the makespan figure
    assert not any("G = 2" in t or "serial" in t for t in texts)


def test_cost_figure_continues_skipped_runs_with_the_closed_form(rows: pd.DataFrame) -> None:
    fig = cost_figure(rows, "messages")
    closed = line(fig, "flat: closed form beyond N = 100 (not run)")
    assert list(closed.get_xdata()) == [100, 300]
    assert list(closed.get_ydata()) == [100 * 99, 300 * 299]
    assert closed.get_linestyle() == "--"
    dollars = line(cost_figure(rows, "dollars"), "flat: closed form beyond N = 100 (not run)")
    flat100 = rows[(rows["topology"] == "flat") & (rows["agents"] == 100)]
    per_message = flat100["cost_usd"].mean() / 9900
    assert dollars.get_ydata()[1] == pytest.approx(300 * 299 * per_message)


def test_cost_figure_shows_the_spread_over_seeds(rows: pd.DataFrame) -> None:
    fig = cost_figure(rows, "dollars")
    bands = [c for c in fig.axes[0].collections if not isinstance(c, LineCollection)]
    assert bands, "no spread band"
    star = rows[(rows["topology"] == "star") & ~rows["serial"]]
    spread = star.groupby("agents")["cost_usd"].agg(["min", "max"])
    assert (spread["max"] > spread["min"]).any()  # seeds differ in cost (batching), so the band is real
    with pytest.raises(ValueError, match="unknown metric 'joules'"):
        cost_figure(rows, "joules")


def test_makespan_figure_has_parallel_and_serial(rows: pd.DataFrame) -> None:
    fig = makespan_figure(rows)
    texts = legend_texts(fig)
    serial = next(t for t in texts if t.startswith("star, serial"))
    parallel = next(t for t in texts if t.startswith("star, parallel"))
    assert line(fig, serial).get_linestyle() == "--" and line(fig, parallel).get_linestyle() == "-"
    expected = rows[(rows["topology"] == "star") & rows["serial"]].groupby("agents")["virtual_time_s"].mean()
    assert np.allclose(line(fig, serial).get_ydata(), expected.to_numpy(dtype=float))
    assert fig.axes[0].get_ylabel() == "makespan (virtual seconds)"


def test_group_size_figure_marks_measured_and_closed_form_optima(rows: pd.DataFrame) -> None:
    fig = group_size_figure(rows)
    texts = legend_texts(fig)
    at = rows[(rows["agents"] == 200) & (rows["group_rule"] == "fixed")]
    measured = int(at.groupby("group_size")["messages"].mean().idxmin())
    dollars = int(at.groupby("group_size")["cost_usd"].mean().idxmin())
    assert f"measured optimum G = {measured}" in texts and f"measured optimum G = {dollars}" in texts
    assert f"closed-form optimum G = {optimal_group_size(200)}" in texts
    curve = line(fig, "closed form  Σ sᵢ(sᵢ−1) + a(a−1)")
    g = curve.get_xdata()
    assert g[0] == 2 and g[-1] == 40
    assert list(curve.get_ydata()) == [closed_form_messages("two-tier", 200, int(x)) for x in g]
    assert "N = 200" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="at least two group sizes"):
        group_size_figure(rows, agents=100)


def test_plot_results_writes_png_and_svg(rows: pd.DataFrame, tmp_path: Path) -> None:
    paths = plot_results(rows, tmp_path)
    names = sorted({p.stem for p in paths})
    assert names == sorted(["messages", "bytes", "tokens", "dollars", "coordination_cost", "makespan", "group_size"])
    for p in paths:
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        else:
            assert ET.parse(p).getroot().tag.endswith("svg")
    assert plot_results(rows[rows["status"] == "error"], tmp_path / "none") == []


def test_load_figure_shows_the_hub_and_admins_as_hotspots() -> None:
    results = {
        "star": RunSpec(topology="star", agents=50, seed=1).execute(),
        "two-tier": RunSpec(topology="two-tier", agents=50, group_size=10, seed=1).execute(),
    }
    fig = load_figure(results)
    star_top, tier_top = fig.axes[0], fig.axes[1]
    assert "boss 0: 98" in [t.get_text() for t in star_top.texts]  # 49 received + 49 sent
    points = {c.get_label(): c.get_offsets() for c in tier_top.collections if isinstance(c, PathCollection)}
    admins, agents = points["admin"][:, 1], points["agent"][:, 1]
    assert len(admins) == 5 and len(agents) == 45
    assert admins.min() > agents.max()  # admins carry the admin channel on top of their group


def test_timeline_figure_draws_each_agents_states() -> None:
    result = RunSpec(topology="two-tier", agents=12, group_size=4, seed=2, trace=True).execute()
    fig = timeline_figure(result)
    ax = fig.axes[0]
    processing = [c for c in ax.collections if np.allclose(c.get_facecolor()[0][:3], (0.12, 0.47, 0.71), atol=0.01)]
    spans = sum(len(c.get_paths()) for c in processing)
    assert spans == sum(1 for *_, to, _t in result.trace.transitions() if to == "PROCESSING")
    assert [t.get_text() for t in ax.get_yticklabels()][:2] == ["0 admin", "1"]
    assert ax.get_xlim()[1] >= result.ledger.virtual_time_s
    with pytest.raises(ValueError, match="no trace"):
        timeline_figure(RunSpec(topology="star", agents=5).execute())


def test_sample_queues_follows_the_run_super_step_by_super_step() -> None:
    spec = RunSpec(topology="star", agents=40, seed=3)
    runtime = SimRuntime(spec.organisation(), spec.build_behaviour(), spec.llm(), seed=3)
    samples = sample_queues(runtime)
    result = runtime.result()
    reference = spec.execute()
    assert result.ledger.messages == reference.ledger.messages
    assert result.ledger.virtual_time_s == reference.ledger.virtual_time_s
    assert list(samples["step"]) == list(range(runtime.steps + 1))
    assert samples["time"].is_monotonic_increasing and samples["time"].iloc[-1] == result.ledger.virtual_time_s
    assert samples["queued"].iloc[-1] == 0 and samples["processing"].iloc[-1] == 0
    assert 0 < samples["longest_queue"].max() <= result.ledger.peak_queue_depth
    assert samples["processing"].max() == result.trace.max_concurrent(AgentState.PROCESSING)
    fig = queue_figure({"star": samples})
    assert fig.axes[0].get_ylabel() == "messages waiting" and fig.axes[1].get_ylabel() == "agents Processing"


def test_organisation_figure_highlights_the_admin_channel() -> None:
    org = Organisation.two_tier(40, 8)
    fig = organisation_figure(org)
    ax = fig.axes[0]
    edges = [c for c in ax.collections if isinstance(c, LineCollection)]
    counts = sorted(len(c.get_segments()) for c in edges)
    # intra-group pairs 5·C(8,2), admin pairs C(5,2), tree edges 5·7
    assert counts == sorted([5 * 28, 10, 35])
    admin = next(c for c in edges if len(c.get_segments()) == 10)
    assert max(admin.get_linewidths()) > max(max(c.get_linewidths()) for c in edges if c is not admin)
    nodes = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert sum(len(c.get_offsets()) for c in nodes) == 40
    group_colours = {tuple(np.round(c, 3)) for coll in nodes for c in coll.get_facecolors()}
    assert len(group_colours) == 5
    with pytest.raises(ValueError, match="too many agents to draw"):
        organisation_figure(Organisation.flat(3000))


def test_save_figure_writes_both_formats(tmp_path: Path) -> None:
    fig = organisation_figure(Organisation.hierarchy(13, 3))
    png, svg = save_figure(fig, tmp_path / "deep" / "dir", "org")
    assert png.read_bytes()[:4] == b"\x89PNG" and ET.parse(svg).getroot().tag.endswith("svg")
    assert png.stat().st_size > 10_000
