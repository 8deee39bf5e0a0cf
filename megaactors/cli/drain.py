"""``megaactors drain``: stop new claims for a version while its running runs finish."""

from __future__ import annotations

import argparse
from typing import Any

from megaactors.cli.common import CommandError
from megaactors.cli.durable_common import add_store_option, open_for

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "drain",
        help="stop new claims for a megaactors version; its running runs finish",
        description="Mark a version draining: its workers finish the runs already started and claim no queued "
        "ones (--undo lets them claim again). The version's queued runs wait.",
    )
    add_store_option(p)
    p.add_argument("--version", required=True, help="the megaactors version to drain")
    p.add_argument("--undo", action="store_true", help="let the version's workers claim queued runs again")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    version = args.version.strip()
    with open_for(args.db) as store:
        runs = [r for r in store.list_runs() if r.version == version]
        if version not in store.deploys() and not runs:
            raise CommandError(
                f"version {version!r} is unknown to this store: no worker of it started and no run is for it"
            )
        store.set_deploy(version, "live" if args.undo else "draining")
    queued = sum(r.status == "queued" for r in runs)
    running = sum(r.status == "running" for r in runs)
    if args.undo:
        print(f"version {version} is live again: {queued} queued run(s) will be claimed")
    elif not queued and not running:
        print(f"version {version} is draining; it had nothing queued or running")
    else:
        print(
            f"version {version} is draining: {running} running run(s) will finish, {queued} queued run(s) wait "
            f"(megaactors drain --version {version} --undo to claim them again)"
        )
    return 0
