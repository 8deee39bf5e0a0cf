"""``megaactors history``: the checkpointed super-steps of one run, with their metadata."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from megaactors.cli.durable_common import add_store_option, open_for, run_id, table

__all__ = ["register"]

COLUMNS = (
    "step",
    "parent",
    "kind",
    "base",
    "bytes",
    "events",
    "virtual_time_s",
    "changed",
    "messages",
    "llm_calls",
    "cost_usd",
    "edit",
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "history",
        help="list a run's checkpointed super-steps",
        description="One row per checkpointed super-step (see --step-seconds in `megaactors run --help`): step, "
        "parent, full or delta, size and ledger totals.",
    )
    add_store_option(p)
    p.add_argument("--run-id", required=True, type=run_id, help="the run")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    with open_for(args.db, readonly=True) as store:
        checkpoints = store.list(args.run_id)
    rows = [
        {
            "step": c.step,
            "parent": c.parent_step,
            "kind": c.kind,
            "base": c.base_step,
            "bytes": c.nbytes,
            "events": c.meta.get("events"),
            "virtual_time_s": round(c.meta.get("virtual_time_s", 0.0), 6),
            "changed": c.meta.get("agents_changed"),
            "messages": c.meta.get("messages"),
            "llm_calls": c.meta.get("llm_calls"),
            "cost_usd": round(c.meta.get("cost_usd", 0.0), 9),
            "edit": _edit_text(c.meta.get("edit")),
            "meta": c.meta,
        }
        for c in checkpoints
    ]
    if args.json:
        print(json.dumps(rows, sort_keys=True))
    else:
        print(table(rows, COLUMNS) if rows else f"run {args.run_id!r} has no checkpoint yet")
    return 0


def _edit_text(edit: Any) -> str | None:
    """A human's edit in one cell: who, when, which agents."""
    if not isinstance(edit, dict):
        return None
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(edit.get("when", 0)))
    done = []
    if edit.get("set_state"):
        done.append(f"set state of agent(s) {','.join(sorted(edit['set_state'], key=int))}")
    if edit.get("send"):
        done.append(f"sent {len(edit['send'])} message(s) to agent(s) {','.join(str(a) for a, _ in edit['send'])}")
    return f"{edit.get('who')} {when} UTC {'; '.join(done)}"
