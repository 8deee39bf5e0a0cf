"""``megaactors bench``: measurements of the runtimes themselves.

``megaactors bench async-vs-threads --calls N --latency-ms L [--json]`` makes N
concurrent simulated LLM calls of L ms on the asyncio runtime and on the pykka
(thread per agent) runtime, each in a fresh process, and reports wall time and
peak resident memory, in total and per concurrent call.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from megaactors.cli.common import CommandError, Parser

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="measure the runtimes (async vs threads)")
    benches = p.add_subparsers(dest="bench", metavar="BENCHMARK", parser_class=Parser)
    benches.required = True
    q = benches.add_parser(
        "async-vs-threads", help="N concurrent simulated LLM calls on asyncio tasks and on pykka threads"
    )
    q.add_argument("--calls", "-n", type=int, default=500, help="concurrent calls N (default %(default)s)")
    q.add_argument("--latency-ms", "-l", type=float, default=50.0, help="latency of each call (default %(default)s)")
    q.add_argument("--json", action="store_true", help='print {"asyncio": {...}, "threads": {...}}')
    q.set_defaults(handler=handle_async_vs_threads)


def handle_async_vs_threads(args: argparse.Namespace) -> int:
    from megaactors.experiments.async_vs_threads import compare, format_comparison
    from megaactors.runtime.threads import thread_capacity

    if args.calls < 1:
        raise CommandError(f"calls must be an integer >= 1, got {args.calls}")
    if not (math.isfinite(args.latency_ms) and args.latency_ms >= 0):
        raise CommandError(f"latency ms must be a finite number >= 0, got {args.latency_ms}")
    capacity = thread_capacity()["capacity"]
    if args.calls > capacity:
        raise CommandError(f"calls: threads need one thread per call and this machine can start {capacity:,} more")
    try:
        result = compare(args.calls, args.latency_ms)
    except RuntimeError as exc:
        raise CommandError(str(exc)) from exc
    print(json.dumps(result, sort_keys=True) if args.json else format_comparison(result, args.calls, args.latency_ms))
    return 0
