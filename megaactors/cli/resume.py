"""``megaactors resume``: continue a checkpointed run from its newest checkpoint."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from megaactors.cli.common import CommandError, add_param
from megaactors.cli.durable_common import (
    add_budget_options,
    add_lease_option,
    add_store_option,
    check_budget,
    check_shardable_run,
    execute_under_lease,
    open_for,
    run_id,
)
from megaactors.cli.shards import add_shard_options
from megaactors.validation import Param

__all__ = ["WAIT", "print_summary", "register"]

WAIT = Param(
    "wait",
    float,
    "wait up to this long for another holder's lease to expire (default: fail at once)",
    unit="s",
    minimum=0,
    maximum=86_400,
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "resume",
        help="continue a checkpointed run from its newest checkpoint",
        description="Claim a run's lease and continue it from its newest checkpoint; a finished run prints "
        "its recorded result. A run held by a dead process of this host is taken over at once.",
    )
    add_store_option(p, primary="--checkpoint")
    p.add_argument("--run-id", required=True, type=run_id, help="the run to resume")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_param(p, WAIT, default=0.0)
    p.add_argument(
        "--set-state",
        action="append",
        default=[],
        metavar="AGENT=JSON",
        help="replace an agent's behaviour state before going on (repeatable; recorded in history with --who)",
    )
    p.add_argument(
        "--send",
        action="append",
        default=[],
        metavar="AGENT=TEXT",
        help="put a message from a human into an agent's in-queue before going on (channel human; "
        "repeatable; recorded in history with --who)",
    )
    p.add_argument("--who", default=None, help="who makes the edits (default: USER@host)")
    add_lease_option(p)
    add_budget_options(p)
    add_shard_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors import __version__
    from megaactors.durable import DurableOptions, RunQueue, owner_id
    from megaactors.durable.holders import holder_is_dead
    from megaactors.durable.sharded import check_resumable
    from megaactors.durable.store import check_header
    from megaactors.errors import StateError
    from megaactors.experiments.spec import ParameterError, RunSpec

    # everything that can be wrong is checked read-only first: a refused resume writes nothing
    with open_for(args.db, readonly=True) as ro:
        run = ro.get_run(args.run_id)
        if run.status == "done":
            return print_summary(run.result, args.json)
        if run.status in ("dead", "cancelled"):
            raise CommandError(f"run {args.run_id!r} is {run.status}: {run.error}")
        if run.version != __version__:
            raise CommandError(
                f"run {args.run_id!r} belongs to megaactors {run.version}; this is megaactors {__version__}"
            )
        try:
            spec = RunSpec.from_dict(run.params)
            options = DurableOptions.from_dict(run.options)
        except (ParameterError, TypeError) as exc:
            raise CommandError(f"run {args.run_id!r} has bad parameters: {exc}") from exc
        options = sharding_of(args, options)
        check_budget(args, [spec])
        deadline = time.monotonic() + args.wait
        while run.held and not holder_is_dead(run.owner):  # wait read-only: a claim would queue behind its writes
            if time.monotonic() >= deadline:
                raise CommandError(
                    f"run {args.run_id!r} is held by {run.owner} for another "
                    f"{run.lease_expires - run.now:.1f} s (use --wait to wait for its lease to expire)"
                )
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            run = ro.get_run(args.run_id)
        latest = ro.latest(args.run_id)
        if latest is not None:
            where = f"run {args.run_id!r} step {latest.step}"
            check_header(latest.state or b"", where=where)
            try:
                check_resumable(latest, options.shards, where)
            except StateError as exc:
                raise CommandError(str(exc)) from None
    edits = _edits(args)
    if options.shards is not None:
        if edits:
            raise CommandError(f"run {args.run_id!r} is sharded: --set-state and --send edit one simulation's agents")
        check_shardable_run(spec, options)
    if edits and latest is None:
        raise CommandError(f"run {args.run_id!r} has no checkpoint yet: there is no state to edit")
    store = open_for(args.db)
    try:
        lease = RunQueue(store).claim(args.run_id, owner_id(), args.lease)
        summary = execute_under_lease(store, lease, spec, options, args.lease, edits)
    finally:
        store.close()
    return print_summary(summary, args.json)


def sharding_of(args: argparse.Namespace, options: Any) -> Any:
    """The run's durable ``options`` with the shard backend and address this resume
    asks for; ``--shards K`` must name the number of shards the run was checkpointed on."""
    from dataclasses import replace

    from megaactors.cli.shards import sharding

    if not sharding(args):
        return options
    rid = args.run_id
    if options.shards is None:
        raise CommandError(f"run {rid!r} is not sharded: resume it without --shards, --shard-backend or --address")
    if args.shards is not None and args.shards != options.shards:
        raise CommandError(f"run {rid!r} was checkpointed on {options.shards} shard(s): it resumes on "
                           f"--shards {options.shards}, not {args.shards}")  # fmt: skip
    backend = args.shard_backend or ("ray" if args.address is not None else options.shard_backend)
    address = args.address if args.address is not None or args.shard_backend else options.shard_address
    return replace(options, shard_backend=backend, shard_address=address)


def _edits(args: argparse.Namespace) -> Any:
    """``--set-state AGENT=JSON`` and ``--send AGENT=TEXT`` options as :class:`HumanEdits`;
    one-line errors for bad ones (an agent the run lacks is found as the edits apply)."""
    import getpass
    import socket

    from megaactors.core.messages import MessageError, check_human_text
    from megaactors.durable.interrupts import HumanEdits

    edits = HumanEdits(who=args.who or f"{getpass.getuser()}@{socket.gethostname()}")
    for text in args.send:
        agent, sep, message = text.partition("=")
        if not sep or not agent.strip().isdigit():
            raise CommandError(f"--send: expected AGENT=TEXT with AGENT an agent number, got {text!r}")
        try:
            check_human_text(message)
        except MessageError as exc:
            raise CommandError(f"--send: agent {int(agent)}: {exc}") from None
        edits.sends.append((int(agent), message))
    for text in args.set_state:
        agent, sep, value = text.partition("=")
        if not sep or not agent.strip().isdigit():
            raise CommandError(f"--set-state: expected AGENT=JSON with AGENT an agent number, got {text!r}")
        try:
            state = json.loads(value)
        except json.JSONDecodeError as exc:
            raise CommandError(f"--set-state: agent {agent.strip()}: not JSON ({exc.msg}): {value!r}") from None
        if int(agent) in edits.states:
            raise CommandError(f"--set-state: agent {int(agent)} given twice")
        edits.states[int(agent)] = state
    return edits


def print_summary(summary: Any, as_json: bool) -> int:
    """Print a run's summary (readable, or one JSON object, with ``status``, ``faults``
    and ``stalled`` as ``run`` prints them); return exit code 0."""
    from megaactors.cli.run import format_summary, with_status

    summary = with_status(dict(summary))

    if as_json:
        print(json.dumps(summary, sort_keys=True))
    elif summary.get("status") == "interrupted":
        rid = summary["run_id"]
        print(f"run {rid} {summary['reason']}: stopped at super-step {summary['step']} "
              f"({summary['virtual_time_s']:g} s virtual). Look: megaactors inspect --run-id {rid} --db DB; "
              f"go on: megaactors resume --run-id {rid} --checkpoint DB")  # fmt: skip
    else:
        print(format_summary(summary))
    return 0
