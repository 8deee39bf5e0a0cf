"""``megaactors versions``: runs per megaactors version, to compare a canary with the stable version."""

from __future__ import annotations

import argparse
import json
from typing import Any

from megaactors.cli.durable_common import add_store_option, open_for, table

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "versions",
        help="per megaactors version: deploy state, queued / running / done / failed runs and mean results",
    )
    add_store_option(p)
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors.durable.deploys import REPORT_COLUMNS, version_report

    with open_for(args.db, readonly=True) as store:
        rows = version_report(store)
    if args.json:
        print(json.dumps(rows, sort_keys=True))
    else:
        print(table(rows, REPORT_COLUMNS) if rows else "no versions: no worker started and no run queued")
    return 0
