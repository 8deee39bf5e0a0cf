"""``megaactors worker``: claim queued runs and run them, checkpointing as they go."""

from __future__ import annotations

import argparse
from typing import Any

from megaactors.cli.common import CommandError
from megaactors.cli.durable_common import SUPER_STEP_HELP, add_lease_option, add_store_option, check_lease, open_for

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "worker",
        help="claim queued runs under a lease and run them (start several at once)",
        description="Claim runs of this megaactors version under a lease renewed by heartbeat, checkpoint every "
        "run's super-steps and finish it. A run whose worker died is resumed from its newest checkpoint once its "
        f"lease expires. {SUPER_STEP_HELP}",
    )
    add_store_option(p)
    add_lease_option(p)
    p.add_argument("--jobs", "-j", type=int, default=1, help="worker processes to start (default 1)")
    p.add_argument("--poll", type=float, default=0.5, metavar="SECONDS", help="pause when the queue is empty")
    p.add_argument("--exit-when-idle", action="store_true", help="stop once no run is queued or running")
    p.add_argument("--max-runs", type=int, default=None, help="stop after finishing this many runs")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors.durable import StoreError
    from megaactors.durable.worker import work, work_in_processes

    lease_s = check_lease(args.lease)
    if args.jobs < 1:
        raise CommandError(f"jobs must be >= 1, got {args.jobs}")
    if args.poll <= 0:
        raise CommandError(f"poll must be > 0 seconds, got {args.poll}")
    if args.max_runs is not None and args.max_runs < 1:
        raise CommandError(f"max runs must be >= 1, got {args.max_runs}")
    kwargs: dict[str, Any] = {
        "lease_s": lease_s,
        "poll_s": args.poll,
        "exit_when_idle": args.exit_when_idle,
        "max_runs": args.max_runs,
    }
    store = open_for(args.db)
    try:
        if args.jobs == 1:
            work(store, **kwargs)
        else:
            store.close()
            work_in_processes(args.db, args.jobs, **kwargs)
    except StoreError as exc:
        raise CommandError(str(exc)) from exc
    finally:
        store.close()
    return 0
