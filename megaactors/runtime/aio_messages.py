"""The asyncio runtime's messages: taking a batch, responding, delivering.

:class:`AsyncioMessages` is the part of :class:`~megaactors.runtime.aio.AsyncioRuntime`
that moves messages: ``take``, ``respond``, ``queued``, ``deliver`` and ``receive`` (a
packet from another process); the runtime sets every attribute it declares. A broadcast
to a whole group or to every admin is one entry in that channel's shared log
(:mod:`megaactors.runtime.mailboxes`), any other send a reference to its packet in each
recipient's private in-queue; a batch takes the agent's private in-queue and its unread
log entries at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from time import monotonic
from typing import TYPE_CHECKING, Any

from megaactors.core.agent import IDLE, PROCESSING, RESPONSE, Agent
from megaactors.core.messages import Batch, Packet
from megaactors.core.peer_view import Without
from megaactors.runtime.mailboxes import gather, leads

if TYPE_CHECKING:
    from megaactors.core.agent import Phase
    from megaactors.core.organisation import Organisation
    from megaactors.core.trace import Trace
    from megaactors.runtime.aio_shards import Router
    from megaactors.runtime.interpreter import Interpreter
    from megaactors.runtime.live_faults import LiveFaults
    from megaactors.runtime.mailboxes import Mailboxes
    from megaactors.runtime.postman import Postman

__all__ = ["AsyncioMessages"]

_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend  # runs an iterator to its end at C speed
_append = list.append
_new = object.__new__


class AsyncioMessages:
    """How messages travel on one event loop (a part of ``AsyncioRuntime``)."""

    org: Organisation
    core: Interpreter
    trace: Trace | None
    postman: Postman
    mailboxes: Mailboxes | None
    inboxes: list[list[Packet]]
    router: Router | None
    live_faults: LiveFaults | None
    time_scale: float
    wall_clock: bool
    _t0: float
    _dirty: set[int]
    _waking: bool

    if TYPE_CHECKING:  # the runtime's; for the type checker alone (a stub here would precede LiveRuntime's)

        def now(self) -> float: ...

        def move(self, a: Agent, to: Phase) -> None: ...

        def account_batch(self, a: Agent, batch: Batch, nbytes: int) -> None: ...

        def wake_soon(self) -> None: ...

    def take(self, a: Agent, woken: bool) -> Batch:
        """``a`` enters Processing with its private in-queue and its unread log entries as one
        batch (:meth:`LiveRuntime.take <megaactors.runtime.live.LiveRuntime.take>`)."""
        if self.trace is None and a.phase is not PROCESSING:  # Agent.transition, inlined: the legal move
            a.phase = PROCESSING
        else:
            self.move(a, PROCESSING)
        aid, inbox = a.id, a.inbox
        if inbox:
            count, copy_bytes, parts = self.mailboxes.take_later(aid)  # type: ignore[union-attr]
        else:  # its logs alone (Mailboxes.take_later, inlined: the commonest batch of a chat)
            count = copy_bytes = 0
            parts = []
            for log in self.mailboxes.reads[aid]:  # type: ignore[union-attr]
                cursors = log.cursors
                start = cursors[aid] - log.base
                if start == len(log.packets):  # nothing unread here
                    continue
                if log.mine:  # some of its own posts to leave out: ChannelLog.take sees to them
                    part, unread, size = log.take(aid)  # type: ignore[misc]
                    parts.append(part)
                    count += unread
                    copy_bytes += size
                    continue
                packets, sums, stop = log.packets, log.sums, len(log.packets)  # ChannelLog.take, inlined
                parts.append((packets, start, stop, (), log.leads))
                count += stop - start
                copy_bytes += sums[stop] - sums[start]
                cursors[aid] = log.end
                log.behind -= 1
                if not log.behind:  # everyone has read everything
                    log.packets, log.leads, log.sums, log.base = [], [], [0], log.end
        if len(parts) == 1 and type(parts[0]) is list:  # its private in-queue alone
            batch = Batch(aid, parts[0])
        else:  # packets listed if asked for; leads read from a log's column (see Batch.deferred)
            batch = Batch.deferred(aid, count, gather, parts, leads)
        nbytes = self.postman.account_batch(aid, count, copy_bytes)
        if self.trace is None:  # LiveRuntime.account_batch, inlined
            a.batch_tokens = -(-nbytes // self.core.bytes_per_token)
        else:
            self.account_batch(a, batch, nbytes)
        return batch

    def respond(self, a: Agent) -> tuple[bool, Batch | None]:
        """``a`` enters Response, delivers its out-queue and goes Idle unless a message waits
        (:meth:`LiveRuntime.respond <megaactors.runtime.live.LiveRuntime.respond>`)."""
        plain = self.trace is None and a.phase is PROCESSING  # Agent.transition, inlined: the legal moves
        if plain:
            a.phase = RESPONSE
        else:
            self.move(a, RESPONSE)
        if a.outbox:
            self.deliver(a)
        aid = a.id
        if a.inbox:
            return False, None
        for log in self.mailboxes.reads[aid]:  # type: ignore[union-attr]  # Mailboxes.pending, inlined
            if log.cursors[aid] < log.end:
                return False, None
        if plain:
            a.phase = IDLE
        else:
            self.move(a, IDLE)
        return True, None

    def queued(self, a: Agent) -> int:
        """How many messages wait for ``a``: its private in-queue and its logs."""
        return len(a.inbox) if self.mailboxes is None else self.mailboxes.queued(a.id)

    def deliver(self, a: Agent) -> None:
        """Flush the out-queue: a broadcast into its channel log(s), any other send
        as a packet reference into each recipient's private in-queue; what is for
        agents of other processes goes through the router."""
        now = (monotonic() - self._t0) / self.time_scale if self.wall_clock else self.now()  # now(), inlined
        postman, sender, router = self.postman, a.id, self.router
        if self.live_faults is not None:
            self._deliver_copies(a, now)
            return
        mail = self.mailboxes
        stamp, group_logs, groups = postman.stamp, mail.group_logs, self.org.groups  # type: ignore[union-attr]
        for send in a.outbox:
            if router is not None:
                postman.next_message_id = router.reserve(len(send.recipients))
            packets = stamp(sender, send, now)
            if postman.broadcast and len(packets) == 1:
                packet = packets[0]
                if router is None:  # into the sender's logs (compacted), each looked at for Idle readers
                    log = group_logs.get(postman.group)
                    if log is not None:  # its one group's whole log (Mailboxes.share and without, inlined)
                        members = groups[postman.group]
                        view = _new(Without)
                        view.members, view.skip, view.size = members, postman.position, len(members)
                        packet.recipients = view
                        log.post(packet, sender)
                        mail.dirty.add(log)  # type: ignore[union-attr]
                        continue
                    mail.share(packet)  # type: ignore[union-attr]
                    mail.dirty.update(mail.reads[sender])  # type: ignore[union-attr]
                    continue
                mail.compact(packet)  # type: ignore[union-attr]
                if not mail.post(packet):  # type: ignore[union-attr]  # some members live in other processes
                    router.forward(packet, True)
                continue
            inboxes, dirty = self.inboxes, self._dirty
            for packet in packets:
                recipients = packet.recipients
                if router is not None and not (
                    router.local.start <= min(recipients) and max(recipients) < router.local.stop
                ):
                    recipients = router.forward(packet, False)
                _consume(map(_append, map(inboxes.__getitem__, recipients), repeat(packet)))
                dirty.update(recipients)
        a.outbox = []
        if not self._waking:
            self.wake_soon()

    def _deliver_copies(self, a: Agent, now: float) -> None:
        """Flush the out-queue copy by copy through :attr:`live_faults` (into private
        in-queues: a copy may be dropped or repeated for one recipient of a broadcast;
        a run with faults has no shards, hence no router)."""
        stamp, sender, inboxes, dirty = self.postman.stamp, a.id, self.inboxes, self._dirty
        packets = [packet for send in a.outbox for packet in stamp(sender, send, now)]
        for packet, r in self.live_faults.copies(packets, now):  # type: ignore[union-attr]
            inboxes[r].append(packet)
            dirty.add(r)
        a.outbox = []
        self.wake_soon()

    def receive(self, packet: Packet, recipients: Sequence[int] | None) -> None:
        """A packet from another process: for local ``recipients``' private in-queues,
        or (``None``) a broadcast for this process's channel logs."""
        if recipients is None:
            self.mailboxes.post(packet)  # type: ignore[union-attr]
        else:
            _consume(map(_append, map(self.inboxes.__getitem__, recipients), repeat(packet)))
            self._dirty.update(recipients)
