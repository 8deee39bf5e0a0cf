"""In-queue heads a restore derives from counts instead of reading them.

An agent takes its whole in-queue at once, and every packet addressed to it joins
that queue in id order. So its queue is always the last ``q`` packets addressed to
it, where ``q`` is what was queued for it at some moment (the *anchor*, where the
heads are known), plus the packets addressed to it since, minus the messages it
has taken since (its ledger's ``received`` count). A delta (state format 3)
therefore stores no heads: describing one costs no look-up per agent, and a
restore counts the packets of the deltas after its anchor (the base, or the last
delta of format 2) instead. A run through a network keeps its in-queues packet by
packet (:mod:`megaactors.durable.net_rows`) and needs no heads at all.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from itertools import chain
from operator import attrgetter

import numpy as np

from megaactors.core.messages import Packet
from megaactors.errors import StateError

__all__ = ["QueueCount"]

_RECIPIENTS = attrgetter("recipients")
_FIRST_ID = attrgetter("first_id")


def _occurrences(packets: list[Packet]) -> tuple[np.ndarray, np.ndarray]:
    """Each (recipient, packet id) of ``packets``, as two arrays in the packets' order."""
    lists = list(map(_RECIPIENTS, packets))  # lists, or views of the organisation's member lists
    counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    agents = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=int(counts.sum()))
    ids = np.repeat(np.fromiter(map(_FIRST_ID, packets), dtype=np.int64, count=len(packets)), counts)
    return agents, ids


def _cells(column: array[int] | np.ndarray, n: int) -> np.ndarray:
    """``column`` as ``n`` int64 cells (missing ones 0: agents recruited since)."""
    cells = np.zeros(n, dtype=np.int64)
    values = np.asarray(column, dtype=np.int64)
    cells[: len(values)] = values[:n]
    return cells


class QueueCount:
    """The in-queues at an anchor (its ``heads``, the ``packets`` known there and
    the ``received`` counts), then the packets addressed since (:meth:`add`); at the
    end, :meth:`heads` gives every agent's head."""

    def __init__(self, heads: array[int], packets: Mapping[int, Packet], received: array[int]) -> None:
        known = [packets[i] for i in sorted(packets)]
        agents, ids = _occurrences(known)
        anchor = np.frombuffer(heads, dtype=np.int64)
        waiting = (anchor[agents] >= 0) & (ids >= anchor[agents])
        self._queued = np.bincount(agents[waiting], minlength=len(anchor))
        self._received = np.array(received, dtype=np.int64)
        self._added: list[Packet] = []

    def add(self, packets: Iterable[Packet]) -> None:
        """Note packets stamped after the anchor."""
        self._added.extend(packets)

    def heads(self, packets: Mapping[int, Packet], received: array[int]) -> array[int]:
        """Each agent's head now (-1: nothing queued), ``packets`` every packet known
        (those of the anchor and every one added) and ``received`` the counts now."""
        n = len(received)
        added, _ = _occurrences(self._added)
        queued = (
            _cells(self._queued, n)
            + np.bincount(added, minlength=n)[:n]
            - (_cells(received, n) - _cells(self._received, n))
        )
        agents, ids = _occurrences([packets[i] for i in sorted(packets)])
        order = np.argsort(agents, kind="stable")  # by agent, each agent's packets in id order
        total = np.bincount(agents, minlength=n)[:n]
        bad = np.flatnonzero((queued < 0) | (queued > total))
        if len(bad):
            a = int(bad[0])
            raise StateError(
                f"agent {a}: {int(queued[a])} message(s) queued by the counts, {int(total[a])} known addressed to it"
            )
        ends = np.cumsum(total)
        heads = np.full(n, -1, dtype=np.int64)
        waiting = np.flatnonzero(queued > 0)
        heads[waiting] = ids[order[ends[waiting] - queued[waiting]]]
        return array("q", heads.tobytes())
