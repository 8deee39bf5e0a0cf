"""``megaactors run --shards K [--address HOST:PORT|local]``: one live run split over
shards, processes on this machine or Ray actors on a cluster."""

from __future__ import annotations

import argparse
from typing import Any

from megaactors.cli.common import CommandError, add_param
from megaactors.experiments.spec import RunSpec
from megaactors.validation import Param

__all__ = ["LOCAL", "SHARDS", "SHARD_ADDRESS", "add_shard_options", "shard_options"]

LOCAL = "local"
"""``--address local``: a Ray instance started and stopped by the command."""

SHARDS = Param(
    "shards",
    int,
    "with --runtime asyncio: split the run over this many event loops, whole groups each (at most one per group)",
    minimum=1,
    maximum=4096,
)
SHARD_ADDRESS = Param(
    "address",
    str,
    "with --shards: run the shards as Ray actors on the Ray cluster at HOST:PORT (its head's GCS port), or on a "
    f"local Ray instance started and stopped here with '{LOCAL}'; default: processes on this machine joined by "
    "socket pairs",
    optional=True,
)


def add_shard_options(parser: argparse.ArgumentParser) -> None:
    add_param(parser, SHARDS, default=1)
    add_param(parser, SHARD_ADDRESS)


def shard_options(args: argparse.Namespace, spec: RunSpec) -> dict[str, Any]:
    """The runtime options ``--shards``/``--address`` ask for (none for one shard);
    what cannot work is a :class:`CommandError`, found before anything starts."""
    shards, address = args.shards, args.address
    if shards == 1:
        if address is not None:
            raise CommandError("--address places shards on Ray: it needs --shards 2 or more")
        return {}
    if spec.runtime != "asyncio":
        raise CommandError(f"--shards splits a live run on the asyncio runtime; got --runtime {spec.runtime}")
    if getattr(args, "endpoint", None) or getattr(args, "db", None) or getattr(args, "run_id", None):
        raise CommandError("--shards does not combine with --endpoint, --checkpoint or --run-id")
    org = spec.organisation()
    units, what = (len(org.groups), "groups") if org.groups else (org.n, "agents")
    if shards > units:
        raise CommandError(f"--shards {shards} is more than the organisation's {units} {what}: a shard holds whole "
                           f"{what}; use at most {units}")  # fmt: skip
    if address is None:
        return {"shards": shards}
    if address != LOCAL:
        from megaactors.runtime.ray_cluster import check_reachable

        check_reachable(address)  # a ClusterError line before the organisation is built again
    return {"shards": shards, "transport": "ray", "address": None if address == LOCAL else address}
