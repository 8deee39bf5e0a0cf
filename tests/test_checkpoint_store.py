"""Every checkpoint store through the one conformance suite
(:mod:`megaactors.durable.conformance`): SQLite, a real PostgreSQL server and the
in-memory reference store, each by one fixture; and the checkpoint format."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from megaactors.durable import CheckpointStore, FormatVersionError, open_store
from megaactors.durable.conformance import StoreConformance
from megaactors.durable.memory import MemoryStore
from megaactors.durable.store import CorruptStoreError, decode_state, encode_state


class TestSQLiteStore(StoreConformance):
    @pytest.fixture
    def new_store(self, tmp_path: Path) -> Callable[[], CheckpointStore]:
        return lambda: open_store(tmp_path / "store.db", create=True)


class TestPostgresStore(StoreConformance):
    @pytest.fixture
    def new_store(self, postgres_dsn: str) -> Callable[[], CheckpointStore]:
        return lambda: open_store(postgres_dsn, create=True)


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    def new_store(self) -> Callable[[], CheckpointStore]:
        return MemoryStore


def test_state_encoding_is_versioned() -> None:
    data = encode_state({"a": [1, 2.5, "x", b"\x00"], 3: None})
    assert decode_state(data) == {"a": [1, 2.5, "x", b"\x00"], 3: None}
    future = data[:4] + (99).to_bytes(2, "big") + data[6:]
    with pytest.raises(FormatVersionError, match="version 99"):
        decode_state(future)
    with pytest.raises(CorruptStoreError, match="magic"):
        decode_state(b"XXXX" + data[4:])
    with pytest.raises(CorruptStoreError, match="does not decode"):
        decode_state(data[:-5])
