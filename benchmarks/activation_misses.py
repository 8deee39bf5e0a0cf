#!/usr/bin/env python3
"""Instructions and cache misses per LLM call (one call per activation) of the
simulation's two-tier chat round, counted by valgrind's cache simulator: what an
activation costs at N agents, reproducibly on a shared machine where wall time is
noise.

For each source tree and each N, the round (1 round, G = round((2N)^(1/3))) runs
twice under ``valgrind --tool=cachegrind --cache-sim=yes``: whole, and built and
started only; the difference, function by function, divided by the run's LLM
calls, is what an activation costs. The cyclic collector's own functions are left
out of both (the start, unlike the run, is made with the collector on). The
simulated caches: a 48 KB first level and a last level of ``--ll`` bytes (32 MB by
default: at N = 10,000 the whole run fits in it, at 100,000 it does not, as the
real machine's shared L3 holds 10,000 agents and not 1,000,000). With ``--top K``
the K functions with the most last-level misses per call are listed.

    PYTHONHASHSEED=0 python benchmarks/activation_misses.py --trees /tmp/old,. --agents 10000,100000 --top 12

Needs valgrind; about 4 minutes a tree at N = 10,000 and 15 at 100,000.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

EVENTS = ("Ir", "I1mr", "ILmr", "Dr", "D1mr", "DLmr", "Dw", "D1mw", "DLmw")
_COLLECTOR = (
    "gc_collect",
    "visit_",
    "subtract_refs",
    "update_refs",
    "move_unreachable",
    "deduce_unreachable",
    "_traverse",
)
"""Parts of the names of the cyclic collector's functions."""


def workload(mode: str, n: int) -> int:
    """Build the round (and run it, for ``mode`` "run") in this process; return its LLM calls."""
    from megaactors import ChatRound, Organisation, SimRuntime

    runtime = SimRuntime(Organisation.two_tier(n, max(2, round((2 * n) ** (1 / 3)))), ChatRound(), trace=False)
    if mode == "run":
        return runtime.run().ledger.llm_calls
    runtime.start()
    return 0


def per_function(path: Path) -> dict[str, list[int]]:
    """Event counts by function of a cachegrind output file."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0] * len(EVENTS))
    name = ""
    with path.open() as f:
        for line in f:
            if line.startswith("fn="):
                name = line[3:].strip()
            elif line[:1].isdigit():
                counts = totals[name]
                for i, v in enumerate(line.split()[1:]):
                    counts[i] += int(v)
    return totals


def measure(tree: Path, n: int, ll: int) -> tuple[int, dict[str, list[int]]]:
    """LLM calls of the round at ``n`` agents and its counts by function (run minus start)."""
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(tree), OPENBLAS_NUM_THREADS="1")
    # a small run first: a fresh tree's first import compiles its modules, which only one side would pay
    subprocess.run([sys.executable, __file__, "--run", "run", "60"], env=env, cwd=tree, check=True, capture_output=True)
    found: dict[str, dict[str, list[int]]] = {}
    calls = 0
    with tempfile.TemporaryDirectory() as d:
        for mode in ("run", "start"):
            out = Path(d) / mode
            cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=yes", f"--LL={ll},16,64", "--D1=49152,12,64"]
            cmd += [f"--cachegrind-out-file={out}", sys.executable, __file__, "--run", mode, str(n)]
            done = subprocess.run(cmd, env=env, cwd=tree, check=True, capture_output=True, text=True)
            if mode == "run":
                calls = int(done.stdout.split()[-1])
            found[mode] = per_function(out)
    run, start = found["run"], found["start"]
    zero = [0] * len(EVENTS)
    diff = {k: [a - b for a, b in zip(run.get(k, zero), start.get(k, zero), strict=True)] for k in run.keys() | start}
    return calls, {k: v for k, v in diff.items() if not any(part in k for part in _COLLECTOR)}


def main() -> None:
    if sys.argv[1:2] == ["--run"]:
        print(workload(sys.argv[2], int(sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", default=".", help="source trees holding megaactors/, comma-separated")
    parser.add_argument("--agents", default="10000,100000", help="values of N, comma-separated")
    parser.add_argument("--ll", type=int, default=32 << 20, help="simulated last-level cache, bytes")
    parser.add_argument("--top", type=int, default=0, help="list the K functions with the most last-level misses")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    for t in trees:
        if not (t / "megaactors").is_dir():
            parser.error(f"--trees: {t} holds no megaactors/")
    try:
        sizes = [int(a) for a in args.agents.split(",")]
    except ValueError:
        parser.error(f"--agents must be integers separated by commas, got {args.agents!r}")
    rows = []
    for n in sizes:
        for tree in trees:
            calls, diff = measure(tree, n, args.ll)
            total = [sum(v[i] for v in diff.values()) / calls for i in range(len(EVENTS))]
            row = {"tree": str(tree), "agents": n, "llm_calls": calls, **dict(zip(EVENTS, total, strict=True))}
            rows.append(row)
            print(
                f"{tree.name or tree} N={n:,}: {calls:,} calls; per call {total[0]:,.0f} instructions, "
                f"first-level misses {total[4]:.1f} + {total[7]:.1f}, last-level misses {total[5]:.2f} + {total[8]:.2f}"
                " (read + write)"
            )
            worst = sorted(diff.items(), key=lambda kv: -(kv[1][5] + kv[1][8]))[: args.top]
            for name, v in worst:
                print(f"    {name[:44]:44s} {v[0] / calls:9.0f} instr  {(v[5] + v[8]) / calls:6.2f} LL misses")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
