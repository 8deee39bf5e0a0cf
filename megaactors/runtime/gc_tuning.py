"""Garbage-collector settings for allocation-heavy runs.

A run allocates millions of short-lived objects (packets, batches) that form no
reference cycles; CPython's default thresholds then spend much of the run in
collections that find nothing. While a run executes, objects alive at its start are
frozen out of the collector and the youngest generation is collected less often;
everything is restored afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["quiet_gc"]


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
