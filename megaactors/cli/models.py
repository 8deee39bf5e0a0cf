"""``megaactors models``: the priced models and their list prices."""

from __future__ import annotations

import argparse
import json
from typing import Any

from megaactors.cli.durable_common import table

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "models",
        help="list the priced LLM models and their prices",
        description="List the models --model accepts with their list prices in dollars per million tokens; "
        "--price-in and --price-out override them for a run.",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors.core.llm import DEFAULT_MODEL, PRICES

    rows = [
        {"model": name, "price_in": p.input_per_m, "price_out": p.output_per_m, "default": name == DEFAULT_MODEL}
        for name, p in sorted(PRICES.items())
    ]
    if args.json:
        print(json.dumps(rows, sort_keys=True))
        return 0
    shown = [
        {
            **r,
            "price_in": f"${r['price_in']:,.2f}",
            "price_out": f"${r['price_out']:,.2f}",
            "default": "yes" if r["default"] else "",
        }
        for r in rows
    ]
    print(table(shown, ["model", "price_in", "price_out", "default"]))
    print("prices in dollars per million tokens (input / output)")
    return 0
