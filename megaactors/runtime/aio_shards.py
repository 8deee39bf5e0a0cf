"""The asyncio runtime sharded over processes: one event loop per core.

``AsyncioRuntime(..., shards=k).run()`` cuts the agents into ``k`` contiguous id
ranges (at group boundaries where it can, so that a group's chat stays inside one
process) and runs each range as the asyncio runtime in a forked process of its
own. A message for an agent of another shard travels with its packet over a
socket pair between the two processes, in one frame per event-loop turn; a
broadcast to a channel (a group, the admins) travels once per shard and goes into
that shard's copy of the channel's log. Message ids stay consecutive from 0 over
the whole run (a counter in shared memory hands them out), so counts and bytes are
those of an unsharded run.

The parent process only coordinates. A shard that has no agent busy reports how
many packets it has sent to and received from each other shard; when every shard
is quiet and every packet sent has been received, the parent asks each shard
whether it has stayed quiet since (a second wave, so that no report is stale) and
then stops them all. Each shard sends back its part of the ledger, its agents'
states and its trace, which the parent merges, and ends at once rather than
tearing down its idle tasks one by one (a shard also runs with the cyclic garbage
collector off: it lives for one run). ``peak_llm_in_flight`` is then the sum of
the shards' peaks (an upper bound of the true peak).

Sharding needs the ``fork`` start method (Linux, macOS) and refuses what would
need state shared by every process: serial mode, ``max_concurrent_llm``,
recruiting and named tool locks. An exception in any shard stops every shard and
is raised by ``run()``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import gc
import multiprocessing
import os
import pickle
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Sequence
from itertools import groupby, repeat
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

from megaactors.core.agent import Agent
from megaactors.core.behaviour import Effects, ToolCall
from megaactors.core.messages import ADMIN, Packet
from megaactors.core.trace import Trace
from megaactors.errors import ParameterError
from megaactors.runtime.gc_tuning import quiet_gc
from megaactors.runtime.mailboxes import Mailboxes, Without

if TYPE_CHECKING:
    from megaactors.core.organisation import Organisation
    from megaactors.runtime.aio import AsyncioRuntime
    from megaactors.runtime.result import RunResult

__all__ = ["ShardError", "run_sharded", "shard_bounds"]

_HEADER = struct.Struct("!Q")
_consume = deque(maxlen=0).extend
_append = list.append


class ShardError(RuntimeError):
    """A shard process failed in a way that did not come from an agent."""


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


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


async def _read_frame(reader: asyncio.StreamReader) -> Any:
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    return pickle.loads(await reader.readexactly(size))


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return ShardError(f"{type(exc).__name__}: {exc}")
    return exc


# ---------------------------------------------------------------------- in a shard process


class _Shard:
    """The part of a sharded run that one process executes."""

    def __init__(
        self,
        rt: AsyncioRuntime,
        index: int,
        bounds: list[int],
        counter: Any,
        id_lock: Any,
        links: dict[int, socket.socket],
        control: socket.socket,
    ) -> None:
        self.rt = rt
        self.index = index
        self.lo, self.hi = bounds[index], bounds[index + 1]
        self.ranges = {j: (bounds[j], bounds[j + 1]) for j in links}
        self.bounds = bounds
        self.counter = counter
        self.id_lock = id_lock
        self.links = links
        self.control_sock = control
        self.sent = [0] * (len(bounds) - 1)
        self.received = [0] * (len(bounds) - 1)
        self.outgoing: dict[int, list[tuple[Any, ...]]] = {j: [] for j in links}
        self.flushing = False
        self.quiet = False
        self.epoch = 0
        self.writers: dict[int, asyncio.StreamWriter] = {}
        self.control: asyncio.StreamWriter | None = None
        rt._mail = Mailboxes(rt.org, rt._inboxes, range(self.lo, self.hi))
        rt._quiescent = self._quiescent  # type: ignore[method-assign]
        rt._deliver = self._deliver  # type: ignore[method-assign]
        rt._add_agents = self._add_agents  # type: ignore[method-assign]
        call_tool = rt._call_tool

        async def _call_tool(a: Agent, call: ToolCall) -> Effects:
            if call.lock is not None:
                raise ParameterError(f"agent {a.id}: named tool lock {call.lock!r} needs one process (shards=1)")
            return await call_tool(a, call)

        rt._call_tool = _call_tool  # type: ignore[method-assign]

    async def serve(self, starts: list[Effects | None]) -> None:
        rt, loop = self.rt, asyncio.get_running_loop()
        streams = {}
        for j, sock in self.links.items():
            streams[j], self.writers[j] = await asyncio.open_connection(sock=sock)
        control, self.control = await asyncio.open_connection(sock=self.control_sock)
        # No await from here until the run is set up: what another shard has sent
        # already (it waits in the streams) is read only once the agents' tasks exist.
        readers = [loop.create_task(self._receive(j, reader)) for j, reader in streams.items()]
        readers.append(loop.create_task(self._listen(control)))
        try:
            await rt._serve(rt.agents[self.lo : self.hi], starts[self.lo : self.hi], self._report)
        except BaseException as exc:  # a clean end never gets here: _report ends the process
            self.control.write(_frame(("error", self.index, _picklable(exc))))
        finally:
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
            await self.control.drain()
            self.control.close()
            for writer in self.writers.values():
                writer.close()

    # ---------------------------------------------------------------- messages

    def _deliver(self, a: Agent) -> None:
        """Flush ``a``'s out-queue: local recipients at once, the others via their shard."""
        rt = self.rt
        postman, now, sender = rt.postman, rt.now(), a.id
        stamp, counter, id_lock = postman.stamp, self.counter, self.id_lock
        inboxes, dirty, mail = rt._inboxes, rt._dirty, rt._mail
        post, compact = mail.post, mail.compact  # type: ignore[union-attr]
        lo, hi = self.lo, self.hi
        for send in a.outbox:
            with id_lock:
                first = counter.value
                counter.value = first + len(send.recipients)
            postman.next_message_id = first
            packets = stamp(sender, send, now)
            if postman.broadcast and len(packets) == 1:
                compact(packets[0])
                if not post(packets[0]):  # some members live in other shards
                    self._forward(packets[0], to_logs=True)
                continue
            for packet in packets:
                recipients = packet.recipients
                if not (lo <= min(recipients) and max(recipients) < hi):
                    recipients = self._forward(packet)
                _consume(map(_append, map(inboxes.__getitem__, recipients), repeat(packet)))
                dirty.update(recipients)
        a.outbox = []
        rt._wake_soon()

    def _forward(self, packet: Packet, to_logs: bool = False) -> Sequence[int]:
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
        known = to_logs and packet.channel == ADMIN and self.rt._mail.admins_sorted  # type: ignore[union-attr]
        listed = isinstance(recipients, (list, Without))
        if known or (listed and list(recipients) == sorted(recipients)):
            admins = type(recipients) is Without and recipients.members is self.rt.org.admins
            for j, (jlo, jhi) in self.ranges.items():
                i, k = bisect.bisect_left(recipients, jlo), bisect.bisect_left(recipients, jhi)
                if i < k:
                    if admins:  # the run lies wholly before or after the sender
                        shift = int(i >= recipients.skip)  # type: ignore[union-attr]
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
            local = []
            bounds = self.bounds
            for k, run in groupby(enumerate(recipients), key=lambda ir: bisect.bisect_right(bounds, ir[1]) - 1):
                positions = list(run)
                ids = [r for _, r in positions]
                if k == self.index:
                    local.extend(ids)
                else:
                    self.outgoing[k].append((*head, first_id + positions[0][0], ids, overhead, False))
        if not self.flushing:
            self.flushing = True
            asyncio.get_running_loop().call_soon(self._flush)
        return local

    def _flush(self) -> None:
        self.flushing = False
        for j, items in self.outgoing.items():
            if items:
                self.writers[j].write(_frame(items))
                self.sent[j] += len(items)
                self.outgoing[j] = []

    async def _receive(self, j: int, reader: asyncio.StreamReader) -> None:
        rt = self.rt
        inboxes, dirty, post = rt._inboxes, rt._dirty, rt._mail.post  # type: ignore[union-attr]
        while True:
            items = await _read_frame(reader)
            for sender, channel, kind, payload, parent, sent_at, first_id, recipients, overhead, to_logs in items:
                if type(recipients) is tuple:  # bounds in the admin list
                    recipients = rt.org.admins[recipients[0] : recipients[1]]
                packet = Packet(sender, channel, kind, payload, parent, sent_at, first_id, recipients, overhead)
                if to_logs:
                    post(packet)
                    continue
                _consume(map(_append, map(inboxes.__getitem__, recipients), repeat(packet)))
                dirty.update(recipients)
            self.received[j] += len(items)
            if self.quiet:  # the wake-up pass makes this shard busy again
                self.quiet = False
                self.epoch += 1
            rt._wake_soon()

    async def _report(self) -> None:
        """The run is over: send this shard's result and end the process at once
        (its idle tasks and data are not worth tearing down one by one)."""
        self.control.write(_frame(("result", self.index, self._result())))  # type: ignore[union-attr]
        await self.control.drain()  # type: ignore[union-attr]
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def _add_agents(self, a: Agent, count: int) -> list[Agent]:
        raise ParameterError(f"agent {a.id}: recruiting needs one process (shards=1)")

    # ---------------------------------------------------------------- coordination

    def _quiescent(self) -> None:
        """No local agent is busy: tell the coordinator (after sending what is queued)."""
        self._flush()
        self.quiet = True
        self.control.write(  # type: ignore[union-attr]
            _frame(("quiet", self.index, self.epoch, list(self.sent), list(self.received), time.monotonic()))
        )

    async def _listen(self, reader: asyncio.StreamReader) -> None:
        rt = self.rt
        while True:
            message = await _read_frame(reader)
            if message[0] == "probe":
                still = self.quiet and self.epoch == message[1]
                self.control.write(_frame(("ack", self.index, still)))  # type: ignore[union-attr]
            elif message[0] == "stop":
                if not rt._done.done():  # type: ignore[union-attr]
                    rt._done.set_result(None)  # type: ignore[union-attr]
                return
            else:  # abort: another shard failed
                rt._fail(ShardError("stopped because another shard failed"))
                return

    def _result(self) -> dict[str, Any]:
        rt, lo, hi = self.rt, self.lo, self.hi
        led = rt.ledger
        trace = rt.trace
        return {
            "ledger": led.part(lo, hi),
            "states": [a.data for a in rt.agents[lo:hi]],
            "trace": None if trace is None else trace.as_dict(),
        }


def _shard_main(
    rt: AsyncioRuntime,
    index: int,
    bounds: list[int],
    starts: list[Effects | None],
    counter: Any,
    id_lock: Any,
    links: dict[tuple[int, int], socket.socket],
    controls: list[tuple[socket.socket, socket.socket]],
) -> None:
    from megaactors.runtime.aio import new_event_loop

    mine = {j: s for (i, j), s in links.items() if i == index}
    for (i, _), s in links.items():
        if i != index:
            s.close()
    for k, (parent_end, child_end) in enumerate(controls):
        parent_end.close()
        if k != index:
            child_end.close()
    shard = _Shard(rt, index, bounds, counter, id_lock, mine, controls[index][1])
    # A shard lives for one run: what it allocates forms no cycle worth collecting
    # (an error ends the run) and dies with the process, so the collector, which
    # would keep walking hundreds of thousands of live tasks, stays off.
    gc.disable()
    with asyncio.Runner(loop_factory=lambda: new_event_loop(rt.event_loop)) as runner:
        runner.run(shard.serve(starts))


# ---------------------------------------------------------------------- in the parent


class _Coordinator:
    """Detects the end of a sharded run and collects the shards' results."""

    def __init__(self, controls: list[socket.socket], processes: list[Any]) -> None:
        self.controls = controls
        self.processes = processes
        self.quiet: list[tuple[int, list[int], list[int], float] | None] = [None] * len(controls)
        self.acks: dict[int, bool] | None = None
        self.results: dict[int, dict[str, Any]] = {}
        self.error: BaseException | None = None
        self.end = 0.0

    def _send(self, k: int, message: Any) -> None:
        with contextlib.suppress(OSError):  # that shard may be gone already
            self.controls[k].sendall(_frame(message))

    def _balanced(self) -> bool:
        if any(q is None for q in self.quiet):
            return False
        s = len(self.quiet)
        return all(
            self.quiet[i][1][j] == self.quiet[j][2][i]  # type: ignore[index]
            for i in range(s)
            for j in range(s)
            if i != j
        )

    def _abort(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
            for k in range(len(self.controls)):
                if k not in self.results:
                    self._send(k, ("abort",))

    def run(self) -> None:
        by_fd = {sock.fileno(): k for k, sock in enumerate(self.controls)}
        by_sentinel = {p.sentinel: k for k, p in enumerate(self.processes)}
        pending = set(range(len(self.controls)))
        while pending:
            for ready in wait([*(self.controls[k] for k in pending), *(self.processes[k].sentinel for k in pending)]):
                if isinstance(ready, int) and ready in by_sentinel:
                    k = by_sentinel[ready]
                    if k in pending and not self._drain(k, pending):
                        pending.discard(k)
                        code = self.processes[k].exitcode
                        self._abort(ShardError(f"shard {k} exited with code {code} before reporting"))
                    continue
                k = by_fd[ready.fileno()]  # type: ignore[union-attr]
                if k in pending:
                    self._read(k, pending)

    def _drain(self, k: int, pending: set[int]) -> bool:
        """A shard process ended: read what it left in its socket; True if it reported."""
        sock = self.controls[k]
        sock.setblocking(False)
        try:
            while k in pending:
                self._read(k, pending)
        except (BlockingIOError, EOFError, OSError):
            pass
        return k not in pending

    def _read(self, k: int, pending: set[int]) -> None:
        sock = self.controls[k]
        try:
            (size,) = _HEADER.unpack(_recv_exactly(sock, _HEADER.size))
            sock.setblocking(True)
            message = pickle.loads(_recv_exactly(sock, size))
        except EOFError:
            pending.discard(k)
            if k not in self.results and self.error is None:
                self._abort(ShardError(f"shard {k} closed its connection before reporting"))
            return
        kind = message[0]
        if kind == "quiet":
            _, _, epoch, sent, received, when = message
            self.quiet[k] = (epoch, sent, received, when)
            self._maybe_probe()
        elif kind == "ack":
            if self.acks is not None:
                self.acks[k] = message[2]
                if not message[2]:
                    self.quiet[k] = None
                if len(self.acks) == len(self.controls):
                    confirmed = all(self.acks.values())
                    self.acks = None
                    if confirmed:
                        self.end = max(q[3] for q in self.quiet)  # type: ignore[index]
                        for j in range(len(self.controls)):
                            self._send(j, ("stop",))
                    else:
                        self._maybe_probe()
        elif kind == "result":
            self.results[k] = message[2]
            pending.discard(k)
        else:  # error
            pending.discard(k)
            self._abort(message[2])

    def _maybe_probe(self) -> None:
        if self.acks is None and self.error is None and self._balanced():
            self.acks = {}
            for k, q in enumerate(self.quiet):
                self._send(k, ("probe", q[0]))  # type: ignore[index]


def run_sharded(rt: AsyncioRuntime) -> RunResult:
    """Run ``rt`` over ``rt.shards`` processes; merge and return the result."""
    try:
        mp = multiprocessing.get_context("fork")
    except ValueError as exc:
        raise ParameterError("shards: a sharded run needs the fork start method (Linux or macOS)") from exc
    n, count = rt.org.n, rt.shards
    if count > n:
        raise ParameterError(f"shards: {count} shards for {n} agents; use at most one shard per agent")
    wall0 = time.perf_counter()
    with quiet_gc():
        starts = rt._start_effects()
        bounds = shard_bounds(rt.org, count)
        counter, id_lock = mp.RawValue("q", 0), mp.Lock()
        links: dict[tuple[int, int], socket.socket] = {}
        for i in range(count):
            for j in range(i + 1, count):
                links[i, j], links[j, i] = socket.socketpair()
        controls = [socket.socketpair() for _ in range(count)]
        rt._mark_start()
        processes = [
            mp.Process(
                target=_shard_main,
                args=(rt, k, bounds, starts, counter, id_lock, links, controls),
                name=f"megaactors-shard-{k}",
                daemon=True,
            )
            for k in range(count)
        ]
        for p in processes:
            p.start()
        for s in links.values():
            s.close()
        for _, child_end in controls:
            child_end.close()
        coordinator = _Coordinator([parent_end for parent_end, _ in controls], processes)
        try:
            coordinator.run()
        finally:
            for p in processes:
                p.join(timeout=60)
                if p.is_alive():
                    p.kill()
                    p.join()
            for parent_end, _ in controls:
                parent_end.close()
        if coordinator.error is not None:
            raise coordinator.error
        rt._end = coordinator.end
        _merge(rt, bounds, coordinator.results)
    rt._wall = time.perf_counter() - wall0
    return rt.result()


def _merge(rt: AsyncioRuntime, bounds: list[int], results: dict[int, dict[str, Any]]) -> None:
    led = rt.ledger
    rows: list[tuple[Any, ...]] = []
    batches: list[tuple[Any, ...]] = []
    for k, res in sorted(results.items()):
        lo, hi = bounds[k], bounds[k + 1]
        led.add_part(res["ledger"], lo, hi)
        for agent, state in zip(rt.agents[lo:hi], res["states"], strict=True):
            agent.data = state
        if res["trace"] is not None:
            t, b = res["trace"]["transitions"], res["trace"]["batches"]
            rows.extend(zip(t["time"], t["agent"], t["from"], t["to"], strict=True))
            batches.extend(zip(b["time"], b["agent"], b["size"], strict=True))
    if rt.trace is not None:
        trace = rt.trace = Trace()
        for when, agent, frm, to in sorted(rows, key=lambda row: row[0]):
            trace.transition(agent, frm, to, when)
        for when, agent, size in sorted(batches, key=lambda row: row[0]):
            trace.batch(agent, when, size)
