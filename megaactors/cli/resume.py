"""``megaactors resume``: continue a checkpointed run from its newest checkpoint."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from megaactors.cli.common import CommandError
from megaactors.cli.durable_common import (
    SUPER_STEP_HELP,
    add_lease_option,
    add_store_option,
    check_lease,
    execute_under_lease,
    open_for,
)

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "resume",
        help="continue a checkpointed run from its newest checkpoint",
        description="Claim a run's lease and continue it from its newest checkpoint; a finished run prints "
        f"its recorded result. {SUPER_STEP_HELP}",
    )
    add_store_option(p, primary="--checkpoint")
    p.add_argument("--run-id", required=True, help="the run to resume")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to this long for another holder's lease to expire (default: fail at once)",
    )
    add_lease_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors import __version__
    from megaactors.durable import DurableOptions, RunQueue, StoreError, owner_id
    from megaactors.durable.store import check_header
    from megaactors.experiments.spec import ParameterError, RunSpec

    lease_s = check_lease(args.lease)
    if args.wait < 0:
        raise CommandError(f"wait must be >= 0 seconds, got {args.wait}")
    # everything that can be wrong is checked read-only first: a refused resume writes nothing
    with open_for(args.db, readonly=True) as ro:
        try:
            run = ro.get_run(args.run_id)
            if run.status == "done":
                return _print(run.result, args.json)
            if run.status in ("dead", "cancelled"):
                raise CommandError(f"run {args.run_id!r} is {run.status}: {run.error}")
            if run.version != __version__:
                raise CommandError(
                    f"run {args.run_id!r} belongs to megaactors {run.version}; this is megaactors {__version__}"
                )
            deadline = time.monotonic() + args.wait
            while run.held:  # wait read-only: a claim would queue behind the holder's writes
                if time.monotonic() >= deadline:
                    raise CommandError(
                        f"run {args.run_id!r} is held by {run.owner} for another "
                        f"{run.lease_expires - run.now:.1f} s (use --wait to wait for its lease to expire)"
                    )
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
                run = ro.get_run(args.run_id)
            latest = ro.latest(args.run_id)
            if latest is not None:
                check_header(latest.state or b"", where=f"run {args.run_id!r} step {latest.step}")
        except StoreError as exc:
            raise CommandError(str(exc)) from exc
    try:
        spec = RunSpec.from_dict(run.params)
        options = DurableOptions.from_dict(run.options)
    except (ParameterError, TypeError) as exc:
        raise CommandError(f"run {args.run_id!r} has bad parameters: {exc}") from exc
    store = open_for(args.db)
    try:
        try:
            lease = RunQueue(store).claim(args.run_id, owner_id(), lease_s)
        except StoreError as exc:
            raise CommandError(str(exc)) from exc
        summary = execute_under_lease(store, lease, spec, options, lease_s)
    finally:
        store.close()
    return _print(summary, args.json)


def _print(summary: Any, as_json: bool) -> int:
    from megaactors.cli.run import format_summary

    print(json.dumps(summary, sort_keys=True) if as_json else format_summary(summary))
    return 0
