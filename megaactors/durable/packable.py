"""What a checkpoint can store, and which value of a run's state it cannot, in words.

A checkpoint is msgpack: ``None``, booleans, integers of at most 64 bits, floats,
strings, bytes, lists, tuples (read back as lists) and dicts of those. A behaviour
whose state (or whose message payload) holds anything else — a set, a custom
object, a numpy scalar — cannot be checkpointed; :func:`explain` names the agent,
the place in its state and the value's type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from megaactors.durable.blob import pack_state
from megaactors.durable.narrow import widened
from megaactors.errors import UncheckpointableError

__all__ = ["STORABLE", "explain", "first_unpackable", "pack_checked"]

STORABLE = "None, booleans, integers of 64 bits, floats, strings, bytes, lists, tuples and dicts"
_SCALARS = (type(None), bool, float, str, bytes, bytearray)


def first_unpackable(value: Any, path: str = "state", depth: int = 0) -> str | None:
    """Where in ``value`` msgpack refuses, e.g. ``state['seen'] is a set``; None if nowhere."""
    if isinstance(value, _SCALARS):
        return None
    if isinstance(value, int):
        return None if -(2**63) <= value < 2**64 else f"{path} is an integer of more than 64 bits"
    if depth > 400:
        return f"{path} is nested too deeply"
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = first_unpackable(item, f"{path}[{i}]", depth + 1)
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = first_unpackable(key, f"a key of {path}", depth + 1) or first_unpackable(
                item, f"{path}[{key!r}]", depth + 1
            )
            if found:
                return found
        return None
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"{path} is a {name}"


def explain(state: dict[str, Any]) -> str:
    """Why a run's state (a full snapshot or delta, see :mod:`megaactors.durable.state`)
    cannot be packed: the agent and the value, or the message and its sender."""
    state = widened(state)
    agents = state.get("agents") or {}
    ids = np.frombuffer(agents.get("ids", b""), dtype=np.int64)
    for i, data in enumerate(agents.get("data", ())):
        found = first_unpackable(data)
        if found:
            agent = int(ids[i]) if i < len(ids) else i
            return f"agent {agent}'s state cannot be checkpointed: {found}{_HINT}"
    packets = state.get("packets") or {}
    senders = np.frombuffer(packets.get("sender", b""), dtype=np.int64)
    for i, payload in enumerate(packets.get("payload", ())):
        found = first_unpackable(payload, "payload")
        if found:
            sender = int(senders[i]) if i < len(senders) else "?"
            return f"a message from agent {sender} cannot be checkpointed: {found}{_HINT}"
    found = first_unpackable({k: v for k, v in state.items() if k not in ("agents", "packets")}, "the run's state")
    return f"the run's state cannot be checkpointed: {found or 'msgpack refused it'}{_HINT}"


_HINT = f" (a checkpoint stores {STORABLE})"


def pack_checked(state: dict[str, Any]) -> bytes:
    """``state`` packed for a checkpoint; :class:`UncheckpointableError` (:func:`explain`)
    if msgpack refuses a value of it."""
    try:
        return pack_state(state)
    except (TypeError, ValueError, OverflowError):
        raise UncheckpointableError(explain(state)) from None
