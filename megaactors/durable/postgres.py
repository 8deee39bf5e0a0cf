"""The PostgreSQL checkpoint store: one database for workers on many machines.

psycopg 3 (the ``postgres`` extra). Write transactions lock the run's row
(``SELECT … FOR UPDATE``) so a claim and a fenced write never interleave;
claimers pick candidates with ``FOR UPDATE SKIP LOCKED`` so they never queue
behind each other; leases expire on the server's clock (``now()``), never on a
worker's. Tables carry a ``megaactors_`` prefix and live in the connection's
schema (set ``options=-csearch_path=...`` in the DSN to choose one).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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

__all__ = ["PostgresStore", "is_postgres"]


def is_postgres(target: str) -> bool:
    """True for a PostgreSQL DSN (``postgresql://`` or ``postgres://``)."""
    return target.startswith(("postgresql://", "postgres://"))


class PostgresStore(SQLStore):
    """A checkpoint store in a PostgreSQL database."""

    NOW = "(extract(epoch from now())::double precision)"
    LOCK = "FOR UPDATE"
    SKIP_LOCKED = "FOR UPDATE SKIP LOCKED"
    PARAM = "%s"

    def __init__(self, dsn: str, *, create: bool = False, readonly: bool = False) -> None:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - the extra is part of the test environment
            raise StoreError("PostgreSQL needs psycopg: pip install 'megaactors[postgres]'") from exc
        self._psycopg = psycopg
        self.target = dsn
        self.readonly = readonly
        self._con = self._connect()
        self._in_tx = False
        present = self._one("SELECT to_regclass('megaactors_meta') IS NOT NULL")[0]
        if not present:
            if readonly or not create:
                self.close()
                raise StoreError("the PostgreSQL database holds no megaactors store yet")
            with self._write():
                self._execute("SELECT pg_advisory_xact_lock(726354)")
                self._init_schema("BYTEA")
        self._check()

    def _check(self) -> None:
        meta = dict(self._all("SELECT key, value FROM megaactors_meta"))
        if meta.get("format") != FORMAT:
            raise CorruptStoreError(f"not a megaactors store (format {meta.get('format')!r})")
        if meta.get("version") != str(FORMAT_VERSION):
            raise FormatVersionError(
                f"the PostgreSQL store is in format version {meta.get('version')}; "
                f"this megaactors reads version {FORMAT_VERSION}"
            )
        missing = [t for t in TABLES if not self._one("SELECT to_regclass(%s) IS NOT NULL", (t,))[0]]
        if missing:
            raise CorruptStoreError(f"tables missing: {', '.join(missing)}")

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self.target, autocommit=True, connect_timeout=10)
        except self._psycopg.OperationalError as exc:
            raise StoreBusyError(f"cannot connect to PostgreSQL: {_first_line(exc)}") from exc
        except self._psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL: {_first_line(exc)}") from exc

    def _error(self, exc: Exception) -> StoreError:
        """A psycopg error as a store error: a lost connection or a server shutting
        down is worth trying again (the next statement reconnects)."""
        lost = self._con.broken or isinstance(exc, self._psycopg.OperationalError)
        return (StoreBusyError if lost else StoreError)(f"PostgreSQL: {_first_line(exc)}")

    def reopen(self) -> PostgresStore:
        return PostgresStore(self.target, readonly=self.readonly)

    def close(self) -> None:
        self._con.close()

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        if self.readonly and self._in_tx:
            raise StoreError("the store is open read-only")
        if self._con.broken and not self._in_tx:  # the server restarted or the network dropped
            self._con.close()
            self._con = self._connect()
        try:
            return self._con.execute(sql, args)
        except self._psycopg.Error as exc:
            raise self._error(exc) from exc

    @contextmanager
    def _write(self) -> Iterator[None]:
        if self._in_tx:
            yield
            return
        if self._con.broken:
            self._con.close()
            self._con = self._connect()
        self._in_tx = True
        try:
            with self._con.transaction():
                yield
        except self._psycopg.Error as exc:
            raise self._error(exc) from exc
        finally:
            self._in_tx = False


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
