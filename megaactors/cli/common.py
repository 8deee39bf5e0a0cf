"""What every sub-command shares: one-line errors with exit code 2, and options made
from parameter declarations (:class:`~megaactors.validation.Param`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from megaactors.experiments.spec import BEHAVIOUR_PREFIX, PARAMETERS, ParameterError, RunSpec
from megaactors.redact import redact
from megaactors.validation import Param

__all__ = [
    "CommandError",
    "Parser",
    "add_behaviour_param_option",
    "add_param",
    "add_run_options",
    "behaviour_params_from_args",
    "parameter_list",
    "parse_assignment",
    "parse_behaviour_value",
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
    """One option per run parameter (a :class:`RunSpec` field), and ``--behaviour-param``."""
    defaults = RunSpec()
    for name, p in PARAMETERS.items():
        add_param(parser, p, default=getattr(defaults, name))
    add_behaviour_param_option(parser)


def add_behaviour_param_option(parser: argparse.ArgumentParser, *, as_list: bool = False) -> None:
    """``--behaviour-param KEY=VALUE`` (repeatable; with ``as_list`` ``KEY=V1,V2``)."""
    parser.add_argument(
        "--behaviour-param",
        action="append",
        default=[],
        metavar="KEY=V1,V2" if as_list else "KEY=VALUE",
        help="a parameter of the behaviour's constructor (repeatable); the value is read as JSON where it parses, "
        "else as text" + ("; comma-separated values make a grid" if as_list else ""),
    )


def behaviour_params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """``--behaviour-param KEY=VALUE`` options as ``{"behaviour.KEY": value}``."""
    out: dict[str, Any] = {}
    for item in args.behaviour_param:
        key, sep, text = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise CommandError(f"--behaviour-param expects KEY=VALUE with KEY a Python name, got {item!r}")
        name = BEHAVIOUR_PREFIX + key.strip()
        if name in out:
            raise CommandError(f"--behaviour-param: parameter {key.strip()!r} given twice")
        out[name] = parse_behaviour_value(text)
    return out


def spec_from_args(args: argparse.Namespace, **overrides: Any) -> RunSpec:
    """The :class:`RunSpec` the options describe; bad values raise :class:`CommandError`."""
    given = {name: getattr(args, name) for name in PARAMETERS}
    try:
        return RunSpec.from_dict({**given, **behaviour_params_from_args(args), **overrides})
    except ParameterError as exc:
        raise CommandError(str(exc)) from exc


def run_parameter(name: str) -> Param:
    """The declaration of run parameter ``name`` (dashes or underscores)."""
    key = name.strip().lstrip("-").replace("-", "_")
    if key not in PARAMETERS:
        raise CommandError(
            f"unknown parameter {name.strip()!r}; known: {', '.join(PARAMETERS)}, or {BEHAVIOUR_PREFIX}NAME "
            "for a parameter of the behaviour"
        )
    return PARAMETERS[key]


def parse_behaviour_value(text: str) -> Any:
    """A behaviour parameter's value: JSON where the text parses as JSON, else the text."""
    item = text.strip()
    try:
        return json.loads(item)
    except ValueError:
        return item


def split_values(text: str) -> list[str]:
    """``text`` split at the commas outside brackets, braces and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, c in enumerate(text):
        if quote:
            quote = "" if c == quote and text[i - 1] != "\\" else quote
        elif c in "\"'":
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def parse_list(p: Param, text: str) -> list[Any]:
    """Comma-separated values of ``p``, each parsed and checked; none is an error."""
    try:
        values = [p.parse(item) for item in text.split(",") if item.strip()]
    except ParameterError as exc:
        raise CommandError(str(exc)) from exc
    if not values:
        raise CommandError(f"empty grid: {p.label} has no values")
    return values


def parse_assignment(text: str, option: str) -> tuple[str, list[Any]]:
    """``NAME=V1,V2`` (the form of ``--param``, ``--grid`` and ``--set``): the
    parameter's name and its values. ``behaviour.KEY`` names a behaviour parameter,
    whose values are JSON where they parse (commas inside brackets or quotes do not
    split them)."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip():
        raise CommandError(f"{option} expects NAME=V1,V2, got {text!r}")
    name = name.strip()
    if name.startswith(BEHAVIOUR_PREFIX):
        key = name[len(BEHAVIOUR_PREFIX) :]
        if not key.isidentifier():
            raise CommandError(f"{option}: {name!r} is not {BEHAVIOUR_PREFIX}NAME with NAME a Python name")
        parsed = [parse_behaviour_value(v) for v in split_values(values)]
        if not parsed:
            raise CommandError(f"empty grid: {name} has no values")
        return name, parsed
    p = run_parameter(name)
    return p.name, parse_list(p, values)


def parameter_list() -> str:
    """Every run parameter with what it accepts: the epilog of commands that take
    ``NAME=VALUE`` options."""
    width = max(len(n) for n in PARAMETERS) + 2
    lines = ["run parameters (NAME=VALUE; the option of the same name is --NAME with dashes):"]
    lines += [f"  {name.ljust(width)}{p.describe()}" for name, p in PARAMETERS.items()]
    lines.append(
        f"  {(BEHAVIOUR_PREFIX + 'NAME').ljust(width)}a parameter of the behaviour's constructor "
        "(megaactors behaviours NAME lists them); JSON where it parses, else text"
    )
    return "\n".join(lines)
