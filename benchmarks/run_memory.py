#!/usr/bin/env python3
"""Peak memory of runs against the budget's estimate (megaactors.experiments.budget).

Each run executes in a fresh process that reports its peak resident memory (the
kernel's high-water mark); a bare process that imports megaactors and runs nothing
is measured the same way, as the baseline. For every run the script prints the
measured peak, the estimate and their ratio: the estimate must be an upper bound
(ratio >= 1) without refusing much that would fit (ratio well under 2 for the large
runs). It also fits bytes per agent and per message of one round by least squares
over the sim runs, the figures the constants in budget.py are rounded up from.

    python benchmarks/run_memory.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np

from megaactors import RunSpec
from megaactors.experiments.budget import BASE_BYTES, estimate, format_bytes

CHILD = """
import json, resource, sys
from megaactors import RunSpec
params = json.loads(sys.argv[1])
if params:
    spec = RunSpec.from_dict(params)
    options = {"time_scale": 0.001} if spec.runtime != "sim" else {}
    spec.execute(**options)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""

RUNS = [
    {"topology": "two-tier", "agents": 10_000, "group_size": "optimal"},
    {"topology": "two-tier", "agents": 100_000, "group_size": "optimal"},
    {"topology": "two-tier", "agents": 30_000, "group_size": 300},
    {"topology": "star", "agents": 100_000},
    {"topology": "hierarchy", "agents": 100_000},
    {"topology": "flat", "agents": 3_000},
    {"topology": "flat", "agents": 10_000},
    {"topology": "two-tier", "agents": 10_000, "group_size": "optimal", "trace": True},
    {"topology": "two-tier", "agents": 10_000, "group_size": "optimal", "runtime": "asyncio"},
    {"topology": "star", "agents": 10_000, "runtime": "asyncio"},
    {"topology": "two-tier", "agents": 2_000, "group_size": "optimal", "runtime": "pykka"},
]
QUICK = [RUNS[0], RUNS[3], RUNS[5], RUNS[8]]


def peak_bytes(params: dict[str, object]) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(params)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="four small runs instead of eleven")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    bare = peak_bytes({})
    rows = []
    for params in QUICK if args.quick else RUNS:
        spec = RunSpec.from_dict(params)
        cost = estimate(spec)
        measured = peak_bytes(params)
        rows.append({"run": {**params, "group_size": spec.group_size}, "agents": spec.agents,
                     "round_messages": cost.round_messages, "measured_bytes": measured,
                     "estimate_bytes": cost.memory_bytes, "ratio": cost.memory_bytes / measured})  # fmt: skip
    sim = [r for r in rows if r["run"].get("runtime", "sim") == "sim" and not r["run"].get("trace")]
    fit = None
    if len(sim) >= 2:
        a = np.array([[r["agents"], r["round_messages"]] for r in sim], dtype=float)
        b = np.array([r["measured_bytes"] - bare for r in sim], dtype=float)
        (per_agent, per_message), *_ = np.linalg.lstsq(a, b, rcond=None)
        fit = {"bytes_per_agent": per_agent, "bytes_per_round_message": per_message}
    if args.json:
        print(json.dumps({"bare_bytes": bare, "base_bytes": BASE_BYTES, "runs": rows, "fit": fit}, default=float))
        return
    print(f"bare process (imports only): {format_bytes(bare)}; the estimate's base: {format_bytes(BASE_BYTES)}")
    print(f"{'run':<62} {'measured':>10} {'estimate':>10} {'ratio':>6}")
    for r in rows:
        shown = ", ".join(f"{k}={v}" for k, v in r["run"].items())
        print(f"{shown:<62} {format_bytes(r['measured_bytes']):>10} {format_bytes(r['estimate_bytes']):>10} "
              f"{r['ratio']:>6.2f}")  # fmt: skip
    if fit:
        print(f"sim fit over the bare process: {fit['bytes_per_agent']:,.0f} bytes per agent, "
              f"{fit['bytes_per_round_message']:,.1f} bytes per message of one round")  # fmt: skip
    low = [r for r in rows if r["ratio"] < 1]
    print("every estimate is an upper bound" if not low else f"{len(low)} estimate(s) BELOW the measured peak")


if __name__ == "__main__":
    main()
