"""``megaactors behaviours``: the installed behaviours, or one of them in detail."""

from __future__ import annotations

import argparse
import json
from typing import Any

from megaactors.cli.common import CommandError

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "behaviours",
        help="list the installed behaviours (agent logic runs can name)",
        description="List the behaviours a run can name with --behaviour: the built-ins and those installed "
        "packages declare in the 'megaactors.behaviours' entry-point group. With NAME (a registered name or "
        "package.module:Class): that behaviour's version and constructor parameters.",
    )
    p.add_argument("name", nargs="?", help="a registered name or package.module:Class to describe")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors.behaviours import registry
    from megaactors.errors import BehaviourLoadError
    from megaactors.experiments.spec import PARAMETERS

    names = [args.name] if args.name else list(registry.installed())
    described, problems = [], {}
    for name in names:
        try:
            described.append(registry.describe(name, PARAMETERS))
        except BehaviourLoadError as exc:
            if args.name:
                raise CommandError(str(exc)) from None
            problems[name] = str(exc)  # an installed package's broken entry point: shown, not fatal
    if args.json:
        print(json.dumps(described[0] if args.name else described, sort_keys=True))
        return 0
    for d in described:
        print(f"{d['name']}  ({d['target']}, version {d['version']})")
        if d["summary"]:
            print(f"    {d['summary']}")
        shown = [_parameter(k, v) for k, v in d["parameters"].items()]
        print(f"    parameters: {', '.join(shown) or 'none'}" + (" (and any other)" if d["any_parameter"] else ""))
    if any(p.get("run_parameter") for d in described for p in d["parameters"].values()):
        print("(*: the run parameter of the same name gives it, e.g. --rounds)")
    for name, problem in problems.items():
        print(f"{name}  (cannot be loaded: {problem})")
    return 0


def _parameter(name: str, entry: dict[str, Any]) -> str:
    text = f"{name} (required)" if entry.get("required") else f"{name}={entry['default']!r}"
    return text + ("*" if entry.get("run_parameter") else "")
