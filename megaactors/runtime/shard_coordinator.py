"""The parent process of a sharded asyncio run: it starts the shards, detects the end
of the run and merges what they report (see :mod:`megaactors.runtime.aio_shards`)."""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import socket
import time
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

from megaactors.errors import ParameterError
from megaactors.runtime.aio_shards import HEADER, ShardError, frame, shard_bounds, shard_main
from megaactors.runtime.gc_tuning import quiet_gc

if TYPE_CHECKING:
    from megaactors.runtime.aio import AsyncioRuntime
    from megaactors.runtime.result import RunResult

__all__ = ["run_sharded"]


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


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
            self.controls[k].sendall(frame(message))

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
            (size,) = HEADER.unpack(_recv_exactly(sock, HEADER.size))
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
        starts = rt.start_effects()
        bounds = shard_bounds(rt.org, count)
        counter, id_lock = mp.RawValue("q", 0), mp.Lock()
        links: dict[tuple[int, int], socket.socket] = {}
        for i in range(count):
            for j in range(i + 1, count):
                links[i, j], links[j, i] = socket.socketpair()
        controls = [socket.socketpair() for _ in range(count)]
        rt.mark_start()
        processes = [
            mp.Process(
                target=shard_main,
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
        rt.mark_end(coordinator.end)
        _merge(rt, bounds, coordinator.results)
    rt.wall_s = time.perf_counter() - wall0
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
