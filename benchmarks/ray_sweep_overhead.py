#!/usr/bin/env python3
"""Sweep overhead per run on Ray against the process pool, same grid, sides taking turns.

A one-node Ray cluster of one CPU is started once (``ray start --head``, as the tests
start theirs); then, ``--repeat`` times, the same grid is swept with one worker process
(``executor="process"``) and with one Ray CPU (``executor="ray"``, connecting to that
cluster), back to back, and a bare ``RunSpec.execute()`` loop over the same specs runs
beside them. Reported: each engine's extra wall time per run over the bare loop, as a
share of a run, Ray's wall time over the pool's, and each engine's time outside the
runs per run (sweep wall time minus the runs' own ``run_s``: dispatch, results, rows,
CSV), which the machine's load disturbs least (medians). Ray nodes advertise the
machine's address, so on a machine with other interfaces run it in a loopback-only
network namespace:

    unshare -n sh -c 'ip link set lo up && RAY_AUTH_MODE=disabled \\
        .venv/bin/python benchmarks/ray_sweep_overhead.py [--agents 20000] [--runs 6] [--repeat 3]'
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from ray_cluster import LocalRayCluster
from sweep_overhead import bare_loop  # this script's directory is on the path

from megaactors.experiments.sweep import run_sweep


def sweep(grid: dict[str, object], **how: object) -> tuple[float, float]:
    """Wall time of the sweep and the part spent outside its runs (dispatch, rows, CSV)."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        workers = None if how else 1  # Ray: every run submitted, the cluster's one CPU runs one at a time
        df = run_sweep(grid, Path(tmp) / "sweep", workers=workers, progress=False, **how)  # type: ignore[arg-type]
        elapsed = time.perf_counter() - t0
    if not (df["status"] == "ok").all():
        raise SystemExit(f"a run failed: {df['detail'].iloc[0]}")
    return elapsed, elapsed - float(df["run_s"].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=20_000, help="N of each run (default %(default)s)")
    parser.add_argument("--runs", type=int, default=6, help="runs in the grid (seeds 1..runs)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of bare / pool / Ray; medians reported")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    grid = {"topology": "two-tier", "agents": args.agents, "group_size": "optimal",
            "seed": list(range(1, args.runs + 1))}  # fmt: skip
    cluster = LocalRayCluster()
    try:
        cluster.start(workers=0, cpus=1)
        ray = {"executor": "ray", "address": cluster.address}
        sweep(grid, **ray)  # warm-up: the cluster's worker process, imports
        sweep(grid)
        bare, pool, on_ray, pool_out, ray_out = [], [], [], [], []
        for _ in range(args.repeat):
            bare.append(bare_loop(grid))
            wall, outside = sweep(grid)
            pool.append(wall)
            pool_out.append(outside / args.runs)
            wall, outside = sweep(grid, **ray)
            on_ray.append(wall)
            ray_out.append(outside / args.runs)
    finally:
        cluster.stop()
    b, p, r = (statistics.median(x) for x in (bare, pool, on_ray))
    per_run = b / args.runs
    report = {
        "agents": args.agents,
        "runs": args.runs,
        "bare_loop_s": round(b, 3),
        "pool_s": round(p, 3),
        "ray_s": round(r, 3),
        "pool_overhead_per_run": round((p - b) / args.runs / per_run, 4),
        "ray_overhead_per_run": round((r - b) / args.runs / per_run, 4),
        "ray_over_pool": round(r / p, 4),
        "pool_outside_runs_per_run_s": round(statistics.median(pool_out), 4),
        "ray_outside_runs_per_run_s": round(statistics.median(ray_out), 4),
        "all_ray_over_pool": [round(y / x, 4) for x, y in zip(pool, on_ray, strict=True)],
    }
    if args.json:
        print(json.dumps(report))
        return
    print(f"{args.runs} two-tier runs of N = {args.agents:,}, mean {per_run:.2f} s each; medians of {args.repeat}")
    print(f"  bare loop        {b:7.2f} s")
    print(f"  process pool     {p:7.2f} s  overhead {100 * report['pool_overhead_per_run']:.1f}% of a run")
    print(f"  Ray (1 CPU)      {r:7.2f} s  overhead {100 * report['ray_overhead_per_run']:.1f}% of a run")
    print(f"  Ray over pool    {r / p:.3f} (all: {report['all_ray_over_pool']}; target <= 1.10)")
    print(
        f"  outside the runs per run: pool {1000 * report['pool_outside_runs_per_run_s']:.0f} ms, "
        f"Ray {1000 * report['ray_outside_runs_per_run_s']:.0f} ms"
    )


if __name__ == "__main__":
    main()
