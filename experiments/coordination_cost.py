#!/usr/bin/env python3
"""Coordination cost versus the number of agents, for each organisation.

Runs one chat round per (organisation, N, seed) in the deterministic simulation and
writes ``results.csv`` and ``messages.png`` into the output directory.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from megaactors.spec import RunSpec

DEFAULT_AGENTS = (10, 30, 100, 300, 1000, 3000)
FLAT_MAX = 1000
COLUMNS = (
    "topology",
    "agents",
    "seed",
    "messages",
    "bytes",
    "llm_calls",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "virtual_time_s",
    "wall_s",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="results/coordination_cost", help="output directory")
    parser.add_argument("--agents", default=",".join(map(str, DEFAULT_AGENTS)), help="comma-separated N values")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for topology in ("flat", "star", "two-tier", "hierarchy"):
        for n in map(int, args.agents.split(",")):
            if topology == "flat" and n > FLAT_MAX:
                continue
            for seed in map(int, args.seeds.split(",")):
                s = RunSpec(topology=topology, agents=n, seed=seed).execute().summary()
                rows.append({c: s[c] for c in COLUMNS})
                print(f"{topology:>9} N={n:>6} seed={seed}: {s['messages']:>10,} messages ${s['cost_usd']:.4f}")
    csv_path = out / "results.csv"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    fig, ax = plt.subplots(figsize=(7, 5))
    for topology in ("flat", "star", "two-tier", "hierarchy"):
        pts = sorted((r["agents"], r["messages"]) for r in rows if r["topology"] == topology)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=topology)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="agents N",
        ylabel="messages per chat round",
        title="Coordination cost of one chat round",
    )
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    png_path = out / "messages.png"
    fig.savefig(png_path, dpi=120, bbox_inches="tight")
    print(f"wrote {csv_path.resolve()}\nwrote {png_path.resolve()}")


if __name__ == "__main__":
    main()
