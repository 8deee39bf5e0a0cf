"""``megaactors bench``: measurements of the runtimes themselves.

``megaactors bench async-vs-threads --calls N --latency-ms L [--json]`` makes N
concurrent simulated LLM calls of L ms on the asyncio runtime and on the pykka
(thread per agent) runtime, each in a fresh process, and reports wall time and
peak resident memory, in total and per concurrent call.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from megaactors.cli.common import CommandError, Parser, add_param
from megaactors.validation import Param

__all__ = ["CALLS", "LATENCY_MS", "register"]


CALLS = Param("calls", int, "concurrent calls N", minimum=1, maximum=10**8, short="-n")
LATENCY_MS = Param("latency_ms", float, "latency of each call", unit="ms", minimum=0, maximum=3_600_000, short="-l")


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="measure the runtimes (async vs threads)")
    benches = p.add_subparsers(dest="bench", metavar="BENCHMARK", parser_class=Parser)
    benches.required = True
    q = benches.add_parser(
        "async-vs-threads", help="N concurrent simulated LLM calls on asyncio tasks and on pykka threads"
    )
    add_param(q, CALLS, default=500)
    add_param(q, LATENCY_MS, default=50.0)
    q.add_argument("--json", action="store_true", help='print {"asyncio": {...}, "threads": {...}}')
    q.set_defaults(handler=handle_async_vs_threads)


def handle_async_vs_threads(args: argparse.Namespace) -> int:
    from megaactors.experiments.async_vs_threads import compare, format_comparison
    from megaactors.runtime.threads import thread_capacity

    capacity = thread_capacity()["capacity"]
    if args.calls > capacity:
        raise CommandError(f"calls: threads need one thread per call and this machine can start {capacity:,} more")
    try:
        result = compare(args.calls, args.latency_ms)
    except RuntimeError as exc:
        raise CommandError(str(exc)) from exc
    print(json.dumps(result, sort_keys=True) if args.json else format_comparison(result, args.calls, args.latency_ms))
    return 0
