"""``megaactors reproduce section3 --out DIR``: MegaAgent §2–§3 in simulation, with
its report (``report.md``, ``report.json`` and figures)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from megaactors.cli.common import CommandError
from megaactors.megaagent.complexity import DEFAULT_AGENTS

__all__ = ["parse_agents", "register"]

TARGETS = ("section3",)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "reproduce",
        help="reproduce a paper's results in simulation and write a report",
        description="Reproduce MegaAgent (arXiv:2408.09955) §2–§3 in simulation: the Gobang and policy runs "
        "with their ablations, and makespan versus N. Writes DIR/report.md, DIR/report.json and figures.",
    )
    p.add_argument("target", choices=TARGETS, help="what to reproduce")
    p.add_argument("--out", required=True, help="output directory (created if missing)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default %(default)s)")
    p.add_argument(
        "--agents",
        default=",".join(map(str, DEFAULT_AGENTS)),
        help="comma-separated N values of the complexity sweep (default %(default)s)",
    )
    p.add_argument("--fanout", type=int, default=5, help="fan-out of the complexity sweep's tree (default %(default)s)")
    p.add_argument("--seeds", type=int, default=5, help="seeds for the speed-up's spread (default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="print only where the report is")
    p.set_defaults(handler=handle)


def parse_agents(text: str) -> list[int]:
    """``"10,100,1000"`` → ``[10, 100, 1000]``; at least three distinct values >= 2."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise CommandError(f"--agents must be comma-separated integers, got {text!r}") from exc
    bad = [v for v in values if v < 2]
    if bad:
        raise CommandError(f"--agents values must be >= 2, got {bad[0]}")
    values = sorted(set(values))
    if len(values) < 3:
        raise CommandError(f"--agents needs at least three distinct values to fit a curve, got {text!r}")
    return values


def handle(args: argparse.Namespace) -> int:
    agents = parse_agents(args.agents)
    if args.seed < 0:
        raise CommandError(f"--seed must be >= 0, got {args.seed}")
    if args.fanout < 2:
        raise CommandError(f"--fanout must be >= 2, got {args.fanout}")
    if args.seeds < 1:
        raise CommandError(f"--seeds must be >= 1, got {args.seeds}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CommandError(f"--out {out} exists and is not a directory")
    from megaactors.megaagent.reproduce import reproduce_section3

    progress = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    report = reproduce_section3(
        out, seed=args.seed, agents=agents, fanout=args.fanout, spread=args.seeds, progress=progress
    )
    for name, s in report["scenarios"].items():
        paper = s["paper"]
        bound = "> " if paper["parallel_speedup_is_lower_bound"] else ""
        print(
            f"{name:>6}: {s['agents']:,} agents, makespan {s['makespan_s']:,.0f} s (paper {paper['makespan_s']:,}), "
            f"parallel speed-up {s['parallel_speedup']:.2f}× (paper {bound}{paper['parallel_speedup']:.2f}×)"
        )
    print(f"complexity: {report['complexity']['summary']}")
    print(f"wrote {(out / 'report.md').resolve()}\nwrote {(out / 'report.json').resolve()}")
    return 0
