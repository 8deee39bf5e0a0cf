"""``megaactors runs``: the run table of a store — status, headline results,
attempts, owner and errors."""

from __future__ import annotations

import argparse
import json
from typing import Any

from megaactors.cli.durable_common import add_store_option, open_for, table
from megaactors.durable.store import STATUSES
from megaactors.redact import redact

__all__ = ["COLUMNS", "register"]

COLUMNS = (
    "run",
    "status",
    "topology",
    "agents",
    "rounds",
    "steps",
    "messages",
    "cost_usd",
    "virtual_time_s",
    "behaviour",
    "attempts",
    "owner",
    "lease_left_s",
    "error",
)


def register(sub: Any) -> None:
    p = sub.add_parser("runs", help="list the runs of a checkpoint store with their status and results")
    add_store_option(p)
    p.add_argument("--status", choices=STATUSES, help="only these")
    p.add_argument("--json", action="store_true", help="print a JSON list (with parameters and results)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    with open_for(args.db, readonly=True) as store:
        runs = store.list_runs(args.status)
    rows = [_row(r) for r in runs]
    if args.json:
        print(json.dumps(rows, sort_keys=True))
    else:
        for row in rows:
            row["attempts"] = f"{row['attempts']}/{row['max_attempts']}"
        print(table(rows, COLUMNS) if rows else "no runs")
    return 0


def _row(r: Any) -> dict[str, Any]:
    params = r.params if isinstance(r.params, dict) else {}
    result = r.result if isinstance(r.result, dict) else {}
    return {
        "run": r.run_id,
        "status": r.status,
        "topology": params.get("topology"),
        "behaviour": params.get("behaviour", "chat-round"),
        "agents": params.get("agents"),
        "rounds": params.get("rounds"),
        "steps": r.step,
        "messages": result.get("messages"),
        "cost_usd": result.get("cost_usd"),
        "virtual_time_s": result.get("virtual_time_s"),
        "attempts": r.attempts,
        "max_attempts": r.max_attempts,
        "owner": r.owner,
        "fence": r.fence,
        "version": r.version,
        "lease_left_s": round(r.lease_expires - r.now, 1) if r.held else None,
        "error": None if r.error is None else redact(r.error),
        "params": r.params,
        "options": json.loads(redact(json.dumps(r.options))),
        "result": r.result,
        "parent_run": r.parent_run,
        "parent_step": r.parent_step,
    }
