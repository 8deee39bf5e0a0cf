"""Message envelope, channels and the msgpack codec.

The encoded size of a message (``len(encode(msg))``) is what "bytes" means in every
cost figure. A send to many recipients shares one :class:`Packet` (packed and sized
once); each :class:`Message` adds only its id and recipient, whose sizes are
arithmetic. The tests check that arithmetic against the real encoder.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any, overload

import msgpack

from megaactors.errors import MessageError

__all__ = [
    "ADMIN",
    "CHANNELS",
    "HIERARCHY",
    "HUMAN",
    "HUMAN_SENDER",
    "INTRA",
    "MAX_MESSAGE_BYTES",
    "Batch",
    "Message",
    "MessageError",
    "Packet",
    "check_human_text",
    "decode",
    "encode",
    "encoded_size",
    "int_size",
    "int_size_total",
    "lead",
    "new_packet",
    "payload_size",
    "send_overhead",
    "str_size",
]

INTRA = "intra"
"""Dense chat among the members of one group."""
ADMIN = "admin"
"""Sparse channel between the admins of different groups."""
HIERARCHY = "hierarchy"
"""Tree edges: boss to admins, admins to the agents they recruited, hubs to spokes."""
CHANNELS: tuple[str, ...] = (INTRA, ADMIN, HIERARCHY)
"""The channels agents send on (a route of the organisation allows each send)."""
HUMAN = "human"
"""A message from a human (``megaactors resume --send``) into one agent's in-queue: no
route, no agent sent it (its sender is :data:`HUMAN_SENDER`); counted and sized like
any message, in the ledger under this channel."""
HUMAN_SENDER = -1
"""The sender of a :data:`HUMAN` message: no agent's id."""

MAX_MESSAGE_BYTES = 1 << 20
"""Size cap for decoding untrusted bytes (1 MiB)."""

_FIELDS = ("id", "sender", "recipient", "channel", "kind", "payload", "parent", "sent_at")


class Packet:
    """One send: every envelope field except the message id and the recipient.

    A broadcast is one packet shared by all its copies: it is packed and sized once
    (``overhead`` is the encoded size of the shared fields) and an in-queue holds a
    reference to it, nothing per copy. Its copies carry the consecutive ids
    ``first_id, first_id + 1, ...`` in the order of ``recipients``; a runtime splits
    a send whose ids would change encoded size, so every copy of a packet has the
    same size but for its recipient (``copy_bytes`` + the recipient's size).
    """

    __slots__ = (
        "_index",
        "channel",
        "copy_bytes",
        "first_id",
        "kind",
        "overhead",
        "parent",
        "payload",
        "recipients",
        "sender",
        "sent_at",
    )

    def __init__(
        self,
        sender: int,
        channel: str,
        kind: str,
        payload: Any,
        parent: int | None = None,
        sent_at: float = 0.0,
        first_id: int = 0,
        recipients: Sequence[int] = (),
        overhead: int | None = None,
    ) -> None:
        self.sender = sender
        self.channel = channel
        self.kind = kind
        self.payload = payload
        self.parent = parent
        self.sent_at = float(sent_at)
        self.overhead = (
            send_overhead(sender, channel, kind, payload_size(payload), parent) if overhead is None else overhead
        )
        self.first_id = first_id
        self.recipients = recipients
        self.copy_bytes = self.overhead + int_size(first_id)
        self._index: dict[int, int] | None = None

    def message_id(self, recipient: int) -> int:
        """Id of the copy addressed to ``recipient``."""
        recipients = self.recipients
        if len(recipients) == 1:
            return self.first_id
        index = self._index
        if index is None:
            index = self._index = {r: i for i, r in enumerate(recipients)}
        return self.first_id + index[recipient]

    def message(self, recipient: int) -> Message:
        """The copy addressed to ``recipient``."""
        return Message(self.message_id(recipient), recipient, self)


_new = object.__new__


def new_packet(
    sender: int, channel: str, kind: str, payload: Any, parent: int | None, sent_at: float, first_id: int,
    recipients: Sequence[int],
) -> Packet:  # fmt: skip
    """``Packet(sender, channel, kind, payload, parent, sent_at, first_id, recipients)``,
    made without calling the class: on CPython 3.11 a class whose ``__init__`` is
    Python code costs about 3,000 machine instructions a call, this a fraction of
    that (a runtime stamps one packet per send)."""
    packet = _new(Packet)
    packet.sender, packet.channel, packet.kind, packet.payload, packet.parent = sender, channel, kind, payload, parent
    packet.sent_at = float(sent_at)
    channel_size, kind_size = _STR_SIZES.get(channel), _STR_SIZES.get(kind)
    if channel_size is None or kind_size is None or parent is not None or not 0 <= sender < 65536:
        overhead = send_overhead(sender, channel, kind, payload_size(payload), parent)
    else:  # send_overhead of the commonest envelope, inlined: names seen before, no parent
        sender_size = 1 if sender < 128 else 2 if sender < 256 else 3  # int_size below 65,536
        overhead = _FIXED_NO_PARENT + sender_size + channel_size + kind_size + payload_size(payload)
    packet.overhead = overhead
    packet.first_id, packet.recipients, packet._index = first_id, recipients, None  # noqa: SLF001
    packet.copy_bytes = overhead + int_size(first_id)
    return packet


class Message:
    """One message: an id, a recipient and the :class:`Packet` it was sent in."""

    __slots__ = ("id", "packet", "recipient")

    def __init__(self, id: int, recipient: int, packet: Packet) -> None:
        self.id = id
        self.recipient = recipient
        self.packet = packet

    @classmethod
    def of(
        cls,
        id: int,
        sender: int,
        recipient: int,
        channel: str,
        kind: str,
        payload: Any,
        parent: int | None = None,
        sent_at: float = 0.0,
    ) -> Message:
        """A message with its own packet, from every envelope field."""
        return cls(id, recipient, Packet(sender, channel, kind, payload, parent, sent_at, id, (recipient,)))

    sender = property(lambda self: self.packet.sender, doc="Id of the sending agent.")
    channel = property(lambda self: self.packet.channel, doc="Channel the message travelled on.")
    kind = property(lambda self: self.packet.kind, doc="Free label of the message's purpose.")
    payload = property(lambda self: self.packet.payload, doc="Msgpack-serializable content.")
    parent = property(lambda self: self.packet.parent, doc="Id of the message that caused this one.")
    sent_at = property(lambda self: self.packet.sent_at, doc="Virtual send time in seconds.")

    @property
    def size(self) -> int:
        """Encoded size in bytes (``len(encode(self))``)."""
        return self.packet.overhead + int_size(self.id) + int_size(self.recipient)

    def as_tuple(self) -> tuple[Any, ...]:
        """The envelope as a plain tuple, in wire order."""
        p = self.packet
        return (self.id, p.sender, self.recipient, p.channel, p.kind, p.payload, p.parent, p.sent_at)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and self.as_tuple() == other.as_tuple()

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        p = self.packet
        return (
            f"Message(id={self.id}, {p.sender}->{self.recipient}, channel={p.channel!r}, "
            f"kind={p.kind!r}, parent={p.parent}, sent_at={p.sent_at})"
        )


_copy_bytes = attrgetter("copy_bytes")


def lead(payload: Any) -> Any:
    """A payload's leading field: ``payload[0]`` of a non-empty list or tuple, else None
    (what :meth:`Batch.leads` lists per message)."""
    return payload[0] if isinstance(payload, (list, tuple)) and payload else None


class Batch:
    """The messages an agent took from its in-queue, built on access.

    In-queues hold packet references; a behaviour that only counts a batch, or
    looks at its packets, never pays for message objects. A runtime whose
    in-queues are shared logs hands over a :meth:`deferred` batch: its packets are
    gathered the first time they are asked for, so a behaviour that only counts
    its batch pays nothing per message, and one that counts the leading fields of
    its payloads (:meth:`leads`) reads them from the logs' columns.
    """

    __slots__ = ("_count", "_gather", "_leads", "_packets", "_source", "recipient")
    _leads: Callable[[Any], list[Any] | None] | None
    """Set by :meth:`deferred` alone: read only while ``_packets`` is None."""

    def __init__(self, recipient: int, packets: list[Packet]) -> None:
        self.recipient = recipient
        self._packets: list[Packet] | None = packets
        self._count = len(packets)
        self._gather: Callable[[Any], list[Packet]] | None = None
        self._source: Any = None

    @classmethod
    def deferred(
        cls,
        recipient: int,
        count: int,
        gather: Callable[[Any], list[Packet]],
        source: Any,
        leads: Callable[[Any], list[Any] | None] | None = None,
    ) -> Batch:
        """A batch of ``count`` messages whose packets ``gather(source)`` returns, in
        arrival order, when they are first asked for; ``leads(source)``, if given,
        returns what :meth:`leads` lists without the packets, or None when it cannot."""
        batch = cls.__new__(cls)  # the class's own fields, set without __init__'s list
        batch.recipient, batch._count, batch._leads = recipient, count, leads  # noqa: SLF001
        batch._packets, batch._gather, batch._source = None, gather, source  # noqa: SLF001
        return batch

    def leads(self) -> list[Any]:
        """The leading field of each message's payload (``payload[0]`` of a non-empty
        list or tuple, None for any other payload), in arrival order: what a behaviour
        that counts its messages by a tag (a round, a kind) needs. A runtime whose
        in-queues are shared logs reads these from a column of the log, without
        touching the packets (cheaper when the batch is large and its packets cold)."""
        if self._packets is None and self._leads is not None:
            found = self._leads(self._source)
            if found is not None:
                return found
        return [lead(p.payload) for p in self.packets]

    @property
    def packets(self) -> list[Packet]:
        """The packet of each message, in arrival order."""
        packets = self._packets
        if packets is None:
            packets = self._packets = self._gather(self._source)  # type: ignore[misc]
            self._gather = self._source = None
        return packets

    @classmethod
    def of(cls, recipient: int, messages: Iterable[Message]) -> Batch:
        """A batch of ready-made messages addressed to ``recipient``."""
        packets = []
        for m in messages:
            if m.recipient != recipient or m.packet.message_id(recipient) != m.id:
                raise MessageError(f"message {m.id} is not the copy its packet addresses to {recipient}")
            packets.append(m.packet)
        return cls(recipient, packets)

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        r = self.recipient
        if isinstance(index, slice):
            return [p.message(r) for p in self.packets[index]]
        return self.packets[index].message(r)

    def __iter__(self) -> Iterator[Message]:
        r = self.recipient
        for p in self.packets:
            yield p.message(r)

    def nbytes(self) -> int:
        """Encoded size of every message in the batch."""
        return sum(map(_copy_bytes, self.packets)) + self._count * int_size(self.recipient)

    def __repr__(self) -> str:
        return f"Batch(recipient={self.recipient}, messages={self._count})"


Sequence.register(Batch)


def encode(msg: Message) -> bytes:
    """Pack a message as a msgpack array in wire order."""
    try:
        return msgpack.packb(msg.as_tuple(), use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise MessageError(f"message {msg.id}: payload is not serializable: {exc}") from exc


def decode(data: bytes | bytearray | memoryview, *, max_bytes: int = MAX_MESSAGE_BYTES) -> Message:
    """Decode untrusted bytes into a :class:`Message`, validating every field (a
    memoryview of any item size or layout is read as its bytes)."""
    if isinstance(data, memoryview):
        if data.nbytes > max_bytes:
            raise MessageError(f"message of {data.nbytes} bytes exceeds the cap of {max_bytes} bytes")
        data = data.tobytes()
    if not isinstance(data, (bytes, bytearray)):
        raise MessageError(f"expected bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise MessageError(f"message of {len(data)} bytes exceeds the cap of {max_bytes} bytes")
    if len(data) == 0:
        raise MessageError("empty input: no message")
    try:
        raw = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=False,
            use_list=True,
        )
    except msgpack.ExtraData as exc:
        raise MessageError("trailing bytes after the message") from exc
    except msgpack.StackError as exc:
        raise MessageError("not a msgpack message: nested too deeply") from exc
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        raise MessageError(f"not a msgpack message: {str(exc) or type(exc).__name__}") from exc
    if not isinstance(raw, list):
        raise MessageError(f"envelope must be an array of {len(_FIELDS)} fields, got {type(raw).__name__}")
    if len(raw) != len(_FIELDS):
        raise MessageError(f"envelope must have {len(_FIELDS)} fields {_FIELDS}, got {len(raw)}")
    mid, sender, recipient, channel, kind, payload, parent, sent_at = raw
    for name, value in (("id", mid), ("sender", sender), ("recipient", recipient)):
        if type(value) is not int:
            raise MessageError(f"field {name!r} must be an integer, got {type(value).__name__}")
        if value < 0 and not (name == "sender" and value == HUMAN_SENDER and channel == HUMAN):
            raise MessageError(f"field {name!r} must be non-negative, got {value}")
    if channel not in CHANNELS and channel != HUMAN:
        raise MessageError(f"field 'channel' must be one of {(*CHANNELS, HUMAN)}, got {channel!r}")
    if not isinstance(kind, str) or not kind:
        raise MessageError(f"field 'kind' must be a non-empty string, got {kind!r}")
    if parent is not None and (type(parent) is not int or parent < 0):
        raise MessageError(f"field 'parent' must be a non-negative integer or nil, got {parent!r}")
    if type(sent_at) not in (float, int) or not 0 <= sent_at < math.inf:
        raise MessageError(f"field 'sent_at' must be a finite non-negative number, got {sent_at!r}")
    overhead = len(data) - int_size(mid) - int_size(recipient)
    packet = Packet(sender, channel, kind, payload, parent, float(sent_at), mid, (recipient,), overhead)
    return Message(mid, recipient, packet)


def int_size(n: int) -> int:
    """Bytes msgpack uses for the integer ``n``."""
    if n >= 0:
        if n < 128:
            return 1
        if n < 256:
            return 2
        if n < 65536:
            return 3
        if n < 4294967296:
            return 5
        return 9
    if n >= -32:
        return 1
    if n >= -128:
        return 2
    if n >= -32768:
        return 3
    if n >= -2147483648:
        return 5
    return 9


def str_size(s: str) -> int:
    """Bytes msgpack uses for the string ``s``."""
    size = _STR_SIZES.get(s)
    if size is not None:
        return size
    n = len(s.encode())
    size = 1 + n if n < 32 else 2 + n if n < 256 else 3 + n if n < 65536 else 5 + n
    if len(_STR_SIZES) < 4096:  # channel and kind names repeat: remember a few
        _STR_SIZES[s] = size
    return size


_STR_SIZES: dict[str, int] = {}


def payload_size(payload: Any) -> int:
    """Bytes msgpack uses for a payload."""
    packer = getattr(_packers, "packer", None)
    if packer is None:  # one per thread: a packer keeps its buffer between calls
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
    try:
        return len(packer.pack(payload))
    except (TypeError, ValueError, OverflowError) as exc:
        raise MessageError(f"payload is not serializable: {exc}") from exc


_packers = threading.local()
"""This thread's msgpack packer (``msgpack.packb`` makes a new one, and its buffer, per call)."""


_FLOAT_SIZE = 9  # msgpack packs a Python float as float 64


_FIXED_NO_PARENT = 1 + 1 + _FLOAT_SIZE
"""What :func:`send_overhead` counts besides the sender, names and payload when there
is no parent: the array header, the parent's nil and the time sent."""


def send_overhead(sender: int, channel: str, kind: str, payload_bytes: int, parent: int | None) -> int:
    """Size of everything in an envelope except the message id and the recipient."""
    return (
        1  # fixarray header of 8 elements
        + int_size(sender)
        + str_size(channel)
        + str_size(kind)
        + payload_bytes
        + (1 if parent is None else int_size(parent))
        + _FLOAT_SIZE
    )


def check_human_text(text: Any) -> None:
    """Raise :class:`MessageError` unless ``text`` can be the payload of a :data:`HUMAN`
    message: a string with some text that msgpack encodes (valid Unicode) and that
    keeps the message within :data:`MAX_MESSAGE_BYTES`."""
    if not isinstance(text, str) or not text.strip():
        raise MessageError(f"a message needs some text, got {text!r}")
    size = send_overhead(HUMAN_SENDER, HUMAN, HUMAN, payload_size(text), None) + 2 * 9  # the largest id and recipient
    if size > MAX_MESSAGE_BYTES:
        raise MessageError(f"a message of {size:,} bytes exceeds the cap of {MAX_MESSAGE_BYTES:,} bytes")


def encoded_size(msg: Message) -> int:
    """``len(encode(msg))`` computed from the fields, without packing the envelope."""
    return (
        send_overhead(msg.sender, msg.channel, msg.kind, payload_size(msg.payload), msg.parent)
        + int_size(msg.id)
        + int_size(msg.recipient)
    )


def int_size_total(lo: int, hi: int) -> int:
    """``sum(int_size(i) for i in range(lo, hi))`` for ``0 <= lo <= hi``, in O(1)."""
    total = 0
    for bound, size in ((128, 1), (256, 2), (65536, 3), (4294967296, 5), (1 << 64, 9)):
        if lo >= hi:
            break
        if lo < bound:
            top = min(hi, bound)
            total += (top - lo) * size
            lo = top
    return total
