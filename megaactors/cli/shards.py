"""``megaactors run --shards K [--shard-backend ...] [--address HOST:PORT]``: one run
split over shards — a live run (``--runtime asyncio``: Ray actors) or the simulation
cut by machine (``--runtime sim``: in this process or Ray actors, with the unsharded
run's result)."""

from __future__ import annotations

import argparse
from typing import Any

from megaactors.cli.common import CommandError, add_param
from megaactors.experiments.spec import RunSpec
from megaactors.runtime.ray_cluster import ADDRESS
from megaactors.runtime.sim_shards import BACKENDS as SIM_SHARD_BACKENDS
from megaactors.validation import Param

__all__ = [
    "SHARDS",
    "SHARD_BACKEND",
    "SIM_SHARD_BACKENDS",
    "add_shard_options",
    "run_sharded",
    "run_sharded_live",
    "run_sharded_sim",
    "sharding",
    "sim_sharding",
]

SHARDS = Param(
    "shards",
    int,
    "split the run over this many shards: --runtime asyncio, Ray actors of whole groups each (at most one per "
    "group; a local Ray instance without --address); --runtime sim, machines of --machines M (needs "
    "--net-latency cross=S > 0), same result as unsharded",
    minimum=1,
    maximum=4096,
    optional=True,
)
SHARD_BACKEND = Param(
    "shard_backend",
    str,
    "with --shards on --runtime sim: where shards run: inprocess (one after another here) or ray (one actor "
    "each, on a local Ray instance without --address); default: ray with --address, else inprocess "
    "(--runtime asyncio runs its shards on Ray only)",
    choices=lambda: SIM_SHARD_BACKENDS,
    optional=True,
)


def add_shard_options(parser: argparse.ArgumentParser) -> None:
    add_param(parser, SHARDS)
    add_param(parser, SHARD_BACKEND)
    add_param(parser, ADDRESS)


def sharding(args: argparse.Namespace) -> bool:
    """Whether the options ask for a sharded run."""
    return args.shards is not None or args.shard_backend is not None or args.address is not None


def run_sharded(args: argparse.Namespace, spec: RunSpec) -> dict[str, Any]:
    """``--shards K``: the sharded simulation for ``--runtime sim``, a sharded live run
    for ``--runtime asyncio``; returns the run's summary."""
    if args.shards is None:
        raise CommandError("--shard-backend and --address go with --shards K")
    if spec.runtime not in ("sim", "asyncio"):
        raise CommandError(f"--shards splits a run on --runtime sim or asyncio; got --runtime {spec.runtime}")
    if args.trace_out is not None or args.collect is not None or args.endpoint:
        raise CommandError("--shards does not combine with --trace-out, --collect or --endpoint")
    if (args.db or args.run_id) and spec.runtime != "sim":
        raise CommandError("--shards with --checkpoint checkpoints the sharded simulation: it needs --runtime sim")
    return run_sharded_sim(args, spec) if spec.runtime == "sim" else run_sharded_live(args, spec)


def _sim_backend(args: argparse.Namespace) -> str:
    """The simulation's shard backend ``args`` ask for (default: ray with an address, else inprocess)."""
    backend = args.shard_backend or ("ray" if args.address is not None else "inprocess")
    if backend == "inprocess" and args.address is not None:
        raise CommandError("--address runs shards on Ray: it does not combine with --shard-backend inprocess")
    return backend


def run_sharded_sim(args: argparse.Namespace, spec: RunSpec) -> dict[str, Any]:
    """``--shards K`` on the simulation: cut by machine, in this process or on Ray;
    with ``--checkpoint DB --run-id ID`` checkpointed in the store, window by window."""
    if args.db or args.run_id:
        from megaactors.cli.durable_common import run_checkpointed

        return run_checkpointed(args, spec, **sim_sharding(args))
    backend = _sim_backend(args)
    from megaactors.runtime.sim_shards import ShardedSimulation

    runtime = spec.build(runtime_class=ShardedSimulation, shards=args.shards, backend=backend, address=args.address)
    result = runtime.run()
    result.params = spec.result_params()
    return result.summary()


def sim_sharding(args: argparse.Namespace) -> dict[str, Any]:
    """The durable options of a checkpointed sharded simulation that ``args`` ask
    for: ``shards``, ``shard_backend``, ``shard_address`` (none without ``--shards``)."""
    if not sharding(args):
        return {}
    if args.shards is None:
        raise CommandError("--shard-backend and --address go with --shards K")
    backend = _sim_backend(args)
    return {"shards": args.shards, "shard_backend": backend, "shard_address": args.address}


def run_sharded_live(args: argparse.Namespace, spec: RunSpec) -> dict[str, Any]:
    """``--shards K`` on the asyncio runtime, as Ray actors: what cannot work is a
    :class:`CommandError` (or a :class:`~megaactors.errors.ClusterError`) found before
    anything starts; returns the run's summary."""
    if args.shard_backend == "inprocess":
        raise CommandError(
            "--shard-backend inprocess is for --runtime sim: a sharded asyncio run's shards are Ray actors"
        )
    if args.shards < 2 and (args.shard_backend is not None or args.address is not None):
        raise CommandError("--shard-backend ray and --address place shards on Ray: they need --shards 2 or more")
    org = spec.organisation()
    units, what = (len(org.groups), "groups") if org.groups else (org.n, "agents")
    if args.shards > units:
        raise CommandError(f"--shards {args.shards} is more than the organisation's {units} {what}: a shard holds "
                           f"whole {what}; use at most {units}")  # fmt: skip
    options: dict[str, Any] = {"shards": args.shards}
    if args.shards > 1:
        from megaactors.runtime.ray_cluster import check_reachable, import_ray

        if args.address is not None:
            check_reachable(args.address)  # a ClusterError line before the organisation is built again
        import_ray()  # a ClusterError line naming the extra when Ray is missing
        options["address"] = args.address
    if args.time_scale is not None:
        options["time_scale"] = args.time_scale
    result = spec.execute(**options)
    return result.summary()
