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

A log keeps an entry until every subscriber has read past it (see
:mod:`megaactors.runtime.channel_log`). The asyncio runtime keeps, per log, the set
of its Idle subscribers, so that a broadcast wakes only them; the simulation opens a
log at its first broadcast (``lazy``) and takes batches without listing their
packets (:meth:`Mailboxes.take_later`), so that reading costs nothing per message
unless its behaviour looks at them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

from megaactors.core.messages import ADMIN, INTRA, Packet
from megaactors.core.organisation import Organisation
from megaactors.core.peer_view import Without, member_position, without
from megaactors.runtime.channel_log import ChannelLog, LogSlice, gather, leads
from megaactors.runtime.postman import is_broadcast

__all__ = ["ChannelLog", "LogSlice", "Mailboxes", "Without", "gather", "leads"]

_copy_bytes = attrgetter("copy_bytes")


def _span(members: list[int]) -> Sequence[int]:
    """``members`` as a ``range`` when they are consecutive ascending ids, else itself."""
    span = range(members[0], members[0] + len(members)) if members else range(0)
    return span if members == list(span) else members


class Mailboxes:
    """The in-queues of the agents one process runs: each agent's private in-queue
    (``inboxes[a]``, its ``agent.inbox``) plus the logs of the channels it reads.

    With ``lazy`` a log is opened (every member of its channel subscribed at its
    start) when the first broadcast is posted to it, so channels nobody broadcasts
    on cost nothing; this suits a runtime that finds Idle readers itself. Otherwise
    every log is opened up front, as the per-log sets of Idle readers need."""

    def __init__(
        self,
        org: Organisation,
        inboxes: list[list[Packet]],
        local: range | None = None,
        *,
        lazy: bool = False,
        ids: list[int] | None = None,
    ) -> None:
        self.org = org
        self.inboxes = inboxes
        self.ids = ids
        """The int objects a runtime names its agents by (``agent.id``, by id), if it
        passes them: the logs' cursors are keyed by these very objects, so that a
        lookup by ``agent.id`` matches its key by identity instead of reading another
        int, scattered over the heap, to compare it (one cache line fewer a look)."""
        self.local = local
        """Ids of the agents this process runs (``None``: every agent, recruits too)."""
        self.lazy = lazy
        self.group_logs: dict[int, ChannelLog] = {}
        self.admin_log = ChannelLog(complete=self._all_local(org.admins))
        self._admins_open = not lazy
        self.reads: list[tuple[ChannelLog, ...]] = [()] * org.n
        """Agent -> the logs it reads."""
        self.dirty: set[ChannelLog] = set()
        """Logs posted to since the runtime last woke their Idle readers."""
        self.admins_sorted = org.admins == sorted(org.admins)
        self._spans: dict[int, Sequence[int]] = {}
        """Group -> its members as a ``range`` if they are consecutive ids, else the list
        (recomputed when the group grows)."""
        if not lazy:
            self._subscribe_all()

    def _subscribe_all(self) -> None:
        """Every agent this process runs reads the logs of the groups it is in (as
        member or admin) and, if an admin, the admins' log (what :meth:`subscribe`
        does one agent at a time)."""
        for g in range(len(self.org.groups)):
            self._open(g)
        self._open_admins()

    def _local(self, members: list[int]) -> list[int]:
        local = self.local
        return members if local is None else [m for m in members if m in local]

    def _open(self, g: int) -> ChannelLog | None:
        """Make the log of group ``g``, every member this process runs subscribed at
        its start (None when it runs none)."""
        members = self.org.groups[g]
        mine = self._local(members)
        if not mine:
            return None
        log = self.group_logs[g] = ChannelLog(complete=len(mine) == len(members))
        log.cursors = dict.fromkeys(self._keys(mine), log.end)
        reads, only = self.reads, (log,)
        for m in mine:  # one tuple shared by the members that read this log alone (fewer cache lines)
            reads[m] = reads[m] + only if reads[m] else only
        return log

    def _open_admins(self) -> None:
        log, reads = self.admin_log, self.reads
        admins = self._local(self.org.admins)
        log.cursors = dict.fromkeys(self._keys(admins), log.end)
        for a in admins:
            reads[a] += (log,)
        self._admins_open = True

    def _keys(self, members: list[int]) -> list[int]:
        """``members`` as the objects of :attr:`ids` (themselves without ids)."""
        ids = self.ids
        if ids is None:
            return members
        known = len(ids)
        return [ids[m] if m < known else m for m in members]

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
        groups = [g for g in dict.fromkeys((mg, ag)) if g >= 0]
        if self.lazy:  # a log not opened yet will subscribe its members when it is
            logs = [self.group_logs[g] for g in groups if g in self.group_logs]
        else:
            logs = [self._group_log(g) for g in groups]
        if ag >= 0 and self._admins_open:
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
            packet.recipients = Without(members, member_position(members, sender), len(members))

    def posts_for(self, sender: int, channel: str) -> tuple[ChannelLog, ...]:
        """The logs a broadcast by ``sender`` on ``channel`` goes to (those this
        process holds; a lazy one is opened here)."""
        if channel == ADMIN:
            if not self._admins_open:
                self._open_admins()
            return (self.admin_log,)
        if channel != INTRA:
            return ()
        org, logs = self.org, self.group_logs
        mg, ag = org.member_group[sender], org.admin_group[sender]
        found = [logs.get(mg) if mg >= 0 else None, logs.get(ag) if 0 <= ag != mg else None]
        if self.lazy:
            if found[0] is None and mg >= 0:
                found[0] = self._open(mg)
            if found[1] is None and 0 <= ag != mg:
                found[1] = self._open(ag)
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

    def share(self, packet: Packet) -> Sequence[int]:
        """:meth:`compact` a broadcast and append it to its logs, in one pass, for a
        runtime that finds the Idle ones among its recipients itself; return where
        to look for them: its recipients in order, possibly with its sender among
        them (a ``range`` when they are a group of consecutive ids, which a runtime
        may scan in bulk)."""
        sender = packet.sender
        span: Sequence[int] | None = ()
        if packet.channel == ADMIN:
            if not self._admins_open:
                self._open_admins()
            log: ChannelLog | None = self.admin_log
            members = self.org.admins
        else:
            org = self.org
            mg, ag = org.member_group[sender], org.admin_group[sender]
            if 0 <= ag != mg:  # an agent of one group that administers another: two logs
                for log in self.posts_for(sender, INTRA):
                    log.post(packet, sender)
                return packet.recipients
            members = org.groups[mg]
            log = self.group_logs.get(mg)
            if log is None:
                log = self._open(mg)
            span = self._spans.get(mg)
            if span is None or len(span) != len(members):
                span = self._spans[mg] = _span(members)
        recipients = packet.recipients
        if type(recipients) is not Without and len(recipients) == len(members) - 1:  # a view is one already
            packet.recipients = without(members, member_position(members, sender), len(members))
        if log is not None:
            log.post(packet, sender)
        return span if type(span) is range else members

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

    def most_queued(self) -> int:
        """The most messages waiting for any one agent (``max`` of :meth:`queued`):
        from the in-queues' lengths alone when every log has been read to its end,
        as at the end of a run, else agent by agent."""
        if all(min(log.cursors.values(), default=log.end) == log.end for log in self._logs()):
            return max(map(len, self.inboxes), default=0)
        return max(map(self.queued, range(len(self.inboxes))), default=0)

    def head(self, agent: int) -> int:
        """``first_id`` of the first packet waiting for ``agent`` (-1: none). Every
        packet addressed to it from that one on waits for it too (a batch takes
        everything)."""
        inbox = self.inboxes[agent]
        best = inbox[0].first_id if inbox else -1
        for log in self.reads[agent]:
            at = log.cursors[agent]
            if at < log.end:  # the entry at a cursor is never the reader's own
                first = log.packets[at - log.base].first_id
                if best < 0 or first < best:
                    best = first
        return best

    def live(self) -> dict[int, Packet]:
        """Every packet some agent has yet to read, by ``first_id`` (a log's entries
        from its lowest cursor on)."""
        packets = {p.first_id: p for inbox in self.inboxes for p in inbox}
        for log in self._logs():
            low = min(log.cursors.values(), default=log.end)
            packets.update((p.first_id, p) for p in log.packets[low - log.base :])
        return packets

    def refill(self, packets: Iterable[Packet], heads: Sequence[int]) -> None:
        """Rebuild every in-queue from ``packets`` (in id order, every one some agent
        had yet to read) and each agent's :meth:`head`: an agent reads the packets
        addressed to it from its head on. A broadcast (as the organisation stands)
        goes to its logs, anything else to the private in-queues."""
        org, inboxes = self.org, self.inboxes
        for inbox in inboxes:
            inbox.clear()
        self.group_logs, self.admin_log = {}, ChannelLog(complete=self._all_local(org.admins))
        self.reads[:] = [()] * org.n  # in place: a runtime may hold on to the list
        self.dirty = set()
        self._admins_open = False
        if not self.lazy:
            self._subscribe_all()
        posted: dict[ChannelLog, list[Packet]] = {}
        for p in packets:
            if is_broadcast(org, p.sender, list(p.recipients), p.channel):
                self.compact(p)
                for log in self.posts_for(p.sender, p.channel):
                    posted.setdefault(log, []).append(p)
                continue
            for r in p.recipients:
                if 0 <= heads[r] <= p.first_id:
                    inboxes[r].append(p)
        for log in self._logs():
            log.refill(posted.get(log, []), heads)

    def _logs(self) -> list[ChannelLog]:
        return [*self.group_logs.values(), *([self.admin_log] if self._admins_open else [])]

    def take(self, agent: int) -> tuple[list[Packet], int]:
        """Empty ``agent``'s in-queues: the packet of each message, by message id when
        they come from more than one queue, and the sum of their ``copy_bytes``."""
        _, nbytes, parts = self.take_later(agent)
        return gather(parts), nbytes

    def take_later(self, agent: int) -> tuple[int, int, list[list[Packet] | LogSlice]]:
        """Empty ``agent``'s in-queues as :meth:`take` does, but return the number of
        messages, the sum of their ``copy_bytes`` and the parts that :func:`gather`
        lists their packets from: nothing is done per message until then."""
        inbox = self.inboxes[agent]
        parts: list[list[Packet] | LogSlice] = []
        count = nbytes = 0
        if inbox:
            private = inbox.copy()
            inbox.clear()
            parts.append(private)
            count, nbytes = len(private), sum(map(_copy_bytes, private))
        for log in self.reads[agent]:
            if log.cursors[agent] < log.end:
                part, unread, size = log.take(agent)  # type: ignore[misc]
                parts.append(part)
                count += unread
                nbytes += size
        return count, nbytes, parts

    def idle(self, agent: int) -> None:
        """``agent`` waits: a post to one of its logs must wake it."""
        for log in self.reads[agent]:
            log.idle.add(agent)

    def busy(self, agent: int) -> None:
        """``agent`` was woken."""
        for log in self.reads[agent]:
            log.idle.discard(agent)
