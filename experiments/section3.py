#!/usr/bin/env python3
"""MegaAgent (arXiv:2408.09955) §2–§3 reproduced in simulation.

The same as ``megaactors reproduce section3``: calibrates the Gobang and policy
scenarios, runs them with their ablations over five seeds, computes the speed-up
bound, runs the reference code's candidate mechanisms and a sensitivity analysis,
sweeps makespan against N (balanced trees and the paper's three levels) and writes
``report.md``, ``report.json`` and the figures.

    python experiments/section3.py [--out results/section3] [--seeds 5] [--agents 10,100,1000]
"""

from __future__ import annotations

import sys

from megaactors.cli import main

DEFAULT_OUT = "results/section3"


def run(argv: list[str]) -> int:
    if not any(a == "--out" or a.startswith("--out=") for a in argv):
        argv = [*argv, "--out", DEFAULT_OUT]
    return main(["reproduce", "section3", *argv])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
