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


# each step: pop one event, schedule events at these delays in sequence, or one keyed
# event (a sequence number of its own, below or above the others) at this delay
mixed_steps = st.lists(
    st.one_of(
        st.none(),
        st.lists(st.sampled_from([0.0, 0.01, 0.0625, 0.3, 1.0]), max_size=4),
        st.tuples(st.sampled_from([0.0, 0.01, 0.0625, 1.0]), st.integers(-50, 10_000)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps=mixed_steps, width=st.sampled_from([1e-3, 0.0625, 1.0]), split=st.integers(0, 60))
def test_keyed_and_restored_events_pop_in_tuple_order(
    steps: list[list[float] | tuple[float, int] | None], width: float, split: int
) -> None:
    """Ties in time go by sequence number whether events were pushed in sequence order,
    keyed out of it, or handed to a rebuilt queue (which then goes on being pushed)."""
    queue, heap = EventQueue(width), []
    now, seq, keys = 0.0, 100, set()
    for n, step in enumerate(steps):
        if n == split:  # rebuilt from its events in no particular order, as after a restore
            queue = EventQueue(width, reversed(queue.events()))
        if step is None:
            if heap:
                expected = heapq.heappop(heap)
                assert queue.pop() == expected
                now = expected[0]
        elif isinstance(step, tuple):
            delay, key = step
            if key not in keys and key != 0:
                keys.add(key)
                event = (now + delay, key, -abs(key))
                queue.push_keyed(event)
                heapq.heappush(heap, event)
        else:
            for delay in step:
                seq += 1
                event = (now + delay, seq, seq % 7)
                queue.push(event)
                heapq.heappush(heap, event)
    assert [queue.pop() for _ in range(len(queue))] == [heapq.heappop(heap) for _ in range(len(heap))]


def test_a_keyed_event_tied_in_time_goes_before_later_sequence_numbers() -> None:
    queue = EventQueue(1.0)
    queue.push((5.0, 10, 1))
    queue.push((5.0, 11, 2))
    queue.push_keyed((5.0, 3, -3))  # appended last, due first among equals
    assert [queue.pop() for _ in range(3)] == [(5.0, 3, -3), (5.0, 10, 1), (5.0, 11, 2)]


def test_restored_ties_come_out_by_sequence_then_new_pushes_after_them() -> None:
    queue = EventQueue(1.0, [(2.0, 7, 1), (2.0, 4, 2), (1.5, 9, 3), (2.0, 5, 4)])
    queue.push((2.0, 12, 5))
    order = [queue.pop()[1] for _ in range(len(queue))]
    assert order == [9, 4, 5, 7, 12]
