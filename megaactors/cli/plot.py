"""``megaactors plot``: redraw the figures of a results CSV."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from megaactors.cli.common import CommandError

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plot",
        help="redraw the figures of a sweep's results.csv",
        description="Read a results CSV written by 'megaactors sweep' and write every figure it allows (PNG and SVG). "
        "A run recorded more than once is drawn once (with a warning).",
    )
    p.add_argument("results", help="results CSV (or the sweep directory holding results.csv)")
    p.add_argument("--out", "-o", default=None, help="output directory (default: beside the CSV)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors.experiments.result_rows import load_results

    source = Path(args.results)
    df = load_results(source)
    out = Path(args.out) if args.out else (source if source.is_dir() else source.parent)
    from megaactors.experiments.plots import plot_results

    paths = plot_results(df, out)
    if not paths:
        raise CommandError(f"nothing to plot: no row of {source} has status ok or skipped")
    for path in paths:
        print(f"wrote {path}")
    return 0
