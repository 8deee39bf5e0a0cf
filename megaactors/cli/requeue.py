"""``megaactors requeue``: put dead-lettered runs back in the queue."""

from __future__ import annotations

import argparse
import json
from typing import Any

from megaactors.cli.common import add_param
from megaactors.cli.durable_common import add_store_option, open_for, run_id
from megaactors.cli.submit import MAX_ATTEMPTS

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "requeue",
        help="put dead-lettered runs back in the queue",
        description="Queue dead runs again with their attempts counted from zero; a worker resumes each from "
        "its newest checkpoint.",
    )
    add_store_option(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--run-id", type=run_id, help="the dead run to requeue")
    which.add_argument("--dead", action="store_true", help="every dead run")
    add_param(p, MAX_ATTEMPTS)
    p.add_argument("--json", action="store_true", help="print the requeued run ids as a JSON list")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    with open_for(args.db) as store:
        ids = [r.run_id for r in store.list_runs("dead")] if args.dead else [args.run_id]
        for rid in ids:
            store.requeue(rid, args.max_attempts)
    if args.json:
        print(json.dumps(ids))
    else:
        print("\n".join(f"requeued {rid}" for rid in ids) if ids else "no dead runs")
    return 0
