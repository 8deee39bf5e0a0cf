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

from megaactors.core.agent_columns import FOLD_AT
from megaactors.core.behaviour import Send
from megaactors.core.ledger import Ledger
from megaactors.core.messages import (
    ADMIN,
    HIERARCHY,
    HUMAN,
    HUMAN_SENDER,
    INTRA,
    Batch,
    MessageError,
    Packet,
    check_human_text,
    int_size,
    int_size_total,
    new_packet,
)
from megaactors.core.organisation import Organisation, RouteError
from megaactors.core.peer_view import Without
from megaactors.runtime.machine_link import MachineLink

__all__ = ["Postman", "check_routes", "is_broadcast"]

_ID_SIZE_BOUNDS = (128, 256, 65536, 4294967296)
_copy_bytes = attrgetter("copy_bytes")


def is_broadcast(org: Organisation, sender: int, recipients: Sequence[int], channel: str) -> bool:
    """True if ``recipients`` is exactly ``org.peers(sender, channel)`` (same order) on
    the intra-group or admin channel: a broadcast to the sender's whole group(s) or
    to every other admin. One comparison at C speed, no per-recipient lookup. Never
    on a graph organisation, whose edges are not whole groups."""
    if org.graph is not None:
        return False
    if type(recipients) is not list or not recipients or type(sender) is not int or not 0 <= sender < org.n:
        return False
    count = len(recipients)
    if channel == INTRA:
        mg, ag = org.member_group[sender], org.admin_group[sender]
        groups = org.groups
        if mg >= 0 and not 0 <= ag != mg:  # one group: compared in slices, its peers' list not built
            members = groups[mg]
            i = sender - members[0]
            if 0 <= i < len(members) and members[i] == sender:  # where group_peers finds it first
                return _whole_group(members, i, recipients)
        most = (len(groups[mg]) if mg >= 0 else 0) + (len(groups[ag]) if 0 <= ag != mg else 0)
        return most - 2 <= count <= most and recipients == org.group_peers(sender)
    if channel == ADMIN:
        if org.admin_group[sender] < 0:
            return False
        most = len(org.admins)
        return most - 1 <= count <= most and recipients == org.admin_peers(sender)
    return False


def _whole_group(members: list[int], i: int, recipients: list[int]) -> bool:
    """Whether ``recipients`` is ``members`` without its ``i``-th (same order),
    compared in slices: the peers' list is not built."""
    return len(recipients) == len(members) - 1 and recipients[:i] == members[:i] and recipients[i:] == members[i + 1 :]


def _every_other(view: Without, members: list[int], sender: int) -> bool:
    """Whether ``view`` is the whole of ``members`` less ``sender``."""
    i = view.skip
    return view.members is members and view.size == len(members) and 0 <= i < len(members) and members[i] == sender


def check_routes(org: Organisation, sender: int, recipients: Sequence[int], channel: str) -> bool:
    """Raise :class:`RouteError` unless ``sender`` may reach every recipient on
    ``channel`` (vectorised for the common cases; the organisation's own check names
    the culprit otherwise). Return :func:`is_broadcast` of the send."""
    if org.graph is not None:  # the usual send goes to every edge on the channel
        if not recipients or recipients != org.graph.peers(sender, channel):
            _check_each(org, sender, recipients, channel)
        return False
    if is_broadcast(org, sender, recipients, channel):
        return True
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
        _explain(org, sender, recipients, channel)
    return False


def _explain(org: Organisation, sender: int, recipients: Sequence[int], channel: str) -> None:
    """Raise the :class:`RouteError` that names the first recipient ``sender`` may not reach."""
    _check_each(org, sender, recipients, channel)
    raise RouteError(f"disallowed route from agent {sender} on channel {channel!r}")


def _check_each(org: Organisation, sender: int, recipients: Sequence[int], channel: str) -> None:
    """Raise :class:`RouteError` for the first recipient ``sender`` may not reach (or
    repeats, or for none at all)."""
    if not recipients:
        raise RouteError(f"agent {sender} sent on channel {channel!r} to no recipient")
    if len(recipients) > 1:
        try:
            distinct = len(set(recipients)) == len(recipients)
        except TypeError as exc:
            raise RouteError(f"agent {sender}: recipients must be agent ids, got {list(recipients)[:5]!r}") from exc
        if not distinct:
            dup = next(r for i, r in enumerate(recipients) if r in recipients[:i])
            raise RouteError(f"agent {sender} lists recipient {dup} twice in one send on channel {channel!r}")
    for r in recipients:
        org.check_route(sender, r, channel)


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
        self.broadcast = False
        """Whether the last send stamped went to every peer of its sender on its
        channel (:func:`is_broadcast`)."""
        self.group = -1
        """The group of the last send stamped if it went to that whole group but its
        sender, a member of that one group only (the commonest broadcast); else -1."""
        self.position = 0
        """Where the sender of that group broadcast stands in its group's member list."""
        self.stamped: list[list[Packet] | bool] | None = None
        """When set, every send stamped appends its packets and then :attr:`broadcast`
        here (a durable run finds the packets sent since its last checkpoint in it)."""
        self._sizes = b""
        self._group_sizes: dict[int, tuple[int, int]] = {}
        self._admin_sizes = (0, 0)
        self._columns = ledger.agent_columns
        self._sends, self._batches = self._columns.sends, self._columns.batches
        self._next_id = self._id_size = self._id_bound = 0
        self.next_message_id = next_message_id
        self._link: MachineLink | None = None
        self._machine = 0
        self._machine_ids: list[int] = []

    def number_by_machine(self, link: MachineLink, next_ids: list[int] | None = None) -> None:
        """Stamp ids from one counter per machine of ``link`` (``next_ids``: where each
        stands; default: machine ``m`` from ``link.first_id(m)``)."""
        self._link = link
        self._machine_ids = list(next_ids) if next_ids is not None else [link.first_id(m) for m in range(link.count)]
        self._machine = 0
        self.next_message_id = self._machine_ids[0]

    def machine_message_ids(self) -> list[int] | None:
        """The next id of each machine (None: one counter for the run)."""
        if self._link is None:
            return None
        ids = list(self._machine_ids)
        ids[self._machine] = self._next_id
        return ids

    def _use_machine(self, agent: int) -> None:
        """Make the counter of ``agent``'s machine the current one."""
        link = self._link
        machine = link.machine(agent)  # type: ignore[union-attr]
        ids, current = self._machine_ids, self._machine
        if self._next_id > link.first_id(current + 1):  # type: ignore[union-attr]
            raise OverflowError(f"machine {current} stamped more than {link.first_id(1)} message ids")  # type: ignore[union-attr]
        if machine != current:
            ids[current] = self._next_id
            self._machine = machine
            self.next_message_id = ids[machine]

    @property
    def next_message_id(self) -> int:
        """The id the next message will get."""
        return self._next_id

    @next_message_id.setter
    def next_message_id(self, value: int) -> None:
        self._next_id = value
        self._id_size = int_size(value)
        self._id_bound = next(b for b in (*_ID_SIZE_BOUNDS, 1 << 64) if b > value)

    def recipient_sizes(self) -> bytes:
        """``int_size(r)`` for every agent id ``r``, as a lookup table."""
        n = self.org.n
        if len(self._sizes) < n:
            n = max(n, 2 * len(self._sizes))
            table = b"\x01" * min(n, 128) + b"\x02" * max(0, min(n, 256) - 128)
            table += b"\x03" * max(0, min(n, 65536) - 256) + b"\x05" * max(0, n - 65536)
            self._sizes = table
        return self._sizes

    def _members_size(self, members: list[int], cached: tuple[int, int]) -> tuple[int, int]:
        """(count, summed id sizes) of ``members``, reusing ``cached`` while the count holds."""
        if cached[0] != len(members):
            cached = (len(members), sum(map(self.recipient_sizes().__getitem__, members)))
        return cached

    def _broadcast_size(self, sender: int, channel: str, count: int) -> int:
        """Summed id sizes of the ``count`` recipients of a broadcast: the sender's
        group(s) or the admins, less the sender itself, from per-group sums."""
        org = self.org
        if channel == ADMIN:
            self._admin_sizes = listed, total = self._members_size(org.admins, self._admin_sizes)
        else:
            listed = total = 0
            mg, ag = org.member_group[sender], org.admin_group[sender]
            for g in {mg, ag} - {-1}:
                cached = self._group_sizes.get(g, (-1, 0))
                self._group_sizes[g] = size = self._members_size(org.groups[g], cached)
                listed += size[0]
                total += size[1]
        # the sender is listed in each group it was left out of
        return total - (listed - count) * self.recipient_sizes()[sender]

    def stamp(self, sender: int, send: Send, now: float) -> list[Packet]:
        """The packets of one send, routed and accounted: usually one; more when the
        message ids cross a size boundary (every copy of a packet has the same size
        but for its recipient). Sets :attr:`broadcast`, and :attr:`group` and
        :attr:`position` for a broadcast to the sender's one group."""
        recipients, channel, org = send.recipients, send.channel, self.org
        group = -1
        # _group_broadcast, inlined: the commonest send of a chat (the sender's whole group)
        one = channel == INTRA and org.graph is None and type(sender) is int
        if one and 0 <= sender < len(org.member_group):  # an agent (org.n, without the property's call)
            mg, ag = org.member_group[sender], org.admin_group[sender]
            if mg >= 0 and not 0 <= ag != mg:
                members = org.groups[mg]
                if type(recipients) is Without:  # Organisation.group_peers_view: its fields tell
                    if _every_other(recipients, members, sender):
                        group, self.position = mg, recipients.skip
                    else:
                        recipients = recipients.as_list()
                if group < 0 and type(recipients) is list:
                    i = sender - members[0]
                    whole = 0 <= i < len(members) and members[i] == sender and len(recipients) == len(members) - 1
                    if whole and recipients[:i] == members[:i] and recipients[i:] == members[i + 1 :]:  # _whole_group
                        group, self.position = mg, i
        admins = False
        if group < 0 and type(recipients) is Without:  # Organisation.admin_peers_view, or checked as a list
            admins = channel == ADMIN and org.graph is None and _every_other(recipients, org.admins, sender)
            if not admins:
                recipients = recipients.as_list()
        self.group = group
        broadcast = self.broadcast = group >= 0 or admins or check_routes(org, sender, recipients, channel)
        if self._link is not None:
            self._use_machine(sender)
        first = self._next_id
        count = len(recipients) if group < 0 else len(members) - 1
        mid = first + count
        if mid <= self._id_bound:  # every id of the send has the size of the first
            packets = [new_packet(sender, channel, send.kind, send.payload, send.parent, now, first, recipients)]
            id_bytes = count * self._id_size
            self._next_id = mid
        else:
            packets = []
            at = first
            for part in _uniform_id_parts(recipients, first):
                packets.append(Packet(sender, channel, send.kind, send.payload, send.parent, now, at, part))
                at += len(part)
            id_bytes = int_size_total(first, mid)
            self.next_message_id = mid
        # every envelope is the packet plus its id and its recipient
        if group >= 0:  # its group's summed id sizes (_group_size, inlined), less the sender's
            cached = self._group_sizes.get(group)
            if cached is None or cached[0] != count + 1:
                cached = self._group_sizes[group] = self._members_size(org.groups[group], (-1, 0))
            recipient_bytes = cached[1] - self._sizes[sender]
        elif broadcast:
            recipient_bytes = self._broadcast_size(sender, channel, count)
        elif count == 1:
            recipient_bytes = self.recipient_sizes()[recipients[0]]
        else:
            recipient_bytes = sum(map(self.recipient_sizes().__getitem__, recipients))
        nbytes = count * packets[0].overhead + id_bytes + recipient_bytes
        ledger = self.ledger
        ledger.messages += count
        ledger.bytes += nbytes
        ledger.messages_by_channel[channel] += count
        ledger.bytes_by_channel[channel] += nbytes
        agents, counts, totals = self._sends  # AgentColumns.note, inlined
        agents.append(sender)
        counts.append(count)
        totals.append(nbytes)
        if len(agents) >= FOLD_AT:
            self._columns.fold()
        stamped = self.stamped
        if stamped is not None:
            stamped += packets, broadcast
        return packets

    def stamp_human(self, recipient: int, text: str, now: float) -> Packet:
        """A human's message to ``recipient`` (channel :data:`~megaactors.core.messages.HUMAN`,
        kind ``human``, payload ``text``), stamped and accounted like any message but
        without a route or a sending agent; :class:`MessageError` for a recipient that
        does not exist or a text that is empty or too large."""
        if type(recipient) is not int or not 0 <= recipient < self.org.n:
            raise MessageError(f"there is no agent {recipient!r} (the run has {self.org.n})")
        check_human_text(text)
        if self._link is not None:
            self._use_machine(recipient)
        packet = Packet(HUMAN_SENDER, HUMAN, HUMAN, text, None, now, self._next_id, (recipient,))
        nbytes = packet.copy_bytes + int_size(recipient)
        self.next_message_id = self._next_id + 1
        ledger = self.ledger
        ledger.messages += 1
        ledger.bytes += nbytes
        ledger.messages_by_channel[HUMAN] = ledger.messages_by_channel.get(HUMAN, 0) + 1
        ledger.bytes_by_channel[HUMAN] = ledger.bytes_by_channel.get(HUMAN, 0) + nbytes
        stamped = self.stamped
        if stamped is not None:
            stamped += [packet], False
        return packet

    def take(self, batch: Batch) -> int:
        """Account a batch taken from an in-queue; return its size in bytes."""
        return self.account_batch(batch.recipient, len(batch.packets), sum(map(_copy_bytes, batch.packets)))

    def account_batch(self, recipient: int, count: int, copy_bytes: int) -> int:
        """Account a batch of ``count`` messages to ``recipient`` whose packets'
        ``copy_bytes`` sum to ``copy_bytes``; return its size in bytes."""
        sizes = self._sizes
        nbytes = copy_bytes + count * (sizes[recipient] if recipient < len(sizes) else int_size(recipient))
        agents, counts, totals = self._batches  # AgentColumns.note, inlined
        agents.append(recipient)
        counts.append(count)
        totals.append(nbytes)
        if len(agents) >= FOLD_AT:
            self._columns.fold()
        if count > self.ledger.peak_queue_depth:
            self.ledger.peak_queue_depth = count
        return nbytes
