"""``megaactors sweep``: a grid of runs → ``DIR/results.csv`` and the figures."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from megaactors.cli.common import CommandError
from megaactors.experiments.spec import ParameterError, RunSpec
from megaactors.experiments.sweep import OPTIMAL, SweepError, run_sweep

__all__ = ["grid_from_args", "parse_values", "register"]

# option -> RunSpec parameter; every other parameter is reachable with --param NAME=V1,V2
_OPTIONS = {
    "topology": "topology",
    "agents": "agents",
    "group_size": "group_size",
    "fanout": "fanout",
    "seeds": "seed",
    "rounds": "rounds",
    "runtime": "runtime",
    "model": "model",
    "serial": "serial",
}
_TYPES = {f.name: str(f.type) for f in fields(RunSpec)}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sweep",
        help="run every combination of parameters and write results.csv and figures",
        description="Run every combination of the given values (comma-separated lists) and write "
        "DIR/results.csv (one row per run) and the figures. Rerunning with the same grid resumes.",
    )
    p.add_argument("--topology", metavar="LIST", help="organisations: flat,star,two-tier,hierarchy")
    p.add_argument("--agents", "-n", metavar="LIST", help="numbers of agents N, e.g. 10,100,1000")
    p.add_argument(
        "--group-size", "-g", metavar="LIST", help=f"two-tier group sizes; '{OPTIMAL}' = the cost-minimising size"
    )
    p.add_argument("--fanout", "-k", metavar="LIST", help="hierarchy fan-outs")
    p.add_argument("--seeds", "-s", metavar="LIST", help="random seeds, e.g. 1,2,3")
    p.add_argument("--rounds", "-r", metavar="LIST", help="chat rounds")
    p.add_argument("--runtime", metavar="LIST", help="runtimes")
    p.add_argument("--model", metavar="LIST", help="priced LLM models")
    p.add_argument("--serial", metavar="LIST", help="false,true: parallel and/or one agent Processing at a time")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="any other run parameter, e.g. latency_sigma=0.2,0.5 (repeatable)",
    )
    p.add_argument("--out", "-o", required=True, help="output directory")
    p.add_argument("--workers", "-j", type=int, default=None, help="worker processes (default: one per core)")
    p.add_argument(
        "--max-messages",
        type=_count,
        default=None,
        help="do not run runs whose closed-form message count exceeds this; figures draw their closed form",
    )
    p.add_argument("--retry-errors", action="store_true", help="rerun runs that failed in an earlier attempt")
    p.add_argument("--no-plots", action="store_true", help="write results.csv only")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(handler=handle)


def _count(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of messages, got {text!r}") from None
    if value < 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(value)


def parse_values(name: str, text: str) -> list[Any]:
    """Comma-separated values of run parameter ``name``, typed as :class:`RunSpec` declares."""
    if name not in _TYPES:
        RunSpec.from_dict({name: None})  # raises ParameterError listing the known names
    kind = _TYPES[name]
    values: list[Any] = []
    for item in (v.strip() for v in text.split(",")):
        if not item:
            continue
        try:
            if name == "group_size" and item == OPTIMAL:
                values.append(item)
            elif kind == "bool":
                values.append(_boolean(item))
            elif kind.startswith("int"):
                values.append(None if kind.endswith("None") and item.lower() == "none" else int(item))
            elif kind == "float":
                values.append(float(item))
            else:
                values.append(item)
        except ValueError:
            expected = {"bool": "true or false", "float": "a number"}.get(kind, "an integer")
            if name == "group_size":
                expected += f" or {OPTIMAL!r}"
            raise CommandError(f"{name.replace('_', ' ')}: {item!r} is not {expected}") from None
    if not values:
        raise CommandError(f"empty grid: {name.replace('_', ' ')} has no values")
    return values


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise ValueError(text)


def grid_from_args(args: argparse.Namespace) -> dict[str, list[Any]]:
    """The grid the options describe; unset options keep the run defaults."""
    grid: dict[str, list[Any]] = {}
    for option, name in _OPTIONS.items():
        text = getattr(args, option)
        if text is not None:
            grid[name] = parse_values(name, text)
    for item in args.param:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep:
            raise CommandError(f"--param expects NAME=V1,V2, got {item!r}")
        if name in grid:
            raise CommandError(f"parameter {name!r} is given twice")
        grid[name] = parse_values(name, text)
    return grid


def handle(args: argparse.Namespace) -> int:
    out = Path(args.out)
    try:
        grid = grid_from_args(args)
        if args.workers is not None and args.workers < 0:
            raise CommandError(f"workers must be >= 0, got {args.workers}")
        df = run_sweep(
            grid,
            out,
            workers=args.workers,
            max_messages=args.max_messages,
            progress=not args.quiet,
            retry_errors=args.retry_errors,
        )
    except (ParameterError, SweepError) as exc:
        raise CommandError(str(exc)) from exc
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished runs are in {out / 'results.csv'}; rerun the same command to resume",
              file=sys.stderr)  # fmt: skip
        return 130
    counts = df["status"].value_counts().to_dict()
    done = ", ".join(f"{counts[s]} {s}" for s in ("ok", "skipped", "error") if counts.get(s))
    print(f"wrote {out / 'results.csv'} ({len(df)} runs: {done})")
    if not args.no_plots:
        from megaactors.experiments.plots import plot_results

        for path in plot_results(df, out):
            print(f"wrote {path}")
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
