"""``megaactors submit``: queue runs (one, or a grid of them) for workers."""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections.abc import Sequence
from typing import Any

from megaactors.cli.common import (
    CommandError,
    add_param,
    add_run_options,
    parameter_list,
    parse_assignment,
    spec_from_args,
)
from megaactors.cli.durable_common import (
    add_durable_options,
    add_store_option,
    check_budget,
    check_shardable_run,
    new_run_id,
    open_for,
    options_from_args,
    preflight,
    run_id,
)
from megaactors.cli.shards import add_shard_options, sim_sharding
from megaactors.experiments.spec import RunSpec
from megaactors.redact import redact
from megaactors.validation import Param

__all__ = ["MAX_ATTEMPTS", "grid_specs", "register"]

MAX_GRID_RUNS = 100_000
MAX_ATTEMPTS = Param("max_attempts", int, "claims before a failing run is dead", minimum=1, maximum=1000)
ROUTE_SEED = Param(
    "route_seed", int, "seed of the draw that routes runs between versions", minimum=0, maximum=2**63 - 1
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "submit",
        help="queue runs for `megaactors worker` (a sweep that survives crashes)",
        description="Queue one run, or with --grid the product of several values, for workers to claim. "
        "Queued runs use the sim runtime; runs over the budget are refused here, before anything is queued, and "
        "the first run of each behaviour and topology is started in memory to check that its behaviour accepts "
        "the organisation and that its state can be checkpointed.",
        epilog=parameter_list(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_option(p)
    add_run_options(p)
    add_durable_options(p, with_store=False)
    add_shard_options(p)
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="vary a run parameter (or behaviour.KEY) over values (repeatable: the runs are the product)",
    )
    p.add_argument("--run-id", type=run_id, help="id of the run (with --grid: the prefix of numbered ids)")
    add_param(p, MAX_ATTEMPTS, default=3)
    routing = p.add_mutually_exclusive_group()
    routing.add_argument(
        "--route",
        metavar="V=PCT,...",
        help="route the new runs between megaactors versions by weight (percents adding up to 100), e.g. "
        "0.1.0=90,0.2.0=10; each version must be known to the store (a worker of it has started)",
    )
    routing.add_argument(
        "--canary", metavar="V=PCT", help="send PCT percent of the new runs to version V, the rest to this one"
    )
    add_param(p, ROUTE_SEED, default=0)
    p.add_argument("--json", action="store_true", help="print the run ids as a JSON list")
    p.set_defaults(handler=handle)


def grid_specs(base: Any, grids: Sequence[str], option: str = "--grid") -> list[Any]:
    """The product of ``NAME=V1,V2`` grids applied to a base :class:`RunSpec`."""
    from megaactors.experiments.spec import RunSpec

    axes: dict[str, list[Any]] = {}
    for g in grids:
        name, values = parse_assignment(g, option)
        if name in axes:
            raise CommandError(f"{option}: parameter {name!r} given twice")
        axes[name] = values
    count = math.prod(len(v) for v in axes.values())
    if count > MAX_GRID_RUNS:
        raise CommandError(f"{option}: the grid makes {count:,} runs; at most {MAX_GRID_RUNS:,} at once")
    specs = []
    for combo in itertools.product(*axes.values()):
        point = {**base.as_dict(), **dict(zip(axes, combo, strict=True))}
        if any(name.startswith("behaviour") for name in axes):  # another behaviour: its own version
            point["behaviour_version"] = None
        specs.append(RunSpec.from_dict(point))
    return specs


def handle(args: argparse.Namespace) -> int:
    from megaactors.durable import RunQueue

    spec = spec_from_args(args)
    options = options_from_args(args, **sim_sharding(args))
    specs = grid_specs(spec, args.grid)
    other = sorted({s.runtime for s in specs} - {"sim"})
    if other:
        raise CommandError(f"queued runs use the sim runtime, not {', '.join(map(repr, other))}")
    check_budget(args, specs)
    if options.shards is not None:
        for s in specs:
            check_shardable_run(s, options)
    # the first run of each behaviour and topology is started in memory before anything is queued
    kinds: dict[tuple[str, str, str], RunSpec] = {}
    for s in specs:
        kinds.setdefault((s.behaviour, json.dumps(s.behaviour_params, sort_keys=True), s.topology), s)
    preflight(list(kinds.values()))
    if args.run_id and len(specs) > 1:
        ids = [f"{args.run_id}-{i}" for i in range(len(specs))]
    else:
        ids = [args.run_id or new_run_id()] if len(specs) == 1 else [new_run_id() for _ in specs]
    with open_for(args.db, create=True) as store:
        taken = [rid for rid in ids if _exists(store, rid)]
        if taken:  # refused before anything is queued
            raise CommandError(f"run {taken[0]!r} already exists in {redact(args.db)}; choose another --run-id")
        queue = RunQueue(store)
        versions = _routed(args, store, queue.version, len(ids))
        for rid, s, version in zip(ids, specs, versions, strict=True):
            queue.submit(s, options.as_dict(), run_id=rid, max_attempts=args.max_attempts, version=version)
    if args.json:
        print(json.dumps(ids))
    elif args.route or args.canary:
        print("\n".join(f"{rid} -> {version}" for rid, version in zip(ids, versions, strict=True)))
    else:
        print("\n".join(ids))
    return 0


def _routed(args: argparse.Namespace, store: Any, this_version: str, count: int) -> list[str]:
    """The version each new run is queued for (``--route``/``--canary``, else this one)."""
    from megaactors.durable.deploys import canary_route, parse_route, route

    known = {this_version, *store.deploys()}
    if args.route:
        weights = parse_route(args.route, known)
    elif args.canary:
        weights = canary_route(args.canary, this_version, known)
    else:
        return [this_version] * count
    return route(count, weights, args.route_seed)


def _exists(store: Any, run_id: str) -> bool:
    from megaactors.durable import UnknownRunError

    try:
        store.get_run(run_id)
    except UnknownRunError:
        return False
    return True
