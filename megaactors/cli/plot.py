"""``megaactors plot``: redraw the figures of a results CSV."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from megaactors.cli.common import CommandError
from megaactors.experiments.sweep import ResultsError, load_results

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plot",
        help="redraw the figures of a sweep's results.csv",
        description="Read a results CSV written by 'megaactors sweep' and write every figure it allows (PNG and SVG).",
    )
    p.add_argument("results", help="results CSV (or the sweep directory holding results.csv)")
    p.add_argument("--out", "-o", default=None, help="output directory (default: beside the CSV)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    source = Path(args.results)
    try:
        df = load_results(source)
    except ResultsError as exc:
        raise CommandError(str(exc)) from exc
    out = Path(args.out) if args.out else (source if source.is_dir() else source.parent)
    from megaactors.experiments.plots import plot_results

    paths = plot_results(df, out)
    if not paths:
        raise CommandError(f"nothing to plot: no row of {source} has status ok or skipped")
    for path in paths:
        print(f"wrote {path}")
    return 0
