"""Shards as Ray actors: a sharded asyncio run that spans the machines of a Ray cluster.

Each shard is an actor that asks for :data:`CPUS_PER_SHARD` CPU, placed through a
placement group of one bundle per shard with strategy ``SPREAD``: Ray puts the
shards on as many nodes as it can (one machine's CPUs are used when the cluster
is one machine), and a cluster without room for every shard is refused before
anything runs. An actor rebuilds the runtime from what made it (organisation,
behaviour, LLM, options), runs its agents on an event loop of its own and sends
another shard one Ray call per event-loop turn with every packet queued for it;
the coordinator (:mod:`megaactors.runtime.shard_coordinator`) reads each shard's
reports by keeping one call to it waiting.

Message ids come from an allocator actor. Below :data:`EXACT_BELOW` (where the
encoded size of an id still changes) it hands out exactly what a send needs, so
those ids are consecutive from 0 as in an unsharded run; above, blocks of
:data:`ID_BLOCK` ids, whose unused ends leave gaps among ids that all encode in 5
bytes. Counts and bytes are thus those of an unsharded run while the run's ids
stay below 2**32 (its messages plus the shards' unused ends).

Ray actors are the one transport of sharded asyncio runs, on one machine too (a
local instance is started when no cluster is given: 35-45 s on the loaded 2-core
machine measured). Forked processes joined by socket pairs did this before; measured
side by side there (``benchmarks/asyncio_million.py``, 2 shards, sides taking turns,
load average 4-7), at 1,000,000 agents they took 225 s and 203 s wall, 4.66 GB
summed RSS, Ray actors 135 s and 136 s (0.60x, 0.67x; Ray's start not counted),
6.08 GB (1.30x, Ray's own processes included): Ray did not cost more than 1.5x, so
the socket pairs went. See BENCHMARKS.md, "A million agents on asyncio".
"""

from __future__ import annotations

import asyncio
import gc
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from megaactors.errors import ClusterError
from megaactors.runtime.aio_shards import Batch, ShardRouter
from megaactors.runtime.ray_cluster import import_ray, ray_session

if TYPE_CHECKING:
    from megaactors.runtime.aio import AsyncioRuntime

__all__ = [
    "CPUS_PER_SHARD",
    "EXACT_BELOW",
    "ID_BLOCK",
    "IdAllocator",
    "IdBlock",
    "RayTransport",
    "ShardActor",
    "ray_for_shards",
]

CPUS_PER_SHARD = 1
"""A shard is one event loop: one CPU."""
EXACT_BELOW = 65536
"""Ids below this are handed out without gaps (their encoded size varies)."""
ID_BLOCK = 1 << 20
"""Ids a shard takes at once above :data:`EXACT_BELOW`."""
PLACEMENT_TIMEOUT_S = 60.0
"""How long the cluster may take to find room for every shard."""


@contextmanager
def ray_for_shards(address: str | None, shards: int) -> Iterator[Any]:
    """Ray for a sharded run: the cluster at ``address``; without one, the Ray this
    process is connected to, else a local instance of ``shards`` CPUs started and
    stopped here."""
    ray = import_ray()
    if address is None and ray.is_initialized():
        yield ray
        return
    with ray_session(address, num_cpus=None if address else shards * CPUS_PER_SHARD) as session:
        yield session


class IdAllocator:
    """Hands out message ids (a Ray actor; see the module's docstring)."""

    def __init__(self) -> None:
        self.next = 0

    def reserve(self, count: int) -> tuple[int, int]:
        """``(first, size)``: ids ``first`` to ``first + size - 1`` are the caller's
        (``size >= count``)."""
        first = self.next
        size = count if first < EXACT_BELOW else max(count, ID_BLOCK)
        self.next = first + size
        return first, size


class IdBlock:
    """A shard's ids: what is left of the last range ``fetch(count)`` gave it
    (``fetch`` is :meth:`IdAllocator.reserve`, across Ray)."""

    def __init__(self, fetch: Callable[[int], tuple[int, int]]) -> None:
        self.fetch = fetch
        self.next = self.limit = 0

    def reserve(self, count: int) -> int:
        if self.next + count > self.limit:
            first, size = self.fetch(count)
            self.next, self.limit = first, first + size
        first = self.next
        self.next += count
        return first


class RayLinks:
    """A shard actor's :class:`~megaactors.runtime.aio_shards.ShardLinks`."""

    def __init__(self, actor: ShardActor, peers: dict[int, Any], allocator: Any) -> None:
        self.actor = actor
        self.takers = {j: peer.take.options(concurrency_group="io") for j, peer in peers.items()}
        ray = import_ray()
        self.ids = IdBlock(lambda count: ray.get(allocator.reserve.remote(count)))

    def reserve(self, count: int) -> int:
        return self.ids.reserve(count)

    def send(self, shard: int, batch: Batch) -> None:
        self.takers[shard].remote(self.actor.index, batch)

    def report(self, message: tuple[Any, ...]) -> None:
        self.actor.reports.put(message)

    async def open(self, router: ShardRouter) -> None:
        self.actor.attach(asyncio.get_running_loop(), router)

    async def close(self) -> None:
        return None

    async def end(self) -> None:
        await asyncio.get_running_loop().create_future()  # the coordinator kills the actor


class ShardActor:
    """One shard as a Ray actor: :meth:`run` holds its event loop; :meth:`take` and
    :meth:`control` hand what arrives to that loop; :meth:`next_report` waits for
    the shard's next message to the coordinator. Each kind runs in a concurrency
    group of one thread of its own (:data:`CONCURRENCY`), so batches from a shard
    are taken in the order they were sent."""

    CONCURRENCY: ClassVar[dict[str, int]] = {"run": 1, "io": 1, "report": 1}

    def __init__(self, index: int, bounds: list[int]) -> None:
        self.index = index
        self.bounds = bounds
        self.reports: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._router: ShardRouter | None = None
        self._early: list[tuple[str, tuple[Any, ...]]] = []
        self._ended = False

    def run(self, recipe: dict[str, Any], peers: dict[int, Any], allocator: Any) -> None:
        """Build the runtime and run this shard's agents (returns only after an error,
        which it has reported)."""
        from megaactors.runtime.aio import AsyncioRuntime, new_event_loop

        rt = AsyncioRuntime(**recipe)
        starts = rt.start_effects()  # every agent's, as in one process: they set the agents' states
        router = ShardRouter(rt, self.index, self.bounds, RayLinks(self, peers, allocator))
        gc.disable()  # one run: what it allocates forms no cycle worth collecting
        rt.mark_start()
        try:
            with asyncio.Runner(loop_factory=lambda: new_event_loop(rt.event_loop)) as runner:
                runner.run(router.serve(starts))
        finally:
            with self._lock:
                self._loop = self._router = None
                self._ended = True

    def attach(self, loop: asyncio.AbstractEventLoop, router: ShardRouter) -> None:
        """The loop runs: hand it what arrived before, and from now on."""
        with self._lock:
            self._loop, self._router = loop, router
            for method, args in self._early:
                loop.call_soon(getattr(router, method), *args)
            self._early.clear()

    def take(self, shard: int, batch: Batch) -> None:
        self._on_loop("take", shard, batch)

    def control(self, message: tuple[Any, ...]) -> None:
        self._on_loop("control", message)

    def _on_loop(self, method: str, *args: Any) -> None:
        with self._lock:
            if self._ended:
                return  # the run failed: what still arrives has nowhere to go
            if self._loop is None:
                self._early.append((method, args))
            else:
                self._loop.call_soon_threadsafe(getattr(self._router, method), *args)

    def next_report(self) -> tuple[Any, ...]:
        return self.reports.get()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


class RayTransport:
    """The coordinator's side over Ray (a
    :class:`~megaactors.runtime.shard_coordinator.ShardTransport`)."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self.group: Any = None
        self.allocator: Any = None
        self.actors: list[Any] = []
        self.reports: dict[Any, int] = {}
        self.runs: dict[Any, int] = {}

    def start(self, rt: AsyncioRuntime, bounds: list[int]) -> None:
        ray = self.ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        rt.mark_start()  # each actor runs its start effects and keeps its own clock from its release
        count = len(bounds) - 1
        self.group = placement_group([{"CPU": CPUS_PER_SHARD}] * count, strategy="SPREAD")
        ready, _ = ray.wait([self.group.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            raise ClusterError(
                f"the Ray cluster has no room for {count} shards of {CPUS_PER_SHARD} CPU each "
                f"(waited {PLACEMENT_TIMEOUT_S:.0f} s); use fewer shards or add nodes"
            )
        self.allocator = ray.remote(IdAllocator).options(num_cpus=0).remote()
        shard = ray.remote(concurrency_groups=ShardActor.CONCURRENCY)(ShardActor)
        self.actors = [
            shard.options(
                num_cpus=CPUS_PER_SHARD,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=k),
            ).remote(k, bounds)
            for k in range(count)
        ]
        recipe = ray.put(rt.shard_recipe())
        for k, actor in enumerate(self.actors):
            peers = {j: other for j, other in enumerate(self.actors) if j != k}
            run = actor.run.options(concurrency_group="run").remote(recipe, peers, self.allocator)
            self.runs[run] = k
            self._ask(k)

    def _ask(self, k: int) -> None:
        self.reports[self.actors[k].next_report.options(concurrency_group="report").remote()] = k

    def send(self, shard: int, message: tuple[Any, ...]) -> None:
        self.actors[shard].control.options(concurrency_group="io").remote(message)

    def wait(self, pending: set[int]) -> list[tuple[Any, ...]]:
        ray = self.ray
        waiting = [ref for ref, k in (*self.reports.items(), *self.runs.items()) if k in pending]
        ready, _ = ray.wait(waiting, num_returns=1)
        out: list[tuple[Any, ...]] = []
        for ref in ready:
            if ref in self.reports:
                k = self.reports.pop(ref)
                message = self._get(ref, k)
                out.append(message)
                if message[0] in ("quiet", "ack"):
                    self._ask(k)
            else:
                k = self.runs.pop(ref)
                message = self._get(ref, k)
                if message[0] != "done":  # a run that returned has reported its error
                    out.append(message)
        return out

    def _get(self, ref: Any, k: int) -> tuple[Any, ...]:
        ray = self.ray
        try:
            got = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # raised in the actor, outside the agents
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc.as_instanceof_cause()
            return ("error", k, cause)
        except ray.exceptions.RayError as exc:
            return ("lost", k, f"shard {k}'s Ray actor was lost ({type(exc).__name__}: {_one_line(exc)})")
        return ("done", k) if got is None else got

    def close(self) -> None:
        ray = self.ray
        kill: Callable[[Any], None] = ray.kill
        for actor in self.actors:
            kill(actor)
        if self.allocator is not None:
            kill(self.allocator)
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.group)
