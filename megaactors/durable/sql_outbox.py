"""The outbox and compensations in SQL (the :class:`~megaactors.durable.store.OutboxStore` part)."""

from __future__ import annotations

from typing import Any

from megaactors.durable.sql_base import SQLConnection, from_json, to_json
from megaactors.durable.store import Compensation, Lease, OutboxEntry, OutboxStore
from megaactors.errors import StoreError

__all__ = ["SQLOutbox"]


class SQLOutbox(SQLConnection, OutboxStore):
    """Side effects in ``megaactors_outbox``, compensations in ``megaactors_compensations``."""

    def outbox_results(self, run_id: str) -> dict[str, Any]:
        rows = self._all("SELECT key, result FROM megaactors_outbox WHERE run_id = ? AND status = 'done'", (run_id,))
        return {k: from_json(v) for k, v in rows}

    def outbox_entries(self, run_id: str) -> list[OutboxEntry]:
        rows = self._all(
            "SELECT run_id, key, kind, request, status, result, attempts, fence FROM megaactors_outbox "
            "WHERE run_id = ? ORDER BY created_at, key",
            (run_id,),
        )
        return [OutboxEntry(r[0], r[1], r[2], from_json(r[3]), r[4], from_json(r[5]), r[6], r[7]) for r in rows]

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
                    (lease.run_id, key, kind, to_json(request), lease.fence),
                )
                return OutboxEntry(lease.run_id, key, kind, request, "pending", None, 1, lease.fence)
            status, result, attempts = row
            if status == "done":
                return OutboxEntry(lease.run_id, key, kind, request, "done", from_json(result), attempts, lease.fence)
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
                (to_json(result), lease.run_id, key),
            )
            if not n:
                raise StoreError(f"run {lease.run_id!r}: no pending side effect {key!r} to record")

    def add_compensation(self, run_id: str, key: str, fence: int, reason: str, result: Any) -> None:
        with self._write():
            self._run(
                "INSERT INTO megaactors_compensations (run_id, key, fence, reason, result, status, created_at) "
                "VALUES (?, ?, ?, ?, ?, 'pending', {NOW})",
                (run_id, key, fence, reason, to_json(result)),
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
        return [Compensation(r[0], r[1], r[2], r[3], from_json(r[4]), r[5], from_json(r[6])) for r in rows]

    def settle_compensation(self, c: Compensation, status: str, outcome: Any) -> None:
        with self._write():
            self._run(
                "UPDATE megaactors_compensations SET status = ?, outcome = ?, done_at = {NOW} "
                "WHERE run_id = ? AND key = ? AND fence = ?",
                (status, to_json(outcome), c.run_id, c.key, c.fence),
            )
