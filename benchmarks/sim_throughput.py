#!/usr/bin/env python3
"""Simulation runtime throughput and memory, against a bare loop in the same run.

For each N, a two-tier chat round (group size G = round((2N)^(1/3)), the size that
minimises messages) runs on the simulation runtime, with every message delivered,
sized in bytes and accounted. The baseline is a bare loop making the same
deliveries with deques and tuples, no accounting, no state machine, no LLM model.
Then 1,000,000 agents are built and started in a fresh process to measure memory.

    python benchmarks/sim_throughput.py [--agents 10000,100000] [--repeat 3] [--million]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections import deque

from megaactors import ChatRound, Organisation, SimRuntime
from megaactors.behaviours.chat_round import mesh_channels
from megaactors.runtime.gc_tuning import paused_gc


def optimal_group_size(n: int) -> int:
    return max(2, round((2 * n) ** (1 / 3)))


def sim_rate(org: Organisation) -> tuple[float, int]:
    runtime = SimRuntime(org, ChatRound(), trace=False)
    t0 = time.perf_counter()
    result = runtime.run()
    return time.perf_counter() - t0, result.ledger.messages


def bare_rate(org: Organisation) -> tuple[float, int]:
    """The same deliveries with nothing but deques: every agent sends its round,
    then every agent drains its queue."""
    peers = [[p for _, ps in mesh_channels(org, a) for p in ps] for a in range(org.n)]
    t0 = time.perf_counter()
    with paused_gc():  # as the simulation runs
        inboxes = [deque() for _ in range(org.n)]
        mid = 0
        for a in range(org.n):
            payload = (a, "chat")
            for r in peers[a]:
                inboxes[r].append((mid, a, payload))
                mid += 1
        delivered = 0
        for q in inboxes:
            delivered += len(q)
            q.clear()
    return time.perf_counter() - t0, delivered


def million_agents_rss() -> dict[str, float]:
    code = (
        "import resource, time\n"
        "from megaactors import ChatRound, Organisation, SimRuntime\n"
        "t = time.perf_counter()\n"
        "org = Organisation.two_tier(1_000_000, 126)\n"
        "rt = SimRuntime(org, ChatRound(), trace=False)\n"
        "rt.start()\n"
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return {"agents": 1_000_000, "build_and_start_s": float(out[0]), "peak_rss_mb": float(out[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", default="10000,100000")
    parser.add_argument("--repeat", type=int, default=3, help="runs per N; the best is reported")
    parser.add_argument("--million", action="store_true", help="also measure memory with 1,000,000 agents")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for n in map(int, args.agents.split(",")):
        g = optimal_group_size(n)
        org = Organisation.two_tier(n, g)
        sim = min(sim_rate(org) for _ in range(args.repeat))
        bare = min(bare_rate(org) for _ in range(args.repeat))
        assert sim[1] == bare[1], (sim, bare)
        row = {
            "agents": n,
            "group_size": g,
            "messages": sim[1],
            "sim_s": round(sim[0], 3),
            "sim_msgs_per_s": round(sim[1] / sim[0]),
            "bare_msgs_per_s": round(bare[1] / bare[0]),
            "ratio_sim_to_bare": round(bare[0] / sim[0], 3),
        }
        rows.append(row)
        if not args.json:
            print(
                f"N={n:>7,} G={g:>3} {row['messages']:>11,} messages: sim {row['sim_msgs_per_s']:>10,} msg/s, "
                f"bare loop {row['bare_msgs_per_s']:>10,} msg/s, ratio {row['ratio_sim_to_bare']:.2f}",
                flush=True,
            )
    report: dict[str, object] = {"throughput": rows}
    if args.million:
        report["memory"] = million_agents_rss()
        if not args.json:
            m = report["memory"]
            print(
                f"1,000,000 agents built and started in {m['build_and_start_s']:.1f} s, "
                f"peak RSS {m['peak_rss_mb']:.0f} MB"
            )
    report["this_process_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
