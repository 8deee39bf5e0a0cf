#!/usr/bin/env python3
"""Async versus threads: N simulated LLM calls started at once on asyncio tasks and on
pykka threads (one per agent), for N = 500, 1,000, 5,000 and 10,000 calls of 50 ms.

Each side runs in a fresh process; the table reports wall time (whole run, and the
calls alone) peak resident memory, in total and per call, and how many calls were in flight at
once at the peak (threads may not reach N). Writes
``results.csv`` and ``async_vs_threads.png`` into the output directory.

    python experiments/async_vs_threads.py [--calls 500,1000,5000,10000] [--latency-ms 50] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from megaactors.experiments.async_vs_threads import KINDS, compare, comparison_figure, format_comparison

COLUMNS = ("runtime", "calls", "latency_ms", "wall_s", "calls_s", "peak_rss_mb", "rss_per_call_kb", "peak_in_flight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", default="500,1000,5000,10000", help="comma-separated N values")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--out", default="results/async_vs_threads", help="output directory")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in map(int, args.calls.split(",")):
        result = compare(n, args.latency_ms)
        print(format_comparison(result, n, args.latency_ms), flush=True)
        for kind in KINDS:
            rows.append({"runtime": kind, "calls": n, "latency_ms": args.latency_ms, **result[kind]})
    csv_path = out / "results.csv"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    fig = comparison_figure(rows, args.latency_ms)
    png_path = out / "async_vs_threads.png"
    fig.savefig(png_path, dpi=120, bbox_inches="tight")
    print(f"wrote {csv_path.resolve()}\nwrote {png_path.resolve()}")


if __name__ == "__main__":
    main()
