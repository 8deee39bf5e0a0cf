"""``megaactors reproduce section3 --out DIR``: MegaAgent §2–§3 in simulation, with
its report (``report.md``, ``report.json`` and figures)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from megaactors.cli.common import CommandError, add_param
from megaactors.megaagent.complexity import DEFAULT_AGENTS, THREE_LEVEL_FANOUTS, ComplexityGrid
from megaactors.validation import Param

__all__ = ["parse_agents", "register"]

TARGETS = ("section3",)
SEED = Param("seed", int, "first seed, and the calibration's", minimum=0, maximum=2**31 - 1)
SEEDS = Param("seeds", int, "seeds behind every interval", minimum=1, maximum=1000)
FANOUT = Param("fanout", int, "main fan-out of the complexity sweep's trees", minimum=2, maximum=10_000)
WORKERS = Param("workers", int, "worker processes for the runs (default: 2, or 1 on one core)", minimum=1, maximum=256)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "reproduce",
        help="reproduce a paper's results in simulation and write a report",
        description="Reproduce MegaAgent (arXiv:2408.09955) §2–§3 in simulation: the Gobang and policy runs "
        "with their ablations over several seeds, the speed-up bound, candidate mechanisms from the reference code, "
        "a sensitivity analysis and makespan versus N. Writes DIR/report.md, DIR/report.json and figures.",
    )
    p.add_argument("target", choices=TARGETS, help="what to reproduce")
    p.add_argument("--out", required=True, help="output directory (created if missing)")
    add_param(p, SEED, default=1)
    add_param(p, SEEDS, default=5)
    p.add_argument(
        "--agents",
        default=",".join(map(str, DEFAULT_AGENTS)),
        help="comma-separated N values of the complexity sweep's main fan-out (default %(default)s)",
    )
    add_param(p, FANOUT, default=5)
    p.add_argument(
        "--other-fanouts",
        default="3,10",
        help="comma-separated fan-outs also swept in parallel, up to N = 1,000 (default %(default)s; '' for none)",
    )
    p.add_argument(
        "--three-level-fanouts",
        default=",".join(map(str, THREE_LEVEL_FANOUTS)),
        help="fan-outs f of the three-level sweep, N = 1 + f + f² (default %(default)s; '' for none)",
    )
    add_param(p, WORKERS)
    p.add_argument("--quiet", action="store_true", help="print only where the report is")
    p.set_defaults(handler=handle)


def parse_agents(text: str) -> list[int]:
    """``"10,100,1000"`` → ``[10, 100, 1000]``; at least three distinct values >= 2."""
    values = _integers("--agents", text)
    bad = [v for v in values if v < 2]
    if bad:
        raise CommandError(f"--agents values must be >= 2, got {bad[0]}")
    values = sorted(set(values))
    if len(values) < 3:
        raise CommandError(f"--agents needs at least three distinct values to fit a curve, got {text!r}")
    return values


def _integers(flag: str, text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise CommandError(f"{flag} must be comma-separated integers, got {text!r}") from exc


def handle(args: argparse.Namespace) -> int:
    agents = parse_agents(args.agents)
    others = _integers("--other-fanouts", args.other_fanouts)
    if any(f < 2 for f in others):
        raise CommandError(f"--other-fanouts values must be >= 2, got {args.other_fanouts!r}")
    three = sorted(set(_integers("--three-level-fanouts", args.three_level_fanouts)))
    if any(f < 1 for f in three) or len(three) in (1, 2):
        raise CommandError(
            f"--three-level-fanouts needs none or at least three distinct values >= 1, got {args.three_level_fanouts!r}"
        )
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CommandError(f"--out {out} exists and is not a directory")
    from megaactors.megaagent.reproduce import reproduce_section3

    grid = ComplexityGrid(
        agents=tuple(agents),
        main_fanout=args.fanout,
        other_fanouts=tuple(sorted(set(others))),
        three_level_fanouts=tuple(three),
    )
    progress = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    report = reproduce_section3(
        out, seed=args.seed, seeds=args.seeds, grid=grid, workers=args.workers, progress=progress
    )
    for name, s in report["scenarios"].items():
        b = s["bound"]
        lower = "> " if b["paper_is_lower_bound"] else ""
        print(
            f"{name:>6}: makespan {b['parallel_makespan_s']['mean']:,.0f} s (paper "
            f"{report['sensitivity'][name]['paper_makespan_s']:,}), parallel speed-up {b['speedup']['mean']:.2f}× "
            f"[{b['speedup']['lo']:.2f}, {b['speedup']['hi']:.2f}] (paper {lower}{b['paper_speedup']:.2f}×), "
            f"mean concurrency {b['mean_concurrency']['mean']:.2f}"
        )
    c = report["complexity"]
    print(
        f"complexity: balanced trees {'follow' if c['claim_holds_for_balanced_trees'] else 'do not follow'} "
        f"depth or log N; three levels: best {c['three_levels_best']}"
    )
    print(f"wrote {(out / 'report.md').resolve()}\nwrote {(out / 'report.json').resolve()}")
    return 0
