"""``megaactors submit``: queue runs (one, or a grid of them) for workers."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from typing import Any

from megaactors.cli.common import CommandError, add_run_options, spec_from_args
from megaactors.cli.durable_common import add_durable_options, add_store_option, new_run_id, open_for, options_from_args

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "submit",
        help="queue runs for `megaactors worker` (a sweep that survives crashes)",
        description="Queue one run, or with --grid the product of several values, for workers to claim.",
    )
    add_store_option(p)
    add_run_options(p)
    add_durable_options(p, with_store=False)
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="vary a run parameter over values (repeatable: the runs are the product)",
    )
    p.add_argument("--run-id", help="id of the run (with --grid: the prefix of numbered ids)")
    p.add_argument("--max-attempts", type=int, default=3, help="claims before a failing run is dead (default 3)")
    p.add_argument("--json", action="store_true", help="print the run ids as a JSON list")
    p.set_defaults(handler=handle)


def _parse(field: dataclasses.Field[Any], text: str) -> Any:
    kind = str(field.type)
    if text.lower() in ("none", "null") and "None" in kind:
        return None
    try:
        if kind.startswith("bool"):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if kind.startswith("int"):
            return int(text)
        if kind.startswith("float"):
            return float(text)
    except ValueError as exc:
        raise CommandError(f"--grid {field.name}: {text!r} is not a {kind.split(' ')[0]}") from exc
    return text


def grid_specs(base: Any, grids: list[str]) -> list[Any]:
    """The product of ``NAME=V1,V2`` grids applied to a base :class:`RunSpec`."""
    from megaactors.experiments.spec import ParameterError, RunSpec

    fields = {f.name: f for f in dataclasses.fields(RunSpec)}
    axes: list[tuple[str, list[Any]]] = []
    for g in grids:
        name, sep, values = g.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not values:
            raise CommandError(f"--grid expects NAME=V1,V2, got {g!r}")
        if name not in fields:
            raise CommandError(f"--grid: unknown parameter {name!r}; known: {', '.join(sorted(fields))}")
        if any(name == n for n, _ in axes):
            raise CommandError(f"--grid: parameter {name!r} given twice")
        axes.append((name, [_parse(fields[name], v.strip()) for v in values.split(",")]))
    specs = []
    for combo in itertools.product(*(values for _, values in axes)):
        try:
            specs.append(dataclasses.replace(base, **dict(zip((n for n, _ in axes), combo, strict=True))))
        except ParameterError as exc:
            raise CommandError(str(exc)) from exc
    return specs


def handle(args: argparse.Namespace) -> int:
    from megaactors.durable import RunQueue, StoreError

    if args.max_attempts < 1:
        raise CommandError(f"max attempts must be >= 1, got {args.max_attempts}")
    spec = spec_from_args(args)
    if spec.runtime != "sim":
        raise CommandError(f"queued runs use the sim runtime, not {spec.runtime!r}")
    options = options_from_args(args)
    specs = grid_specs(spec, args.grid)
    if args.run_id and len(specs) > 1:
        ids = [f"{args.run_id}-{i}" for i in range(len(specs))]
    else:
        ids = [args.run_id or new_run_id()] if len(specs) == 1 else [new_run_id() for _ in specs]
    with open_for(args.db, create=True) as store:
        queue = RunQueue(store)
        try:
            for run_id, s in zip(ids, specs, strict=True):
                queue.submit(s, options.as_dict(), run_id=run_id, max_attempts=args.max_attempts)
        except StoreError as exc:
            raise CommandError(str(exc)) from exc
    print(json.dumps(ids) if args.json else "\n".join(ids))
    return 0
