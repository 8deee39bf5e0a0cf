"""Sleeps for the asyncio runtime, as futures whose timer is set at once
(:func:`sleep_future`), and coalesced (``timer_tick_s > 0``): every simulated wait
ending within the same tick of that length is woken by one shared loop timer, at the
end of the tick (waits are rounded up by less than one tick)."""

from __future__ import annotations

import asyncio
import math
import time

__all__ = ["CoalescedTimers", "sleep_future"]


class CoalescedTimers:
    """Coalesced sleeps: one loop timer per tick wakes every wait ending in it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, tick_s: float) -> None:
        self.loop = loop
        self.tick = tick_s
        self.buckets: dict[int, asyncio.Future[None]] = {}

    def sleep(self, delay: float) -> asyncio.Future[None]:
        key = math.ceil((time.monotonic() + delay) / self.tick)
        fut = self.buckets.get(key)
        if fut is None:
            fut = self.buckets[key] = self.loop.create_future()
            self.loop.call_later(max(0.0, key * self.tick - time.monotonic()), self._fire, key)
        return fut

    def _fire(self, key: int) -> None:
        fut = self.buckets.pop(key)
        if not fut.done():
            fut.set_result(None)


def sleep_future(delay: float) -> asyncio.Future[None]:
    """A future of the running loop done in ``delay`` seconds: what ``asyncio.sleep``
    awaits, with its timer set now rather than when first awaited."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    loop.call_later(delay, _set_unless_done, fut)
    return fut


def _set_unless_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():  # not cancelled meanwhile
        fut.set_result(None)
