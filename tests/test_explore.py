"""The explorer, driven from Python as a user's clicks and edits would drive it."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.patches import Rectangle

from megaactors import AgentState, RunSpec
from megaactors.experiments.plots.common import STATE_COLOURS
from megaactors.experiments.spec import PARAMETERS
from megaactors.explore import Explorer

PNG = b"\x89PNG\r\n\x1a\n"
BLUE = (0.12, 0.47, 0.71)


def node_colours(explorer: Explorer) -> list[tuple[float, ...]]:
    ax = explorer.figures["state"].axes[0]
    return [
        tuple(np.round(c[:3], 2))
        for coll in ax.collections
        if isinstance(coll, PathCollection)
        for c in coll.get_facecolors()
    ]


def bars(explorer: Explorer) -> list[float]:
    ax = explorer.figures["state"].axes[1]
    return [p.get_height() for p in ax.patches if isinstance(p, Rectangle) and p.get_width() == 1.0]


@pytest.fixture
def explorer() -> Explorer:
    return Explorer(RunSpec(topology="two-tier", agents=30, group_size=6, seed=3))


def test_it_opens_on_a_started_run(explorer: Explorer) -> None:
    rt = explorer.runtime
    assert rt is not None and rt.started and rt.steps == 0 and rt.org.n == 30
    assert "t = 0.000 s virtual" in explorer.status.value
    for name in ("state", "series"):
        assert bytes(explorer.images[name].value).startswith(PNG)
    # at the start every agent composes its first message: all Processing, nothing sent
    assert node_colours(explorer).count(BLUE) == 30
    assert explorer.collector.collections == 1


def test_stepping_redraws_states_and_queues(explorer: Explorer) -> None:
    before = explorer.images["state"].value
    explorer.buttons["event"].click()
    rt = explorer.runtime
    assert rt.steps == 1 and explorer.collector.collections == 2
    assert bytes(explorer.images["state"].value) != bytes(before)
    for _ in range(3):
        explorer.buttons["superstep"].click()
    queues = [rt.queued(i) for i in range(30)]
    assert sum(queues) > 0 and bars(explorer) == queues
    processing = sum(a.state is AgentState.PROCESSING for a in rt.agents)
    assert node_colours(explorer).count(BLUE) == processing
    grey = tuple(np.round(np.array([int(STATE_COLOURS["IDLE"][i : i + 2], 16) for i in (1, 3, 5)]) / 255, 2))
    assert node_colours(explorer).count(grey) == 30 - processing
    model = explorer.collector.model_frame()
    assert list(model["events"])[:2] == [0, 1] and model["time"].iloc[-1] == rt.now
    series = explorer.figures["series"].axes[0]
    assert list(series.get_lines()[0].get_ydata()) == list(model["processing"])


def test_running_to_the_end_matches_a_plain_run(explorer: Explorer) -> None:
    explorer.buttons["finish"].click()
    rt = explorer.runtime
    reference = RunSpec(topology="two-tier", agents=30, group_size=6, seed=3).execute().ledger
    assert rt.finished and rt.ledger.messages == reference.messages and rt.now == reference.virtual_time_s
    assert explorer.collector.model_frame()["cost_usd"].iloc[-1] == pytest.approx(reference.cost_usd)
    assert "finished" in explorer.status.value
    explorer.buttons["event"].click()  # nothing left: no error, nothing changes
    assert rt.steps == explorer.runtime.steps


def test_changing_a_control_builds_a_new_run(explorer: Explorer) -> None:
    explorer.buttons["finish"].click()
    explorer.controls["topology"].value = "star"
    explorer.controls["agents"].value = 12
    rt = explorer.runtime
    assert rt.org.kind == "star" and rt.org.n == 12 and rt.steps == 0
    title = explorer.figures["state"].axes[0].get_title()
    assert title.startswith("star organisation: 12 agents")
    explorer.controls["max_concurrent_llm"].value = 2
    assert explorer.spec.max_concurrent_llm == 2 and explorer.runtime.max_concurrent_llm == 2
    explorer.controls["serial"].value = True
    explorer.buttons["finish"].click()
    assert explorer.runtime.ledger.peak_llm_in_flight == 1


def test_cost_curves_compare_every_organisation(explorer: Explorer) -> None:
    explorer.max_messages = 2_000
    explorer.buttons["curves"].click()  # a click returns nothing: the rows are kept
    rows = explorer.rows
    assert set(rows["topology"]) == {"flat", "star", "two-tier", "hierarchy"}
    assert sorted(rows["agents"].unique()) == [10, 30]
    assert (rows["group_size"][rows["topology"] == "two-tier"] == 6).all()
    fig = explorer.figures["curves"]
    messages, dollars = fig.axes[:2]
    labels = [ln.get_label() for ln in messages.get_lines()]
    assert any(label.startswith("two-tier, G = 6") for label in labels)
    assert "chosen N = 30" in labels and "chosen N = 30" in [t.get_text() for t in messages.get_legend().get_texts()]
    assert "per M tokens" in dollars.get_title()
    assert bytes(explorer.images["curves"].value).startswith(PNG)


def test_large_runs_are_not_drawn_but_still_stepped() -> None:
    explorer = Explorer(RunSpec(topology="star", agents=500, seed=1), max_drawn=100)
    assert "too many to draw" in explorer.figures["state"].axes[0].texts[0].get_text()
    explorer.buttons["event"].click()
    assert len(bars(explorer)) == 500
    explorer.set(agents=1500)  # beyond one bar per agent: an outline, Processing agents ticked
    explorer.step(events=3)
    queues = explorer.figures["state"].axes[1]
    assert bars(explorer) == [] and len(queues.collections) == 1
    ticks = queues.get_lines()[0].get_xdata()
    assert list(ticks) == [a.id for a in explorer.runtime.agents if a.state is AgentState.PROCESSING]


def test_controls_are_bounded_as_the_parameters_are_declared(explorer: Explorer) -> None:
    for name in ("agents", "rounds", "fanout", "latency_sigma", "message_bytes"):
        declared = PARAMETERS[name]
        assert (explorer.controls[name].min, explorer.controls[name].max) == (declared.minimum, declared.maximum)


def test_an_impossible_run_is_reported_not_raised(explorer: Explorer) -> None:
    explorer.controls["rounds"].min = -5
    explorer.controls["rounds"].value = -1
    assert explorer.runtime is None and explorer.error.startswith("rounds must be an integer >= 0")
    assert "rounds must be an integer &gt;= 0" in explorer.status.value
    explorer.buttons["event"].click()
    explorer.buttons["finish"].click()
    explorer.buttons["curves"].click()  # (a click returns None whatever happens)
    assert explorer.rows is None and explorer.cost_curves() is None and explorer.runtime is None
    explorer.controls["rounds"].value = 1
    assert explorer.runtime is not None and explorer.error is None


def test_a_megaagent_scenario_recruits_its_organisation_as_it_runs(explorer: Explorer) -> None:
    explorer.set(behaviour="MegaAgent: Gobang", model="gpt-4o")
    rt = explorer.runtime
    assert rt.org.n == 1 and "MegaAgent: Gobang" in explorer.status.value  # a lone boss
    explorer.buttons["finish"].click()
    assert explorer.runtime.org.n == 7  # boss, admins and workers recruited during the run
    assert explorer.figures["state"].axes[0].get_title().startswith("hierarchy organisation: 7 agents")
    assert "gpt-4o at" in explorer.figures["series"].axes[1].get_title()
    assert explorer.cost_curves() is None and "chat round" in explorer.error


def test_play_steps_super_steps_until_the_end(explorer: Explorer) -> None:
    explorer.set(topology="star", agents=6)
    explorer.play.playing = True
    for _ in range(100):
        if not explorer.play.playing:
            break
        explorer.play.value += 1  # what each tick of the Play widget does
    assert explorer.runtime.finished and not explorer.play.playing
    assert explorer.collector.collections == explorer.play.value + 1  # the start, then one per tick
