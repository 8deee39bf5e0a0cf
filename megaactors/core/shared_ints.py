"""Shared int objects for the counts a run keeps by the million.

CPython makes a new int object for every result above 256. A count that lives long
(a token count in a memory window or a reply, a running byte sum in a channel log)
then sits in an object of its own, scattered over the heap, and reading or freeing
it later costs a cache miss. :data:`SHARED_COUNTS` holds one object per count below
:data:`SHARED_BELOW`; a hot path stores ``SHARED_COUNTS[n] if n < SHARED_BELOW else n``
(equal to ``n``), so that the counts it keeps refer to these few, which stay in cache.
"""

from __future__ import annotations

__all__ = ["SHARED_BELOW", "SHARED_COUNTS"]

SHARED_BELOW = 1 << 15
SHARED_COUNTS: tuple[int, ...] = tuple(range(SHARED_BELOW))
"""``SHARED_COUNTS[n] == n`` for every ``n`` below :data:`SHARED_BELOW` (256 KB of
references; only the counts used are ever touched)."""
