"""``megaactors plot``: redraw the figures of a results CSV."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from megaactors.cli.common import CommandError

__all__ = ["register", "write_figures"]


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
    paths = write_figures(df, out)
    if not paths:
        raise CommandError(f"nothing to plot: no row of {source} has status ok or skipped")
    for path in paths:
        print(f"wrote {path}")
    return 0


def write_figures(df: Any, out: Path) -> list[Path]:
    """Every figure ``df`` allows, written into ``out`` without following a link
    planted there (drawn in a private directory, then renamed into place)."""
    from megaactors.experiments.plots import plot_results
    from megaactors.safe_files import Directory

    with tempfile.TemporaryDirectory(prefix="megaactors-figures-") as tmp, Directory(out) as target:
        drawn = plot_results(df, tmp)
        for path in drawn:
            target.replace(path.name, path.read_bytes())
    return [out / path.name for path in drawn]
