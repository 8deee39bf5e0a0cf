"""``megaactors runs``: the run table of a store (status, owner, attempts, steps, errors)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from megaactors.cli.common import CommandError
from megaactors.cli.durable_common import add_store_option, open_for, table

__all__ = ["register"]

COLUMNS = ("run", "status", "owner", "attempts", "fence", "steps", "version", "lease_left_s", "error")


def register(sub: Any) -> None:
    p = sub.add_parser("runs", help="list the runs of a checkpoint store")
    add_store_option(p)
    p.add_argument("--status", choices=("queued", "running", "done", "dead", "cancelled"), help="only these")
    p.add_argument("--json", action="store_true", help="print a JSON list (with parameters and results)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors.durable import StoreError

    with open_for(args.db, readonly=True) as store:
        try:
            runs = store.list_runs(args.status)
        except StoreError as exc:
            raise CommandError(str(exc)) from exc
    rows = [
        {
            "run": r.run_id,
            "status": r.status,
            "owner": r.owner,
            "attempts": f"{r.attempts}/{r.max_attempts}",
            "fence": r.fence,
            "steps": r.step,
            "version": r.version,
            "lease_left_s": round(r.lease_expires - r.now, 1) if r.held else None,
            "error": r.error,
            "params": r.params,
            "options": r.options,
            "result": r.result,
            "parent_run": r.parent_run,
            "parent_step": r.parent_step,
        }
        for r in runs
    ]
    if args.json:
        for row in rows:
            row["attempts"], row["max_attempts"] = (int(x) for x in row["attempts"].split("/"))
        print(json.dumps(rows, sort_keys=True))
    else:
        print(table(rows, COLUMNS) if rows else "no runs")
    return 0
