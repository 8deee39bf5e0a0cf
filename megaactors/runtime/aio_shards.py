"""The asyncio runtime sharded over Ray actors: one event loop per CPU (the shard side).

``AsyncioRuntime(..., shards=k).run()`` cuts the agents into ``k`` contiguous id
ranges (at group boundaries where it can, so that a group's chat stays inside one
process) and runs each range as the asyncio runtime in a Ray actor of its own
(:mod:`megaactors.runtime.ray_shards`). A message for an agent of another shard travels with
its packet to that shard, batched: one batch per destination shard per event-loop
turn; a broadcast to a channel (a group, the admins) travels once per shard and
goes into that shard's copy of the channel's log. How batches travel, and where
message ids come from, is the transport's (:class:`ShardLinks`); the run's ids
encode to the sizes of ids consecutive from 0, so counts and bytes are those of an
unsharded run.

The parent process only coordinates (:mod:`megaactors.runtime.shard_coordinator`).
A shard that has no agent busy reports how many packets it has sent to and
received from each other shard; when every shard is quiet and every packet sent
has been received, the parent asks each shard whether it has stayed quiet since (a
second wave, so that no report is stale) and then stops them all. Each shard sends
back its part of the ledger, its agents' states and its trace, which the parent
merges, and ends at once rather than tearing down its idle tasks one by one (a
shard also runs with the cyclic garbage collector off: it lives for one run).
``peak_llm_in_flight`` is then the sum of the shards' peaks (an upper bound of the
true peak).

Sharding refuses what would need state shared by every process: serial mode,
``max_concurrent_llm``, recruiting, named tool locks, faults, and rate limits
shared by the run (or by a group cut between two shards:
:func:`check_shared_limits`). An exception in any shard stops every shard and is
raised by ``run()``.

This module is what runs in a shard: a :class:`ShardRouter` (the asyncio
runtime's :class:`Router`) that forwards what is for other
shards and reports quiescence over its :class:`ShardLinks`.
"""

from __future__ import annotations

import asyncio
import bisect
import pickle
from collections.abc import Sequence
from itertools import groupby
from typing import TYPE_CHECKING, Any, Protocol

from megaactors.core.agent import Agent
from megaactors.core.messages import ADMIN, Packet
from megaactors.errors import ParameterError
from megaactors.runtime.mailboxes import Without

if TYPE_CHECKING:
    from megaactors.core.behaviour import Effects
    from megaactors.core.organisation import Organisation
    from megaactors.providers.limits import ProviderModel
    from megaactors.runtime.aio import AsyncioRuntime
    from megaactors.runtime.options import RuntimeOptions

__all__ = [
    "Batch",
    "Router",
    "ShardError",
    "ShardLinks",
    "ShardRouter",
    "check_sharding",
    "check_shared_limits",
    "picklable",
    "shard_bounds",
]

Batch = list[tuple[Any, ...]]
"""What one shard sends another in one go: packets' fields, one tuple a packet."""


class Router(Protocol):
    """Where a process that runs only some of the agents sends the rest (a shard)."""

    local: range
    """The agents this process runs."""

    def reserve(self, count: int) -> int:
        """The first of ``count`` consecutive message ids for one send (ids are
        consecutive over the whole run, whichever process sends)."""
        ...

    def forward(self, packet: Packet, to_logs: bool) -> Sequence[int]:
        """Send ``packet`` to its recipients in other processes (``to_logs``: a
        broadcast, into their channel logs); return its local recipients."""
        ...

    def quiescent(self) -> None:
        """No local agent is busy."""
        ...

    def admit(self, agent: Agent, what: str) -> None:
        """Raise :class:`~megaactors.errors.ParameterError` unless ``agent`` may do
        ``what`` here (``recruit``, or take the named tool lock ``lock <name>``)."""
        ...


class ShardError(RuntimeError):
    """A shard failed in a way that did not come from an agent."""


class ShardLinks(Protocol):
    """How one shard reaches the other shards and the coordinator (a transport's
    shard side). The coordinator's messages are ``("probe", epoch)``, ``("stop",)``
    and ``("abort",)``; a shard's are ``("quiet", index, epoch, sent, received,
    elapsed_s)``, ``("ack", index, still_quiet)``, ``("result", index, result)`` and
    ``("error", index, exception)``."""

    def reserve(self, count: int) -> int:
        """The first of ``count`` consecutive message ids no other shard gets."""
        ...

    def send(self, shard: int, batch: Batch) -> None:
        """Send ``batch`` to shard ``shard`` (without waiting)."""
        ...

    def report(self, message: tuple[Any, ...]) -> None:
        """Send ``message`` to the coordinator (without waiting)."""
        ...

    async def open(self, router: ShardRouter) -> None:
        """Start handing what arrives to ``router`` (:meth:`ShardRouter.take`,
        :meth:`ShardRouter.control`), on the running loop."""
        ...

    async def close(self) -> None:
        """Stop receiving; send what is queued."""
        ...

    async def end(self) -> None:
        """The result is reported: end this shard at once (it never returns)."""
        ...


def shard_bounds(org: Organisation, shards: int) -> list[int]:
    """``shards + 1`` increasing agent ids: shard ``k`` runs agents ``bounds[k]`` to
    ``bounds[k + 1] - 1``. Cuts fall on the first agent of a group when groups are
    contiguous id ranges (two-tier, flat), otherwise at equal sizes."""
    n = org.n
    starts = sorted({min(g) for g in org.groups if g})
    bounds = [0]
    for k in range(1, shards):
        ideal = round(n * k / shards)
        cut = ideal
        if starts:
            i = bisect.bisect_left(starts, ideal)
            near = [s for s in starts[max(0, i - 1) : i + 1] if bounds[-1] < s < n]
            if near:
                cut = min(near, key=lambda s: abs(s - ideal))
        cut = min(max(cut, bounds[-1] + 1), n - (shards - k))
        bounds.append(cut)
    bounds.append(n)
    return bounds


def check_sharding(
    org: Organisation, options: RuntimeOptions, provider: ProviderModel | None, shards: int, address: str | None
) -> None:
    """Raise :class:`~megaactors.errors.ParameterError` unless a run over ``shards``
    processes (on the Ray cluster at ``address``) can have these options."""
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        raise ParameterError(f"shards must be an integer >= 1, got {shards!r}")
    if shards > 1 and (options.serial or options.max_concurrent_llm is not None):
        raise ParameterError("shards: serial mode and max_concurrent_llm need one process (shards=1)")
    if shards > 1 and options.faults is not None and options.faults.active:
        raise ParameterError("faults need a single-process asyncio run (no shards)")
    if shards > 1 and provider is not None:
        check_shared_limits(org, provider, shards)
    if address is not None and shards < 2:
        raise ParameterError("address: a Ray cluster runs shards; give shards=2 or more")


def check_shared_limits(org: Organisation, provider: ProviderModel, shards: int) -> None:
    """Refuse rate limits that ``shards`` processes cannot share: each process keeps
    its own token buckets, so a run-scope limit (or a group's, for a group cut in
    two) would be applied once per shard, not once."""
    if provider.rpm is None and provider.tpm is None:
        return
    if provider.scope == "run":
        raise ParameterError(
            "shards: rpm/tpm with --limit-scope run would be applied once per shard; "
            "use --limit-scope group, or one process (shards=1)"
        )
    bounds = shard_bounds(org, shards)
    for g, members in enumerate(org.groups):
        if len({bisect.bisect_right(bounds, m) for m in members}) > 1:
            raise ParameterError(
                f"shards: group {g} spans two shards, so its rpm/tpm limit would be applied once per shard; "
                "use one process (shards=1)"
            )


def picklable(exc: BaseException) -> BaseException:
    """``exc``, or a :class:`ShardError` saying what it was if it does not pickle."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return ShardError(f"{type(exc).__name__}: {exc}")
    return exc


class ShardRouter:
    """The part of a sharded run that one process executes: the router of its
    asyncio runtime, which runs agents ``bounds[index]`` to ``bounds[index + 1] - 1``."""

    def __init__(self, rt: AsyncioRuntime, index: int, bounds: list[int], links: ShardLinks) -> None:
        self.rt = rt
        self.index = index
        self.local = range(bounds[index], bounds[index + 1])
        self.lo, self.hi = self.local.start, self.local.stop
        others = [j for j in range(len(bounds) - 1) if j != index]
        self.ranges = {j: (bounds[j], bounds[j + 1]) for j in others}
        self.bounds = bounds
        self.links = links
        self.sent = [0] * (len(bounds) - 1)
        self.received = [0] * (len(bounds) - 1)
        self.outgoing: dict[int, Batch] = {j: [] for j in others}
        self.flushing = False
        self.quiet = False
        self.epoch = 0
        rt.router = self

    async def serve(self, starts: list[Effects | None]) -> None:
        """Run this shard's agents until the coordinator stops them (the links then
        end the shard) or one fails (reported, then this returns)."""
        rt = self.rt
        # No await between opening the links and starting the agents: what another
        # shard has sent already is taken only once the agents' start is scheduled.
        await self.links.open(self)
        try:
            await rt.serve(rt.agents[self.lo : self.hi], starts[self.lo : self.hi], self._report)
        except BaseException as exc:  # a clean end never gets here: _report ends the shard
            self.links.report(("error", self.index, picklable(exc)))
        finally:
            await self.links.close()

    # ---------------------------------------------------------------- the router

    def reserve(self, count: int) -> int:
        return self.links.reserve(count)

    def admit(self, agent: Agent, what: str) -> None:
        if what == "recruit":
            raise ParameterError(f"agent {agent.id}: recruiting needs one process (shards=1)")
        raise ParameterError(f"agent {agent.id}: named tool {what} needs one process (shards=1)")

    def forward(self, packet: Packet, to_logs: bool = False) -> Sequence[int]:
        """Queue ``packet`` for the shards of its remote recipients; return the local ones.

        A shard receives the packet's fields and, for each run of consecutive
        positions of its recipients, that run with the id of its first copy: the
        copies keep their ids. A sorted recipient list (the usual case) makes one
        run per shard, cut by bisection; the run of a broadcast (``to_logs``) is
        then every member the shard holds, and goes into that shard's logs. A run
        of the admins travels as its bounds in the admin list, which every shard
        holds: the receiver slices its own copy instead of unpickling the ids."""
        recipients = packet.recipients
        head = (packet.sender, packet.channel, packet.kind, packet.payload, packet.parent, packet.sent_at)
        first_id, overhead = packet.first_id, packet.overhead
        # admin_peers of a sorted admin list are sorted: no need to check
        known = to_logs and packet.channel == ADMIN and self.rt.mailboxes.admins_sorted  # type: ignore[union-attr]
        listed = isinstance(recipients, (list, Without))
        if known or (listed and list(recipients) == sorted(recipients)):
            admins = type(recipients) is Without and recipients.members is self.rt.org.admins
            for j, (jlo, jhi) in self.ranges.items():
                i, k = bisect.bisect_left(recipients, jlo), bisect.bisect_left(recipients, jhi)
                if i < k:
                    if admins:  # the run lies wholly before or after the sender
                        shift = int(i >= recipients.skip)  # type: ignore[attr-defined]
                        run: Any = (i + shift, k + shift)
                    else:
                        run = recipients[i:k]
                    self.outgoing[j].append((*head, first_id + i, run, overhead, to_logs))
            local: Sequence[int] = (
                ()
                if to_logs  # delivered through the logs already
                else recipients[bisect.bisect_left(recipients, self.lo) : bisect.bisect_left(recipients, self.hi)]
            )
        else:
            mine: list[int] = []
            bounds = self.bounds
            for k, run in groupby(enumerate(recipients), key=lambda ir: bisect.bisect_right(bounds, ir[1]) - 1):
                positions = list(run)
                ids = [r for _, r in positions]
                if k == self.index:
                    mine.extend(ids)
                else:
                    self.outgoing[k].append((*head, first_id + positions[0][0], ids, overhead, False))
            local = mine
        if not self.flushing:
            self.flushing = True
            asyncio.get_running_loop().call_soon(self._flush)
        return local

    def _flush(self) -> None:
        self.flushing = False
        for j, items in self.outgoing.items():
            if items:
                self.links.send(j, items)
                self.sent[j] += len(items)
                self.outgoing[j] = []

    def take(self, j: int, items: Batch) -> None:
        """A batch from shard ``j`` arrived: deliver its packets (on the loop)."""
        rt = self.rt
        receive, admins = rt.receive, rt.org.admins
        for sender, channel, kind, payload, parent, sent_at, first_id, recipients, overhead, to_logs in items:
            if type(recipients) is tuple:  # bounds in the admin list
                recipients = admins[recipients[0] : recipients[1]]
            packet = Packet(sender, channel, kind, payload, parent, sent_at, first_id, recipients, overhead)
            receive(packet, None if to_logs else recipients)
        self.received[j] += len(items)
        if self.quiet:  # the wake-up pass makes this shard busy again
            self.quiet = False
            self.epoch += 1
        rt.wake_soon()

    async def _report(self) -> None:
        """The run is over: send this shard's result and end the shard at once (its
        idle tasks and data are not worth tearing down one by one)."""
        self.links.report(("result", self.index, self._result()))
        await self.links.end()

    # ---------------------------------------------------------------- coordination

    def quiescent(self) -> None:
        """No local agent is busy: tell the coordinator (after sending what is queued)."""
        self._flush()
        self.quiet = True
        elapsed = self.rt.now() * self.rt.time_scale  # wall seconds since this shard released its agents
        self.links.report(("quiet", self.index, self.epoch, list(self.sent), list(self.received), elapsed))

    def control(self, message: tuple[Any, ...]) -> bool:
        """A message from the coordinator (on the loop); True when it ends the run."""
        if message[0] == "probe":
            still = self.quiet and self.epoch == message[1]
            self.links.report(("ack", self.index, still))
            return False
        if message[0] == "stop":
            self.rt.finish()
        else:  # abort: another shard failed
            self.rt.fail(ShardError("stopped because another shard failed"))
        return True

    def _result(self) -> dict[str, Any]:
        rt, lo, hi = self.rt, self.lo, self.hi
        trace = rt.trace
        return {
            "ledger": rt.ledger.part(slice(lo, hi)),
            "states": [a.data for a in rt.agents[lo:hi]],
            "interrupts": rt.core.interrupts,
            "trace": None if trace is None else trace.as_dict(),
        }
