"""The integer columns of a delta in the narrowest integer type (state format 5).

A delta describes its agents' records and its packets by column, integers as int64
(:mod:`megaactors.durable.agent_rows`, :mod:`megaactors.durable.state_codec`). Most
of those bytes are zeros: agent ids and message ids (stored as the gaps between
them, ascending), batch tokens, positions, output tokens and event sequences of the
calls in flight, senders, overheads and recipient counts of the packets fit in one
to four bytes. Stored in the narrowest signed integer type that holds each column,
a delta hands zstd about a quarter fewer bytes, which is most of what compressing it
costs (floats, payloads and behaviour states are left as they are).

:func:`narrowed` rewrites a delta so (``narrow`` holds the column lengths, which tell
each column's width); :func:`widened` gives it back as int64 columns, as deltas of
state format 4 and before store them, so that everything reading a delta reads
one layout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from megaactors.errors import StateError

__all__ = ["counts", "narrow_ints", "narrowed", "widen_ints", "widened"]

_WIDTHS = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
"""The signed integer type of each width in bytes."""
_LLM_INTEGERS = (0, 2, 5)
"""The integer columns of the calls in flight: positions, output tokens, sequences."""
_PACKET_INTEGERS = ("sender", "overhead", "count")


def narrow_ints(values: np.ndarray) -> bytes:
    """``values`` (int64) in the narrowest signed integer type that holds them all
    (:func:`widen_ints` tells it by the length)."""
    if not len(values):
        return b""
    low, high = int(values.min()), int(values.max())
    width = next(w for w in (1, 2, 4, 8) if -(1 << (8 * w - 1)) <= low and high < 1 << (8 * w - 1))
    return values.astype(_WIDTHS[width]).tobytes()


def widen_ints(packed: bytes, n: int, what: str, of: str = "values") -> np.ndarray:
    """The ``n`` int64 values of :func:`narrow_ints`' ``packed`` (``what``: their
    name in the error a wrong length raises, ``of``: what they are ``n`` of)."""
    if not n and not packed:
        return np.zeros(0, dtype=np.int64)
    width = len(packed) // n if n else 0
    if width not in _WIDTHS or width * n != len(packed):
        raise StateError(f"a delta holds {len(packed)} bytes of {what} for {n} {of}")
    return np.frombuffer(packed, dtype=_WIDTHS[width]).astype(np.int64)


def _int64s(packed: bytes) -> np.ndarray:
    return np.frombuffer(packed, dtype=np.int64)


def narrowed(delta: dict[str, Any]) -> dict[str, Any]:
    """``delta`` (int64 columns) with its integer columns narrowed, in place."""
    rows, packets = delta["agents"], delta["packets"]
    llm = rows["llm"]
    ids = _int64s(rows["ids"])
    delta["narrow"] = [len(ids), len(llm[0]) // 8, len(packets["first_id"]) // 8]
    rows["ids"] = narrow_ints(np.diff(ids, prepend=0))
    rows["batch_tokens"] = narrow_ints(_int64s(rows["batch_tokens"]))
    for k in _LLM_INTEGERS:
        llm[k] = narrow_ints(_int64s(llm[k]))
    packets["first_id"] = narrow_ints(np.diff(_int64s(packets["first_id"]), prepend=0))
    for c in _PACKET_INTEGERS:
        packets[c] = narrow_ints(_int64s(packets[c]))
    return delta


def widened(delta: dict[str, Any]) -> dict[str, Any]:
    """``delta`` with int64 columns: itself when it has none narrowed, else a copy."""
    if "narrow" not in delta:
        return delta
    try:
        agents, flying, sent = (int(n) for n in delta["narrow"])
    except (TypeError, ValueError):
        raise StateError(f"a delta's column lengths are not three integers: {delta['narrow']!r}") from None
    out = {k: v for k, v in delta.items() if k != "narrow"}
    rows, packets = dict(delta["agents"]), dict(delta["packets"])
    llm = list(rows["llm"])
    rows["ids"] = np.cumsum(widen_ints(rows["ids"], agents, "agent ids")).tobytes()
    rows["batch_tokens"] = widen_ints(rows["batch_tokens"], agents, "batch tokens").tobytes()
    for k in _LLM_INTEGERS:
        llm[k] = widen_ints(llm[k], flying, "calls in flight").tobytes()
    rows["llm"] = llm
    packets["first_id"] = np.cumsum(widen_ints(packets["first_id"], sent, "message ids")).tobytes()
    for c in _PACKET_INTEGERS:
        packets[c] = widen_ints(packets[c], sent, f"packet {c}s").tobytes()
    out["agents"], out["packets"] = rows, packets
    return out


def counts(state: dict[str, Any]) -> tuple[int, int] | None:
    """The number of agent records and of packets ``state`` describes (None: not stored)."""
    if "narrow" in state:
        return state["narrow"][0], state["narrow"][2]
    if "agents" not in state:
        return None
    return len(state["agents"]["ids"]) // 8, len(state["packets"]["first_id"]) // 8
