#!/usr/bin/env python3
"""What faults cost each organisation: overhead and completion versus drop and crash rates.

For flat, star, two-tier (the group size that minimises messages) and hierarchy
organisations of N agents, a chat round of ``--rounds`` rounds runs on the simulation
without faults and then with a drop probability from 0 to 20 % and, separately, a
crash rate (per batch taken) from 0 to 10 %, over ``--seeds``. Recovery is on (a lost
copy is sent again after ``timeout_s``, at most ``retries`` times; a crashed agent
restarts after ``restart_s`` with its behaviour state, its in-queue lost). Each
faulty run is compared with the fault-free run of the same seed: messages on the
wire (work plus re-sends), tokens, dollars and makespan as ratios, and the share of
runs that completed (status ``ok``, not ``stalled``).

    python experiments/faults.py [--out DIR] [--agents 100] [--rounds 2] [--seeds 0,1,2,3,4]

Writes ``DIR/faults.csv`` (one row per run) and ``DIR/faults.png``/``.svg``, and
prints a table of the cheapest organisation at each fault rate (among those whose
every run completed: a stalled run is cheap only because it stopped).
"""

from __future__ import annotations

import argparse
import csv
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from megaactors import RunSpec

TOPOLOGIES = {"flat": {}, "star": {}, "two-tier": {"group_size": "optimal"}, "hierarchy": {"fanout": 4}}
DROP_RATES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2)
CRASH_RATES = (0.0, 0.01, 0.02, 0.05, 0.1)
RECOVERY = "recover=true,timeout_s=3,retries=3,restart_s=3"


def _base(topology: str, agents: int, rounds: int, seed: int) -> dict[str, Any]:
    return {"topology": topology, "agents": agents, "rounds": rounds, "seed": seed, **TOPOLOGIES[topology]}


def fault_free(job: tuple[str, int, int, int]) -> dict[str, float]:
    """The fault-free run of one organisation and seed: what its faulty runs are compared with."""
    ledger = RunSpec.from_dict(_base(*job)).execute().ledger
    return {
        "messages": ledger.messages,
        "tokens": ledger.tokens_in + ledger.tokens_out,
        "cost_usd": ledger.cost_usd,
        "makespan_s": ledger.virtual_time_s,
    }


def one(job: tuple[str, int, int, int, str, float, dict[str, float]]) -> dict[str, Any]:
    """One faulty run against its fault-free twin (same seed)."""
    topology, agents, rounds, seed, kind, rate, plain = job
    faults = f"{kind}={rate},{RECOVERY}"
    faulty = RunSpec.from_dict({**_base(topology, agents, rounds, seed), "faults": faults}).execute()
    counts = faulty.faults or {}
    tokens = faulty.ledger.tokens_in + faulty.ledger.tokens_out
    return {
        "topology": topology,
        "agents": agents,
        "seed": seed,
        "kind": kind,
        "rate": rate,
        "status": faulty.status,
        "messages": faulty.ledger.messages,
        "resent": counts.get("resent", 0),
        "wire_ratio": (faulty.ledger.messages + counts.get("resent", 0)) / plain["messages"],
        "tokens_ratio": tokens / plain["tokens"],
        "cost_usd": faulty.ledger.cost_usd,
        "cost_ratio": faulty.ledger.cost_usd / plain["cost_usd"],
        "makespan_s": faulty.ledger.virtual_time_s,
        "makespan_ratio": faulty.ledger.virtual_time_s / plain["makespan_s"],
        **{f"n_{k}": v for k, v in counts.items()},
    }


def mean(rows: list[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def figure(rows: list[dict[str, Any]]) -> Figure:
    fig = Figure(figsize=(15, 7.5), layout="constrained")
    axes = fig.subplots(2, 4)
    panels = [
        ("cost_usd", "dollars per run (mean)"),
        ("wire_ratio", "messages on the wire / fault-free"),
        ("makespan_ratio", "makespan / fault-free"),
        ("complete", "completed runs (share)"),
    ]
    for row, (kind, label) in enumerate((("drop", "drop probability"), ("crash", "crash rate per batch"))):
        for col, (key, title) in enumerate(panels):
            ax = axes[row][col]
            for topology in TOPOLOGIES:
                mine = [r for r in rows if r["topology"] == topology and r["kind"] == kind]
                rates = sorted({r["rate"] for r in mine})
                ys = []
                for rate in rates:
                    at = [r for r in mine if r["rate"] == rate]
                    ys.append(sum(r["status"] == "ok" for r in at) / len(at) if key == "complete" else mean(at, key))
                ax.plot(rates, ys, marker="o", label=topology)
            ax.set_xlabel(label)
            ax.set_title(title, fontsize=10)
            if key == "cost_usd":
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    n = rows[0]["agents"]
    fig.suptitle(f"Faults and recovery by organisation (N = {n}, chat round, recovery on; mean over seeds)")
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="faults_out")
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    twins = [(topology, args.agents, args.rounds, seed) for topology in TOPOLOGIES for seed in seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        plain = dict(zip(twins, pool.map(fault_free, twins), strict=True))  # once, not once per fault rate
        jobs = [
            (topology, args.agents, args.rounds, seed, kind, rate, plain[(topology, args.agents, args.rounds, seed)])
            for topology in TOPOLOGIES
            for kind, rates in (("drop", DROP_RATES), ("crash", CRASH_RATES))
            for rate in rates
            for seed in seeds
        ]
        rows = list(pool.map(one, jobs, chunksize=4))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for r in rows for k in r})
    with open(out / "faults.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys, restval=0)
        writer.writeheader()
        writer.writerows(rows)
    fig = figure(rows)
    for ext in ("png", "svg"):
        fig.savefig(out / f"faults.{ext}", dpi=110)
        print(out / f"faults.{ext}")
    print("\n| fault | rate | " + " | ".join(f"{t} $ (done)" for t in TOPOLOGIES) + " | cheapest |")
    print("|---|---|" + "---|" * (len(TOPOLOGIES) + 1))
    for kind, rates in (("drop", DROP_RATES), ("crash", CRASH_RATES)):
        for rate in rates:
            cells, costs = [], {}
            for topology in TOPOLOGIES:
                at = [r for r in rows if r["topology"] == topology and r["kind"] == kind and r["rate"] == rate]
                done = sum(r["status"] == "ok" for r in at) / len(at)
                if done == 1:  # a stalled run is cheap because it stopped: not a candidate
                    costs[topology] = mean(at, "cost_usd")
                cells.append(f"{mean(at, 'cost_usd'):.4f} ({done:.0%})")
            cheapest = min(costs, key=costs.__getitem__) if costs else "none completes"
            print(f"| {kind} | {rate:g} | " + " | ".join(cells) + f" | {cheapest} |")


if __name__ == "__main__":
    main()
