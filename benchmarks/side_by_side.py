#!/usr/bin/env python3
"""Run one benchmark on two source trees in turns, and compare what each reports.

Each run is a fresh process whose ``PYTHONPATH`` starts with one tree (so its
``megaactors`` is imported, and its copy of the benchmark script is run); the two
trees take turns, so that a slow spell of a shared machine falls on both. Every
benchmark already reports a ratio against a bare baseline measured in the same
process; this prints, for each figure named with ``--key`` (a dotted path in the
benchmark's JSON report, ``:min`` when smaller is better), the best and all values
per tree and the change from the first tree to the second.

    python benchmarks/side_by_side.py --trees /tmp/old,. --bench live_runtimes \\
        --key pykka.wall_ratio:min --key asyncio.throughput_ratio --turns 3 -- --repeat 3

(a worktree of an older commit, e.g. ``git worktree add /tmp/old main``, is the
other tree). Arguments after ``--`` go to the benchmark, which is run with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def dig(report: Any, key: str) -> float:
    """``report["a"]["b"]`` for the key ``a.b`` (list items by index)."""
    for part in key.split("."):
        report = report[int(part)] if isinstance(report, list) else report[part]
    return float(report)


def run_once(tree: Path, bench: str, extra: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    script = tree / "benchmarks" / f"{bench}.py"
    out = subprocess.run(
        [sys.executable, str(script), "--json", *extra], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", required=True, help="two source trees, comma-separated (first: the reference)")
    parser.add_argument("--bench", required=True, help="benchmark script name in benchmarks/ (no .py)")
    parser.add_argument("--key", action="append", required=True, help="dotted path of a figure in its JSON report")
    parser.add_argument("--turns", type=int, default=3, help="runs per tree, taking turns")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the benchmark's own arguments")
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    if len(trees) != 2 or not all((t / "megaactors").is_dir() for t in trees):
        parser.error(f"--trees needs two source trees holding megaactors/, got {args.trees!r}")
    extra = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    keys = {k.removesuffix(":min"): min if k.endswith(":min") else max for k in args.key}
    figures: dict[str, dict[Path, list[float]]] = {k: {t: [] for t in trees} for k in keys}
    for turn in range(args.turns):
        for tree in trees:
            report = run_once(tree, args.bench, extra)
            for key in keys:
                figures[key][tree].append(dig(report, key))
            print(f"turn {turn + 1} {tree}: " + ", ".join(f"{k}={figures[k][tree][-1]:g}" for k in keys), flush=True)
    summary = {}
    for key, best in keys.items():
        first, second = (best(figures[key][t]) for t in trees)
        summary[key] = {"best": [first, second], "all": [figures[key][t] for t in trees], "change": second / first - 1}
        print(f"{key}: best {first:g} -> {second:g} ({summary[key]['change']:+.1%}); all {summary[key]['all']}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
