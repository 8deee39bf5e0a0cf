"""What the durable sub-commands share: opening a store, durable options, tables,
budgets, and running a checkpointed run under a lease."""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Sequence
from typing import Any

from megaactors.cli.common import CommandError, add_param
from megaactors.experiments.budget import MAX_AGENTS, MAX_MESSAGES, Budget
from megaactors.redact import redact
from megaactors.validation import Param

__all__ = [
    "LEASE",
    "RUN_ID",
    "add_budget_options",
    "add_durable_options",
    "add_lease_option",
    "add_store_option",
    "check_budget",
    "check_shardable_run",
    "execute_under_lease",
    "open_for",
    "options_from_args",
    "preflight",
    "table",
]

LEASE = Param(
    "lease", float, "lease length; the holder renews it every third of it", unit="s", minimum=0.1, maximum=86_400
)
CHECKPOINT_EVERY = Param(
    "checkpoint_every",
    int,
    "checkpoint every N super-steps (windows of a sharded simulation)",
    minimum=1,
    maximum=10**9,
)
STEP_SECONDS = Param(
    "step_seconds",
    float,
    "virtual seconds per super-step window. A super-step runs every event (LLM reply, finished tool call, and "
    "the deliveries and new batches they cause) in the next window of this width that holds one; super-step 0 "
    "is the start",
    unit="s",
    minimum=0,
    above_minimum=True,
    maximum=86_400,
)
RUN_ID = Param("run_id", str, "id of the run")
INTERRUPT_AT = Param(
    "interrupt_at",
    float,
    "stop for a human once the run reaches this virtual time (status interrupted; inspect shows it, resume continues)",
    unit="s",
    minimum=0,
    maximum=1e12,
)
_RUN_ID_CHARS = 200


def add_store_option(parser: argparse.ArgumentParser, *, primary: str = "--db") -> None:
    """``--db``/``--checkpoint``: an SQLite file or a postgresql:// DSN."""
    names = ("--db", "--checkpoint") if primary == "--db" else ("--checkpoint", "--db")
    parser.add_argument(
        *names, dest="db", required=True, metavar="DB", help="SQLite file (default backend) or postgresql:// DSN"
    )


def add_lease_option(parser: argparse.ArgumentParser) -> None:
    add_param(parser, LEASE, default=30.0)


def add_budget_options(parser: argparse.ArgumentParser) -> None:
    """``--max-agents`` and ``--max-messages``: runs over them are refused."""
    add_param(parser, MAX_AGENTS)
    add_param(parser, MAX_MESSAGES)


def check_budget(args: argparse.Namespace, specs: Sequence[Any]) -> None:
    """Refuse (one line, with the estimate) if a spec does not fit the budget."""
    budget = Budget.machine(args.max_agents, args.max_messages)
    for spec in specs:
        refusal = budget.refusal(spec)
        if refusal:
            raise CommandError(f"run refused: {refusal}")


def preflight(specs: Sequence[Any]) -> None:
    """Start each run in memory before anything is written: the behaviour must accept
    the organisation and every agent's state after the start must be one a checkpoint
    stores (one line, exit code 2, otherwise)."""
    from megaactors.durable.checkpointing import preflight as start_in_memory

    for spec in specs:
        start_in_memory(spec)


def check_shardable_run(spec: Any, options: Any) -> None:
    """Refuse (one line) a sharded run the simulation cannot cut, or whose Ray cluster
    does not answer, before anything is written."""
    from megaactors.durable.sharded import sharded_simulation

    sharded_simulation(spec, options)
    if options.shard_address is not None:
        from megaactors.runtime.ray_cluster import check_reachable

        check_reachable(options.shard_address)


def add_durable_options(parser: argparse.ArgumentParser, *, with_store: bool) -> None:
    """Options of a checkpointed run (``with_store``: also ``--checkpoint DB --run-id ID``)."""
    if with_store:
        parser.add_argument("--checkpoint", "--db", dest="db", metavar="DB", help="checkpoint into this store")
        parser.add_argument("--run-id", type=run_id, help="id of the checkpointed run (with --checkpoint)")
    add_param(parser, CHECKPOINT_EVERY, default=1)
    add_param(parser, STEP_SECONDS, default=1.0)
    parser.add_argument("--bill", metavar="URL", help="charge every LLM call to this billing service (outbox)")
    add_param(parser, INTERRUPT_AT)
    parser.add_argument(
        "--interrupt-when",
        metavar="COND",
        help="stop for a human once the ledger meets COND, e.g. cost_usd>0.5 (status interrupted; resume continues)",
    )
    add_lease_option(parser)
    add_budget_options(parser)


def run_id(text: str) -> str:
    """A run id: 1 to 200 printable characters without spaces (argparse type)."""
    if not text or len(text) > _RUN_ID_CHARS or not text.isprintable() or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(
            f"a run id is 1 to {_RUN_ID_CHARS} printable characters without spaces, got {text!r}"
        )
    return text


def options_from_args(args: argparse.Namespace, **sharding: Any) -> Any:
    """The durable options ``args`` give; ``sharding``: ``shards``, ``shard_backend``
    and ``shard_address`` of a sharded run."""
    from megaactors.durable import DurableOptions

    return DurableOptions(
        checkpoint_every=args.checkpoint_every,
        step_s=args.step_seconds,
        billing_url=args.bill,
        interrupt_at=getattr(args, "interrupt_at", None),
        interrupt_when=getattr(args, "interrupt_when", None),
        **sharding,
    )


def open_for(target: str, *, create: bool = False, readonly: bool = False) -> Any:
    """Open a store; every store problem becomes a one-line error naming it."""
    from megaactors.durable import open_store

    return open_store(target, create=create, readonly=readonly)


def execute_under_lease(
    store: Any, lease: Any, spec: Any, options: Any, lease_s: float, edits: Any = None
) -> dict[str, Any]:
    """Run (or resume) a claimed run to its end under a heartbeat; return its summary,
    or for a run stopped for a human (``--interrupt-at``/``--interrupt-when``, or the
    behaviour's ``Interrupt``) where, why and what fired (``status``: ``interrupted``,
    ``trigger``). A run that fails gives its claim back (queued
    again, or dead after its last attempt) and the failure is one line naming what
    became of the run. ``edits`` (:class:`~megaactors.durable.interrupts.HumanEdits`) are
    applied as the run resumes."""
    from megaactors.durable import FencingError, Heartbeat, run_durable
    from megaactors.durable.interrupts import EditRefused, RunInterrupted
    from megaactors.durable.outbox import settle_compensations
    from megaactors.durable.worker import PERMANENT

    with Heartbeat(store, lease, lease_s) as heartbeat:
        try:
            result = run_durable(store, lease, spec, options, lost=lambda: heartbeat.lost, edits=edits)
            summary = result.summary()
            store.finish(lease, summary)
        except EditRefused:  # a human's edit the run cannot take: nothing was written; it waits for another
            store.interrupt(lease, store.get_run(lease.run_id).error or "an edit was refused", options.as_dict())
            raise
        except RunInterrupted as stop:
            store.interrupt(lease, stop.reason, stop.going_on(options.as_dict()))
            return {"status": "interrupted", "run_id": lease.run_id, "step": stop.step,
                    "virtual_time_s": stop.virtual_time_s, "reason": stop.reason, "trigger": stop.trigger}  # fmt: skip
        except FencingError:
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            permanent = isinstance(exc, PERMANENT)
            try:
                status = store.fail(lease, error, final=permanent)
            except Exception:  # the store itself is failing: the lease runs out instead
                raise exc from None
            became = "queued again"
            if status == "dead":
                became = "dead (it would fail again)" if permanent else "dead (no attempts left)"
            raise CommandError(f"run {lease.run_id!r} failed and is {became}: {error}") from exc
    settle_compensations(store, run_id=lease.run_id)
    if options.interrupt_at is not None:
        raise CommandError(
            f"run {lease.run_id!r} ended at {summary['virtual_time_s']:g} s of virtual time, before --interrupt-at "
            f"{options.interrupt_at:g} s: nothing was interrupted (its result is stored; megaactors runs shows it)"
        )
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
        return redact(json.dumps(value, sort_keys=True))
    text = redact(str(value).replace("\n", " "))
    return text if len(text) <= 60 else text[:57] + "..."


def run_checkpointed(args: argparse.Namespace, spec: Any, **sharding: Any) -> dict[str, Any]:
    """``megaactors run --checkpoint DB --run-id ID``: a new run, checkpointed as it goes
    (``sharding``: the sharded simulation's ``shards``, ``shard_backend``, ``shard_address``)."""
    from megaactors import __version__
    from megaactors.durable import RunExistsError, owner_id

    if not args.db or not args.run_id:
        raise CommandError("a checkpointed run needs both --checkpoint DB and --run-id ID")
    if spec.runtime != "sim":
        raise CommandError(f"checkpointed runs use the sim runtime, not {spec.runtime!r}")
    options = options_from_args(args, **sharding)
    preflight([spec])
    if options.shards is not None:
        check_shardable_run(spec, options)
    store = open_for(args.db, create=True)
    try:
        try:
            owner, params, opts = owner_id(), spec.as_dict(), options.as_dict()
            lease = store.create_run(args.run_id, params, opts, version=__version__, owner=owner, lease_s=args.lease)
        except RunExistsError as exc:
            raise CommandError(
                f"{exc}; continue it with: megaactors resume --checkpoint {redact(args.db)} --run-id {args.run_id}"
            ) from exc
        return execute_under_lease(store, lease, spec, options, args.lease)
    finally:
        store.close()
