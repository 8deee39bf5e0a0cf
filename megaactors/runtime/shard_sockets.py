"""Shards on one machine: forked processes joined by socket pairs.

The parent forks one process per shard (the ``fork`` start method: Linux, macOS),
joined pairwise by socket pairs that carry length-prefixed pickled batches, and to
the parent by one control socket each. Message ids come from a counter in shared
memory, so the run's ids are consecutive from 0 as in an unsharded run. A shard
ends its process at once when its result is sent.

This transport stays beside the Ray actors (:mod:`megaactors.runtime.ray_shards`)
for runs on one machine, where it needs no Ray: no instance to start (35-40 s on
the loaded 2-core machine measured), no dependency, and runs fast enough to test.
Measured side by side there (``benchmarks/asyncio_million.py --ray``, 2 shards,
sides taking turns, load average 4-7 from other jobs): at 1,000,000 agents the
socket pairs took 225 s and 203 s wall, 4.66 GB summed RSS; Ray actors 135 s and
136 s (0.60x, 0.67x; Ray's start not counted), 6.08 GB (1.30x, Ray's own processes
included); at 100,000 agents 16.9 s, 0.55 GB against Ray's 24.2 s (1.43x), 1.63 GB
(2.96x). See BENCHMARKS.md, "A million agents on asyncio".
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import os
import pickle
import socket
import struct
import sys
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

from megaactors.errors import ParameterError
from megaactors.runtime.aio_shards import Batch, ShardRouter

if TYPE_CHECKING:
    from megaactors.core.behaviour import Effects
    from megaactors.runtime.aio import AsyncioRuntime

__all__ = ["SocketLinks", "SocketTransport", "frame", "read_frame"]

HEADER = struct.Struct("!Q")
"""Length prefix of every frame."""


def frame(obj: Any) -> bytes:
    """``obj`` pickled behind its length."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> Any:
    (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
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


class SocketLinks:
    """A forked shard's :class:`~megaactors.runtime.aio_shards.ShardLinks`: a
    stream per other shard and one to the parent."""

    def __init__(self, counter: Any, id_lock: Any, peers: dict[int, socket.socket], control: socket.socket) -> None:
        self.counter = counter
        self.id_lock = id_lock
        self.peers = peers
        self.control_sock = control
        self.writers: dict[int, asyncio.StreamWriter] = {}
        self.control: asyncio.StreamWriter | None = None
        self.readers: list[asyncio.Task[None]] = []

    def reserve(self, count: int) -> int:
        with self.id_lock:
            first = self.counter.value
            self.counter.value = first + count
        return first

    def send(self, shard: int, batch: Batch) -> None:
        self.writers[shard].write(frame(batch))

    def report(self, message: tuple[Any, ...]) -> None:
        self.control.write(frame(message))  # type: ignore[union-attr]

    async def open(self, router: ShardRouter) -> None:
        loop = asyncio.get_running_loop()
        streams = {}
        for j, sock in self.peers.items():
            streams[j], self.writers[j] = await asyncio.open_connection(sock=sock)
        control, self.control = await asyncio.open_connection(sock=self.control_sock)
        self.readers = [loop.create_task(self._receive(router, j, reader)) for j, reader in streams.items()]
        self.readers.append(loop.create_task(self._listen(router, control)))

    @staticmethod
    async def _receive(router: ShardRouter, j: int, reader: asyncio.StreamReader) -> None:
        while True:
            router.take(j, await read_frame(reader))

    @staticmethod
    async def _listen(router: ShardRouter, reader: asyncio.StreamReader) -> None:
        while not router.control(await read_frame(reader)):
            pass

    async def close(self) -> None:
        for task in self.readers:
            task.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)
        if self.control is not None:
            await self.control.drain()
            self.control.close()
        for writer in self.writers.values():
            writer.close()

    async def end(self) -> None:
        await self.control.drain()  # type: ignore[union-attr]
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def shard_main(
    rt: AsyncioRuntime,
    index: int,
    bounds: list[int],
    starts: list[Effects | None],
    counter: Any,
    id_lock: Any,
    links: dict[tuple[int, int], socket.socket],
    controls: list[tuple[socket.socket, socket.socket]],
) -> None:
    """What a shard process runs."""
    from megaactors.runtime.aio import new_event_loop

    mine = {j: s for (i, j), s in links.items() if i == index}
    for (i, _), s in links.items():
        if i != index:
            s.close()
    for k, (parent_end, child_end) in enumerate(controls):
        parent_end.close()
        if k != index:
            child_end.close()
    shard = ShardRouter(rt, index, bounds, SocketLinks(counter, id_lock, mine, controls[index][1]))
    # A shard lives for one run: what it allocates forms no cycle worth collecting
    # (an error ends the run) and dies with the process, so the collector, which
    # would keep walking hundreds of thousands of live tasks, stays off.
    gc.disable()
    with asyncio.Runner(loop_factory=lambda: new_event_loop(rt.event_loop)) as runner:
        runner.run(shard.serve(starts))


class SocketTransport:
    """The parent's side: forks the shards and reads their control sockets (a
    :class:`~megaactors.runtime.shard_coordinator.ShardTransport`)."""

    def __init__(self) -> None:
        try:
            self.mp = multiprocessing.get_context("fork")
        except ValueError as exc:
            raise ParameterError("shards: a sharded run needs the fork start method (Linux or macOS)") from exc
        self.controls: list[socket.socket] = []
        self.processes: list[Any] = []

    def start(self, rt: AsyncioRuntime, bounds: list[int]) -> None:
        starts = rt.start_effects()  # the forked shards inherit the states they set
        rt.mark_start()  # the forked shards inherit the clock too: virtual time 0 is now
        count = len(bounds) - 1
        counter, id_lock = self.mp.RawValue("q", 0), self.mp.Lock()
        links: dict[tuple[int, int], socket.socket] = {}
        for i in range(count):
            for j in range(i + 1, count):
                links[i, j], links[j, i] = socket.socketpair()
        controls = [socket.socketpair() for _ in range(count)]
        self.controls = [parent_end for parent_end, _ in controls]
        self.processes = [
            self.mp.Process(
                target=shard_main,
                args=(rt, k, bounds, starts, counter, id_lock, links, controls),
                name=f"megaactors-shard-{k}",
                daemon=True,
            )
            for k in range(count)
        ]
        for p in self.processes:
            p.start()
        for s in links.values():
            s.close()
        for _, child_end in controls:
            child_end.close()

    def send(self, shard: int, message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):  # that shard may be gone already
            self.controls[shard].sendall(frame(message))

    def wait(self, pending: set[int]) -> list[tuple[Any, ...]]:
        by_fd = {self.controls[k].fileno(): k for k in pending}
        by_sentinel = {self.processes[k].sentinel: k for k in pending}
        out: list[tuple[Any, ...]] = []
        for ready in wait([*(self.controls[k] for k in pending), *by_sentinel]):
            if isinstance(ready, int) and ready in by_sentinel:
                out.extend(self._drain(by_sentinel[ready]))
            else:
                out.append(self._read(by_fd[ready.fileno()]))  # type: ignore[union-attr]
        return out

    def _drain(self, k: int) -> list[tuple[Any, ...]]:
        """Shard ``k``'s process ended: what it left in its socket, then its loss."""
        sock, out = self.controls[k], []
        sock.setblocking(False)
        try:
            while (message := self._read(k))[0] != "lost":
                out.append(message)
        except (BlockingIOError, OSError):
            message = self._lost(k)
        out.append(message)
        return out

    def _read(self, k: int) -> tuple[Any, ...]:
        sock = self.controls[k]
        try:
            (size,) = HEADER.unpack(_recv_exactly(sock, HEADER.size))
            sock.setblocking(True)
            return pickle.loads(_recv_exactly(sock, size))
        except EOFError:
            return self._lost(k)

    def _lost(self, k: int) -> tuple[Any, ...]:
        process = self.processes[k]
        process.join(timeout=5)  # its end closed the socket: it is ending
        if process.exitcode is None:
            return ("lost", k, f"shard {k} closed its connection before reporting")
        return ("lost", k, f"shard {k} exited with code {process.exitcode} before reporting")

    def close(self) -> None:
        for p in self.processes:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join()
        for sock in self.controls:
            sock.close()
