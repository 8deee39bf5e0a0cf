"""The simulation's pending events, in the order they are due.

An event is a tuple ``(time, sequence, agent)``; events come out in tuple order, so
ties in time go by sequence number (the order they were scheduled in). The queue is
a calendar: times fall into buckets of ``width`` virtual seconds, a heap orders the
non-empty buckets, and the bucket being consumed is sorted once when it is reached.
With thousands of calls in flight, a binary heap over all events compares each
popped event with about ``2 log2 n`` others scattered in memory; here an event is
appended to its bucket, sorted with its neighbours in time, and read in place.

An event due within the bucket being consumed (a network copy's latency is shorter
than the bucket width) goes into :attr:`soon`, a heap beside it, rather than into
the sorted bucket (inserting into the middle of a list moves every later entry); the
next event is the lesser of ``current[index]`` and ``soon[0]``.

A bucket is sorted by time alone (a stable sort of floats, several times faster than
comparing tuples) while the order events were appended in is their sequence order
among equal times: :meth:`push` takes events in increasing sequence order (as the
simulation numbers them), and the constructor pushes the events it is given sorted.
An event keyed out of that order (:meth:`push_keyed`, a copy between machines) or a
restored network event (which may be one) makes the queue sort every bucket after it
by ``(time, sequence)``.

The simulation's main loop reads :attr:`current` from :attr:`index` and :attr:`soon`
directly (attribute reads per event instead of a call); everything else goes
through methods.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from operator import itemgetter

__all__ = ["Event", "EventQueue", "superstep_end"]

Event = tuple[float, int, int]
"""``(time, sequence, agent)``. The event of an LLM call in flight on the simulation's
plain path carries more items, its request, latency and prompt tokens (the call's record:
see :data:`~megaactors.runtime.sim_state.LLMInFlight`); only the first three are read
as the event."""

_EVENT = itemgetter(0, 1, 2)
_TIME = itemgetter(0)


def superstep_end(t: float, step_s: float) -> float:
    """The end of the window of ``step_s`` virtual seconds (aligned on multiples of
    ``step_s``) that holds time ``t``: a super-step runs every event before it. Always
    after ``t``, even where ``(floor(t / step_s) + 1) * step_s`` rounds to ``t``."""
    until = (math.floor(t / step_s) + 1) * step_s
    return until if until > t else math.nextafter(t, math.inf)


class EventQueue:
    """Events ordered by ``(time, sequence)``, bucketed by time."""

    __slots__ = ("_keys", "buckets", "current", "current_key", "index", "inverse_width", "keyed", "soon")

    def __init__(self, width: float, events: Iterable[Event] = ()) -> None:
        if not width > 0 or width == float("inf"):
            raise ValueError(f"bucket width must be a finite number > 0, got {width!r}")
        self.inverse_width = 1.0 / width
        self.buckets: dict[int, list[Event]] = {}
        """Time key -> the events of a bucket after the current one (unsorted); a
        caller may append an event due after the current bucket to its bucket here
        when that bucket exists (what :meth:`push` does)."""
        self._keys: list[int] = []
        """Keys of the non-empty buckets after the current one (a heap)."""
        self.current: list[Event] = []
        """The bucket being consumed, sorted; entries before :attr:`index` are done
        and set to None, so that an event dies with its call rather than with the
        whole bucket, long after (when its objects have left the caches)."""
        self.index = 0
        self.current_key = -1
        self.soon: list[Event] = []
        """Events due within the current bucket pushed after it was sorted (a heap;
        always this one list)."""
        restored = sorted(events, key=_EVENT)
        self.keyed = any(event[2] < 0 for event in restored)
        """Whether an event may have been appended out of sequence order: buckets are
        then sorted by ``(time, sequence)`` rather than by time alone."""
        for event in restored:
            self.push(event)

    def push(self, event: Event) -> None:
        """Schedule ``event`` (its time is never before the last event popped; its
        sequence number above those of every event pushed before, or the constructor's)."""
        key = int(event[0] * self.inverse_width)  # monotone in time: same bucket for equal times
        if key <= self.current_key:
            heapq.heappush(self.soon, event)
            return
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [event]
            heapq.heappush(self._keys, key)
        else:
            bucket.append(event)

    def push_keyed(self, event: Event) -> None:
        """Schedule ``event``, whose sequence number may be below those pushed before
        (a key of its own): from now on, buckets are sorted by ``(time, sequence)``."""
        self.keyed = True
        self.push(event)

    def refill(self) -> bool:
        """Move on to the next non-empty bucket once the current one and :attr:`soon`
        are done; False when no event is left."""
        if self.index < len(self.current) or self.soon:
            return True
        if not self._keys:
            return False
        key = heapq.heappop(self._keys)
        bucket = self.buckets.pop(key)
        if self.keyed:
            bucket.sort()
        else:  # appended in sequence order: a stable sort by time is the tuple order
            bucket.sort(key=_TIME)
        self.current, self.index, self.current_key = bucket, 0, key
        return True

    def _from_soon(self) -> bool:
        """Whether the next event is ``soon[0]`` (rather than ``current[index]``);
        call after :meth:`refill` returned True."""
        soon, current, i = self.soon, self.current, self.index
        return bool(soon) and (i == len(current) or soon[0] < current[i])

    def peek(self) -> Event | None:
        """The next event, left in place (None when there is none)."""
        if not self.refill():
            return None
        return self.soon[0] if self._from_soon() else self.current[self.index]

    def pop(self) -> Event:
        """Remove and return the next event (IndexError when there is none)."""
        if not self.refill():
            raise IndexError("no event is pending")
        if self._from_soon():
            return heapq.heappop(self.soon)
        event = self.current[self.index]
        self.current[self.index] = None  # type: ignore[call-overload]
        self.index += 1
        return event

    def events(self) -> list[Event]:
        """Every pending event as ``(time, sequence, agent)``, in no particular order."""
        pending = self.current[self.index :]
        pending.extend(self.soon)
        for bucket in self.buckets.values():
            pending.extend(bucket)
        return list(map(_EVENT, pending))

    def __len__(self) -> int:
        return len(self.current) - self.index + len(self.soon) + sum(map(len, self.buckets.values()))

    def __bool__(self) -> bool:
        return self.index < len(self.current) or bool(self.soon) or bool(self._keys)
