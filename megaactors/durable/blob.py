"""The bytes of a checkpoint: msgpack, zstd, and a versioned header.

A checkpoint's state is msgpack packed and zstd compressed behind a header (magic,
state format, codec); a blob of a format this code does not read or with a bad magic
is refused with a one-line :class:`~megaactors.errors.StoreError`, never guessed at.

The state formats read differ in deltas only. Format 2 stores the in-queue heads of
the agents that changed; format 3 stores none (a restore derives them from the
packets and the ledger: :mod:`megaactors.durable.queue_heads`); format 4 (written
since) also stores the integer ledger cells of those agents as what each gained
since the previous checkpoint, in the narrowest integer type that holds them
(``ledger_added``: one or two bytes a cell instead of eight), not their values;
format 5 (written since) stores a delta's other integer columns of agent records
and packets in the narrowest integer type too (``narrow``: their lengths, see
:mod:`megaactors.durable.narrow`).
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import zstandard

from megaactors.errors import CorruptStoreError, FormatVersionError

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "STATE_FORMAT",
    "STATE_FORMATS_READ",
    "check_header",
    "decode_state",
    "encode_state",
    "pack_state",
    "seal_state",
]

FORMAT = "megaactors-durable"
"""Name recorded in every database this package creates."""
FORMAT_VERSION = 2
"""Version of the database schema; a mismatch is refused, never guessed.
The state of a run through a network or under a provider model adds keys that other
runs never write (:mod:`megaactors.durable.net_rows`), so every checkpoint written
before them reads as it did; a megaactors that predates them refuses such runs'
parameters instead of resuming them without their network or limits."""

STATE_FORMAT = 5
"""Format of the state encoding every checkpoint written now carries in its header."""
STATE_FORMATS_READ = (2, 3, 4, 5)
"""State formats this code reads: 2 (deltas with in-queue heads), 3 (deltas with the
values of ledger cells), 4 (deltas with int64 columns) and 5."""

_MAGIC = b"MACK"
_HEADER = struct.Struct(">4sHB")  # magic, format version, codec
_ZSTD = 1
ZSTD_LEVEL = 1
"""zstd's fastest regular level: a third less time than level 3 for about 3 % more
bytes on a simulation's checkpoints."""
_decompressor = zstandard.ZstdDecompressor()


def _exact(value: Any) -> Any:
    """What msgpack's strict packing is handed back for a value of no msgpack type: a
    tuple as a list, a subclass of a msgpack type (an ``IntEnum``, a numpy float) as
    that type, so that the bytes are those of ordinary packing; anything else refused."""
    if isinstance(value, (tuple, list)):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return bytes(memoryview(value))
    raise TypeError(f"can not serialize {type(value).__name__!r} object")


def pack_state(state: Any) -> bytes:
    """msgpack(state): the part of :func:`encode_state` that needs the interpreter.

    Packed with ``strict_types`` (a list is told from an ``ExtType`` by its exact
    type, not by ``isinstance``: a quarter fewer instructions on a simulation's
    checkpoints), the few other values through :func:`_exact`: the same bytes as
    ``msgpack.packb(state, use_bin_type=True)``."""
    return msgpack.packb(state, use_bin_type=True, strict_types=True, default=_exact)


def seal_state(packed: bytes) -> bytes:
    """Header + zstd(packed): the part of :func:`encode_state` that runs without the GIL."""
    return _HEADER.pack(_MAGIC, STATE_FORMAT, _ZSTD) + zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(packed)


def encode_state(state: Any) -> bytes:
    """Header + zstd(msgpack(state))."""
    return seal_state(pack_state(state))


def check_header(blob: bytes, where: str = "checkpoint") -> None:
    """Raise unless ``blob`` starts with a header this code reads."""
    if len(blob) < _HEADER.size:
        raise CorruptStoreError(f"{where}: {len(blob)} bytes is too short to be a checkpoint")
    magic, version, codec = _HEADER.unpack_from(blob)
    if magic != _MAGIC:
        raise CorruptStoreError(f"{where}: not a megaactors checkpoint (bad magic {magic!r})")
    if version not in STATE_FORMATS_READ:
        raise FormatVersionError(
            f"{where}: written in checkpoint format version {version}; "
            f"this megaactors reads versions {', '.join(map(str, STATE_FORMATS_READ))}"
        )
    if codec != _ZSTD:
        raise CorruptStoreError(f"{where}: unknown compression codec {codec}")


def decode_state(blob: bytes, where: str = "checkpoint") -> Any:
    """The state inside an :func:`encode_state` blob; a wrong header raises."""
    blob = bytes(blob)
    check_header(blob, where)
    try:
        raw = _decompressor.decompress(blob[_HEADER.size :])
        return msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (zstandard.ZstdError, ValueError, msgpack.UnpackException) as exc:
        raise CorruptStoreError(f"{where}: the state does not decode: {exc}") from exc
