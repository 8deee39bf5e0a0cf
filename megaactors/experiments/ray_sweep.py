"""Sweeps on a Ray cluster: each run one Ray task, its rows recorded as tasks finish.

A run is a task that asks for :data:`CPUS_PER_RUN` CPU, so Ray places as many on a
node as it has CPUs. The driver (the sweep's process) keeps the rows: it records a
run once, when its task returns, so ``results.csv``, resuming and error rows are those
of the process pool. A worker process or a whole node lost while a run is in flight
costs that run only: Ray starts it again on a node that is alive (up to
:data:`RETRIES` times); when every attempt is lost, the run becomes an error row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from megaactors.runtime.ray_cluster import ray_session

__all__ = ["CPUS_PER_RUN", "RETRIES", "run_on_ray"]

CPUS_PER_RUN = 1
"""A run is one Python thread of work: one CPU."""
RETRIES = 3
"""Times a run is started again after its worker or node was lost."""

RunOne = Callable[[dict[str, Any]], dict[str, Any]]


def run_on_ray(
    runs: Sequence[tuple[Any, dict[str, Any]]],
    run_one: RunOne,
    record: Callable[[Any, dict[str, Any]], None],
    *,
    address: str | None = None,
    workers: int | None = None,
) -> None:
    """``run_one(params)`` for each ``(run, params)`` as a Ray task on the cluster at
    ``address`` (default: a local instance of ``workers`` CPUs), at most ``workers``
    in flight when given; ``record(run, figures)`` as each finishes."""
    with ray_session(address, num_cpus=workers) as ray:
        task = ray.remote(run_one).options(num_cpus=CPUS_PER_RUN, max_retries=RETRIES, retry_exceptions=False)
        pending = list(reversed(runs))
        limit = workers or len(runs)
        inflight: dict[Any, Any] = {}
        while pending or inflight:
            while pending and len(inflight) < limit:
                run, params = pending.pop()
                inflight[task.remote(params)] = run
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                run = inflight.pop(ref)
                try:
                    figures = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    figures = {"status": "error", "detail": _lost(exc)}
                record(run, figures)


def _lost(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"the Ray worker running this was lost {RETRIES + 1} times ({type(exc).__name__}: {text})"
