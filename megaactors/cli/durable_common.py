"""What the durable sub-commands share: opening a store, durable options, tables,
and running a checkpointed run under a lease."""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Sequence
from typing import Any

from megaactors.cli.common import CommandError

__all__ = [
    "SUPER_STEP_HELP",
    "add_durable_options",
    "add_lease_option",
    "add_store_option",
    "execute_under_lease",
    "open_for",
    "options_from_args",
    "table",
]

SUPER_STEP_HELP = (
    "A super-step runs every event (LLM reply, finished tool call, and the deliveries and new batches they "
    "cause) in the next window of --step-seconds of virtual time that holds one; super-step 0 is the start."
)


def add_store_option(parser: argparse.ArgumentParser, *, primary: str = "--db") -> None:
    """``--db``/``--checkpoint``: an SQLite file or a postgresql:// DSN."""
    names = ("--db", "--checkpoint") if primary == "--db" else ("--checkpoint", "--db")
    parser.add_argument(
        *names, dest="db", required=True, metavar="DB", help="SQLite file (default backend) or postgresql:// DSN"
    )


def add_lease_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lease",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="lease length; the holder renews it every third of it (default %(default)s)",
    )


def add_durable_options(parser: argparse.ArgumentParser, *, with_store: bool) -> None:
    """Options of a checkpointed run (``with_store``: also ``--checkpoint DB --run-id ID``)."""
    if with_store:
        parser.add_argument("--checkpoint", "--db", dest="db", metavar="DB", help="checkpoint into this store")
        parser.add_argument("--run-id", help="id of the checkpointed run (with --checkpoint)")
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=1,
        metavar="K",
        help=f"checkpoint every K super-steps (default %(default)s). {SUPER_STEP_HELP}",
    )
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=1.0,
        metavar="W",
        help="virtual seconds per super-step window (default %(default)s)",
    )
    parser.add_argument("--bill", metavar="URL", help="charge every LLM call to this billing service (outbox)")
    add_lease_option(parser)


def options_from_args(args: argparse.Namespace) -> Any:
    from megaactors.durable import DurableOptions
    from megaactors.experiments.spec import ParameterError

    try:
        return DurableOptions(checkpoint_every=args.checkpoint_every, step_s=args.step_seconds, billing_url=args.bill)
    except ParameterError as exc:
        raise CommandError(str(exc)) from exc


def check_lease(seconds: float) -> float:
    if not seconds > 0:
        raise CommandError(f"lease must be > 0 seconds, got {seconds}")
    return seconds


def open_for(target: str, *, create: bool = False, readonly: bool = False) -> Any:
    """Open a store; every store problem becomes a one-line :class:`CommandError`."""
    from megaactors.durable import StoreError, open_store

    try:
        return open_store(target, create=create, readonly=readonly)
    except StoreError as exc:
        raise CommandError(str(exc)) from exc


def execute_under_lease(store: Any, lease: Any, spec: Any, options: Any, lease_s: float) -> dict[str, Any]:
    """Run (or resume) a claimed run to its end under a heartbeat; return its summary."""
    from megaactors.durable import Heartbeat, StoreError, run_durable
    from megaactors.durable.outbox import settle_compensations

    try:
        with Heartbeat(store, lease, lease_s) as heartbeat:
            result = run_durable(store, lease, spec, options, lost=lambda: heartbeat.lost)
            summary = result.summary()
            store.finish(lease, summary)
        settle_compensations(store, run_id=lease.run_id)
    except StoreError as exc:
        raise CommandError(str(exc)) from exc
    return summary


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as a plain fixed-width table."""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    text = str(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def run_checkpointed(args: argparse.Namespace, spec: Any) -> dict[str, Any]:
    """``megaactors run --checkpoint DB --run-id ID``: a new run, checkpointed as it goes."""
    from megaactors import __version__
    from megaactors.durable import StoreError, owner_id

    if not args.db or not args.run_id:
        raise CommandError("a checkpointed run needs both --checkpoint DB and --run-id ID")
    if spec.runtime != "sim":
        raise CommandError(f"checkpointed runs use the sim runtime, not {spec.runtime!r}")
    options = options_from_args(args)
    lease_s = check_lease(args.lease)
    store = open_for(args.db, create=True)
    try:
        try:
            lease = store.create_run(
                args.run_id, spec.as_dict(), options.as_dict(), version=__version__, owner=owner_id(), lease_s=lease_s
            )
        except StoreError as exc:
            hint = f"; continue it with: megaactors resume --checkpoint {args.db} --run-id {args.run_id}"
            raise CommandError(str(exc) + (hint if "already exists" in str(exc) else "")) from exc
        return execute_under_lease(store, lease, spec, options, lease_s)
    finally:
        store.close()
