#!/usr/bin/env python3
"""How the simulation's cost per activation and its memory grow with N.

For each N, a two-tier chat round at the cost-minimising group size
G = round((2N)^(1/3)) runs in a fresh process (so that its peak RSS is its own):
wall time per LLM call (one call per activation: a batch read or a message
composed), messages per second and peak RSS. Each row's per-call cost is also given
as a ratio to the smallest N's, measured in the same run; sizes take turns when
``--repeat`` is above 1, and the fastest run of each is kept. A log-log figure of
per-call cost and peak RSS against N is written to ``--out``.

    python benchmarks/sim_scaling.py [--agents 10000,100000,300000,1000000] [--large]
                                     [--repeat 1] [--hierarchy N] [--out sim_scaling.png] [--json]

``--large`` adds N = 3,000,000; ``--hierarchy N`` also runs an N-agent hierarchy
(fan-out 10) chat round and reports its time and memory.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

_CHILD = r"""
import json, resource, sys, time
from megaactors import ChatRound, Organisation, SimRuntime
kind, n = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
if kind == "two-tier":
    org = Organisation.two_tier(n, max(2, round((2 * n) ** (1 / 3))))
else:
    org = Organisation.hierarchy(n, 10)
runtime = SimRuntime(org, ChatRound(), trace=False)
built = time.perf_counter() - t0
result = runtime.run()
ledger = result.ledger
print(json.dumps({
    "kind": kind, "agents": n, "groups": len(org.groups), "build_s": built, "run_s": ledger.wall_s,
    "messages": ledger.messages, "llm_calls": ledger.llm_calls,
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def measure(kind: str, n: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", _CHILD, kind, str(n)], capture_output=True, text=True)
    if out.returncode:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"the {kind} run of {n:,} agents failed (exit {out.returncode}): {last}")
    row = json.loads(out.stdout)
    row["us_per_call"] = row["run_s"] / row["llm_calls"] * 1e6
    row["msgs_per_s"] = row["messages"] / row["run_s"]
    return row


def figure(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["agents"] for r in rows]
    fig, left = plt.subplots(figsize=(7, 4.5), layout="constrained")
    left.loglog(ns, [r["us_per_call"] for r in rows], "o-", color="tab:blue", label="wall time per LLM call")
    left.set_xlabel("agents N (two-tier, G = (2N)^(1/3))")
    left.set_ylabel("µs per LLM call (activation)", color="tab:blue")
    right = left.twinx()
    right.loglog(ns, [r["peak_rss_mb"] for r in rows], "s--", color="tab:red", label="peak RSS")
    right.set_ylabel("peak RSS (MB)", color="tab:red")
    left.set_title("Simulation: cost per activation and memory against N")
    fig.legend(loc="upper left", bbox_to_anchor=(0.1, 0.92))
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", default="10000,100000,300000,1000000")
    parser.add_argument("--large", action="store_true", help="also N = 3,000,000")
    parser.add_argument("--repeat", type=int, default=1, help="runs per N, taking turns; the fastest is kept")
    parser.add_argument("--hierarchy", type=int, default=0, help="also an N-agent hierarchy (fan-out 10)")
    parser.add_argument("--out", default="sim_scaling.png", help="the log-log figure (PNG)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        sizes = [int(x) for x in args.agents.split(",")] + ([3_000_000] if args.large else [])
    except ValueError:
        parser.error(f"--agents must be comma-separated integers, got {args.agents!r}")
    if not sizes or min(sizes) < 2 or args.repeat < 1:
        parser.error("--agents needs sizes >= 2 and --repeat >= 1")
    best: dict[int, dict[str, Any]] = {}
    for _ in range(args.repeat):
        for n in sizes:
            row = measure("two-tier", n)
            if n not in best or row["run_s"] < best[n]["run_s"]:
                best[n] = row
    rows = [best[n] for n in sorted(best)]
    base = rows[0]["us_per_call"]
    for r in rows:
        r["per_call_vs_smallest"] = r["us_per_call"] / base
    report: dict[str, Any] = {"two_tier": rows}
    if args.hierarchy:
        report["hierarchy"] = measure("hierarchy", args.hierarchy)
    figure(rows, args.out)
    if args.json:
        print(json.dumps(report))
        return
    print(f"{'N':>10} {'messages':>12} {'LLM calls':>10} {'run s':>8} {'µs/call':>8} {'x smallest':>10} "
          f"{'M msg/s':>8} {'peak RSS MB':>11}")  # fmt: skip
    for r in rows:
        print(
            f"{r['agents']:>10,} {r['messages']:>12,} {r['llm_calls']:>10,} {r['run_s']:>8.2f} "
            f"{r['us_per_call']:>8.1f} {r['per_call_vs_smallest']:>10.2f} {r['msgs_per_s'] / 1e6:>8.2f} "
            f"{r['peak_rss_mb']:>11,.0f}"
        )
    if args.hierarchy:
        h = report["hierarchy"]
        print(
            f"hierarchy (fan-out 10), N = {h['agents']:,}: built in {h['build_s']:.1f} s, run {h['run_s']:.1f} s, "
            f"{h['llm_calls']:,} LLM calls, {h['messages']:,} messages, peak RSS {h['peak_rss_mb']:,.0f} MB"
        )
    print(f"figure: {args.out}")


if __name__ == "__main__":
    main()
