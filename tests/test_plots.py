"""Figures: what they draw is what the rows and runs say."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.text import Text

from megaactors import PRICES, AgentState, Organisation, RunSpec, SimRuntime
from megaactors.experiments.async_vs_threads import comparison_figure
from megaactors.experiments.plots import (
    METRICS,
    cost_figure,
    fit_exponent,
    group_size_figure,
    load_figure,
    makespan_figure,
    organisation_figure,
    plot_results,
    price_title,
    queue_figure,
    sample_queues,
    save_figure,
    series_labels,
    timeline_figure,
)
from megaactors.experiments.plots.common import prices_text
from megaactors.experiments.sweep import closed_form_messages, optimal_group_size, run_sweep


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    grid = [
        {"topology": ["flat", "star", "hierarchy"], "agents": [10, 30, 100, 300], "seed": [1, 2]},
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
    assert "busiest: boss 0, 98" in [t.get_text() for t in star_top.texts]  # 49 received + 49 sent
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


# ---------------------------------------------------------------------- honest figures


def test_coinciding_series_are_told_apart(rows: pd.DataFrame) -> None:
    """Star and hierarchy both send 2(N−1) messages: the later line says it lies on
    the earlier one and differs from it in marker, size and line style."""
    fig = cost_figure(rows, "messages")
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    star = next(ln for label, ln in lines.items() if label.startswith("star"))
    tree = next(ln for label, ln in lines.items() if label.startswith("hierarchy"))
    assert np.array_equal(star.get_ydata(), tree.get_ydata())
    assert tree.get_label().endswith("(on the star line)") and "on the" not in star.get_label()
    assert star.get_marker() != tree.get_marker()
    assert star.get_linestyle() != tree.get_linestyle()
    assert tree.get_markersize() > star.get_markersize() and tree.get_zorder() > star.get_zorder()
    # series that differ are left alone
    assert not any("on the" in label for label in lines if label.startswith(("flat", "two-tier")))


def test_dollar_figures_name_the_model_and_its_prices(rows: pd.DataFrame) -> None:
    price = PRICES["gpt-4o-mini"]
    expected = price_title("gpt-4o-mini", price.input_per_m, price.output_per_m)
    assert expected == f"gpt-4o-mini at ${price.input_per_m:.2f} in / ${price.output_per_m:.2f} out per M tokens"
    expected = expected.replace("$", r"\$")  # matplotlib would read $…$ as mathematics
    assert expected in cost_figure(rows, "dollars").axes[0].get_title()
    assert "per M tokens" not in cost_figure(rows, "messages").axes[0].get_title()
    assert expected in group_size_figure(rows).axes[1].get_title()
    model = np.where(rows["seed"] == 1, "gpt-4o-mini", "gpt-4o")
    listed = {m: PRICES[m] for m in ("gpt-4o-mini", "gpt-4o")}  # rows record the prices paid
    two = rows.assign(
        model=model,
        price_in=[listed[m].input_per_m for m in model],
        price_out=[listed[m].output_per_m for m in model],
    )
    title = cost_figure(two, "dollars").axes[0].get_title()
    other = price_title("gpt-4o", PRICES["gpt-4o"].input_per_m, PRICES["gpt-4o"].output_per_m)
    assert expected in title and other.replace("$", r"\$") in title
    assert prices_text(pd.DataFrame({"model": ["no-such-model"]})) == "no-such-model (price unknown)"
    assert prices_text(pd.DataFrame({"agents": [10]})) == "model and prices not recorded"
    overridden = rows.assign(price_in=1.0, price_out=2.0)
    assert (
        r"gpt-4o-mini at \$1.00 in / \$2.00 out per M tokens" in cost_figure(overridden, "dollars").axes[0].get_title()
    )


def test_load_labels_stay_clear_of_the_markers() -> None:
    results = {
        "star": RunSpec(topology="star", agents=200, seed=1).execute(),
        "two-tier": RunSpec(topology="two-tier", agents=200, group_size=10, seed=1).execute(),
        "flat": RunSpec(topology="flat", agents=200, seed=1).execute(),  # every agent as busy as the busiest
    }
    fig = load_figure(results)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        (label,) = ax.texts
        box = Text.get_window_extent(label, renderer)  # the text alone, not its arrow
        points = np.concatenate([c.get_offsets() for c in ax.collections if isinstance(c, PathCollection)])
        shown = ax.transData.transform(points)
        inside = (shown[:, 0] >= box.x0) & (shown[:, 0] <= box.x1) & (shown[:, 1] >= box.y0) & (shown[:, 1] <= box.y1)
        assert not inside.any(), (label.get_text(), int(inside.sum()))
        legend = ax.get_legend().get_window_extent(renderer)
        assert not box.overlaps(legend)
        under = (shown[:, 0] >= legend.x0) & (shown[:, 0] <= legend.x1)
        under &= (shown[:, 1] >= legend.y0) & (shown[:, 1] <= legend.y1)
        assert not under.any(), ("legend over markers", label.get_text(), int(under.sum()))


def test_queue_figure_title_gives_n() -> None:
    spec = RunSpec(topology="star", agents=25, seed=1)
    samples = sample_queues(SimRuntime(spec.organisation(), spec.build_behaviour(), spec.llm(), seed=1))
    assert samples.attrs["agents"] == 25
    assert queue_figure({"star": samples}).axes[0].get_title() == "Queue depth over virtual time (N = 25)"


def drawn_edges(fig) -> dict[str, int]:
    """Segments per edge colour family drawn on the first axes."""
    out = {}
    for c in fig.axes[0].collections:
        if isinstance(c, LineCollection):
            rgb = tuple(np.round(c.get_colors()[0][:3], 2))
            out[{(0.75, 0.75, 0.75): "intra", (0.2, 0.2, 0.2): "hierarchy"}.get(rgb, "admin")] = len(c.get_segments())
    return out


def test_organisation_figure_draws_only_channels_that_carried_messages() -> None:
    tiers = RunSpec(topology="two-tier", agents=40, group_size=8, seed=1).execute()
    fig = organisation_figure(tiers.org, traffic=tiers.ledger.messages_by_channel)
    assert drawn_edges(fig) == {"intra": 5 * 28, "admin": 10}  # no tree edges: nothing went over them
    assert "no messages, not drawn: hierarchy" in legend_texts(fig)
    assert "(channels that carried messages)" in fig.axes[0].get_title()
    tree = RunSpec(topology="hierarchy", agents=40, fanout=3, seed=1).execute()
    assert tree.ledger.messages_by_channel["admin"] == 0 < tree.ledger.messages_by_channel["hierarchy"]
    fig = organisation_figure(tree.org, traffic=tree.ledger.messages_by_channel)
    assert drawn_edges(fig) == {"hierarchy": 39}  # the boss's tree, no admin mesh hiding it
    assert f"hierarchy channel: {tree.ledger.messages:,} messages" in legend_texts(fig)
    assert "(every channel it allows)" in organisation_figure(tree.org).axes[0].get_title()


def test_organisation_figure_colours_agents_by_state() -> None:
    spec = RunSpec(topology="star", agents=12, seed=1)
    rt = SimRuntime(spec.organisation(), spec.build_behaviour(), spec.llm(), seed=1)
    rt.start()
    states = [a.state for a in rt.agents]
    assert states.count(AgentState.PROCESSING) == 11  # every spoke composes its question
    fig = organisation_figure(rt.org, states=states, traffic=rt.ledger.messages_by_channel)
    colours = [
        tuple(np.round(c, 2))
        for coll in fig.axes[0].collections
        if isinstance(coll, PathCollection)
        for c in coll.get_facecolors()
    ]
    blue = tuple(np.round((0.12, 0.47, 0.71, 1.0), 2))
    assert colours.count(blue) == 11 and len(colours) == 12
    assert "Processing: 11" in legend_texts(fig) and "Idle: 1" in legend_texts(fig)
    assert drawn_edges(fig) == {}  # nothing has been sent yet
    with pytest.raises(ValueError, match="states has 3 entries for 12 agents"):
        organisation_figure(rt.org, states=states[:3])


def test_async_vs_threads_figure_says_how_many_calls_were_in_flight() -> None:
    rows = [
        {
            "runtime": "asyncio",
            "calls": n,
            "wall_s": 0.1 * n / 500,
            "calls_s": 0.06,
            "rss_per_call_kb": 3,
            "peak_in_flight": n,
        }
        for n in (500, 5000)
    ] + [
        {
            "runtime": "threads",
            "calls": 500,
            "wall_s": 0.3,
            "calls_s": 0.1,
            "rss_per_call_kb": 40,
            "peak_in_flight": 500,
        },
        {
            "runtime": "threads",
            "calls": 5000,
            "wall_s": 4.0,
            "calls_s": 2,
            "rss_per_call_kb": 40,
            "peak_in_flight": 1980,
        },
    ]
    fig = comparison_figure(rows, 50)
    left = fig.axes[0]
    assert [t.get_text() for t in left.texts] == ["threads: 1,980 of 5,000 in flight at once"]
    assert left.get_xlabel() == "LLM calls started at once, N"
    one_second = [ln for ln in left.get_lines() if list(ln.get_ydata()) == [1.0, 1.0]]
    assert len(one_second) == 1 and one_second[0].get_label() == "1 s"
    assert "1 s" in legend_texts(fig)
