#!/usr/bin/env python3
"""The coordination-cost experiment: how messages, bytes, tokens, dollars and makespan
grow with the number of agents N for each organisation.

One chat round per run in the deterministic simulation, N from 10 to 100,000, three
seeds up to N = 10,000 and one beyond, for flat, star, two-tier (a fixed group size
and the size that minimises messages) and hierarchy organisations. Runs whose closed-form message count exceeds
the budget (flat beyond N = 3,000, two-tier with G = 10 beyond N = 30,000) are not
run; the figures draw their closed form, marked as such. Serial runs (one agent
Processing at a time) up to N = 10,000 give makespan parallel versus serial; a sweep
over the group size at N = 3,000 gives the measured optimum beside the closed-form
one; small traced runs give per-agent load, a state timeline, queue depth over time
and organisation drawings (only the channels that carried messages). Figures are
drawn in parallel, one process per core.

    python experiments/coordination_cost.py [--out DIR] [--agents 10,100,...] [--seeds 1,2,3]

Writes ``DIR/results.csv`` (one row per run; resumable: rerunning skips finished
runs), ``DIR/grid.json`` and every figure as PNG and SVG, and prints their paths.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.figure import Figure

from megaactors import RunSpec, SimRuntime
from megaactors.experiments.plots import (
    FigureJob,
    figure_jobs,
    fit_exponent,
    load_figure,
    organisation_figure,
    queue_figure,
    sample_queues,
    save_figures,
    series_labels,
    timeline_figure,
)
from megaactors.experiments.progress import SweepProgress
from megaactors.experiments.spec import ParameterError
from megaactors.experiments.sweep import SweepError, optimal_group_size, run_sweep

if TYPE_CHECKING:
    import pandas as pd

AGENTS = (10, 30, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000)
SEEDS = (1, 2, 3)
SPREAD_MAX_AGENTS = 10_000
"""Every seed up to this N; beyond it the first seed only (the spread over seeds there
is a fraction of a percent, and these runs are most of the work)."""
FIXED_GROUP_SIZE = 10
MAX_MESSAGES = 10_000_000
"""Closed-form message budget per run: larger runs are drawn, not run."""
SERIAL_MAX_AGENTS = 10_000
GROUP_SIZE_AGENTS = 3_000
GROUP_SIZES = (2, 3, 4, 6, 8, 10, 12, 15, 18, 20, 25, 30, 40, 60, 100, 200, 500, 1_000)
SMALL_AGENTS = 1_000
"""N of the runs behind the per-agent load figure."""
QUEUE_AGENTS = 300
"""N of the runs behind the queue-depth figure (sampled after every event)."""


def grid(agents: list[int], seeds: list[int]) -> list[dict[str, object]]:
    """The experiment's parameter sets: organisations × N × seeds (one seed beyond
    :data:`SPREAD_MAX_AGENTS`), the serial runs and the group-size sweep."""
    organisations: list[dict[str, object]] = [
        {"topology": ["flat", "star", "hierarchy"]},
        {"topology": ["two-tier"], "group_size": [FIXED_GROUP_SIZE, "optimal"]},
    ]
    spread = [n for n in agents if n <= SPREAD_MAX_AGENTS]
    large = [n for n in agents if n > SPREAD_MAX_AGENTS]
    sets = [{**o, "agents": spread, "seed": seeds} for o in organisations if spread]
    sets += [{**o, "agents": large, "seed": seeds[:1]} for o in organisations if large]
    serial_agents = [n for n in agents if n <= SERIAL_MAX_AGENTS] or agents[:1]
    sets += [{**o, "agents": serial_agents, "seed": seeds, "serial": [True]} for o in organisations]
    g_agents = GROUP_SIZE_AGENTS if GROUP_SIZE_AGENTS in agents else agents[len(agents) // 2]
    sizes = sorted({g for g in GROUP_SIZES if g < g_agents} | {optimal_group_size(g_agents)})
    sets.append({"topology": ["two-tier"], "agents": [g_agents], "group_size": sizes, "seed": seeds})
    return sets


def _organisations(n: int, seed: int) -> dict[str, RunSpec]:
    return {
        "star": RunSpec(topology="star", agents=n, seed=seed),
        f"two-tier, G = {FIXED_GROUP_SIZE}": RunSpec(
            topology="two-tier", agents=n, group_size=FIXED_GROUP_SIZE, seed=seed
        ),
        "two-tier, optimal G": RunSpec(topology="two-tier", agents=n, group_size=optimal_group_size(n), seed=seed),
        "hierarchy, fan-out 5": RunSpec(topology="hierarchy", agents=n, fanout=5, seed=seed),
        "flat": RunSpec(topology="flat", agents=n, seed=seed),
    }


def load_distribution(seed: int) -> Figure:
    """Per-agent load in one run of each organisation at N = :data:`SMALL_AGENTS`."""
    return load_figure({k: s.execute() for k, s in _organisations(SMALL_AGENTS, seed).items()})


def state_timeline(seed: int) -> Figure:
    """Agent states over virtual time in a small traced two-tier run."""
    return timeline_figure(RunSpec(topology="two-tier", agents=24, group_size=6, seed=seed, trace=True).execute())


def queue_depth(seed: int) -> Figure:
    """Queue depth over virtual time, sampled after every event, at N = :data:`QUEUE_AGENTS`."""
    specs = _organisations(QUEUE_AGENTS, seed)
    samples = {}
    for name in ("star", f"two-tier, G = {FIXED_GROUP_SIZE}", "hierarchy, fan-out 5"):
        spec = specs[name]
        samples[name] = sample_queues(SimRuntime(spec.organisation(), spec.build_behaviour(), spec.llm(), seed=seed))
    return queue_figure(samples)


def organisation(seed: int) -> Figure:
    """A two-tier and a hierarchy organisation of 40 agents, each drawn with the
    channels that carried messages in one chat round on it."""
    fig = Figure(figsize=(16, 8), layout="constrained")
    left, right = fig.subplots(1, 2)
    for ax, spec in zip(
        (left, right),
        (
            RunSpec(topology="two-tier", agents=40, group_size=8, seed=seed),
            RunSpec(topology="hierarchy", agents=40, fanout=3, seed=seed),
        ),
        strict=True,
    ):
        result = spec.execute()
        organisation_figure(result.org, traffic=result.ledger.messages_by_channel, ax=ax)
    return fig


def small_run_jobs(seed: int) -> list[FigureJob]:
    """Figures that need whole runs, not rows: load, timeline, queue depth, drawings."""
    makers = (load_distribution, state_timeline, queue_depth, organisation)
    return [FigureJob(make.__name__, make, (seed,)) for make in makers]


def report(df: object) -> str:
    """Fitted exponents per organisation and the optimum group size, as text."""
    import pandas as pd

    assert isinstance(df, pd.DataFrame)
    ok = df[(df["status"] == "ok") & ~df["serial"].astype(bool)].copy()
    ok["series"] = series_labels(ok)
    ok["tokens"] = ok["tokens_in"].astype(float) + ok["tokens_out"].astype(float)
    lines = ["scaling exponents (messages ∝ N^b, fitted on measured runs):"]
    for label, rows in ok.groupby("series", sort=False):
        if rows["agents"].nunique() < 2:
            continue
        means = rows.groupby("agents")[["messages", "bytes", "tokens", "cost_usd"]].mean()
        fits = {c: fit_exponent(means.index, means[c]) for c in means.columns}
        top = int(means.index.max())
        lines.append(
            f"  {label:<24} messages {fits['messages']:.2f}  bytes {fits['bytes']:.2f}  "
            f"tokens {fits['tokens']:.2f}  dollars {fits['cost_usd']:.2f}  (measured up to N = {top:,})"
        )
    fixed = ok[(ok["topology"] == "two-tier") & (ok["group_rule"] == "fixed")]
    if len(fixed):
        n = int(fixed.groupby("agents")["group_size"].nunique().idxmax())
        at = fixed[fixed["agents"] == n].groupby("group_size")[["messages", "cost_usd"]].mean()
        if len(at) >= 3:
            lines.append(
                f"optimal two-tier group size at N = {n:,}: closed form G = {optimal_group_size(n)}, "
                f"measured G = {int(at['messages'].idxmin())} (messages), {int(at['cost_usd'].idxmin())} (dollars)"
            )
    skipped = df[df["status"] == "skipped"]
    if len(skipped):
        lines.append(
            f"{skipped['agents'].count()} run(s) beyond the budget of {MAX_MESSAGES:,} messages drawn as closed form"
        )
    errors = df[df["status"] == "error"]
    for row in errors.head(5).itertuples():
        lines.append(f"FAILED {row.topology} N={row.agents} seed={row.seed}: {row.detail}")
    return "\n".join(lines)


def integers(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one value")
    return values


def run_experiment(
    out: Path, agents: list[int], seeds: list[int], workers: int | None, progress: SweepProgress
) -> tuple[pd.DataFrame, list[Path], dict[str, float]]:
    """The sweep (reporting to ``progress``) and every figure; returns the rows, the
    figure paths and the wall seconds of the sweep and of everything."""
    t0 = time.perf_counter()
    df = run_sweep(grid(agents, seeds), out, workers=workers, max_messages=MAX_MESSAGES, progress=progress)
    swept = time.perf_counter() - t0
    cores = workers if workers is not None else len(os.sched_getaffinity(0))
    paths = save_figures([*figure_jobs(df), *small_run_jobs(seeds[0])], out, cores)
    return df, paths, {"sweep_s": swept, "total_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/coordination_cost", help="output directory (default %(default)s)")
    parser.add_argument("--agents", type=integers, default=list(AGENTS), help="comma-separated N values")
    parser.add_argument("--seeds", type=integers, default=list(SEEDS), help="comma-separated seeds")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: one per core)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        df, paths, times = run_experiment(
            Path(args.out), args.agents, args.seeds, args.workers, SweepProgress(enabled=not args.quiet)
        )
    except (SweepError, ParameterError) as exc:
        print(f"coordination_cost: error: {exc}", file=sys.stderr)
        return 2
    out, swept = Path(args.out), times["sweep_s"]
    print(report(df))
    print(f"{len(df)} runs in {swept:.1f} s; everything in {times['total_s']:.1f} s")
    print(f"wrote {(out / 'results.csv').resolve()}")
    for path in paths:
        if path.suffix == ".png":
            print(f"wrote {path.resolve()} (and .svg)")
    return 1 if (df["status"] == "error").any() else 0


if __name__ == "__main__":
    sys.exit(main())
