"""``megaactors run --runtime asyncio --shards K [--shard-backend processes|ray]
[--address HOST:PORT]``: one live run split over shards, processes on this machine
or Ray actors."""

from __future__ import annotations

import argparse
from typing import Any

from megaactors.cli.common import CommandError, add_param
from megaactors.experiments.spec import RunSpec
from megaactors.runtime.ray_cluster import ADDRESS
from megaactors.validation import Param

__all__ = ["LIVE_SHARD_BACKENDS", "SHARDS", "SHARD_BACKEND", "add_shard_options", "run_sharded_live", "sharding"]

LIVE_SHARD_BACKENDS = ("processes", "ray")
"""Where the shards of a live run go: forked processes of this machine joined by
socket pairs, or Ray actors."""

SHARDS = Param(
    "shards",
    int,
    "--runtime asyncio: split the run over this many event loops, whole groups each (at most one per group)",
    minimum=1,
    maximum=4096,
    optional=True,
)
SHARD_BACKEND = Param(
    "shard_backend",
    str,
    "with --shards: where shards run: processes (forked here, joined by socket pairs) or ray (one actor each, "
    "on a local Ray instance without --address); default: ray with --address, else processes",
    choices=lambda: LIVE_SHARD_BACKENDS,
    optional=True,
)


def add_shard_options(parser: argparse.ArgumentParser) -> None:
    add_param(parser, SHARDS)
    add_param(parser, SHARD_BACKEND)
    add_param(parser, ADDRESS)


def sharding(args: argparse.Namespace) -> bool:
    """Whether the options ask for a sharded run."""
    return args.shards is not None or args.shard_backend is not None or args.address is not None


def run_sharded_live(args: argparse.Namespace, spec: RunSpec) -> dict[str, Any]:
    """``--shards K`` on the asyncio runtime: what cannot work is a :class:`CommandError`
    found before anything starts; returns the run's summary."""
    if args.shards is None:
        raise CommandError("--shard-backend and --address go with --shards K")
    if spec.runtime != "asyncio":
        raise CommandError(f"--shards splits a live run on the asyncio runtime; got --runtime {spec.runtime}")
    if args.trace_out is not None or args.collect is not None or args.db or args.run_id or args.endpoint:
        raise CommandError("--shards does not combine with --trace-out, --collect, --checkpoint or --endpoint")
    backend = args.shard_backend or ("ray" if args.address is not None else "processes")
    if backend == "processes" and args.address is not None:
        raise CommandError("--address runs shards on Ray: it does not combine with --shard-backend processes")
    if backend == "ray" and args.shards < 2:
        raise CommandError("--shard-backend ray and --address place shards on Ray: they need --shards 2 or more")
    org = spec.organisation()
    units, what = (len(org.groups), "groups") if org.groups else (org.n, "agents")
    if args.shards > units:
        raise CommandError(f"--shards {args.shards} is more than the organisation's {units} {what}: a shard holds "
                           f"whole {what}; use at most {units}")  # fmt: skip
    options: dict[str, Any] = {"shards": args.shards}
    if backend == "ray":
        if args.address is not None:
            from megaactors.runtime.ray_cluster import check_reachable

            check_reachable(args.address)  # a ClusterError line before the organisation is built again
        options.update(transport="ray", address=args.address)
    if args.time_scale is not None:
        options["time_scale"] = args.time_scale
    result = spec.execute(**options)
    return result.summary()
