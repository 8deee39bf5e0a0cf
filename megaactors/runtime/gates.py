"""One primitive for everything agents queue for: the serial token, named tool locks
and LLM call slots.

A :class:`FifoGate` admits up to ``capacity`` holders; everyone else waits in arrival
order, and a holder that leaves hands its place straight to the first in line (who
never competes for it again). The gate only keeps the books: who holds it, who waits
and with what. How a waiter waits and is woken is the runtime's business — the
simulation puts the agent back in its ready queue, asyncio resolves a future, the
pykka runtime sets an event — so the same gate serves every runtime, and the
simulation's state can list holders and waiters by agent id. A gate is not
thread-safe: a threaded runtime calls it under a lock of its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

__all__ = ["FifoGate"]

Owner = TypeVar("Owner")
"""Who holds or waits (an agent)."""


class FifoGate(Generic[Owner]):
    """Up to ``capacity`` holders at once, the others admitted first come, first served.

    A gate is a *mutex* (``capacity`` 1, the default) or a *pool* of ``capacity``
    slots (``pool=True``, e.g. LLM slots). A mutex knows its holder: the holder may
    acquire it again without waiting (the serial token: an agent that holds it and
    has more to do keeps it) and only the holder's release counts. A pool only
    counts its holders."""

    __slots__ = ("capacity", "held", "holder", "mutex", "waiting")

    def __init__(self, capacity: int = 1, *, pool: bool = False) -> None:
        if capacity < 1:
            raise ValueError(f"a gate admits at least one holder, got capacity {capacity}")
        if capacity > 1 and not pool:
            raise ValueError(f"a gate of capacity {capacity} is a pool (pool=True)")
        self.capacity = capacity
        self.mutex = not pool
        self.held = 0
        """Holders now."""
        self.holder: Owner | None = None
        """A mutex's holder (None when free); a pool's latest holder admitted."""
        self.waiting: deque[tuple[Owner, Any]] = deque()
        """``(owner, waiter)`` in arrival order; ``waiter`` is whatever wakes it."""

    @classmethod
    def restored(
        cls, holder: Owner | None, waiting: Iterable[Owner], *, capacity: int = 1, held: int | None = None
    ) -> FifoGate[Owner]:
        """A gate as a snapshot lists it: a mutex held by ``holder`` (None: free), or a
        pool of ``capacity`` with ``held`` holders; ``waiting`` in line (no waiters)."""
        gate: FifoGate[Owner] = cls(capacity, pool=held is not None)
        gate.held = int(holder is not None) if held is None else held
        gate.holder = holder
        gate.waiting.extend((owner, None) for owner in waiting)
        return gate

    def try_acquire(self, owner: Owner) -> bool:
        """Hold the gate now if there is room (or ``owner`` holds the mutex already);
        False if ``owner`` must :meth:`wait`."""
        if self.held < self.capacity:
            self.held += 1
            self.holder = owner
            return True
        return self.mutex and self.holder is owner

    def wait(self, owner: Owner, waiter: Any = None) -> None:
        """Queue ``owner`` at the back; ``waiter`` comes back from :meth:`release`."""
        self.waiting.append((owner, waiter))

    def release(self, owner: Owner) -> tuple[Owner, Any] | None:
        """``owner`` leaves. The first in line, if any, holds the gate from now on and is
        returned as ``(owner, waiter)`` to be woken. A mutex released by anyone but
        its holder does not change."""
        if self.mutex and self.holder is not owner:
            return None
        if self.waiting:
            nxt = self.waiting.popleft()
            self.holder = nxt[0]
            return nxt
        self.held -= 1
        if self.mutex:
            self.holder = None
        return None

    def waiters(self) -> list[Owner]:
        """Who waits, first in line first."""
        return [owner for owner, _ in self.waiting]

    def __repr__(self) -> str:
        kind = "mutex" if self.mutex else f"pool of {self.capacity}"
        return f"FifoGate({kind}, held={self.held}, waiting={len(self.waiting)})"
