"""What every sub-command shares: one-line errors with exit code 2, and options made
from parameter declarations (:class:`~megaactors.validation.Param`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from megaactors.experiments.spec import PARAMETERS, ParameterError, RunSpec
from megaactors.redact import redact
from megaactors.validation import Param

__all__ = [
    "CommandError",
    "Parser",
    "add_param",
    "add_run_options",
    "parameter_list",
    "parse_assignment",
    "parse_list",
    "run_parameter",
    "spec_from_args",
    "warn",
]


class CommandError(Exception):
    """Bad input on the command line: printed as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (secrets redacted), exit code 2."""

    def error(self, message: str) -> NoReturn:
        print(redact(f"{self.prog}: error: {' '.join(message.split())}"), file=sys.stderr)
        sys.exit(2)


def warn(message: str) -> None:
    """One warning line on stderr."""
    print(redact(f"megaactors: warning: {' '.join(message.split())}"), file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- declared parameters as options


class _Deprecating(argparse.Action):
    """Stores a value; an old flag spelling also prints a deprecation line."""

    def __init__(self, *args: Any, old_flags: Sequence[str] = (), **kwargs: Any) -> None:
        self.old_flags = tuple(old_flags)
        super().__init__(*args, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        if option_string in self.old_flags:
            warn(f"{option_string} is deprecated; use {self.option_strings[0]}")
        setattr(namespace, self.dest, values)


def _checked(p: Param) -> Any:
    def convert(text: str) -> Any:
        try:
            return p.parse(text)
        except ParameterError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _metavar(p: Param) -> str:
    if p.kind is str:
        return p.name.upper()
    return {"s": "SECONDS", "bytes": "BYTES", "tokens": "TOKENS"}.get(p.unit, "N" if p.kind is int else "X")


def add_param(
    parser: argparse.ArgumentParser,
    p: Param,
    *,
    default: Any = None,
    as_list: bool = False,
    dest: str | None = None,
    required: bool = False,
    old_flags: Sequence[str] = (),
) -> None:
    """Add ``p`` as an option: ``--name VALUE`` (its short and old spellings, and
    ``old_flags``, too), a boolean as ``--name``/``--no-name``, or with ``as_list``
    a comma-separated list (left as text for :func:`parse_list`)."""
    old = (*p.old_flags, *old_flags)
    flags = [p.flag, *([p.short] if p.short else []), *old]
    kwargs: dict[str, Any] = {"dest": dest or p.name, "default": default, "required": required}
    if as_list:
        parser.add_argument(*flags, **kwargs, metavar="LIST", help=f"{p.describe()}; comma-separated values",
                            action=_Deprecating, old_flags=old)  # fmt: skip
        return
    shown = "" if default is None else " (default %(default)s)"
    if p.kind is bool and not old:
        parser.add_argument(*flags, **kwargs, action=argparse.BooleanOptionalAction, help=p.help + shown)
        return
    parser.add_argument(
        *flags,
        **kwargs,
        type=_checked(p),
        metavar=_metavar(p),
        help=p.describe() + shown,
        action=_Deprecating,
        old_flags=old,
    )


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """One option per run parameter (a :class:`RunSpec` field)."""
    defaults = RunSpec()
    for name, p in PARAMETERS.items():
        add_param(parser, p, default=getattr(defaults, name))


def spec_from_args(args: argparse.Namespace, **overrides: Any) -> RunSpec:
    """The :class:`RunSpec` the options describe; bad values raise :class:`CommandError`."""
    try:
        return RunSpec.from_dict({**{name: getattr(args, name) for name in PARAMETERS}, **overrides})
    except ParameterError as exc:
        raise CommandError(str(exc)) from exc


def run_parameter(name: str) -> Param:
    """The declaration of run parameter ``name`` (dashes or underscores)."""
    key = name.strip().lstrip("-").replace("-", "_")
    if key not in PARAMETERS:
        raise CommandError(f"unknown parameter {name.strip()!r}; known: {', '.join(PARAMETERS)}")
    return PARAMETERS[key]


def parse_list(p: Param, text: str) -> list[Any]:
    """Comma-separated values of ``p``, each parsed and checked; none is an error."""
    try:
        values = [p.parse(item) for item in text.split(",") if item.strip()]
    except ParameterError as exc:
        raise CommandError(str(exc)) from exc
    if not values:
        raise CommandError(f"empty grid: {p.label} has no values")
    return values


def parse_assignment(text: str, option: str) -> tuple[Param, list[Any]]:
    """``NAME=V1,V2`` (the form of ``--param``, ``--grid`` and ``--set``)."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip():
        raise CommandError(f"{option} expects NAME=V1,V2, got {text!r}")
    p = run_parameter(name)
    return p, parse_list(p, values)


def parameter_list() -> str:
    """Every run parameter with what it accepts: the epilog of commands that take
    ``NAME=VALUE`` options."""
    width = max(len(n) for n in PARAMETERS) + 2
    lines = ["run parameters (NAME=VALUE; the option of the same name is --NAME with dashes):"]
    lines += [f"  {name.ljust(width)}{p.describe()}" for name, p in PARAMETERS.items()]
    return "\n".join(lines)
