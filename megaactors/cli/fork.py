"""``megaactors fork``: a new queued run that starts from a checkpoint of another
(what-if experiments: same past, other parameters from then on)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from megaactors.cli.common import CommandError, add_param, parameter_list, parse_assignment
from megaactors.cli.durable_common import (
    add_budget_options,
    add_lease_option,
    add_store_option,
    check_budget,
    execute_under_lease,
    open_for,
    run_id,
)
from megaactors.validation import Param

__all__ = ["FIXED", "STEP", "register"]

FIXED = ("topology", "agents", "group_size", "fanout", "degree", "rewire", "runtime", "trace", "behaviour")
"""Parameters a fork keeps: they shape the state the checkpoint holds."""

STEP = Param("step", int, "the checkpointed super-step to start from", minimum=0, maximum=2**62)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fork",
        help="start a new run from a checkpoint of another (what-if)",
        description="Queue a new run that starts from a checkpointed super-step of another, with some parameters "
        f"changed from then on (not {', '.join(FIXED)}: they shape the checkpoint). With --run it runs at once; "
        "otherwise it waits in the queue for `megaactors resume --run-id NEW` or a worker.",
        epilog=parameter_list(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_option(p)
    p.add_argument("--run-id", required=True, type=run_id, help="the run to fork")
    add_param(p, STEP, required=True)
    p.add_argument("--new-run-id", required=True, type=run_id, help="id of the new run")
    p.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="change a parameter from then on (repeatable)"
    )
    p.add_argument("--run", action="store_true", help="run the new run now and print its summary")
    p.add_argument("--json", action="store_true", help="with --run: print the summary as one JSON object")
    add_lease_option(p)
    add_budget_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors.durable import DurableOptions, RunQueue, owner_id
    from megaactors.durable.checkpointing import fork_run
    from megaactors.experiments.spec import RunSpec

    changes: dict[str, Any] = {}
    for item in args.set:
        name, values = parse_assignment(item, "--set")
        if name in FIXED:
            raise CommandError(f"--set {name}: a fork keeps {', '.join(FIXED)} (the checkpoint's shape)")
        if len(values) != 1:
            raise CommandError(f"--set {name}: one value, got {len(values)} ({item!r}); a fork is one run")
        if name in changes:
            raise CommandError(f"--set: parameter {name!r} given twice")
        changes[name] = values[0]
    with open_for(args.db) as store:
        source = store.get_run(args.run_id)
        try:
            base = RunSpec.from_dict(source.params)
        except TypeError as exc:
            raise CommandError(f"run {args.run_id!r} has bad parameters: {exc}") from exc
        spec = RunSpec.from_dict({**base.as_dict(), **changes})  # behaviour.KEY changes one of its parameters
        check_budget(args, [spec])
        fork_run(store, args.run_id, args.step, args.new_run_id, spec.as_dict())
        if args.run:
            lease = RunQueue(store).claim(args.new_run_id, owner_id(), args.lease)
            options = DurableOptions.from_dict(store.get_run(args.new_run_id).options)
            summary = execute_under_lease(store, lease, spec, options, args.lease)
    if args.run:
        from megaactors.cli.resume import print_summary

        return print_summary(summary, args.json)
    print(args.new_run_id)
    print(
        f"megaactors: run {args.new_run_id!r} is queued from super-step {args.step} of {args.run_id!r}; run it with "
        f"--run, `megaactors resume --checkpoint DB --run-id {args.new_run_id}` or `megaactors worker --db DB`",
        file=sys.stderr,
    )
    return 0
