"""The ``megaactors`` command line.

Each module of this package that defines ``register(subparsers)`` adds one
sub-command; ``main`` discovers them, so a new command is a new module.

``main`` is the one error boundary: bad input and refusals are one line on stderr
and exit code 2; a run that its behaviour broke (it raised, or sent where the
organisation forbids) is one line and exit code 1; anything else is a short
"internal error" line and exit code 1 (the traceback only with ``--debug``); every
line is redacted of passwords.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from megaactors.cli.common import CommandError, Parser, warn
from megaactors.redact import redact

__all__ = ["main", "user_errors"]

_HELPERS = ("common", "durable_common")


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that describe the user's input or environment: one line, exit code 2
    (imported when needed: the store's modules are not loaded for every command)."""
    from megaactors.core.messages import MessageError
    from megaactors.core.organisation import OrganisationError
    from megaactors.durable.billing import BillingError
    from megaactors.durable.store import StoreError
    from megaactors.errors import ClusterError, ParameterError, UncheckpointableError
    from megaactors.experiments.result_rows import SweepError

    return (
        CommandError,
        ClusterError,
        ParameterError,
        StoreError,
        SweepError,
        BillingError,
        MessageError,
        OrganisationError,
        UncheckpointableError,
    )


def run_failures() -> tuple[type[BaseException], ...]:
    """Errors of a run whose behaviour failed (its own exception, a forbidden send or
    recruitment): one line naming the agent, exit code 1."""
    from megaactors.core.behaviour import BehaviourError
    from megaactors.errors import RecruitError, RouteError

    return (BehaviourError, RouteError, RecruitError)


def build_parser() -> Parser:
    parser = Parser(prog="megaactors", description="Build, run and measure MegaAgent-style multi-agent systems.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name in _HELPERS:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    for command in sub.choices.values():  # --debug also after the command
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (2 for bad input, 1 for an
    internal error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if os.environ.get("OTEL_TRACES_EXPORTER"):  # spans of durable runs, exported as the standard variables say
        from megaactors.durable.spans import configure_from_env

        configure_from_env()
    with _warnings_as_lines():
        try:
            code = int(args.handler(args) or 0)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
            return code
        except KeyboardInterrupt:
            print("megaactors: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # the reader went away (``| head``): nothing more to say
            _drop_stdout()
            return 141
        except MemoryError:
            print("megaactors: error: out of memory (ask for fewer agents or rounds)", file=sys.stderr)
            return 2
        except OSError as exc:  # a file, disk or permission problem of the user's environment
            _line("error", exc)
            return 2
        except Exception as exc:
            if isinstance(exc, user_errors()):
                _line("error", exc)
                return 2
            if args.debug:
                print(redact(traceback.format_exc()), file=sys.stderr, end="")
            if isinstance(exc, run_failures()):
                _line("error", exc, "" if args.debug else " (--debug shows the traceback)")
                return 1
            hint = "" if args.debug else " (--debug shows the traceback)"
            _line("internal error", exc, f"; please report it{hint}")
            return 1


def _line(kind: str, exc: BaseException, suffix: str = "") -> None:
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        text = f"{where}{exc.strerror}"
    if kind != "error":
        text = f"{type(exc).__name__}: {text}"
    print(redact(f"megaactors: {kind}: {text}{suffix}"), file=sys.stderr, flush=True)


def _drop_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush finds no broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


@contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """Library warnings (deprecations, dropped duplicate rows) as one line each."""

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        warn(str(message))

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


if __name__ == "__main__":
    sys.exit(main())
