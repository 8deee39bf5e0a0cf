"""Shards of a sharded simulation as Ray actors, one per shard.

The coordinator (:class:`~megaactors.runtime.sim_shards.ShardedSimulation`) calls
one method on every actor at once and waits for all of them: one round of calls per
window, each carrying the copies for that shard as one batch (never a call per
message). Actors are spread over the cluster's nodes and ask for a CPU each when
the cluster has one per shard; they are killed when the run ends, whatever happens.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from megaactors.runtime.ray_cluster import ray_session
from megaactors.runtime.sim_shard import SimShard

__all__ = ["ShardActor", "ray_shards"]


class ShardActor(SimShard):
    """A :class:`SimShard` alone in a Ray worker process. The cyclic collector is
    off for the actor's life, as during :meth:`SimRuntime.run
    <megaactors.runtime.sim.SimRuntime.run>` (see :mod:`megaactors.runtime.gc_tuning`):
    what a simulation allocates forms no cycle, and with a million agents each full
    pass would walk tens of millions of objects."""

    def __init__(self, *args: Any) -> None:
        gc.disable()
        super().__init__(*args)
        gc.freeze()


ShardCall = Callable[[str, list[tuple[Any, ...]]], list[Any]]
"""Calls one method on every shard with its arguments; returns their answers."""


@contextmanager
def ray_shards(shard_args: list[tuple[Any, ...]], address: str | None) -> Iterator[ShardCall]:
    """One :class:`SimShard` actor per entry of ``shard_args`` on the cluster at
    ``address`` (a local Ray instance with a CPU per shard when None)."""
    with ray_session(address, num_cpus=len(shard_args) if address is None else None) as ray:
        cpus = 1 if ray.cluster_resources().get("CPU", 0) >= len(shard_args) else 0
        actor = ray.remote(num_cpus=cpus, scheduling_strategy="SPREAD")(ShardActor)
        shared = [ray.put(x) for x in shard_args[0][:4]]  # organisation, behaviour, LLM, options: sent once
        actors = [actor.remote(*shared, *args[4:]) for args in shard_args]
        try:
            ray.get([a.peak_rss_kb.remote() for a in actors])  # every actor is up

            def call(method: str, args: list[tuple[Any, ...]]) -> list[Any]:
                return ray.get([getattr(a, method).remote(*x) for a, x in zip(actors, args, strict=True)])

            yield call
        finally:
            for a in actors:
                ray.kill(a)
