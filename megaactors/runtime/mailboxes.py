"""In-queues that share one log per conversation: what a group chat really is.

A broadcast to a whole group (``org.group_peers(sender)``) or to every other admin
(``org.admin_peers(sender)``) is one entry in that group's or the admins' shared
:class:`ChannelLog`, whatever the number of members. Each member reads the log from
its own cursor: taking a batch slices every log it belongs to from its cursor to
the end (skipping what it posted itself) and moves the cursor to the end. Any
other send goes, as before, into the private in-queue (``agent.inbox``) of each
recipient. Delivering a broadcast therefore costs O(1), whatever the group size;
reading costs one slice per log, and a running sum of the entries' ``copy_bytes``
gives a batch's size in bytes without walking it.

Every message is still one message: a batch holds one packet reference per
message addressed to the agent, and counts, bytes and ids are those of per-recipient
delivery. Each queue keeps arrival order; a batch that gathers several queues (the
private one, a group log, the admin log) whose messages interleave lists them by
message id. In a one-process run that is exactly arrival order, since ids are
handed out as messages are delivered; in a sharded run a message from another
process may come later than its id says.

A log keeps an entry until every subscriber has read past it; the runtime keeps,
per log, the set of its Idle subscribers, so that a broadcast wakes only them. The
packet of a broadcast lists its recipients as a :class:`Without` view of the
organisation's own member list (same ids, same order) rather than a list per send.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice, pairwise
from operator import attrgetter
from typing import Any, overload

from megaactors.core.messages import ADMIN, INTRA, Packet
from megaactors.core.organisation import Organisation

__all__ = ["ChannelLog", "Mailboxes", "Without"]

_copy_bytes = attrgetter("copy_bytes")
_first_id = attrgetter("first_id")
_MIN_TRIM = 64


class Without(Sequence[int]):
    """The first ``size`` ids of ``members`` but the one at position ``skip``: the
    recipients of a broadcast (a group or the admins less the sender) in a few
    bytes instead of a list of them all. ``members`` only ever grows at its end."""

    __slots__ = ("members", "size", "skip")

    def __init__(self, members: list[int], skip: int, size: int) -> None:
        self.members = members
        self.skip = skip
        self.size = size

    def __len__(self) -> int:
        return self.size - 1

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self.size - 1)
            if step != 1:
                return self.as_list()[index]
            members, skip = self.members, self.skip  # positions from skip on are one further
            head = members[start : min(stop, skip)] if start < skip else []
            return head + members[max(start, skip) + 1 : stop + 1] if stop > skip else head
        count = self.size - 1
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("recipient index out of range")
        return self.members[index + (index >= self.skip)]

    def __iter__(self) -> Iterator[int]:
        members, skip = self.members, self.skip
        return chain(islice(members, skip), islice(members, skip + 1, self.size))

    def as_list(self) -> list[int]:
        members, skip = self.members, self.skip
        return members[:skip] + members[skip + 1 : self.size]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Without):
            other = other.as_list()
        return isinstance(other, (list, tuple)) and self.as_list() == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Without({self.as_list()!r})"


def _position(members: list[int], a: int) -> int:
    """Where ``a`` is in ``members``, guessed from consecutive or sorted ids first."""
    i = a - members[0]
    if 0 <= i < len(members) and members[i] == a:
        return i
    i = bisect_left(members, a)
    if i < len(members) and members[i] == a:
        return i
    return members.index(a)


class ChannelLog:
    """The packets broadcast to the subscribers of one channel, oldest first, with a
    read cursor per subscriber (absolute positions: ``base`` entries were dropped)."""

    __slots__ = ("base", "behind", "complete", "cursors", "end", "idle", "mine", "packets", "sums", "trim_at")

    def __init__(self, complete: bool = True) -> None:
        self.base = 0
        """Entries dropped from the front (read by every subscriber)."""
        self.end = 0
        """Entries ever posted: the position of the next one."""
        self.packets: list[Packet] = []
        self.sums = [0]
        """Running sums of ``copy_bytes``: ``sums[i]`` covers ``packets[:i]``."""
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
        sums = self.sums
        sums.append(sums[-1] + packet.copy_bytes)
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
        if cut > 0:
            del self.packets[:cut]
            del self.sums[:cut]
            self.base = low
        self.trim_at = len(self.packets) + max(_MIN_TRIM, len(self.cursors))

    def unread(self, agent: int) -> int:
        """Messages waiting here for ``agent``."""
        return self.end - self.cursors[agent] - len(self.mine.get(agent, ()))

    def read(self, agent: int) -> tuple[list[Packet], int]:
        """Everything ``agent`` has not read yet (its own posts left out) and the sum
        of their ``copy_bytes``; the cursor moves to the end."""
        base, packets, sums = self.base, self.packets, self.sums
        start, stop = self.cursors[agent] - base, len(packets)
        if start == stop:
            return [], 0
        self.cursors[agent] = self.end
        taken, nbytes = packets[start:stop], sums[stop] - sums[start]
        own = self.mine.pop(agent, None)
        if own is not None:
            for at in reversed(own):
                nbytes -= taken.pop(at - base - start).copy_bytes
        self.behind -= 1
        if not self.behind:  # everyone has read everything
            self.packets, self.sums, self.base = [], [0], self.end
        return taken, nbytes


class Mailboxes:
    """The in-queues of the agents one process runs: each agent's private in-queue
    (``inboxes[a]``, its ``agent.inbox``) plus the logs of the channels it reads."""

    def __init__(self, org: Organisation, inboxes: list[list[Packet]], local: range | None = None) -> None:
        self.org = org
        self.inboxes = inboxes
        self.local = local
        """Ids of the agents this process runs (``None``: every agent, recruits too)."""
        self.group_logs: dict[int, ChannelLog] = {}
        self.admin_log = ChannelLog(complete=self._all_local(org.admins))
        self.reads: list[tuple[ChannelLog, ...]] = [()] * org.n
        """Agent -> the logs it reads."""
        self.dirty: set[ChannelLog] = set()
        """Logs posted to since the runtime last woke their Idle readers."""
        self.admins_sorted = org.admins == sorted(org.admins)
        self._subscribe_all()

    def _subscribe_all(self) -> None:
        """Every agent this process runs reads the logs of the groups it is in (as
        member or admin) and, if an admin, the admins' log (what :meth:`subscribe`
        does one agent at a time)."""
        org, local, reads = self.org, self.local, self.reads
        for g, members in enumerate(org.groups):
            mine = members if local is None else [m for m in members if m in local]
            if mine:
                log = self.group_logs[g] = ChannelLog(complete=len(mine) == len(members))
                log.cursors = dict.fromkeys(mine, 0)
                for m in mine:
                    reads[m] += (log,)
        admins = org.admins if local is None else [a for a in org.admins if a in local]
        self.admin_log.cursors = dict.fromkeys(admins, 0)
        for a in admins:
            reads[a] += (self.admin_log,)

    def _all_local(self, members: Iterable[int]) -> bool:
        local = self.local
        return local is None or all(m in local for m in members)

    def _group_log(self, g: int) -> ChannelLog:
        log = self.group_logs.get(g)
        if log is None:
            log = self.group_logs[g] = ChannelLog(complete=self._all_local(self.org.groups[g]))
        return log

    def subscribe(self, agent: int) -> None:
        """(Re)compute the logs ``agent`` reads from the organisation: its member
        group, the group it administers and, if it is an admin, the admins' log. A
        new subscription starts at the end of the log."""
        org = self.org
        reads = self.reads
        if len(reads) < org.n:
            reads.extend([()] * (org.n - len(reads)))
        mg, ag = org.member_group[agent], org.admin_group[agent]
        logs = [self._group_log(g) for g in dict.fromkeys((mg, ag)) if g >= 0]
        if ag >= 0:
            logs.append(self.admin_log)
        for log in logs:
            log.subscribe(agent)
        reads[agent] = tuple(logs)

    def compact(self, packet: Packet) -> None:
        """Swap the recipient list of a broadcast for a :class:`Without` view of the
        organisation's own list where there is one (the admins, a single group):
        the same ids in the same order, without a list per send."""
        org, sender = self.org, packet.sender
        if packet.channel == ADMIN:
            members: Any = org.admins
        else:
            groups = {org.member_group[sender], org.admin_group[sender]} - {-1}
            if len(groups) != 1:
                return
            members = org.groups[groups.pop()]
        if len(packet.recipients) == len(members) - 1:
            packet.recipients = Without(members, _position(members, sender), len(members))

    def posts_for(self, sender: int, channel: str) -> tuple[ChannelLog, ...]:
        """The logs a broadcast by ``sender`` on ``channel`` goes to (those this
        process holds)."""
        if channel == ADMIN:
            return (self.admin_log,)
        if channel != INTRA:
            return ()
        org, logs = self.org, self.group_logs
        mg, ag = org.member_group[sender], org.admin_group[sender]
        found = (logs.get(mg) if mg >= 0 else None, logs.get(ag) if 0 <= ag != mg else None)
        return tuple(log for log in found if log is not None)

    def post(self, packet: Packet) -> bool:
        """Deliver a broadcast (``is_broadcast`` of its send) to its logs; return
        whether that reached every recipient (no member is in another process)."""
        complete = True
        sender = packet.sender
        for log in self.posts_for(sender, packet.channel):
            log.post(packet, sender)
            self.dirty.add(log)
            complete = complete and log.complete
        return complete

    def pending(self, agent: int) -> bool:
        """Whether a message waits for ``agent``."""
        if self.inboxes[agent]:
            return True
        for log in self.reads[agent]:  # noqa: SIM110 (a loop is cheaper than any() here)
            if log.cursors[agent] < log.end:
                return True
        return False

    def queued(self, agent: int) -> int:
        """How many messages wait for ``agent``."""
        return len(self.inboxes[agent]) + sum(log.unread(agent) for log in self.reads[agent])

    def take(self, agent: int) -> tuple[list[Packet], int]:
        """Empty ``agent``'s in-queues: the packet of each message, by message id when
        they come from more than one queue, and the sum of their ``copy_bytes``."""
        inbox = self.inboxes[agent]
        parts: list[list[Packet]] = []
        nbytes = 0
        if inbox:
            parts.append(inbox.copy())
            inbox.clear()
            nbytes = sum(map(_copy_bytes, parts[0]))
        for log in self.reads[agent]:
            if log.cursors[agent] < log.end:
                packets, size = log.read(agent)
                if packets:
                    parts.append(packets)
                    nbytes += size
        if len(parts) == 1:
            return parts[0], nbytes
        if not parts:
            return [], 0
        return _by_id(parts), nbytes

    def idle(self, agent: int) -> None:
        """``agent`` waits: a post to one of its logs must wake it."""
        for log in self.reads[agent]:
            log.idle.add(agent)

    def busy(self, agent: int) -> None:
        """``agent`` was woken."""
        for log in self.reads[agent]:
            log.idle.discard(agent)


def _by_id(parts: list[list[Packet]]) -> list[Packet]:
    """Concatenate packet lists, each in id order, into one in id order: in the order
    of their first ids when they do not interleave, else sorted."""
    parts.sort(key=lambda part: part[0].first_id)
    if all(a[-1].first_id < b[0].first_id for a, b in pairwise(parts)):
        return list(chain.from_iterable(parts))
    return sorted(chain.from_iterable(parts), key=_first_id)
