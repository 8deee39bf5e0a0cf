"""Plain-data codecs of a simulation's state: the values a checkpoint holds.

Numbers are stored by column as packed arrays (one bytes value per column), the rest
(behaviour states, payloads) as lists; effects, sends, LLM requests and tool calls
as short lists; packets by column with a broadcast's recipients left out (they are
its sender's peers on its channel). Everything is msgpack-ready.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain, repeat
from typing import Any

import numpy as np

from megaactors.core.behaviour import UNCHANGED, Effects, Interrupt, LLMRequest, Send, ToolCall
from megaactors.core.ledger import Ledger
from megaactors.core.machine_ledger import MachineLedger
from megaactors.core.messages import CHANNELS, Packet
from megaactors.core.organisation import Organisation
from megaactors.core.trace import Trace
from megaactors.durable.narrow import narrow_ints, widen_ints

__all__ = [
    "LEDGER_SCALARS",
    "add_cells",
    "added_cells",
    "append_trace",
    "cells_changed",
    "column_dtype",
    "decode_effects",
    "decode_packets",
    "diff_cells",
    "encode_call",
    "encode_effects",
    "encode_ledger",
    "encode_packets",
    "encode_request",
    "encode_send",
    "encode_trace",
    "float64s",
    "int64s",
    "load_ledger",
    "pick_cells",
    "set_cells",
    "spread",
    "uniform",
]


LEDGER_SCALARS = (
    "messages",
    "bytes",
    "llm_calls",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "peak_queue_depth",
    "peak_llm_in_flight",
    "llm_time_s",
    "tool_calls",
    "tool_time_s",
    "lock_wait_s",
)
"""Ledger totals a checkpoint stores one by one (per-agent columns go by cells)."""


def encode_request(r: LLMRequest) -> list[Any]:
    return [r.new_tokens, r.output_tokens, r.stage, r.prompt]


def encode_call(c: ToolCall) -> list[Any]:
    return [c.name, c.duration_s, c.lock, c.args, c.stage]


def encode_send(s: Send) -> list[Any]:
    recipients = s.recipients if type(s.recipients) in (list, tuple) else list(s.recipients)
    return [recipients, s.channel, s.kind, s.payload, s.parent]


def encode_effects(e: Effects) -> list[Any]:
    encoded = [
        e.state is not UNCHANGED,
        None if e.state is UNCHANGED else e.state,
        [encode_send(s) for s in e.sends],
        None if e.llm is None else encode_request(e.llm),
        None if e.tool is None else encode_call(e.tool),
        e.recruits,
    ]
    return encoded if e.interrupt is None else [*encoded, e.interrupt.reason]


def decode_effects(v: list[Any]) -> Effects:
    has_state, state, sends, llm, tool, recruits = v[:6]
    return Effects(
        state=state if has_state else UNCHANGED,
        sends=[Send(*s) for s in sends],
        llm=None if llm is None else LLMRequest(*llm),
        tool=None if tool is None else ToolCall(*tool),
        recruits=recruits,
        interrupt=Interrupt(v[6]) if len(v) > 6 else None,
    )


def int64s(values: Sequence[int]) -> bytes:
    """``array('q', values).tobytes()`` in a third of its instructions (``struct``
    converts each value directly; an array parses it as a call argument)."""
    return struct.pack(f"{len(values)}q", *values)


def float64s(values: Sequence[float]) -> bytes:
    """``array('d', values).tobytes()``, as :func:`int64s`."""
    return struct.pack(f"{len(values)}d", *values)


def uniform(column: Sequence[Any]) -> list[Any]:
    """``column`` as a list, or as its one value when all its values are equal."""
    return list(values) if len(values := set(column)) == 1 else list(column)


def spread(values: list[Any], n: int) -> Iterable[Any]:
    """The ``n`` values of a :func:`uniform` column."""
    return repeat(values[0], n) if len(values) == 1 else values


def encode_packets(packets: list[Packet], broadcasts: np.ndarray | None) -> dict[str, Any]:
    """Packets by column: numbers in packed arrays (the recipients of all of them in
    one, with a count per packet), the rest in lists (channels, kinds and parents
    by :func:`uniform`). A packet flagged in ``broadcasts`` went to every peer of its
    sender on its channel (a boolean array, one flag per packet): its recipients are
    not stored (count -1). Each column is one list comprehension (on CPython 3.11
    its specialised attribute read costs half the instructions of ``map`` with an
    ``attrgetter``)."""
    first_id = [p.first_id for p in packets]
    sender = [p.sender for p in packets]
    channel = [p.channel for p in packets]
    kind = [p.kind for p in packets]
    payload = [p.payload for p in packets]
    parent = [p.parent for p in packets]
    sent_at = [p.sent_at for p in packets]
    overhead = [p.overhead for p in packets]
    if broadcasts is not None and broadcasts.all():  # every one a broadcast: no recipients stored
        count, recipients = b"\xff" * (8 * len(broadcasts)), b""  # -1 per packet
    else:
        lists = [p.recipients for p in packets]
        if broadcasts is not None:
            lists = [() if b else r for r, b in zip(lists, broadcasts.tolist(), strict=True)]
        counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        if broadcasts is not None:
            counts[broadcasts] = -1
        count = counts.tobytes()
        recipients = int64s(list(chain.from_iterable(lists)))
    return {
        "first_id": int64s(first_id),
        "sender": int64s(sender),
        "channel": uniform(channel),
        "kind": uniform(kind),
        "payload": payload,
        "parent": uniform(parent),
        "sent_at": float64s(sent_at),
        "overhead": int64s(overhead),
        "count": count,
        "recipients": recipients,
    }


def decode_packets(v: dict[str, Any], org: Organisation) -> list[Packet]:
    """The packets of :func:`encode_packets`; a broadcast's recipients are its
    sender's peers on its channel in ``org`` (as it was when the packets were sent)."""
    recipients = array("q", v["recipients"]).tolist()
    counts = array("q", v["count"])
    ends = list(accumulate(max(c, 0) for c in counts))
    return [
        Packet(
            sender,
            channel,
            kind,
            payload,
            parent,
            sent_at,
            first_id,
            recipients[end - count : end] if count >= 0 else org.peers(sender, channel),
            overhead,
        )
        for first_id, sender, channel, kind, payload, parent, sent_at, overhead, count, end in zip(
            array("q", v["first_id"]),
            array("q", v["sender"]),
            spread(v["channel"], len(counts)),
            spread(v["kind"], len(counts)),
            v["payload"],
            spread(v["parent"], len(counts)),
            array("d", v["sent_at"]),
            array("q", v["overhead"]),
            counts,
            ends,
            strict=True,
        )
    ]


def diff_cells(current: np.ndarray, shadow: np.ndarray) -> tuple[bytes, bytes] | None:
    """Indices and new values of the cells that differ (``None`` when none do)."""
    if len(shadow) < len(current):
        shadow = np.concatenate([shadow, np.zeros(len(current) - len(shadow), dtype=shadow.dtype)])
    changed = np.flatnonzero(current != shadow)
    if not len(changed):
        return None
    return changed.astype(np.int64).tobytes(), current[changed].tobytes()


def column_dtype(column: array[Any] | bytearray) -> type:
    if isinstance(column, bytearray):
        return np.uint8
    return np.float64 if column.typecode == "d" else np.int64


def cells_changed(column: array[Any], shadow: np.ndarray) -> np.ndarray:
    """Which cells of ``column`` differ from ``shadow`` (cells beyond it count as changed)."""
    current: np.ndarray = np.frombuffer(column, dtype=column_dtype(column))
    changed = np.ones(len(current), dtype=bool)
    k = min(len(shadow), len(current))
    np.not_equal(current[:k], shadow[:k], out=changed[:k])
    return changed


def pick_cells(column: array[Any], at: np.ndarray) -> bytes:
    """The cells of ``column`` at the indices ``at``, packed."""
    return np.frombuffer(column, dtype=column_dtype(column))[at].tobytes()


def added_cells(column: array[int], shadow: np.ndarray, at: np.ndarray) -> bytes:
    """What the cells of the integer ``column`` at the indices ``at`` gained since
    ``shadow`` (cells beyond it count from 0), packed in the narrowest signed integer
    type that holds every gain (:func:`~megaactors.durable.narrow.narrow_ints`;
    :func:`add_cells` tells it by the length)."""
    if not len(at):
        return b""
    current: np.ndarray = np.frombuffer(column, dtype=np.int64)
    gained: np.ndarray
    if len(shadow) == len(current):  # no agent recruited since: one subtraction, one gather
        gained = np.subtract(current, shadow)[at]
    else:
        gained = current[at]  # a copy (indexed by an array)
        known = at < len(shadow)
        gained[known] -= shadow[at[known]]
    del current  # release the buffer: the column may grow later
    return narrow_ints(gained)


def add_cells(column: array[int], at: bytes, gains: bytes) -> None:
    """Add packed ``gains`` of :func:`added_cells` to the integer ``column`` at the
    packed int64 indices ``at``, in place."""
    target: np.ndarray = np.frombuffer(column, dtype=np.int64)
    where = np.frombuffer(at, dtype=np.int64)
    if len(where):
        target[where] += widen_ints(gains, len(where), "ledger gains", of="agents")
    del target  # release the buffer: the column may grow later


def set_cells(column: array[Any] | bytearray, at: bytes, values: bytes) -> None:
    """Write packed ``values`` into ``column`` at the packed int64 indices ``at``, in place."""
    target: np.ndarray = np.frombuffer(column, dtype=column_dtype(column))
    target[np.frombuffer(at, dtype=np.int64)] = np.frombuffer(values, dtype=target.dtype)
    del target  # release the buffer: the column may grow later


def encode_ledger(ledger: Ledger) -> dict[str, Any]:
    """The ledger's totals, per channel and per stage, and per machine for a run
    placed on machines (not its per-agent columns)."""
    return {
        **{k: getattr(ledger, k) for k in LEDGER_SCALARS},
        "messages_by_channel": dict(ledger.messages_by_channel),
        "bytes_by_channel": dict(ledger.bytes_by_channel),
        "stages": {k: list(v) for k, v in ledger.stages.items()},
        **({"machines": ledger.figures()} if isinstance(ledger, MachineLedger) else {}),
    }


def load_ledger(ledger: Ledger, values: dict[str, Any]) -> None:
    """Set what :func:`encode_ledger` stored."""
    for k in LEDGER_SCALARS:
        setattr(ledger, k, values[k])
    # every agent channel, and the human one once a human's message was sent
    ledger.messages_by_channel = {**dict.fromkeys(CHANNELS, 0), **values["messages_by_channel"]}
    ledger.bytes_by_channel = {**dict.fromkeys(CHANNELS, 0), **values["bytes_by_channel"]}
    ledger.stages = {k: list(v) for k, v in values["stages"].items()}
    if isinstance(ledger, MachineLedger) and "machines" in values:
        ledger.load_figures(values["machines"])


def _trace_columns(t: Trace) -> tuple[array[Any], ...]:
    return (t.t_agent, t.t_from, t.t_to, t.t_time, t.b_agent, t.b_time, t.b_size)


def encode_trace(trace: Trace | None, start: tuple[int, int]) -> list[bytes] | None:
    """Trace rows from ``start`` = (transitions, batches) on, by column."""
    if trace is None:
        return None
    t0, b0 = start
    return [col[t0 if k < 4 else b0 :].tobytes() for k, col in enumerate(_trace_columns(trace))]


def append_trace(trace: Trace | None, rows: list[bytes] | None, *, fresh: bool) -> None:
    """Append rows of :func:`encode_trace` (``fresh``: in place of every row)."""
    if trace is None or rows is None:
        return
    for col, data in zip(_trace_columns(trace), rows, strict=True):
        if fresh:
            del col[:]
        col.frombytes(data)
