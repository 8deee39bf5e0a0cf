"""Garbage-collector settings for allocation-heavy runs.

A run allocates millions of short-lived objects (packets, batches, replies) that
form no reference cycles: reference counting frees them, and the cyclic collector
only walks them. Each of its passes visits the objects that survived since the
last one, scattered over the whole heap, so with a million agents a pass costs
about a second and a run makes dozens. While a run executes, objects alive at its
start are frozen out of the collector, and either the youngest generation is
collected less often (:func:`quiet_gc`, for the live runtimes, whose event loops and
threads do make cycles) or the collector does not run at all (:func:`paused_gc`, for
the simulation); everything is restored afterwards, and cycles made meanwhile are
collected by the next collection after the block.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc", "quiet_gc"]


@contextmanager
def quiet_gc(threshold: int = 200_000) -> Iterator[None]:
    """Collect rarely for the duration of the block."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(threshold, old[1], old[2] * 10 if len(old) > 2 else 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


@contextmanager
def paused_gc() -> Iterator[None]:
    """Collect nothing automatically for the duration of the block."""
    enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.unfreeze()
