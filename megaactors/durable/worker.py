"""The worker loop: claim a run, run it under a heartbeat-renewed lease while
checkpointing, finish it; repeat. Start as many workers as you like, on one host
(SQLite) or many (PostgreSQL): each claims its own runs, and a run whose worker
died is resumed by another from its newest checkpoint once the lease expires.

A claimed run that can never succeed here — bad parameters, or over this worker's
budget (:class:`~megaactors.experiments.budget.Budget`: too many agents or
messages, or more memory than the machine has) — is dead-lettered at once with the
reason, without being started. The processes of :func:`work_in_processes` end
when their parent does, SIGKILL included.

A worker never exits because the database is busy or out of reach for a while
(SQLite's "database is locked", a PostgreSQL restart): claims, finishes and
hand-backs are tried again with growing pauses (:func:`~megaactors.durable.runqueue.retry_busy`).
A run whose attempt fails is handed back at once; if even that cannot be written
(a full disk), the worker stops with the store's error, and as its holder is then a
dead process its lease ends at once for any worker or ``resume`` of this host."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from megaactors.child_processes import die_with_parent
from megaactors.durable.checkpointing import DurableOptions, Progress, run_durable
from megaactors.durable.interrupts import RunInterrupted
from megaactors.durable.metrics import WorkerMetrics
from megaactors.durable.outbox import settle_compensations
from megaactors.durable.runqueue import DEFAULT_LEASE_S, Heartbeat, RunQueue, owner_id, retry_busy
from megaactors.durable.store import CheckpointStore, FencingError, Lease, StoreBusyError, StoreError
from megaactors.errors import OrganisationError, UncheckpointableError
from megaactors.experiments.budget import Budget
from megaactors.experiments.spec import ParameterError, RunSpec
from megaactors.redact import redact

__all__ = ["LOG_FORMATS", "execute_claimed", "log_to_stderr", "work", "work_in_processes"]

Log = Callable[[str], None]
LOG_FORMATS = ("text", "json")
PERMANENT = (ParameterError, OrganisationError, UncheckpointableError)
"""Failures a run meets again on every attempt (its parameters, its organisation, a
state a checkpoint cannot store): the run is dead-lettered at once."""


def _stderr(line: str) -> None:
    print(redact(line), file=sys.stderr, flush=True)


def _json_stderr(line: str) -> None:
    record = {"ts": round(time.time(), 3), "pid": os.getpid(), "message": redact(line)}
    print(json.dumps(record), file=sys.stderr, flush=True)


def log_to_stderr(log_format: str = "text") -> Log:
    """A worker's log: one redacted line per event, as text or as one JSON object
    (``ts``, ``pid``, ``message``) per line."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format is one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    return _json_stderr if log_format == "json" else _stderr


def execute_claimed(
    store: CheckpointStore,
    lease: Lease,
    lease_s: float = DEFAULT_LEASE_S,
    log: Log = _stderr,
    budget: Budget | None = None,
    metrics: WorkerMetrics | None = None,
) -> str:
    """Run a claimed run to its end; return what became of it: ``done``, ``queued``
    (failed, will be retried), ``dead`` (failed for good, or refused: bad parameters
    or over ``budget``, by default this machine's), ``interrupted`` (stopped for a
    human) or ``lost`` (the lease went to another worker). ``metrics`` counts it all."""
    status = _execute(store, lease, lease_s, log, budget, metrics)
    if metrics is not None and status != "done":
        metrics.ended(status)
    return status


def _execute(
    store: CheckpointStore,
    lease: Lease,
    lease_s: float,
    log: Log,
    budget: Budget | None,
    metrics: WorkerMetrics | None,
) -> str:

    def busy_log(line: str) -> None:
        log(f"worker {lease.owner}: run {lease.run_id!r}: {line}")

    def hand_back(error: str, *, final: bool = False) -> str:
        try:
            return retry_busy(lambda: store.fail(lease, error, final=final), log=busy_log)
        except FencingError:
            return "lost"
        except StoreError as exc:  # the store refuses even this write (disk full): stop, so the lease ends with us
            log(f"worker {lease.owner}: run {lease.run_id!r} could not be handed back ({exc}); stopping")
            raise

    run = retry_busy(lambda: store.get_run(lease.run_id), log=busy_log)
    try:
        spec = RunSpec.from_dict(run.params)
        options = DurableOptions.from_dict(run.options)
    except (ParameterError, TypeError) as exc:
        return hand_back(f"bad parameters: {exc}", final=True)
    refusal = (budget or Budget.machine()).refusal(spec)
    if refusal:
        log(f"worker {lease.owner}: run {lease.run_id!r} refused: {refusal}")
        return hand_back(f"refused: {refusal}", final=True)
    renewed = metrics.renewals.inc if metrics is not None else None
    with Heartbeat(store, lease, lease_s, on_renew=renewed) as heartbeat:
        try:
            progress = Progress(on_checkpoint=metrics.checkpoint_written if metrics is not None else None)
            result = run_durable(store, lease, spec, options, lost=lambda: heartbeat.lost, progress=progress)
            summary = result.summary()
            retry_busy(lambda: store.finish(lease, summary), log=busy_log)
            if metrics is not None:
                metrics.run_finished(summary, progress.outbox_performed, progress.outbox_replayed)
            start = "the start" if progress.resumed_from is None else f"super-step {progress.resumed_from}"
            log(f"worker {lease.owner}: run {lease.run_id!r} ran from {start} to super-step {progress.super_steps}")
        except RunInterrupted as stop:
            log(f"worker {lease.owner}: run {lease.run_id!r} {stop.reason} at super-step {stop.step}")
            reason, going_on = stop.reason, stop.going_on(options.as_dict())
            try:
                retry_busy(lambda: store.interrupt(lease, reason, going_on), log=busy_log)
            except FencingError as exc:  # cancelled or taken over meanwhile: not this worker's to stop
                log(f"worker {lease.owner}: {exc}")
                return "lost"
            return "interrupted"
        except FencingError as exc:
            log(f"worker {lease.owner}: {exc}")
            return "lost"
        except StoreBusyError as exc:  # the database stayed out of reach (restarting): not the run's fault
            log(f"worker {lease.owner}: run {lease.run_id!r} stopped, database busy: {exc}; handing it back")
            return hand_back(f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log(f"worker {lease.owner}: run {lease.run_id!r} failed: {error}\n{traceback.format_exc()}")
            return hand_back(error, final=isinstance(exc, PERMANENT))
    try:
        settled = retry_busy(lambda: settle_compensations(store, run_id=lease.run_id), log=busy_log)
        if metrics is not None:
            metrics.settled(settled)
    except StoreError as exc:
        log(f"worker {lease.owner}: settling compensations of run {lease.run_id!r}: {exc}")
    return "done"


def work(
    store: CheckpointStore,
    *,
    owner: str | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    poll_s: float = 0.5,
    exit_when_idle: bool = False,
    max_runs: int | None = None,
    log: Log = _stderr,
    budget: Budget | None = None,
    metrics: WorkerMetrics | None = None,
) -> int:
    """Claim and run runs until told to stop; return how many this worker finished
    (runs over ``budget``, by default this machine's, are dead-lettered unstarted).
    ``metrics`` counts claims, outcomes, renewals, takeovers and checkpoints."""
    owner = owner or owner_id()
    budget = budget or Budget.machine()
    queue = RunQueue(store)
    retry_busy(queue.announce, log=log)
    finished = 0
    pause = 0.05
    while max_runs is None or finished < max_runs:
        try:
            takeovers = queue.takeovers
            lease = queue.claim_next(owner, lease_s)
            if metrics is not None:
                metrics.takeovers.inc(queue.takeovers - takeovers)
            if lease is None:
                try:
                    settled = settle_compensations(store)
                    if metrics is not None:
                        metrics.settled(settled)
                except StoreBusyError:
                    raise
                except StoreError as exc:
                    log(f"worker {owner}: settling compensations: {exc}")
                if exit_when_idle and not _in_progress(store, queue.version, queue.draining):
                    break
        except StoreBusyError as exc:  # locked or restarting: wait and try again, never exit
            log(f"worker {owner}: database busy ({exc}); trying again in {pause:.2f} s")
            time.sleep(pause)
            pause = min(2.0, pause * 2)
            continue
        pause = 0.05
        if lease is None:
            time.sleep(poll_s)
            continue
        log(f"worker {owner}: claimed run {lease.run_id!r} (fence {lease.fence})")
        if metrics is not None:
            metrics.claimed.inc()
        status = execute_claimed(store, lease, lease_s, log, budget, metrics)
        log(f"worker {owner}: run {lease.run_id!r} {status}")
        if status == "done":
            finished += 1
    return finished


def _in_progress(store: CheckpointStore, version: str, draining: bool = False) -> bool:
    """True while some run of ``version`` is queued (unless the version is draining)
    or held (its holder may yet fail it back)."""
    waiting = ("running",) if draining else ("queued", "running")
    return any(r.status in waiting and r.version == version for r in store.list_runs())


def _work_process(target: str, parent: int, kwargs: dict[str, Any], log_format: str, metrics_port: int | None) -> None:
    from megaactors.durable import open_store

    die_with_parent(parent)
    with retry_busy(lambda: open_store(target)) as store:
        metrics = None
        if metrics_port is not None:
            metrics = WorkerMetrics(store)
            metrics.serve(metrics_port)
        work(store, log=log_to_stderr(log_format), metrics=metrics, **kwargs)


def work_in_processes(
    target: str | Path, jobs: int, *, log_format: str = "text", metrics_port: int | None = None, **kwargs: Any
) -> None:
    """Run ``jobs`` workers, one process each, until they all stop; with
    ``metrics_port``, worker ``i`` serves its metrics on ``metrics_port + i``. The
    workers end with this process: killed (SIGKILL included), or on SIGTERM, which
    this process passes on to them before it ends."""
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(
            target=_work_process,
            args=(str(target), os.getpid(), kwargs, log_format, None if metrics_port is None else metrics_port + i),
        )
        for i in range(jobs)
    ]

    def stop(signum: int, frame: object) -> None:
        for p in procs:
            if p.is_alive():
                p.terminate()
        raise SystemExit(128 + signum)

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if main else None
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
