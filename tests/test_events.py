"""The simulation's event queue pops events exactly in (time, sequence) order."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megaactors.runtime.events import EventQueue

# each step: pop one event, or schedule events at these delays from the last time popped
steps = st.lists(
    st.one_of(st.none(), st.lists(st.sampled_from([0.0, 1e-9, 0.01, 0.0625, 0.3, 1.0, 2.5, 1e3]), max_size=4)),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps=steps, width=st.sampled_from([1e-3, 0.0625, 1.0, 7.0]))
def test_pops_in_the_order_of_a_binary_heap(steps: list[list[float] | None], width: float) -> None:
    queue, heap = EventQueue(width), []
    now, seq = 0.0, 0
    for step in steps:
        if step is None:
            assert bool(queue) == bool(heap) and len(queue) == len(heap)
            if heap:
                expected = heapq.heappop(heap)
                assert queue.peek() == expected
                assert queue.pop() == expected
                now = expected[0]
            continue
        for delay in step:
            seq += 1
            event = (now + delay, seq, seq % 7)
            queue.push(event)
            heapq.heappush(heap, event)
    assert sorted(queue.events()) == sorted(heap)
    while heap:
        assert queue.pop() == heapq.heappop(heap)
    assert not queue and queue.peek() is None


def test_rebuilt_from_its_events_it_pops_the_same_order() -> None:
    events = [(t / 7.0, i, i) for i, t in enumerate([5, 3, 3, 9, 0, 14, 2, 2, 2])]
    queue = EventQueue(0.25, events)
    queue.pop()
    again = EventQueue(0.25, queue.events())
    assert [again.pop() for _ in range(len(again))] == [queue.pop() for _ in range(len(queue))]


def test_bad_width_and_empty_pop_are_refused() -> None:
    with pytest.raises(ValueError, match="bucket width"):
        EventQueue(0.0)
    with pytest.raises(IndexError, match="no event"):
        EventQueue(1.0).pop()
