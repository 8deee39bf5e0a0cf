"""The parent of a sharded asyncio run: it starts the shards, detects the end of
the run and merges what they report (see :mod:`megaactors.runtime.aio_shards`).

The shards are Ray actors (:class:`~megaactors.runtime.ray_shards.RayTransport`);
the coordination itself only needs a :class:`ShardTransport`, which starts the
shards and carries the coordinator's messages to them and theirs back.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from megaactors.errors import ParameterError
from megaactors.runtime.aio_shards import ShardError, shard_bounds
from megaactors.runtime.gc_tuning import quiet_gc

if TYPE_CHECKING:
    from megaactors.runtime.aio import AsyncioRuntime
    from megaactors.runtime.result import RunResult

__all__ = ["Coordinator", "ShardTransport", "run_sharded"]


class ShardTransport(Protocol):
    """How the coordinator starts shards and talks to them (a transport's parent
    side; the messages are those of :class:`~megaactors.runtime.aio_shards.ShardLinks`)."""

    def start(self, rt: AsyncioRuntime, bounds: list[int]) -> None:
        """Start shard ``k`` on agents ``bounds[k]`` to ``bounds[k + 1] - 1`` of ``rt``,
        marking ``rt``'s start (:meth:`~megaactors.runtime.live.LiveRuntime.mark_start`)
        as the agents are released, after every agent's start effects have run."""
        ...

    def send(self, shard: int, message: tuple[Any, ...]) -> None:
        """Send ``message`` to shard ``shard`` (nothing if it is gone)."""
        ...

    def wait(self, pending: set[int]) -> list[tuple[Any, ...]]:
        """The next messages of the shards in ``pending`` (at least one; blocks);
        ``("lost", shard, why)`` for a shard that ended without reporting."""
        ...

    def close(self) -> None:
        """End every shard, whatever it is doing."""
        ...


class Coordinator:
    """Detects the end of a sharded run and collects the shards' results: once every
    shard has reported itself quiet and every packet sent has been received, it asks
    each shard whether it is still quiet (a second wave, so that no report is stale)
    and stops them all; an error or a lost shard aborts the others."""

    def __init__(self, transport: ShardTransport, count: int) -> None:
        self.transport = transport
        self.count = count
        self.quiet: list[tuple[int, list[int], list[int], float] | None] = [None] * count
        self.acks: dict[int, bool] | None = None
        self.results: dict[int, dict[str, Any]] = {}
        self.error: BaseException | None = None
        self.end_s = 0.0
        """Wall seconds from the agents' release to the last shard's going quiet."""

    def run(self) -> None:
        """Handle the shards' messages until each has sent its result or failed."""
        pending = set(range(self.count))
        while pending:
            for message in self.transport.wait(pending):
                if message[1] in pending:
                    self._handle(message, pending)

    def _balanced(self) -> bool:
        if any(q is None for q in self.quiet):
            return False
        s = self.count
        return all(
            self.quiet[i][1][j] == self.quiet[j][2][i]  # type: ignore[index]
            for i in range(s)
            for j in range(s)
            if i != j
        )

    def _abort(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
            for k in range(self.count):
                if k not in self.results:
                    self.transport.send(k, ("abort",))

    def _handle(self, message: tuple[Any, ...], pending: set[int]) -> None:
        kind, k = message[0], message[1]
        if kind == "quiet":
            _, _, epoch, sent, received, elapsed = message
            self.quiet[k] = (epoch, sent, received, elapsed)
            self._maybe_probe()
        elif kind == "ack":
            if self.acks is not None:
                self.acks[k] = message[2]
                if not message[2]:
                    self.quiet[k] = None
                if len(self.acks) == self.count:
                    confirmed = all(self.acks.values())
                    self.acks = None
                    if confirmed:
                        self.end_s = max(q[3] for q in self.quiet)  # type: ignore[index]
                        for j in range(self.count):
                            self.transport.send(j, ("stop",))
                    else:
                        self._maybe_probe()
        elif kind == "result":
            self.results[k] = message[2]
            pending.discard(k)
        elif kind == "lost":
            pending.discard(k)
            self._abort(ShardError(message[2]))
        else:  # error
            pending.discard(k)
            self._abort(message[2])

    def _maybe_probe(self) -> None:
        if self.acks is None and self.error is None and self._balanced():
            self.acks = {}
            for k, q in enumerate(self.quiet):
                self.transport.send(k, ("probe", q[0]))  # type: ignore[index]


def run_sharded(rt: AsyncioRuntime) -> RunResult:
    """Run ``rt`` over ``rt.shards`` Ray actors on the cluster at ``rt.address`` (see
    :func:`~megaactors.runtime.ray_shards.ray_for_shards`); merge and return the result."""
    n, count = rt.org.n, rt.shards
    if count > n:
        raise ParameterError(f"shards: {count} shards for {n} agents; use at most one shard per agent")
    from megaactors.runtime.ray_shards import RayTransport, ray_for_shards

    with ray_for_shards(rt.address, count) as ray:
        return _run(rt, RayTransport(ray))


def _run(rt: AsyncioRuntime, transport: ShardTransport) -> RunResult:
    """Run ``rt`` over ``rt.shards`` shards that ``transport`` starts and reaches."""
    count = rt.shards
    wall0 = time.perf_counter()
    with quiet_gc():
        bounds = shard_bounds(rt.org, count)
        coordinator = Coordinator(transport, count)
        try:
            transport.start(rt, bounds)
            released = time.monotonic() - rt.now() * rt.time_scale
            coordinator.run()
        finally:
            transport.close()
        if coordinator.error is not None:
            raise coordinator.error
        rt.mark_end(released + coordinator.end_s)
        _merge(rt, bounds, coordinator.results)
    rt.wall_s = time.perf_counter() - wall0
    return rt.result()


def _merge(rt: AsyncioRuntime, bounds: list[int], results: dict[int, dict[str, Any]]) -> None:
    led = rt.ledger
    rows: list[tuple[Any, ...]] = []
    batches: list[tuple[Any, ...]] = []
    for k, res in sorted(results.items()):
        lo, hi = bounds[k], bounds[k + 1]
        led.add_part(res["ledger"], slice(lo, hi))
        for agent, state in zip(rt.agents[lo:hi], res["states"], strict=True):
            agent.data = state
        rt.core.interrupts.extend((agent, reason) for agent, reason in res["interrupts"])
        if res["trace"] is not None:
            t, b = res["trace"]["transitions"], res["trace"]["batches"]
            rows.extend(zip(t["time"], t["agent"], t["from"], t["to"], strict=True))
            batches.extend(zip(b["time"], b["agent"], b["size"], strict=True))
    trace = rt.trace
    if trace is not None:
        trace.clear()
        for when, agent, frm, to in sorted(rows, key=lambda row: row[0]):
            trace.transition(agent, frm, to, when)
        for when, agent, size in sorted(batches, key=lambda row: row[0]):
            trace.batch(agent, when, size)
