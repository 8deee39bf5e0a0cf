"""A shared log of broadcasts that each subscriber reads from its own cursor.

A broadcast to a whole group or to every other admin is one entry in the channel's
:class:`ChannelLog`, whatever the number of members; each member reads the log from
its own cursor (skipping what it posted itself) and a running sum of the entries'
``copy_bytes`` gives the size of what it read without walking it, and a column of
the entries' leading payload fields (:func:`~megaactors.core.messages.lead`) lets a reader count what it read
without touching a packet (:func:`leads`). A log keeps an
entry until every subscriber has read past it, and never changes a list of entries
it has handed out (:data:`LogSlice`): it appends, or replaces the list, so a reader
may list the packets it took later, or never. The packet of a broadcast lists its
recipients as a :class:`~megaactors.core.peer_view.Without` view of the organisation's own member list (same
ids, same order) rather than a list per send.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate, chain, pairwise
from operator import attrgetter
from typing import cast

from megaactors.core.messages import Packet, lead
from megaactors.core.shared_ints import SHARED_BELOW, SHARED_COUNTS

__all__ = ["ChannelLog", "LogSlice", "gather", "leads"]

_copy_bytes = attrgetter("copy_bytes")
_first_id = attrgetter("first_id")
_MIN_TRIM = 64


class ChannelLog:
    """The packets broadcast to the subscribers of one channel, oldest first, with a
    read cursor per subscriber (absolute positions: ``base`` entries were dropped)."""

    __slots__ = ("base", "behind", "complete", "cursors", "end", "idle", "leads", "mine", "packets", "sums", "trim_at")

    def __init__(self, complete: bool = True) -> None:
        self.base = 0
        """Entries dropped from the front (read by every subscriber)."""
        self.end = 0
        """Entries ever posted: the position of the next one."""
        self.packets: list[Packet] = []
        self.sums = [0]
        """Running sums of ``copy_bytes``: ``sums[i]`` covers ``packets[:i]``."""
        self.leads: list[object] = []
        """The :func:`~megaactors.core.messages.lead` of each packet's payload (``leads[i]`` of ``packets[i]``): a
        reader counts these in one contiguous list instead of visiting every packet."""
        self.cursors: dict[int, int] = {}
        """Subscriber -> position of its first unread entry."""
        self.mine: dict[int, list[int]] = {}
        """Subscriber -> positions of its own posts that lie past its cursor."""
        self.idle: set[int] = set()
        """Subscribers that wait for a message (kept by the runtime)."""
        self.complete = complete
        """Whether every member of the channel subscribes here (one process)."""
        self.trim_at = _MIN_TRIM
        self.behind = 0
        """Subscribers with something unread: at 0 the log is emptied."""

    def subscribe(self, agent: int) -> None:
        """Make ``agent`` a reader from now on (no-op if it is one)."""
        self.cursors.setdefault(agent, self.end)

    def post(self, packet: Packet, sender: int) -> None:
        """Append a broadcast by ``sender``, which never reads its own posts."""
        at = self.end
        self.packets.append(packet)
        payload = packet.payload  # lead(payload), inlined: this runs once per broadcast
        self.leads.append(payload[0] if isinstance(payload, (list, tuple)) and payload else None)
        sums = self.sums
        total = sums[-1] + packet.copy_bytes
        sums.append(SHARED_COUNTS[total] if total < SHARED_BELOW else total)  # freed with the log's entries, cold
        self.end = at + 1
        self.behind = len(self.cursors)
        cursor = self.cursors.get(sender)
        if cursor is not None:
            if cursor == at:  # nothing else unread: read past its own post at once
                self.cursors[sender] = at + 1
                self.behind -= 1
            else:
                self.mine.setdefault(sender, []).append(at)
        if len(self.packets) >= self.trim_at:
            self._trim()

    def _trim(self) -> None:
        """Drop the entries every subscriber has read. It costs one look at every
        cursor, so it runs once the log has grown by as many entries as it has
        subscribers: amortised O(1) per post (a log that everyone has read to the
        end is emptied at once by :meth:`read`)."""
        low = min(self.cursors.values(), default=self.end)
        cut = low - self.base
        if cut > 0:  # new lists: slices handed out by take() stay valid
            self.packets = self.packets[cut:]
            self.leads = self.leads[cut:]
            self.sums = self.sums[cut:]
            self.base = low
        self.trim_at = len(self.packets) + max(_MIN_TRIM, len(self.cursors))

    def refill(self, packets: list[Packet], heads: Sequence[int]) -> None:
        """Hold ``packets`` (in id order), each subscriber's cursor at the first one
        not its own from id ``heads[subscriber]`` on (at the end for -1)."""
        self.packets, self.base, self.end = packets, 0, len(packets)
        self.sums = list(accumulate(map(_copy_bytes, packets), initial=0))
        self.leads = [lead(p.payload) for p in packets]
        ids = list(map(_first_id, packets))
        own: dict[int, list[int]] = {}
        for at, p in enumerate(packets):
            own.setdefault(p.sender, []).append(at)
        self.mine, behind = {}, 0
        for s in self.cursors:
            at = self.end if heads[s] < 0 else bisect_left(ids, heads[s])
            while at < self.end and packets[at].sender == s:
                at += 1
            self.cursors[s] = at
            if at < self.end:
                behind += 1
                later = [i for i in own.get(s, ()) if i > at]
                if later:
                    self.mine[s] = later
        self.behind = behind
        self.trim_at = len(packets) + max(_MIN_TRIM, len(self.cursors))

    def unread(self, agent: int) -> int:
        """Messages waiting here for ``agent``."""
        return self.end - self.cursors[agent] - len(self.mine.get(agent, ()))

    def take(self, agent: int) -> tuple[LogSlice, int, int] | None:
        """Everything ``agent`` has not read yet, as a :data:`LogSlice` of this log
        (nothing is copied), how many messages that is and the sum of their
        ``copy_bytes``; the cursor moves to the end. None when nothing is unread."""
        cursors, base, packets, column = self.cursors, self.base, self.packets, self.leads
        start, stop = cursors[agent] - base, len(packets)
        if start == stop:
            return None
        cursors[agent] = self.end
        sums = self.sums
        nbytes = sums[stop] - sums[start]
        skip: list[int] | tuple[()] = ()
        if self.mine:
            own = self.mine.pop(agent, None)
            if own is not None:
                skip = [at - base - start for at in own]
                for i in skip:
                    nbytes -= packets[start + i].copy_bytes
        self.behind -= 1
        if not self.behind:  # everyone has read everything
            self.packets, self.leads, self.sums, self.base = [], [], [0], self.end
        return (packets, start, stop, skip, column), stop - start - len(skip), nbytes

    def read(self, agent: int) -> tuple[list[Packet], int]:
        """Everything ``agent`` has not read yet (its own posts left out) and the sum
        of their ``copy_bytes``; the cursor moves to the end."""
        taken = self.take(agent)
        if taken is None:
            return [], 0
        return _slice_packets(taken[0]), taken[2]


LogSlice = tuple[list[Packet], int, int, "list[int] | tuple[()]", list[object]]
"""``(packets, start, stop, skip, leads)``: ``packets[start:stop]`` but the positions in
``skip`` (counted from ``start``, ascending), and ``leads`` the log's column of their
:func:`~megaactors.core.messages.lead` s, in step with ``packets``. A log never changes a list it has handed out
in a slice: it appends, or replaces the list."""


def _slice_packets(part: LogSlice) -> list[Packet]:
    packets, start, stop, skip, _ = part
    taken = packets[start:stop]
    for i in reversed(skip):
        del taken[i]
    return taken


def leads(parts: list[list[Packet] | LogSlice]) -> list[object] | None:
    """The :func:`~megaactors.core.messages.lead` of each message of a batch (its
    parts from :meth:`Mailboxes.take_later`), in message-id order as :func:`gather`
    lists them: a log slice's from the log's column, a private in-queue's from its
    packets; several parts are put in order by their packets' ids alone (no Python
    call per message). None for a batch of one private in-queue (its packets are
    listed anyway)."""
    if len(parts) == 1:
        part = parts[0]
        if type(part) is list:
            return None
        _, start, stop, skip, column = cast(LogSlice, part)  # _slice_leads, inlined: one log's slice
        taken = column[start:stop]
        for i in reversed(skip):
            del taken[i]
        return taken
    cols: list[tuple[list[int], list[object]]] = []
    for part in parts:
        if type(part) is list:
            ids, column = list(map(_first_id, part)), [lead(p.payload) for p in part]
        else:
            packets, start, stop, skip, _ = cast(LogSlice, part)
            ids, column = list(map(_first_id, packets[start:stop])), _slice_leads(cast(LogSlice, part))
            for i in reversed(skip):
                del ids[i]
        if ids:
            cols.append((ids, column))
    cols.sort(key=lambda col: col[0][0])  # as _by_id orders the parts
    if all(a[0][-1] < b[0][0] for a, b in pairwise(cols)):
        return list(chain.from_iterable(column for _, column in cols))
    ids = list(chain.from_iterable(ids for ids, _ in cols))
    column = list(chain.from_iterable(column for _, column in cols))
    return list(map(column.__getitem__, sorted(range(len(ids)), key=ids.__getitem__)))


def _slice_leads(part: LogSlice) -> list[object]:
    _, start, stop, skip, column = part
    taken = column[start:stop]
    for i in reversed(skip):
        del taken[i]
    return taken


def gather(parts: list[list[Packet] | LogSlice]) -> list[Packet]:
    """The packets of a batch's parts (a private in-queue's copy or log slices, from
    :meth:`Mailboxes.take_later`), in message-id order."""
    lists = [part if type(part) is list else _slice_packets(part) for part in parts]  # type: ignore[arg-type]
    if len(lists) < 2:
        return lists[0] if lists else []
    return _by_id(lists)


def _by_id(parts: list[list[Packet]]) -> list[Packet]:
    """Concatenate packet lists, each in id order, into one in id order: in the order
    of their first ids when they do not interleave, else sorted."""
    parts.sort(key=lambda part: part[0].first_id)
    if all(a[-1].first_id < b[0].first_id for a, b in pairwise(parts)):
        return list(chain.from_iterable(parts))
    return sorted(chain.from_iterable(parts), key=_first_id)
