"""FifoGate: the one primitive behind the serial token, tool locks and LLM slots."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megaactors.runtime.gates import FifoGate


def test_a_mutex_admits_one_holder_and_hands_over_in_arrival_order() -> None:
    gate: FifoGate[str] = FifoGate()
    assert gate.try_acquire("a")
    assert gate.try_acquire("a")  # its holder keeps it
    for who in ("b", "c"):
        assert not gate.try_acquire(who)
        gate.wait(who, f"wake {who}")
    assert gate.waiters() == ["b", "c"]
    assert gate.release("b") is None  # only the holder's release counts
    assert gate.release("a") == ("b", "wake b") and gate.holder == "b" and gate.held == 1
    assert gate.release("b") == ("c", "wake c")
    assert gate.release("c") is None and gate.holder is None and gate.held == 0
    assert gate.try_acquire("d")


def test_a_pool_admits_capacity_holders_and_counts_only() -> None:
    pool: FifoGate[str] = FifoGate(2, pool=True)
    assert pool.try_acquire("a") and pool.try_acquire("b")
    assert not pool.try_acquire("a")  # a pool does not know who holds it
    pool.wait("c")
    assert pool.release("a") == ("c", None) and pool.held == 2
    assert pool.release("x") is None and pool.held == 1  # any holder may leave
    assert pool.try_acquire("d") and not pool.try_acquire("e")


def test_bad_capacities_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one holder"):
        FifoGate(0)
    with pytest.raises(ValueError, match="is a pool"):
        FifoGate(3)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=60), st.integers(1, 3))
def test_holders_never_exceed_capacity_and_waiters_go_first_come_first_served(
    ops: list[tuple[bool, int]], capacity: int
) -> None:
    gate: FifoGate[int] = FifoGate(capacity, pool=capacity > 1)
    holding: list[int] = []
    line: list[int] = []
    for arrive, who in ops:
        if arrive and who not in holding and who not in line:
            if gate.try_acquire(who):
                holding.append(who)
            else:
                gate.wait(who)
                line.append(who)
        elif not arrive and holding:
            leaving = holding.pop(0)
            nxt = gate.release(leaving)
            if line:
                assert nxt is not None and nxt[0] == line.pop(0)
                holding.append(nxt[0])
            else:
                assert nxt is None
        assert len(holding) == gate.held <= capacity
        assert gate.waiters() == line
