"""What every runtime does with an agent's out-queue and in-queue, whatever carries
the messages: check routes, stamp packets with message ids, account messages and
bytes, and account batches taken.

A runtime asks :meth:`Postman.stamp` for the packets of one :class:`Send` and puts a
reference to each packet into the in-queue of each of its ``recipients``; how it
does that (a list append, an ``asyncio`` wake-up, a pykka ``tell``) is its own
business. The postman is not thread-safe: a threaded runtime calls it under a lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from megaactors.behaviour import Send
from megaactors.ledger import Ledger
from megaactors.messages import ADMIN, HIERARCHY, INTRA, Batch, Packet, int_size, int_size_total
from megaactors.organisation import Organisation, RouteError

__all__ = ["Postman", "check_routes"]

_ID_SIZE_BOUNDS = (128, 256, 65536, 4294967296)
_copy_bytes = attrgetter("copy_bytes")


def check_routes(org: Organisation, sender: int, recipients: Sequence[int], channel: str) -> None:
    """Raise :class:`RouteError` unless ``sender`` may reach every recipient on
    ``channel`` (vectorised for the common cases; the organisation's own check names
    the culprit otherwise)."""
    # a group broadcast is checked by comparing it with the sender's intra-group peers
    big_intra = channel == INTRA and type(recipients) is list and len(recipients) > 8
    if big_intra and 0 <= sender < org.n and recipients == org.group_peers(sender):
        return
    try:
        distinct = set(recipients)
        ok = len(distinct) == len(recipients) and sender not in distinct and bool(distinct) and min(distinct) >= 0
        if not ok and len(distinct) != len(recipients):
            dup = next(r for i, r in enumerate(recipients) if r in recipients[:i])
            raise RouteError(f"agent {sender} lists recipient {dup} twice in one send on channel {channel!r}")
        if ok:
            mg, ag, par = org.member_group, org.admin_group, org.parent
            if channel == INTRA:
                own = {mg[sender], ag[sender]}
                own.discard(-1)
                ok = set(map(mg.__getitem__, distinct)) <= own or all(mg[r] in own or ag[r] in own for r in distinct)
            elif channel == ADMIN:
                ok = ag[sender] >= 0 and min(map(ag.__getitem__, distinct)) >= 0
            elif channel == HIERARCHY:
                ok = set(map(par.__getitem__, distinct)) == {sender} or all(
                    r == par[sender] or par[r] == sender for r in distinct
                )
            else:
                ok = False
    except IndexError:
        ok = False
    except TypeError as exc:
        raise RouteError(f"agent {sender}: recipients must be agent ids, got {list(recipients)[:5]!r}") from exc
    if not ok:
        if not recipients:
            raise RouteError(f"agent {sender} sent on channel {channel!r} to no recipient")
        for r in recipients:
            org.check_route(sender, r, channel)
        raise RouteError(f"disallowed route from agent {sender} on channel {channel!r}")


def _uniform_id_parts(recipients: Sequence[int], first_id: int) -> list[Sequence[int]]:
    """Split ``recipients`` where their consecutive message ids change encoded size."""
    last = first_id + len(recipients)
    for bound in _ID_SIZE_BOUNDS:
        if first_id < bound < last:
            cut = bound - first_id
            return [recipients[:cut], *_uniform_id_parts(recipients[cut:], bound)]
    return [recipients]


class Postman:
    """Routes, stamps and accounts messages for one run."""

    def __init__(self, org: Organisation, ledger: Ledger, next_message_id: int = 0) -> None:
        self.org = org
        self.ledger = ledger
        self.next_message_id = next_message_id
        self._sizes = b""
        per_agent = ledger.per_agent
        self._sent, self._bytes_sent = per_agent["sent"], per_agent["bytes_sent"]
        self._batches, self._received = per_agent["batches"], per_agent["received"]
        self._bytes_received = per_agent["bytes_received"]

    def recipient_sizes(self) -> bytes:
        """``int_size(r)`` for every agent id ``r``, as a lookup table."""
        n = self.org.n
        if len(self._sizes) < n:
            n = max(n, 2 * len(self._sizes))
            table = b"\x01" * min(n, 128) + b"\x02" * max(0, min(n, 256) - 128)
            table += b"\x03" * max(0, min(n, 65536) - 256) + b"\x05" * max(0, n - 65536)
            self._sizes = table
        return self._sizes

    def stamp(self, sender: int, send: Send, now: float) -> list[Packet]:
        """The packets of one send, routed and accounted: usually one; more when the
        message ids cross a size boundary (every copy of a packet has the same size
        but for its recipient)."""
        recipients, channel = send.recipients, send.channel
        check_routes(self.org, sender, recipients, channel)
        first = self.next_message_id
        packets = []
        mid = first
        for part in _uniform_id_parts(recipients, first):
            packets.append(Packet(sender, channel, send.kind, send.payload, send.parent, now, mid, part))
            mid += len(part)
        self.next_message_id = mid
        count = mid - first
        # every envelope is the packet plus its id and its recipient
        sizes = self.recipient_sizes()
        nbytes = count * packets[0].overhead + int_size_total(first, mid) + sum(map(sizes.__getitem__, recipients))
        ledger = self.ledger
        ledger.messages += count
        ledger.bytes += nbytes
        ledger.messages_by_channel[channel] += count
        ledger.bytes_by_channel[channel] += nbytes
        self._sent[sender] += count
        self._bytes_sent[sender] += nbytes
        return packets

    def take(self, batch: Batch) -> int:
        """Account a batch taken from an in-queue; return its size in bytes."""
        packets, aid = batch.packets, batch.recipient
        size = len(packets)
        # Batch.nbytes, inlined: this runs once per batch
        nbytes = sum(map(_copy_bytes, packets)) + size * int_size(aid)
        self._batches[aid] += 1
        self._received[aid] += size
        self._bytes_received[aid] += nbytes
        if size > self.ledger.peak_queue_depth:
            self.ledger.peak_queue_depth = size
        return nbytes
