"""The SQL both stores share, written once; each backend supplies its dialect
(placeholders, clock, blob type, row locks) and its connection."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from megaactors.durable.store import (
    FORMAT,
    FORMAT_VERSION,
    CheckpointRecord,
    CheckpointStore,
    Compensation,
    FencingError,
    Lease,
    LeaseHeldError,
    OutboxEntry,
    RunExistsError,
    RunRecord,
    StoreError,
    UnknownRunError,
    VersionMismatchError,
)
from megaactors.redact import redact

__all__ = ["SQLStore", "schema"]

TABLES = (
    "megaactors_meta",
    "megaactors_runs",
    "megaactors_checkpoints",
    "megaactors_outbox",
    "megaactors_compensations",
)

_RUN_COLUMNS = (
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


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _unjson(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class SQLStore(CheckpointStore):
    """A :class:`CheckpointStore` over a DB-API connection; subclasses set the dialect."""

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

    # ------------------------------------------------------------------ fencing

    def _fenced(self, lease: Lease) -> float:
        """Inside a write transaction: check ``lease`` still holds; return the clock."""
        row = self._one(
            "SELECT fence, owner, status, lease_expires, {NOW} FROM megaactors_runs WHERE run_id = ? {LOCK}",
            (lease.run_id,),
        )
        if row is None:
            raise UnknownRunError(f"no run {lease.run_id!r}")
        fence, owner, status, expires, now = row
        if status in ("done", "dead", "cancelled"):
            raise FencingError(f"run {lease.run_id!r}: lease lost — the run is {status}")
        if fence != lease.fence:
            raise FencingError(
                f"run {lease.run_id!r}: lease lost — it was claimed again (fence {fence}, owner {owner}); "
                f"this worker holds fence {lease.fence}"
            )
        if status != "running":
            raise FencingError(f"run {lease.run_id!r}: lease lost — the run is {status}")
        if expires is None or expires <= now:
            raise FencingError(f"run {lease.run_id!r}: lease lost — it expired {now - (expires or now):.1f} s ago")
        return float(now)

    # ------------------------------------------------------------------ runs

    def _row_to_run(self, row: Sequence[Any], now: float) -> RunRecord:
        (run_id, params, options, status, owner, expires, fence, attempts, max_attempts, version) = row[:10]
        created, updated, step, error, result, parent_run, parent_step = row[10:17]
        return RunRecord(
            run_id=run_id,
            params=json.loads(params),
            options=json.loads(options),
            status=status,
            owner=owner,
            lease_expires=expires,
            fence=fence,
            attempts=attempts,
            max_attempts=max_attempts,
            version=version,
            created_at=created,
            updated_at=updated,
            step=step,
            error=error,
            result=_unjson(result),
            parent_run=parent_run,
            parent_step=parent_step,
            now=now,
        )

    def create_run(
        self,
        run_id: str,
        params: dict[str, Any],
        options: dict[str, Any],
        *,
        version: str,
        max_attempts: int = 3,
        owner: str | None = None,
        lease_s: float | None = None,
    ) -> Lease | None:
        if not isinstance(run_id, str) or not run_id:
            raise StoreError(f"a run id must be a non-empty string, got {run_id!r}")
        if max_attempts < 1:
            raise StoreError(f"max attempts must be >= 1, got {max_attempts}")
        with self._write():
            if self._one("SELECT 1 FROM megaactors_runs WHERE run_id = ?", (run_id,)) is not None:
                raise RunExistsError(f"run {run_id!r} already exists")
            held = owner is not None
            self._run(
                "INSERT INTO megaactors_runs (run_id, params, options, status, owner, lease_expires, fence, "
                "attempts, max_attempts, version, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, " + ("{NOW} + ?" if held else "NULL") + ", ?, ?, ?, ?, {NOW}, {NOW})",
                (
                    run_id,
                    _json(params),
                    _json(options),
                    "running" if held else "queued",
                    owner,
                    *((float(lease_s or 0),) if held else ()),
                    1 if held else 0,
                    1 if held else 0,
                    max_attempts,
                    version,
                ),
            )
            if not held:
                return None
            expires = self._one("SELECT lease_expires FROM megaactors_runs WHERE run_id = ?", (run_id,))[0]
        return Lease(run_id, owner, 1, expires)

    def get_run(self, run_id: str) -> RunRecord:
        row = self._one(f"SELECT {_RUN_COLUMNS}, {{NOW}} FROM megaactors_runs WHERE run_id = ?", (run_id,))
        if row is None:
            raise UnknownRunError(f"no run {run_id!r} in {redact(self.target)}")
        return self._row_to_run(row, row[17])

    def list_runs(self, status: str | None = None) -> list[RunRecord]:
        where, args = ("WHERE status = ?", (status,)) if status else ("", ())
        rows = self._all(
            f"SELECT {_RUN_COLUMNS}, {{NOW}} FROM megaactors_runs {where} ORDER BY created_at, run_id", args
        )
        return [self._row_to_run(r, r[17]) for r in rows]

    def claim(self, run_id: str, owner: str, version: str, lease_s: float) -> Lease:
        with self._write():
            row = self._one(
                "SELECT status, owner, lease_expires, version, {NOW} FROM megaactors_runs WHERE run_id = ? {LOCK}",
                (run_id,),
            )
            if row is None:
                raise UnknownRunError(f"no run {run_id!r} in {redact(self.target)}")
            status, holder, expires, run_version, now = row
            if run_version != version:
                raise VersionMismatchError(
                    f"run {run_id!r} belongs to megaactors {run_version}; this is megaactors {version}"
                )
            if status in ("done", "dead", "cancelled"):
                raise StoreError(f"run {run_id!r} is {status}; nothing to resume")
            if status == "running" and expires is not None and expires > now:
                raise LeaseHeldError(
                    f"run {run_id!r} is held by {holder} for another {expires - now:.1f} s (database clock)"
                )
            self._run(
                "UPDATE megaactors_runs SET status = 'running', owner = ?, fence = fence + 1, "
                "attempts = attempts + 1, lease_expires = {NOW} + ?, updated_at = {NOW} WHERE run_id = ?",
                (owner, float(lease_s), run_id),
            )
            fence, expires = self._one("SELECT fence, lease_expires FROM megaactors_runs WHERE run_id = ?", (run_id,))
        return Lease(run_id, owner, fence, expires)

    def claim_next(self, owner: str, version: str, lease_s: float) -> Lease | None:
        with self._write():
            self._run(
                "UPDATE megaactors_runs SET status = 'dead', updated_at = {NOW}, "
                "error = 'gave up after ' || attempts || ' attempt(s): the worker holding it was lost each time' "
                "WHERE version = ? AND status = 'running' AND lease_expires <= {NOW} AND attempts >= max_attempts",
                (version,),
            )
            row = self._one(
                "UPDATE megaactors_runs SET status = 'running', owner = ?, fence = fence + 1, "
                "attempts = attempts + 1, lease_expires = {NOW} + ?, updated_at = {NOW} "
                "WHERE run_id = (SELECT run_id FROM megaactors_runs WHERE version = ? AND "
                "(status = 'queued' OR (status = 'running' AND lease_expires <= {NOW})) "
                "ORDER BY created_at, run_id LIMIT 1 {SKIP_LOCKED}) "
                "RETURNING run_id, fence, lease_expires",
                (owner, float(lease_s), version),
            )
        if row is None:
            return None
        return Lease(row[0], owner, row[1], row[2])

    def renew(self, lease: Lease, lease_s: float) -> Lease:
        with self._write():
            self._fenced(lease)
            self._run(
                "UPDATE megaactors_runs SET lease_expires = {NOW} + ?, updated_at = {NOW} WHERE run_id = ?",
                (float(lease_s), lease.run_id),
            )
            expires = self._one("SELECT lease_expires FROM megaactors_runs WHERE run_id = ?", (lease.run_id,))[0]
        return Lease(lease.run_id, lease.owner, lease.fence, expires)

    def finish(self, lease: Lease, result: dict[str, Any]) -> None:
        with self._write():
            self._fenced(lease)
            self._run(
                "UPDATE megaactors_runs SET status = 'done', result = ?, lease_expires = NULL, error = NULL, "
                "updated_at = {NOW} WHERE run_id = ?",
                (_json(result), lease.run_id),
            )

    def fail(self, lease: Lease, error: str, *, final: bool = False) -> str:
        with self._write():
            self._fenced(lease)
            attempts, max_attempts = self._one(
                "SELECT attempts, max_attempts FROM megaactors_runs WHERE run_id = ?", (lease.run_id,)
            )
            status = "dead" if final or attempts >= max_attempts else "queued"
            self._run(
                "UPDATE megaactors_runs SET status = ?, error = ?, lease_expires = NULL, updated_at = {NOW} "
                "WHERE run_id = ?",
                (status, error, lease.run_id),
            )
        return status

    def release(self, lease: Lease) -> None:
        with self._write():
            self._fenced(lease)
            self._run(
                "UPDATE megaactors_runs SET status = 'queued', lease_expires = NULL, updated_at = {NOW} "
                "WHERE run_id = ?",
                (lease.run_id,),
            )

    def cancel(self, run_id: str, reason: str = "cancelled") -> None:
        with self._write():
            n = self._run(
                "UPDATE megaactors_runs SET status = 'cancelled', fence = fence + 1, lease_expires = NULL, "
                "error = ?, updated_at = {NOW} WHERE run_id = ?",
                (reason, run_id),
            )
        if not n:
            raise UnknownRunError(f"no run {run_id!r} in {redact(self.target)}")

    # ------------------------------------------------------------------ checkpoints

    def write(
        self,
        lease: Lease,
        step: int,
        parent_step: int | None,
        base_step: int,
        kind: str,
        meta: dict[str, Any],
        state: bytes,
    ) -> None:
        if kind not in ("full", "delta", "start"):
            raise StoreError(f"a checkpoint is 'full', 'delta' or 'start', got {kind!r}")
        if kind != "delta" and base_step != step:
            raise StoreError(f"a {kind} checkpoint is its own base (step {step}, base {base_step})")
        with self._write():
            self._fenced(lease)
            latest = self._one("SELECT MAX(step) FROM megaactors_checkpoints WHERE run_id = ?", (lease.run_id,))[0]
            if latest is not None and step <= latest:
                raise StoreError(f"run {lease.run_id!r}: step {step} is not after the latest checkpoint {latest}")
            if latest != parent_step:
                raise StoreError(f"run {lease.run_id!r}: step {step} names parent {parent_step}; latest is {latest}")
            self._run(
                "INSERT INTO megaactors_checkpoints (run_id, step, parent_step, base_step, kind, meta, nbytes, "
                "created_at, state) VALUES (?, ?, ?, ?, ?, ?, ?, {NOW}, ?)",
                (lease.run_id, step, parent_step, base_step, kind, _json(meta), len(state), state),
            )
            self._run("UPDATE megaactors_runs SET step = ?, updated_at = {NOW} WHERE run_id = ?", (step, lease.run_id))

    _CP = "run_id, step, parent_step, base_step, kind, meta, nbytes, created_at"

    @staticmethod
    def _row_to_cp(row: Sequence[Any]) -> CheckpointRecord:
        state = row[8] if len(row) > 8 else None
        return CheckpointRecord(
            run_id=row[0],
            step=row[1],
            parent_step=row[2],
            base_step=row[3],
            kind=row[4],
            meta=json.loads(row[5]),
            nbytes=row[6],
            created_at=row[7],
            state=None if state is None else bytes(state),
        )

    def _known(self, run_id: str) -> None:
        if self._one("SELECT 1 FROM megaactors_runs WHERE run_id = ?", (run_id,)) is None:
            raise UnknownRunError(f"no run {run_id!r} in {redact(self.target)}")

    def latest(self, run_id: str) -> CheckpointRecord | None:
        self._known(run_id)
        row = self._one(
            f"SELECT {self._CP}, state FROM megaactors_checkpoints WHERE run_id = ? ORDER BY step DESC LIMIT 1",
            (run_id,),
        )
        return None if row is None else self._row_to_cp(row)

    def get(self, run_id: str, step: int) -> CheckpointRecord:
        self._known(run_id)
        row = self._one(
            f"SELECT {self._CP}, state FROM megaactors_checkpoints WHERE run_id = ? AND step = ?", (run_id, step)
        )
        if row is None:
            raise StoreError(f"run {run_id!r} has no checkpoint of step {step}")
        return self._row_to_cp(row)

    def list(self, run_id: str) -> list[CheckpointRecord]:
        self._known(run_id)
        rows = self._all(f"SELECT {self._CP} FROM megaactors_checkpoints WHERE run_id = ? ORDER BY step", (run_id,))
        return [self._row_to_cp(r) for r in rows]

    def _range(self, run_id: str, first: int, last: int) -> list[CheckpointRecord]:
        rows = self._all(
            f"SELECT {self._CP}, state FROM megaactors_checkpoints WHERE run_id = ? AND step >= ? AND step <= ? "
            "ORDER BY step",
            (run_id, first, last),
        )
        return [self._row_to_cp(r) for r in rows]

    def fork(
        self,
        run_id: str,
        step: int,
        new_run_id: str,
        *,
        params: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        max_attempts: int | None = None,
        snapshot: tuple[dict[str, Any], bytes] | None = None,
    ) -> None:
        source = self.get_run(run_id)
        chain = self.chain(run_id, step)
        if snapshot is not None:
            meta, state = snapshot
            chain = [CheckpointRecord(new_run_id, step, None, step, "full", meta, len(state), 0.0, state)]
        with self._write():
            if self._one("SELECT 1 FROM megaactors_runs WHERE run_id = ?", (new_run_id,)) is not None:
                raise RunExistsError(f"run {new_run_id!r} already exists")
            self._run(
                "INSERT INTO megaactors_runs (run_id, params, options, status, fence, attempts, max_attempts, "
                "version, created_at, updated_at, step, parent_run, parent_step) "
                "VALUES (?, ?, ?, 'queued', 0, 0, ?, ?, {NOW}, {NOW}, ?, ?, ?)",
                (
                    new_run_id,
                    _json(source.params if params is None else params),
                    _json(source.options if options is None else options),
                    source.max_attempts if max_attempts is None else max_attempts,
                    source.version,
                    step,
                    run_id,
                    step,
                ),
            )
            for r in chain:
                self._run(
                    "INSERT INTO megaactors_checkpoints (run_id, step, parent_step, base_step, kind, meta, nbytes, "
                    "created_at, state) VALUES (?, ?, ?, ?, ?, ?, ?, {NOW}, ?)",
                    (new_run_id, r.step, r.parent_step, r.base_step, r.kind, _json(r.meta), r.nbytes, r.state),
                )

    def prune(self, run_id: str, keep: int) -> int:
        if keep < 1:
            raise StoreError(f"prune keeps at least one checkpoint, got keep={keep}")
        self._known(run_id)
        with self._write():
            row = self._one(
                "SELECT MIN(base_step) FROM (SELECT base_step FROM megaactors_checkpoints WHERE run_id = ? "
                "ORDER BY step DESC LIMIT ?) AS newest",
                (run_id, keep),
            )
            if row is None or row[0] is None:
                return 0
            return self._run("DELETE FROM megaactors_checkpoints WHERE run_id = ? AND step < ?", (run_id, row[0]))

    # ------------------------------------------------------------------ outbox

    def outbox_results(self, run_id: str) -> dict[str, Any]:
        rows = self._all("SELECT key, result FROM megaactors_outbox WHERE run_id = ? AND status = 'done'", (run_id,))
        return {k: _unjson(v) for k, v in rows}

    def outbox_entries(self, run_id: str) -> list[OutboxEntry]:
        rows = self._all(
            "SELECT run_id, key, kind, request, status, result, attempts, fence FROM megaactors_outbox "
            "WHERE run_id = ? ORDER BY created_at, key",
            (run_id,),
        )
        return [OutboxEntry(r[0], r[1], r[2], _unjson(r[3]), r[4], _unjson(r[5]), r[6], r[7]) for r in rows]

    def outbox_begin(self, lease: Lease, key: str, kind: str, request: Any) -> OutboxEntry:
        with self._write():
            self._fenced(lease)
            row = self._one(
                "SELECT status, result, attempts FROM megaactors_outbox WHERE run_id = ? AND key = ?",
                (lease.run_id, key),
            )
            if row is None:
                self._run(
                    "INSERT INTO megaactors_outbox (run_id, key, kind, request, status, attempts, fence, created_at) "
                    "VALUES (?, ?, ?, ?, 'pending', 1, ?, {NOW})",
                    (lease.run_id, key, kind, _json(request), lease.fence),
                )
                return OutboxEntry(lease.run_id, key, kind, request, "pending", None, 1, lease.fence)
            status, result, attempts = row
            if status == "done":
                return OutboxEntry(lease.run_id, key, kind, request, "done", _unjson(result), attempts, lease.fence)
            self._run(
                "UPDATE megaactors_outbox SET attempts = attempts + 1, fence = ? WHERE run_id = ? AND key = ?",
                (lease.fence, lease.run_id, key),
            )
            return OutboxEntry(lease.run_id, key, kind, request, "pending", None, attempts + 1, lease.fence)

    def outbox_finish(self, lease: Lease, key: str, result: Any) -> None:
        with self._write():
            self._fenced(lease)
            n = self._run(
                "UPDATE megaactors_outbox SET status = 'done', result = ?, done_at = {NOW} "
                "WHERE run_id = ? AND key = ? AND status = 'pending'",
                (_json(result), lease.run_id, key),
            )
            if not n:
                raise StoreError(f"run {lease.run_id!r}: no pending side effect {key!r} to record")

    def add_compensation(self, run_id: str, key: str, fence: int, reason: str, result: Any) -> None:
        with self._write():
            self._run(
                "INSERT INTO megaactors_compensations (run_id, key, fence, reason, result, status, created_at) "
                "VALUES (?, ?, ?, ?, ?, 'pending', {NOW})",
                (run_id, key, fence, reason, _json(result)),
            )

    def compensations(self, run_id: str | None = None, status: str | None = "pending") -> list[Compensation]:
        where, args = [], []
        if run_id is not None:
            where.append("run_id = ?")
            args.append(run_id)
        if status is not None:
            where.append("status = ?")
            args.append(status)
        rows = self._all(
            "SELECT run_id, key, fence, reason, result, status, outcome FROM megaactors_compensations "
            + ("WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY created_at, run_id, key",
            args,
        )
        return [Compensation(r[0], r[1], r[2], r[3], _unjson(r[4]), r[5], _unjson(r[6])) for r in rows]

    def settle_compensation(self, c: Compensation, status: str, outcome: Any) -> None:
        with self._write():
            self._run(
                "UPDATE megaactors_compensations SET status = ?, outcome = ?, done_at = {NOW} "
                "WHERE run_id = ? AND key = ? AND fence = ?",
                (status, _json(outcome), c.run_id, c.key, c.fence),
            )
