"""The SQLite checkpoint store: embedded, zero set-up, the default.

WAL journal (readers never block the writer), a 30 s busy timeout, every write
transaction begun ``IMMEDIATE`` (it takes the write lock at once instead of
failing half-way with "database is locked") and ``synchronous=NORMAL``: a commit
survives the death of its process (SIGKILL); a power cut may lose the newest
commits but never corrupts the file. Leases expire on SQLite's clock, which is the
host's: workers sharing one file share one clock. Not for network filesystems.

A file is inspected read-only before anything is written to it: a corrupt file,
another application's database or one of another format version is refused and
left exactly as it was.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from megaactors.durable.sql import TABLES, SQLStore
from megaactors.durable.store import (
    FORMAT,
    FORMAT_VERSION,
    CorruptStoreError,
    FormatVersionError,
    StoreBusyError,
    StoreError,
)

__all__ = ["SQLiteStore"]

BUSY_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 5.0
"""Readers rarely wait in WAL mode; only a writer frozen mid-commit makes them."""


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection. On read-only media (a directory or file this process
    cannot write) SQLite cannot make the shared-memory file a WAL database needs, so
    the file is opened as immutable instead: nothing can change it anyway."""
    uri = path.resolve().as_uri()
    try:
        con = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=READ_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot open: {exc}") from exc
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return con
    except sqlite3.OperationalError:
        con.close()
        if os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
            raise
    try:
        return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=READ_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot open read-only: {exc}") from exc


def _inspect(path: Path) -> bool:
    """Check ``path`` read-only; return True if it already holds a megaactors store,
    False if it is an empty database; raise if it is anything else."""
    try:
        con = _connect_readonly(path)
    except sqlite3.OperationalError as exc:
        raise StoreError(f"{path}: cannot read: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        raise CorruptStoreError(f"{path} is not a megaactors checkpoint database ({exc})") from exc
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return False
        if "megaactors_meta" not in tables:
            shown = ", ".join(sorted(tables)[:5])
            raise CorruptStoreError(f"{path} is an SQLite database of another application (tables: {shown})")
        meta = dict(con.execute("SELECT key, value FROM megaactors_meta"))
    except sqlite3.OperationalError as exc:  # locked, unreadable: not a verdict on the file
        raise StoreError(f"{path}: cannot read: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        raise CorruptStoreError(f"{path} is not a megaactors checkpoint database ({exc})") from exc
    finally:
        con.close()
    if meta.get("format") != FORMAT:
        raise CorruptStoreError(f"{path}: not a megaactors checkpoint database (format {meta.get('format')!r})")
    version = meta.get("version")
    if version != str(FORMAT_VERSION):
        raise FormatVersionError(
            f"{path} was written in store format version {version}; this megaactors reads version {FORMAT_VERSION}"
        )
    missing = [t for t in TABLES if t not in tables]
    if missing:
        raise CorruptStoreError(f"{path}: tables missing: {', '.join(missing)}")
    return True


class SQLiteStore(SQLStore):
    """A checkpoint store in one SQLite file."""

    NOW = "((julianday('now') - 2440587.5) * 86400.0)"

    def __init__(
        self, path: str | Path, *, create: bool = False, readonly: bool = False, busy_timeout_s: float = BUSY_TIMEOUT_S
    ) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self.target = str(path)
        self.readonly = readonly
        if self.path.is_dir():
            raise StoreError(f"{path} is a directory, not a checkpoint database")
        if self.path.exists() and not stat.S_ISREG(self.path.stat().st_mode):  # a FIFO would block the open
            raise StoreError(f"{path} is not a regular file, so not a checkpoint database")
        exists = self.path.exists()
        if not exists and not create:
            raise StoreError(f"no checkpoint database at {path}")
        ready = _inspect(self.path) if exists else False
        if not ready and (readonly or not create):
            raise StoreError(f"{path} holds no megaactors store yet")
        if readonly:
            try:
                self._con = _connect_readonly(self.path)
            except sqlite3.Error as exc:
                raise StoreError(f"{path}: cannot read: {exc}") from exc
            return
        try:
            if not exists:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._con = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None)
            self._con.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            if not ready:
                self._con.execute("PRAGMA journal_mode = WAL")
            self._con.execute("PRAGMA synchronous = NORMAL")
            if not ready:
                self._init_schema("BLOB")
                # two processes may have created it at once: check what is there now
                _inspect(self.path)
        except (sqlite3.OperationalError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if not os.access(self.path.parent if self.path.parent.exists() else ".", os.W_OK):
                reason += f" (the directory {self.path.parent} is not writable)"
            raise StoreError(f"{path}: cannot {'create' if not exists else 'open'} it for writing: {reason}") from exc

    def reopen(self) -> SQLiteStore:
        return SQLiteStore(self.path, readonly=self.readonly, busy_timeout_s=self.busy_timeout_s)

    def close(self) -> None:
        self._con.close()

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        try:
            return self._con.execute(sql, args)
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc):
                raise StoreError(f"{self.path} is open read-only") from exc
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreBusyError(f"{self.path}: {exc}") from exc
            raise StoreError(f"{self.path}: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise CorruptStoreError(f"{self.path}: {exc}") from exc

    @contextmanager
    def _write(self) -> Iterator[None]:
        if self._con.in_transaction:  # nested: the outer transaction decides
            yield
            return
        self._execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if self._con.in_transaction:
                self._con.execute("ROLLBACK")
            raise
        self._execute("COMMIT")
