#!/usr/bin/env python3
"""The whole §2–§3 reproduction against its budget of 120 seconds.

Runs ``megaactors reproduce section3`` with its defaults (calibrations, both scenarios
with their ablations, mechanisms and sensitivity points over five seeds, the
complexity sweep, figures and report) into a temporary directory, in a fresh
process each time, and prints its wall time against the budget, with the CPU time
of all its processes: on a machine shared with other jobs, CPU time over the worker
count is what the same run takes when it has the cores to itself.

    python benchmarks/section3_runtime.py [--repeat 1] [-- extra reproduce flags]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time

BUDGET_S = 120.0


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1, help="fresh-process repetitions (median reported)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the reproduction")
    parser.add_argument("extra", nargs="*", help="more flags for `megaactors reproduce section3`")
    args = parser.parse_args()
    walls, cpus = [], []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as out:
            cpu0, t0 = _children_cpu(), time.perf_counter()
            cmd = [sys.executable, "-m", "megaactors", "reproduce", "section3", "--out", out, "--quiet"]
            subprocess.run([*cmd, "--workers", str(args.workers), *args.extra], check=True, capture_output=True)
            wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
        walls.append(wall)
        cpus.append(cpu)
        print(
            f"run {i + 1}: {wall:6.1f} s wall, {cpu:6.1f} s CPU over all processes "
            f"({cpu / args.workers:.1f} s per worker)"
        )
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(
        f"whole reproduction: {wall:.1f} s wall against a budget of {BUDGET_S:.0f} s ({wall / BUDGET_S:.0%}): "
        f"{'within' if wall <= BUDGET_S else 'OVER'} budget; {cpu / args.workers:.1f} s of CPU per worker "
        f"({cpu / args.workers / BUDGET_S:.0%} of the budget); load average {load} when it ended"
    )


if __name__ == "__main__":
    main()
