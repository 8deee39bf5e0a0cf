"""What the SQL stores share, written once: the schema, the dialect plumbing and
fencing. Each backend (:mod:`megaactors.durable.sqlite`, :mod:`megaactors.durable.postgres`)
supplies its dialect (placeholders, clock, blob type, row locks) and its connection;
the three parts of the store are :mod:`~megaactors.durable.sql_runs`,
:mod:`~megaactors.durable.sql_log` and :mod:`~megaactors.durable.sql_outbox`."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from megaactors.durable.store import FORMAT, FORMAT_VERSION, Lease, StoreConnection, fence_error
from megaactors.errors import UnknownRunError
from megaactors.redact import redact

__all__ = ["RUN_COLUMNS", "TABLES", "SQLConnection", "from_json", "schema", "to_json"]
TABLES = (
    "megaactors_meta",
    "megaactors_runs",
    "megaactors_checkpoints",
    "megaactors_outbox",
    "megaactors_compensations",
)

RUN_COLUMNS = (
    "run_id, params, options, status, owner, lease_expires, fence, attempts, max_attempts, version, "
    "created_at, updated_at, step, error, result, parent_run, parent_step"
)


def schema(blob: str) -> list[str]:
    """CREATE statements of every table (``blob``: the binary column type)."""
    return [
        "CREATE TABLE IF NOT EXISTS megaactors_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE IF NOT EXISTS megaactors_runs (
            run_id TEXT PRIMARY KEY,
            params TEXT NOT NULL,
            options TEXT NOT NULL,
            status TEXT NOT NULL,
            owner TEXT,
            lease_expires DOUBLE PRECISION,
            fence BIGINT NOT NULL DEFAULT 0,
            attempts INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL,
            version TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            step BIGINT,
            error TEXT,
            result TEXT,
            parent_run TEXT,
            parent_step BIGINT
        )""",
        "CREATE INDEX IF NOT EXISTS megaactors_runs_claim ON megaactors_runs (version, status, created_at)",
        f"""CREATE TABLE IF NOT EXISTS megaactors_checkpoints (
            run_id TEXT NOT NULL,
            step BIGINT NOT NULL,
            parent_step BIGINT,
            base_step BIGINT NOT NULL,
            kind TEXT NOT NULL,
            meta TEXT NOT NULL,
            nbytes BIGINT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            state {blob} NOT NULL,
            PRIMARY KEY (run_id, step)
        )""",
        """CREATE TABLE IF NOT EXISTS megaactors_outbox (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            request TEXT NOT NULL,
            status TEXT NOT NULL,
            result TEXT,
            attempts INTEGER NOT NULL DEFAULT 1,
            fence BIGINT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            done_at DOUBLE PRECISION,
            PRIMARY KEY (run_id, key)
        )""",
        """CREATE TABLE IF NOT EXISTS megaactors_compensations (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            fence BIGINT NOT NULL,
            reason TEXT NOT NULL,
            result TEXT,
            status TEXT NOT NULL,
            outcome TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            done_at DOUBLE PRECISION,
            PRIMARY KEY (run_id, key, fence)
        )""",
    ]


def to_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class SQLConnection(StoreConnection):
    """A DB-API connection in some SQL dialect; subclasses set the dialect."""

    NOW: str
    """SQL expression for the database's clock in epoch seconds."""
    LOCK: str = ""
    """Row-lock suffix for a SELECT inside a write transaction."""
    SKIP_LOCKED: str = ""
    """Suffix that makes concurrent claimers skip each other's candidate rows."""
    PARAM = "?"

    # ------------------------------------------------------------------ dialect plumbing

    @abstractmethod
    def _execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """Run one statement; return the cursor."""

    @abstractmethod
    @contextmanager
    def _write(self) -> Iterator[None]:
        """A write transaction (serialised with every other writer)."""

    def _sql(self, sql: str) -> str:
        sql = sql.replace("{NOW}", self.NOW).replace("{LOCK}", self.LOCK).replace("{SKIP_LOCKED}", self.SKIP_LOCKED)
        return sql if self.PARAM == "?" else sql.replace("?", self.PARAM)

    def _one(self, sql: str, args: Sequence[Any] = ()) -> Any:
        return self._execute(self._sql(sql), args).fetchone()

    def _all(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        return list(self._execute(self._sql(sql), args).fetchall())

    def _run(self, sql: str, args: Sequence[Any] = ()) -> int:
        return self._execute(self._sql(sql), args).rowcount

    def _init_schema(self, blob: str) -> None:
        with self._write():
            for statement in schema(blob):
                self._execute(statement)
            have = dict(self._all("SELECT key, value FROM megaactors_meta"))
            if not have:
                self._run("INSERT INTO megaactors_meta (key, value) VALUES (?, ?)", ("format", FORMAT))
                self._run("INSERT INTO megaactors_meta (key, value) VALUES (?, ?)", ("version", str(FORMAT_VERSION)))

    def now(self) -> float:
        return float(self._one("SELECT {NOW}")[0])

    def _fenced(self, lease: Lease) -> float:
        """Inside a write transaction: check ``lease`` still holds; return the clock."""
        row = self._one(
            "SELECT fence, owner, status, lease_expires, {NOW} FROM megaactors_runs WHERE run_id = ? {LOCK}",
            (lease.run_id,),
        )
        if row is None:
            raise UnknownRunError(f"no run {lease.run_id!r}")
        fence, owner, status, expires, now = row
        error = fence_error(lease, fence, owner, status, expires, now)
        if error is not None:
            raise error
        return float(now)

    def _known(self, run_id: str) -> None:
        if self._one("SELECT 1 FROM megaactors_runs WHERE run_id = ?", (run_id,)) is None:
            raise UnknownRunError(f"no run {run_id!r} in {redact(self.target)}")
