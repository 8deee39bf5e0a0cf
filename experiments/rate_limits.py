#!/usr/bin/env python3
"""Makespan and parallel speed-up versus N under provider rate limits.

Two-tier (groups of 10) and hierarchy (fan-out 10) organisations, one chat round, N =
10 … 100,000, without limits and under two OpenAI rate-limit tiers for gpt-4o-mini
(tier 1: 500 RPM / 200,000 TPM; tier 5: 30,000 RPM / 150,000,000 TPM, as published in
2024), with the prompt ignored or read at the reference log's prefill rate. The speed-up is the
serial makespan (calls one after another, no shorter than the limit's floor) over the
parallel one. Writes
``results.csv`` and ``rate_limits.png`` and prints, per setting, the N from which ten
times as many agents gain less than 20 % more speed-up.

    python experiments/rate_limits.py [--agents 10,100,1000,10000,100000] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from megaactors.experiments.rate_limits import COLUMNS, limits_figure, run_rate_limits, stops_paying


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", default="10,100,1000,10000,100000", help="comma-separated N values")
    parser.add_argument("--topologies", default="two-tier,hierarchy")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="results/rate_limits", help="output directory")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def show(row: dict) -> None:
        how = "simulated" if row["simulated"] else "floor"
        where = f"{row['topology']:>9} N={row['agents']:>7,} {row['latency']:>14} {row['limits']:>17}"
        print(f"{where}: makespan {row['makespan_s']:>10,.1f} s ({how}), speed-up {row['speedup']:>8,.1f}", flush=True)

    rows = run_rate_limits([int(n) for n in args.agents.split(",")], args.topologies.split(","), args.seed, show)
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    limits_figure(rows, out / "rate_limits.png")
    print("\nparallelism stops paying (ten times the agents, < 20 % more speed-up) from N =")
    for (topology, latency, limits), n in sorted(stops_paying(rows).items()):
        print(f"  {topology:>9} {latency:>14} {limits:>17}: {'beyond the grid' if n is None else f'{n:,}'}")
    print(f"wrote {out / 'results.csv'} and {out / 'rate_limits.png'}")


if __name__ == "__main__":
    main()
