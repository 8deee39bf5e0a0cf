"""The ``megaactors`` command line.

Each module of this package that defines ``register(subparsers)`` adds one
sub-command; ``main`` discovers them, so a new command is a new module.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Sequence

from megaactors.cli.common import CommandError, Parser

__all__ = ["main"]


def build_parser() -> Parser:
    parser = Parser(prog="megaactors", description="Build, run and measure MegaAgent-style multi-agent systems.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "common":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (2 for bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except CommandError as exc:
        print(f"megaactors: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
