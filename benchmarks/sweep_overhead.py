#!/usr/bin/env python3
"""Sweep engine overhead per run, against a bare loop over the same specs in the same run.

The specs are two-tier chat rounds at the cost-minimising group size, each taking over
a second. The bare loop calls ``RunSpec.execute()`` on each in this process; the engine
runs the same grid with ``run_sweep`` and one worker process forked from this one (process pool, row
building, CSV append, the final sorted rewrite and the DataFrame), so its extra wall
time per run is the engine's own cost (the median of ``--repeat`` back-to-back pairs);
the part spent outside the runs (pool, rows, CSV, DataFrame) is shown separately. With
``--workers 2`` it also reports the parallel speed-up.

    python benchmarks/sweep_overhead.py [--agents 20000] [--runs 6] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from megaactors.experiments.sweep import plan, run_sweep


def bare_loop(grid: dict[str, object]) -> float:
    specs = [run.spec for run in plan(grid)]
    t0 = time.perf_counter()
    for spec in specs:
        spec.execute()
    return time.perf_counter() - t0


def engine(grid: dict[str, object], workers: int) -> tuple[float, float]:
    """Wall time of the sweep and the time its runs took inside the workers."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        df = run_sweep(grid, Path(tmp) / "sweep", workers=workers, progress=False)
        elapsed = time.perf_counter() - t0
    if not (df["status"] == "ok").all():
        raise SystemExit(f"a run failed: {df['detail'].iloc[0]}")
    return elapsed, float(df["run_s"].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=20_000, help="N of each run (default %(default)s)")
    parser.add_argument("--runs", type=int, default=6, help="runs in the grid (seeds 1..runs)")
    parser.add_argument("--repeat", type=int, default=3, help="bare/engine pairs measured; the median is reported")
    parser.add_argument("--workers", type=int, default=2, help="also time the engine with this many workers")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    grid = {
        "topology": "two-tier",
        "agents": args.agents,
        "group_size": "optimal",
        "seed": list(range(1, args.runs + 1)),
    }
    plan(grid)[0].spec.execute()  # warm-up: imports, caches and the heap's first growth
    engine(grid, 1)
    pairs, plumbing, parallel = [], [], []
    for _ in range(args.repeat):  # back to back, so drift in machine load hits both alike
        b = bare_loop(grid)
        e, inside = engine(grid, 1)
        pairs.append((b, e))
        plumbing.append((e - inside) / args.runs)
        if args.workers > 1:
            parallel.append(b / engine(grid, args.workers)[0])
    b, e = sorted(pairs, key=lambda p: p[1] / p[0])[len(pairs) // 2]  # the median pair
    per_run = b / args.runs
    overhead = (e - b) / args.runs
    report = {
        "agents": args.agents,
        "runs": args.runs,
        "bare_loop_s": round(b, 3),
        "mean_run_s": round(per_run, 3),
        "engine_1_worker_s": round(e, 3),
        "engine_over_bare": round(e / b, 4),
        "overhead_per_run_s": round(overhead, 4),
        "overhead_ratio": round(overhead / per_run, 4),
        "plumbing_per_run_s": round(statistics.median(plumbing), 4),
        "all_ratios": [round(e / b, 4) for b, e in pairs],
    }
    if parallel:
        report[f"speedup_{args.workers}_workers"] = round(statistics.median(parallel), 3)
    if args.json:
        print(json.dumps(report))
        return
    print(
        f"{args.runs} two-tier runs of N = {args.agents:,} (optimal G), mean {per_run:.2f} s each; "
        f"median of {args.repeat} pairs"
    )
    print(f"  bare loop          {b:7.2f} s")
    print(f"  sweep, 1 worker    {e:7.2f} s  -> engine over bare {e / b:.3f} (all: {report['all_ratios']})")
    print(f"  overhead per run   {overhead * 1000:7.1f} ms = {100 * overhead / per_run:.2f}% of a run (target < 5%)")
    print(f"    of which outside the run (pool, rows, CSV, frame): {1000 * report['plumbing_per_run_s']:.1f} ms")
    if parallel:
        print(
            f"  sweep, {args.workers} workers: speed-up "
            f"{report[f'speedup_{args.workers}_workers']:.2f}x over the bare loop"
        )


if __name__ == "__main__":
    main()
