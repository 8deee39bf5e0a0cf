"""Runs and leases in SQL (the :class:`~megaactors.durable.store.RunQueueStore` part)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from megaactors.durable.sql_base import RUN_COLUMNS, SQLConnection, from_json, to_json
from megaactors.durable.store import (
    Lease,
    RunQueueStore,
    RunRecord,
    check_deploy_state,
    check_max_attempts,
    check_new_run,
)
from megaactors.errors import LeaseHeldError, RunExistsError, StoreError, UnknownRunError, VersionMismatchError
from megaactors.redact import redact

__all__ = ["SQLRunQueue"]

_DEPLOY = "deploy:"
"""Prefix of a version's deploy state in ``megaactors_meta``."""


class SQLRunQueue(SQLConnection, RunQueueStore):
    """Runs as rows of ``megaactors_runs``, claimed under fenced leases."""

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
            result=from_json(result),
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
        check_new_run(run_id, max_attempts)
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
                    to_json(params),
                    to_json(options),
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
        assert owner is not None  # held
        return Lease(run_id, owner, 1, expires)

    def get_run(self, run_id: str) -> RunRecord:
        row = self._one(f"SELECT {RUN_COLUMNS}, {{NOW}} FROM megaactors_runs WHERE run_id = ?", (run_id,))
        if row is None:
            raise UnknownRunError(f"no run {run_id!r} in {redact(self.target)}")
        return self._row_to_run(row, row[17])

    def list_runs(self, status: str | None = None) -> list[RunRecord]:
        where, args = ("WHERE status = ?", (status,)) if status else ("", ())
        rows = self._all(
            f"SELECT {RUN_COLUMNS}, {{NOW}} FROM megaactors_runs {where} ORDER BY created_at, run_id", args
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
                "((status = 'queued' AND NOT EXISTS (SELECT 1 FROM megaactors_meta WHERE key = ? AND "
                "value = 'draining')) OR (status = 'running' AND lease_expires <= {NOW})) "
                "ORDER BY created_at, run_id LIMIT 1 {SKIP_LOCKED}) "
                "RETURNING run_id, fence, lease_expires",
                (owner, float(lease_s), version, _DEPLOY + version),
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
                (to_json(result), lease.run_id),
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

    def interrupt(self, lease: Lease, reason: str, options: dict[str, Any]) -> None:
        with self._write():
            self._fenced(lease)
            self._run(
                "UPDATE megaactors_runs SET status = 'interrupted', error = ?, options = ?, lease_expires = NULL, "
                "updated_at = {NOW} WHERE run_id = ?",
                (reason, to_json(options), lease.run_id),
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

    def end_lease(self, run_id: str, owner: str, fence: int) -> bool:
        with self._write():
            n = self._run(
                "UPDATE megaactors_runs SET lease_expires = {NOW}, updated_at = {NOW} "
                "WHERE run_id = ? AND owner = ? AND fence = ? AND status = 'running' AND lease_expires > {NOW}",
                (run_id, owner, fence),
            )
        return bool(n)

    def requeue(self, run_id: str, max_attempts: int | None = None) -> None:
        check_max_attempts(max_attempts)
        with self._write():
            row = self._one("SELECT status FROM megaactors_runs WHERE run_id = ? {LOCK}", (run_id,))
            if row is None:
                raise UnknownRunError(f"no run {run_id!r} in {redact(self.target)}")
            if row[0] != "dead":
                raise StoreError(f"run {run_id!r} is {row[0]}; only dead runs are requeued")
            self._run(
                "UPDATE megaactors_runs SET status = 'queued', attempts = 0, owner = NULL, lease_expires = NULL, "
                "max_attempts = COALESCE(?, max_attempts), updated_at = {NOW} WHERE run_id = ?",
                (max_attempts, run_id),
            )

    def set_deploy(self, version: str, state: str, *, only_if_unknown: bool = False) -> None:
        check_deploy_state(state)
        key = _DEPLOY + version
        with self._write():
            known = self._one("SELECT value FROM megaactors_meta WHERE key = ? {LOCK}", (key,)) is not None
            if known and only_if_unknown:
                return
            if known:
                self._run("UPDATE megaactors_meta SET value = ? WHERE key = ?", (state, key))
            else:
                self._run("INSERT INTO megaactors_meta (key, value) VALUES (?, ?)", (key, state))

    def deploys(self) -> dict[str, str]:
        rows = self._all("SELECT key, value FROM megaactors_meta WHERE key LIKE ?", (_DEPLOY + "%",))
        return {key[len(_DEPLOY) :]: value for key, value in sorted(rows)}
