"""``megaactors fork``: a new queued run that starts from a checkpoint of another
(what-if experiments: same past, other parameters from then on)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from megaactors.cli.common import CommandError
from megaactors.cli.durable_common import add_store_option, open_for

__all__ = ["FIXED", "register"]

FIXED = ("topology", "agents", "group_size", "fanout", "runtime", "trace")
"""Parameters a fork keeps: they shape the state the checkpoint holds."""


def register(sub: Any) -> None:
    p = sub.add_parser("fork", help="start a new run from a checkpoint of another (what-if)")
    add_store_option(p)
    p.add_argument("--run-id", required=True, help="the run to fork")
    p.add_argument("--step", type=int, required=True, help="the checkpointed super-step to start from")
    p.add_argument("--new-run-id", required=True, help="id of the new run")
    p.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="change a parameter from then on (repeatable)"
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors.cli.submit import grid_specs
    from megaactors.durable import StoreError
    from megaactors.durable.checkpointing import fork_run
    from megaactors.experiments.spec import ParameterError, RunSpec

    with open_for(args.db) as store:
        try:
            source = store.get_run(args.run_id)
            base = RunSpec.from_dict(source.params)
        except (StoreError, ParameterError, TypeError) as exc:
            raise CommandError(str(exc)) from exc
        for s in args.set:
            name = s.partition("=")[0].strip().replace("-", "_")
            if name in FIXED:
                raise CommandError(f"--set {name}: a fork keeps {', '.join(FIXED)} (the checkpoint's shape)")
        (spec,) = grid_specs(base, args.set)
        try:
            fork_run(store, args.run_id, args.step, args.new_run_id, dataclasses.asdict(spec))
        except (StoreError, ParameterError) as exc:
            raise CommandError(str(exc)) from exc
    print(args.new_run_id)
    return 0
