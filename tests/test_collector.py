"""Per-step data collection: series that add up to the run's own ledger and trace."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from megaactors import AgentState, RunSpec, SimRuntime
from megaactors.cli import main
from megaactors.experiments.collector import (
    AGENT_VARIABLES,
    MODEL_VARIABLES,
    CollectorError,
    DataCollector,
    superstep_end,
)


def runtime(topology: str = "two-tier", agents: int = 30, seed: int = 2, **extra) -> SimRuntime:
    spec = RunSpec(topology=topology, agents=agents, group_size=6, seed=seed, **extra)
    return SimRuntime(spec.organisation(), spec.build_behaviour(), spec.llm(), seed=seed)


def test_super_steps_end_where_the_run_ends_with_the_ledger_totals() -> None:
    rt = runtime()
    collector = DataCollector(step_s=0.5).run(rt)
    model = collector.model_frame()
    assert list(model.columns) == list(MODEL_VARIABLES)
    assert list(model["step"]) == list(range(len(model)))
    last = model.iloc[-1]
    reference = RunSpec(topology="two-tier", agents=30, group_size=6, seed=2).execute().ledger
    for column in ("messages", "bytes", "llm_calls", "tokens_in", "tokens_out"):
        assert last[column] == getattr(reference, column)
        assert model[column].is_monotonic_increasing
    assert last["cost_usd"] == pytest.approx(reference.cost_usd)
    assert last["tokens"] == reference.tokens_in + reference.tokens_out
    assert last["time"] == reference.virtual_time_s and last["events"] == rt.steps
    assert last["processing"] == 0 and last["queued"] == 0 and last["idle"] == 30
    assert (model[["idle", "processing", "response"]].sum(axis=1) == 30).all()
    # every super-step after the start lies in its own half-second window
    windows = [math.floor(t / 0.5) for t in model["time"].iloc[1:]]
    assert windows == sorted(set(windows))


def test_every_k_events_and_the_agents_series() -> None:
    rt = runtime("star", agents=12)
    collector = DataCollector(every_events=3).run(rt)
    model, agents = collector.model_frame(), collector.agent_frame()
    events = list(model["events"])
    assert events[0] == 0 and all(b - a == 3 for a, b in itertools.pairwise(events[:-1]))
    assert events[-1] == rt.steps
    assert list(agents.columns) == list(AGENT_VARIABLES)
    assert len(agents) == 12 * len(model)
    per_step = agents.groupby("step")
    assert (per_step["queue"].sum() == model["queued"]).all()
    assert (per_step["state"].apply(lambda s: (s == "PROCESSING").sum()) == model["processing"]).all()
    final = agents[agents["step"] == model["step"].iloc[-1]].set_index("agent")
    ledger = rt.ledger
    assert list(final["sent"]) == list(ledger.per_agent["sent"])
    assert list(final["received"]) == list(ledger.per_agent["received"])
    assert final["cost_usd"].sum() == pytest.approx(ledger.cost_usd)
    # the hub (agent 0) answers 11 spokes; it is Processing while its own reply is in flight
    assert final.loc[0, "sent"] == 11


def test_processing_counts_match_the_trace() -> None:
    spec = RunSpec(topology="two-tier", agents=24, group_size=6, seed=5, trace=True)
    rt = SimRuntime(spec.organisation(), spec.build_behaviour(), spec.llm(), seed=5, trace=True)
    model = DataCollector(every_events=1, agents=False).run(rt).model_frame()
    assert model["processing"].max() == rt.trace.max_concurrent(AgentState.PROCESSING)
    assert collector_is_deterministic(spec)


def collector_is_deterministic(spec: RunSpec) -> bool:
    frames = [
        DataCollector(step_s=0.25)
        .run(SimRuntime(spec.organisation(), spec.build_behaviour(), spec.llm(), seed=spec.seed))
        .model_frame()
        for _ in range(2)
    ]
    return frames[0].equals(frames[1])


def test_reporters_add_columns_and_until_stops_early() -> None:
    rt = runtime()
    collector = DataCollector(
        model_reporters={"in_flight": lambda r: sum(a.state is AgentState.PROCESSING for a in r.agents)},
        agent_reporters={"memory": lambda r, i: len(r.agents[i].memory)},
    ).run(rt, until=1.0)
    model = collector.get_model_vars_dataframe()
    assert (model["in_flight"] == model["processing"]).all()
    assert not rt.finished and rt.next_event_time >= 1.0
    assert "memory" in collector.get_agent_vars_dataframe().columns
    collector.run(rt)
    assert rt.finished and collector.model_frame()["time"].iloc[-1] == rt.now


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_save_writes_model_and_agent_series(tmp_path: Path, suffix: str) -> None:
    collector = DataCollector().run(runtime(agents=12))
    written = collector.save(tmp_path / f"series{suffix}")
    assert [p.name for p in written] == [f"series{suffix}", f"series.agents{suffix}"]
    read = pd.read_parquet if suffix == ".parquet" else pd.read_csv
    model = read(written[0])
    assert model["messages"].tolist() == collector.model_frame()["messages"].tolist()
    agents = read(written[1])
    assert len(agents) == len(collector.agent_frame())
    assert set(agents["state"]) <= {"IDLE", "PROCESSING", "RESPONSE"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in written)


def test_bad_settings_are_named(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="step seconds must be a finite number > 0"):
        DataCollector(step_s=0)
    with pytest.raises(CollectorError, match="every events must be an integer >= 1"):
        DataCollector(every_events=0)
    with pytest.raises(CollectorError, match="'messages' is a built-in column"):
        DataCollector(model_reporters={"messages": len})
    collector = DataCollector().run(runtime(agents=6))
    with pytest.raises(CollectorError, match=r"must end in \.csv or \.parquet"):
        collector.save(tmp_path / "series.xlsx")
    with pytest.raises(CollectorError, match="does not exist"):
        collector.save(tmp_path / "missing" / "series.csv")
    assert list(tmp_path.iterdir()) == []


def test_superstep_windows() -> None:
    assert superstep_end(0.0, 1.0) == 1.0
    assert superstep_end(2.5, 1.0) == 3.0
    assert superstep_end(3.0, 1.0) == 4.0
    assert superstep_end(1e300, 1.0) > 1e300


# ---------------------------------------------------------------------- megaactors run --collect


def test_run_collect_writes_the_series_of_the_run_it_reports(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "star.parquet"
    args = ["run", "--topology", "star", "--agents", "40", "--seed", "4", "--collect", str(out), "--json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert f"wrote {out}" in captured.err
    model = pd.read_parquet(out)
    agents = pd.read_parquet(tmp_path / "star.agents.parquet")
    assert model["messages"].iloc[-1] == summary["messages"] == 2 * 39
    assert model["cost_usd"].iloc[-1] == pytest.approx(summary["cost_usd"])
    assert model["time"].iloc[-1] == pytest.approx(summary["virtual_time_s"])
    assert len(agents) == 40 * len(model)
    plain = RunSpec(topology="star", agents=40, seed=4).execute().summary()
    assert {k: v for k, v in summary.items() if k != "wall_s"} == {k: v for k, v in plain.items() if k != "wall_s"}
    assert main(["run", "--agents", "12", "--collect", str(tmp_path / "e.csv"), "--collect-every", "5"]) == 0
    assert set(pd.read_csv(tmp_path / "e.csv")["events"].diff().dropna().iloc[:-1]) == {5}


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--collect", "{tmp}/series.xlsx"], "must end in .csv or .parquet"),
        (["--collect", "{tmp}/no/such/series.csv"], "does not exist"),
        (["--collect", "{tmp}/series.csv", "--runtime", "asyncio"], "steps the run in the simulation"),
        (["--collect", "{tmp}/series.csv", "--collect-every", "0"], "collect_every must be an integer >= 1"),
        (["--collect", "{tmp}/series.csv", "--step-seconds", "0"], "step_seconds must be a finite number > 0"),
        (["--collect-every", "3"], "--collect-every needs --collect PATH"),
        (["--collect", "{tmp}/series.csv", "--checkpoint", "{tmp}/runs.db"], "does not combine with --checkpoint"),
    ],
)
def test_run_collect_refuses_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture, extra: list[str], needle: str
) -> None:
    args = ["run", "--agents", "10", *(a.format(tmp=tmp_path) for a in extra)]
    try:
        code = main(args)
    except SystemExit as exc:  # the parser's own refusals
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
