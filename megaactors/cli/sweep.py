"""``megaactors sweep``: a grid of runs → ``DIR/results.csv`` and the figures."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from megaactors.cli.common import (
    CommandError,
    add_behaviour_param_option,
    add_param,
    parameter_list,
    parse_assignment,
    parse_list,
)
from megaactors.experiments.budget import MAX_AGENTS, MAX_MESSAGES
from megaactors.experiments.spec import PARAMETERS
from megaactors.validation import Param

__all__ = ["WORKERS", "grid_from_args", "register"]

WORKERS = Param("workers", int, "worker processes (default: one per core)", minimum=0, maximum=4096, short="-j")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sweep",
        help="run every combination of parameters and write results.csv and figures",
        description="Run every combination of the given values (comma-separated lists, one option per run "
        "parameter, or --param NAME=V1,V2) and write DIR/results.csv (one row per run) and the figures. "
        "Rerunning resumes; a wider grid in the same directory extends it, keeping the rows already there.",
        epilog=parameter_list(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for param in PARAMETERS.values():
        add_param(p, param, as_list=True, old_flags=("--seeds",) if param.name == "seed" else ())
    add_behaviour_param_option(p, as_list=True)
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="a run parameter, or behaviour.KEY for a behaviour parameter, by name (repeatable)",
    )
    p.add_argument("--out", "-o", required=True, help="output directory")
    add_param(p, WORKERS)
    add_param(p, MAX_MESSAGES)
    add_param(p, MAX_AGENTS)
    p.add_argument("--retry-errors", action="store_true", help="rerun runs that failed in an earlier attempt")
    p.add_argument("--no-plots", action="store_true", help="write results.csv only")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(handler=handle)


def grid_from_args(args: argparse.Namespace) -> dict[str, list[Any]]:
    """The grid the options describe; unset options keep the run defaults."""
    grid: dict[str, list[Any]] = {}
    for name, param in PARAMETERS.items():
        text = getattr(args, name)
        if text is not None:
            grid[name] = parse_list(param, text)
    items = [("--param", item) for item in args.param]
    items += [("--behaviour-param", f"behaviour.{item}") for item in args.behaviour_param]
    for option, item in items:
        name, values = parse_assignment(item, option)
        if name in grid:
            raise CommandError(f"parameter {name!r} is given twice")
        grid[name] = values
    return grid


def handle(args: argparse.Namespace) -> int:
    from megaactors.experiments.sweep import run_sweep

    out = Path(args.out)
    grid = grid_from_args(args)
    try:
        df = run_sweep(
            grid,
            out,
            workers=args.workers,
            max_messages=args.max_messages,
            max_agents=args.max_agents,
            progress=not args.quiet,
            retry_errors=args.retry_errors,
        )
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished runs are in {out / 'results.csv'}; rerun the same command to resume",
              file=sys.stderr)  # fmt: skip
        return 130
    counts = df["status"].value_counts().to_dict()
    done = ", ".join(f"{counts[s]} {s}" for s in ("ok", "skipped", "error") if counts.get(s))
    print(f"wrote {out / 'results.csv'} ({len(df)} runs: {done})", flush=True)
    if not args.no_plots:
        from megaactors.cli.plot import write_figures
        from megaactors.experiments.result_rows import load_results

        for path in write_figures(load_results(out), out):  # every run of the directory
            print(f"wrote {path}", flush=True)
    failed = df[df["status"] == "error"]
    if len(failed):
        first = failed.iloc[0]
        print(
            f"megaactors: {len(failed)} of {len(df)} runs failed; the 'detail' column of {out / 'results.csv'} "
            f"says why (first: {first['topology']} N={first['agents']} seed={first['seed']}: {first['detail']})",
            file=sys.stderr,
        )
        return 1
    return 0
