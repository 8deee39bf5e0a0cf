"""Independent simulated runs spread over worker processes.

Every run of the reproduction is deterministic and independent of the others, so
the results do not depend on how many processes run them or in which order: a
task is a module-level function and its arguments (picklable), and
:func:`run_tasks` returns the results in the order the tasks were given.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

__all__ = ["Task", "default_workers", "run_tasks"]

Task = tuple[Callable[..., Any], tuple[Any, ...], float]
"""A function, its arguments and its expected cost (any unit: the largest start first)."""


def default_workers() -> int:
    """Two processes (or one on a one-core machine): what a shared two-core machine affords."""
    return max(1, min(2, os.cpu_count() or 1))


def run_tasks(
    tasks: Sequence[Task], workers: int | None = None, progress: Callable[[int, int], None] | None = None
) -> list[Any]:
    """Run every task; ``progress(done, total)`` is called as they finish."""
    workers = default_workers() if workers is None else workers
    results: list[Any] = [None] * len(tasks)
    if workers <= 1 or len(tasks) <= 1:
        for i, (fn, args, _) in enumerate(tasks):
            results[i] = fn(*args)
            if progress is not None:
                progress(i + 1, len(tasks))
        return results
    # fork where there is one: it needs no importable __main__, so a script or notebook can run tasks
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    order = sorted(range(len(tasks)), key=lambda i: -tasks[i][2])
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
        futures = {pool.submit(tasks[i][0], *tasks[i][1]): i for i in order}
        for done, future in enumerate(as_completed(futures), 1):
            results[futures[future]] = future.result()
            if progress is not None:
                progress(done, len(tasks))
    return results
