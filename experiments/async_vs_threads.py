#!/usr/bin/env python3
"""Async versus threads: N concurrent simulated LLM calls on asyncio tasks and on
pykka threads (one per agent), for N = 500, 1,000, 5,000 and 10,000 calls of 50 ms.

Each side runs in a fresh process; the table reports wall time (whole run, and the
calls alone) and peak resident memory, in total and per concurrent call. Writes
``results.csv`` and ``async_vs_threads.png`` into the output directory.

    python experiments/async_vs_threads.py [--calls 500,1000,5000,10000] [--latency-ms 50] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from megaactors.experiments.async_vs_threads import KINDS, compare, format_comparison

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
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for kind, marker, color in zip(KINDS, "os", ("tab:blue", "tab:orange"), strict=True):
        mine = [r for r in rows if r["runtime"] == kind]
        pts = sorted((r["calls"], r["wall_s"], r["calls_s"], r["rss_per_call_kb"]) for r in mine)
        xs = [p[0] for p in pts]
        left.plot(xs, [p[1] for p in pts], marker=marker, color=color, label=f"{kind}: whole run")
        left.plot(xs, [p[2] for p in pts], marker=marker, color=color, linestyle="--", label=f"{kind}: calls only")
        right.plot(xs, [p[3] for p in pts], marker=marker, color=color, label=kind)
    left.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    left.set(xscale="log", yscale="log", xlabel="concurrent LLM calls N", ylabel="wall time (s)")
    left.set_title(f"{args.latency_ms:g} ms simulated calls: wall time")
    right.set(xscale="log", xlabel="concurrent LLM calls N", ylabel="peak RSS added per call (KB)")
    right.set_title("memory per concurrent call")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    png_path = out / "async_vs_threads.png"
    fig.savefig(png_path, dpi=120, bbox_inches="tight")
    print(f"wrote {csv_path.resolve()}\nwrote {png_path.resolve()}")


if __name__ == "__main__":
    main()
