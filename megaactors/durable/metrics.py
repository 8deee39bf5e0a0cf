"""Prometheus metrics of workers and checkpointed runs (``prometheus_client``).

:class:`WorkerMetrics` owns a registry of its own and the counters a dashboard
scrapes: runs claimed / finished / failed / dead-lettered, lease renewals and
takeovers, checkpoint write latency and bytes, outbox attempts and compensations,
LLM calls, tokens and dollars by stage (counted when a run finishes, for the whole
run), and the queue's depth by status (read from the store at each scrape).
:meth:`WorkerMetrics.serve` exposes them over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from megaactors.durable.store import STATUSES, RunQueueStore, StoreError
from megaactors.errors import ParameterError

__all__ = ["WorkerMetrics", "check_ports_free"]

_P = "megaactors_"


class _QueueDepth(Collector):
    """Runs by status, read from the store (a connection of its own) at each scrape."""

    def __init__(self, store: RunQueueStore) -> None:
        self.store = store

    def collect(self) -> Any:
        family = GaugeMetricFamily(_P + "runs", "Runs in the store by status", labels=["status"])
        try:
            with self.store.reopen() as store:
                runs = store.list_runs()
        except StoreError:  # the database is out of reach: no sample rather than a wrong one
            return
        for status in STATUSES:
            family.add_metric([status], sum(r.status == status for r in runs))
        yield family


class WorkerMetrics:
    """The metrics of one worker process (or one checkpointed run)."""

    def __init__(self, store: RunQueueStore | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.claimed = Counter(_P + "runs_claimed", "Runs claimed", registry=r)
        self.finished = Counter(_P + "runs_finished", "Runs finished (done)", registry=r)
        self.failed = Counter(_P + "runs_failed", "Failed attempts handed back to the queue", registry=r)
        self.dead = Counter(_P + "runs_dead_lettered", "Runs dead-lettered (refused or out of attempts)", registry=r)
        self.lost = Counter(_P + "runs_lost", "Runs whose lease went to another holder", registry=r)
        self.interrupted = Counter(_P + "runs_interrupted", "Runs stopped for a human", registry=r)
        self.renewals = Counter(_P + "lease_renewals", "Lease renewals (heartbeats)", registry=r)
        self.takeovers = Counter(_P + "lease_takeovers", "Leases of dead holders ended", registry=r)
        self.checkpoint_seconds = Histogram(
            _P + "checkpoint_write_seconds",
            "Time to compress and write one checkpoint",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.checkpoint_bytes = Counter(_P + "checkpoint_bytes", "Bytes of checkpoints written", registry=r)
        self.outbox = Counter(
            _P + "outbox_attempts", "Side effects through the outbox", ["outcome"], registry=r
        )  # performed / replayed
        self.compensations = Counter(_P + "compensations", "Compensations settled", ["status"], registry=r)
        self.llm_calls = Counter(_P + "llm_calls", "LLM calls of finished runs", ["stage"], registry=r)
        self.tokens = Counter(_P + "llm_tokens", "Tokens of finished runs", ["stage", "direction"], registry=r)
        self.dollars = Counter(_P + "llm_dollars", "Dollars of finished runs", ["stage"], registry=r)
        if store is not None:
            self.registry.register(_QueueDepth(store))

    def checkpoint_written(self, seconds: float, nbytes: int) -> None:
        self.checkpoint_seconds.observe(seconds)
        self.checkpoint_bytes.inc(nbytes)

    def run_finished(self, summary: dict[str, Any], performed: int = 0, replayed: int = 0) -> None:
        """Count a finished run: its LLM use by stage and its outbox attempts."""
        self.finished.inc()
        for stage, cells in (summary.get("by_stage") or {}).items():
            self.llm_calls.labels(stage).inc(cells.get("llm_calls", 0))
            self.tokens.labels(stage, "in").inc(cells.get("tokens_in", 0))
            self.tokens.labels(stage, "out").inc(cells.get("tokens_out", 0))
            self.dollars.labels(stage).inc(cells.get("cost_usd", 0.0))
        self.outbox.labels("performed").inc(performed)
        self.outbox.labels("replayed").inc(replayed)

    def settled(self, compensations: list[Any]) -> None:
        for c in compensations:
            self.compensations.labels(c.status).inc()

    def ended(self, status: str) -> None:
        """Count what became of a claimed run that did not finish."""
        {"queued": self.failed, "dead": self.dead, "lost": self.lost, "interrupted": self.interrupted}[status].inc()

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Expose the metrics at ``http://addr:port/metrics``; a port in use is a
        :class:`ParameterError`. Returns the server (``shutdown()`` stops it)."""
        try:
            server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ParameterError(f"metrics port {port} is in use on {addr}") from exc
            raise ParameterError(f"metrics port {port}: cannot listen on {addr}: {exc.strerror or exc}") from exc
        return server


def check_ports_free(first: int, count: int, addr: str = "127.0.0.1") -> None:
    """Raise :class:`ParameterError` naming the first of ports ``first .. first+count-1``
    that is in use on ``addr``."""
    if first + count - 1 > 65535:
        raise ParameterError(f"metrics ports {first}..{first + count - 1} go beyond 65535")
    for port in range(first, first + count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((addr, port))
            except OSError as exc:
                raise ParameterError(f"metrics port {port} is in use on {addr}") from exc
