"""The in-memory checkpoint store: the reference implementation of the store contract.

Everything a :class:`~megaactors.durable.store.CheckpointStore` promises, in plain
dictionaries guarded by one lock, with the host's clock as the database clock. It
keeps nothing after the process ends, so it is for tests, notebooks and as the
model a new backend is checked against: it passes the same conformance suite
(:mod:`megaactors.durable.conformance`) as SQLite and PostgreSQL. Values go through
JSON as they would in a database (tuples come back as lists, keys as strings).
:meth:`MemoryStore.reopen` is another handle on the same data.
"""

from __future__ import annotations

import builtins
import json
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from megaactors.durable.store import (
    CheckpointRecord,
    CheckpointStore,
    Compensation,
    Lease,
    OutboxEntry,
    RunRecord,
    check_deploy_state,
    check_max_attempts,
    check_new_run,
    checked_checkpoint,
    fence_error,
)
from megaactors.errors import LeaseHeldError, RunExistsError, StoreError, UnknownRunError, VersionMismatchError

__all__ = ["MemoryStore"]


def _copy(value: Any) -> Any:
    """``value`` as a database would give it back (through JSON)."""
    return None if value is None else json.loads(json.dumps(value, sort_keys=True))


@dataclass
class _Tables:
    lock: threading.Lock = field(default_factory=threading.Lock)
    runs: dict[str, RunRecord] = field(default_factory=dict)
    checkpoints: dict[str, dict[int, CheckpointRecord]] = field(default_factory=dict)
    outbox: dict[tuple[str, str], tuple[OutboxEntry, float]] = field(default_factory=dict)
    compensations: dict[tuple[str, str, int], tuple[Compensation, float]] = field(default_factory=dict)
    deploys: dict[str, str] = field(default_factory=dict)


class MemoryStore(CheckpointStore):
    """Runs, checkpoints, leases and the outbox in this process's memory."""

    def __init__(self, tables: _Tables | None = None) -> None:
        self._t = tables if tables is not None else _Tables()
        self.target = f"memory:{id(self._t):x}"

    def reopen(self) -> MemoryStore:
        return MemoryStore(self._t)

    def close(self) -> None:
        return None

    def now(self) -> float:
        return time.time()

    # ------------------------------------------------------------------ runs and leases

    def _run(self, run_id: str) -> RunRecord:
        run = self._t.runs.get(run_id)
        if run is None:
            raise UnknownRunError(f"no run {run_id!r} in {self.target}")
        return run

    def _fenced(self, lease: Lease) -> RunRecord:
        run = self._t.runs.get(lease.run_id)
        if run is None:
            raise UnknownRunError(f"no run {lease.run_id!r}")
        error = fence_error(lease, run.fence, run.owner, run.status, run.lease_expires, self.now())
        if error is not None:
            raise error
        return run

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
        with self._t.lock:
            if run_id in self._t.runs:
                raise RunExistsError(f"run {run_id!r} already exists")
            now, held = self.now(), owner is not None
            expires = now + float(lease_s or 0) if held else None
            self._t.runs[run_id] = RunRecord(
                run_id, _copy(params), _copy(options), "running" if held else "queued", owner, expires,
                int(held), int(held), max_attempts, version, now, now,
            )  # fmt: skip
        return Lease(run_id, owner, 1, expires) if held else None  # type: ignore[arg-type]

    def get_run(self, run_id: str) -> RunRecord:
        with self._t.lock:
            return replace(self._run(run_id), now=self.now())

    def list_runs(self, status: str | None = None) -> builtins.list[RunRecord]:
        with self._t.lock:
            now = self.now()
            runs = [r for r in self._t.runs.values() if status is None or r.status == status]
            return [replace(r, now=now) for r in sorted(runs, key=lambda r: (r.created_at, r.run_id))]

    def _take(self, run: RunRecord, owner: str, lease_s: float) -> Lease:
        now = self.now()
        run.status, run.owner, run.fence, run.attempts = "running", owner, run.fence + 1, run.attempts + 1
        run.lease_expires, run.updated_at = now + float(lease_s), now
        return Lease(run.run_id, owner, run.fence, run.lease_expires)

    def claim(self, run_id: str, owner: str, version: str, lease_s: float) -> Lease:
        with self._t.lock:
            run, now = self._run(run_id), self.now()
            if run.version != version:
                raise VersionMismatchError(
                    f"run {run_id!r} belongs to megaactors {run.version}; this is megaactors {version}"
                )
            if run.status in ("done", "dead", "cancelled"):
                raise StoreError(f"run {run_id!r} is {run.status}; nothing to resume")
            if run.status == "running" and run.lease_expires is not None and run.lease_expires > now:
                raise LeaseHeldError(
                    f"run {run_id!r} is held by {run.owner} for another {run.lease_expires - now:.1f} s "
                    "(database clock)"
                )
            return self._take(run, owner, lease_s)

    def claim_next(self, owner: str, version: str, lease_s: float) -> Lease | None:
        with self._t.lock:
            now = self.now()
            runs = sorted(self._t.runs.values(), key=lambda r: (r.created_at, r.run_id))
            for run in runs:
                expired = run.status == "running" and run.lease_expires is not None and run.lease_expires <= now
                if run.version == version and expired and run.attempts >= run.max_attempts:
                    run.status, run.updated_at = "dead", now
                    run.error = f"gave up after {run.attempts} attempt(s): the worker holding it was lost each time"
            draining = self._t.deploys.get(version) == "draining"
            for run in runs:
                expired = run.status == "running" and run.lease_expires is not None and run.lease_expires <= now
                if run.version == version and ((run.status == "queued" and not draining) or expired):
                    return self._take(run, owner, lease_s)
        return None

    def renew(self, lease: Lease, lease_s: float) -> Lease:
        with self._t.lock:
            run = self._fenced(lease)
            run.updated_at = self.now()
            run.lease_expires = run.updated_at + float(lease_s)
            return Lease(lease.run_id, lease.owner, lease.fence, run.lease_expires)

    def finish(self, lease: Lease, result: dict[str, Any]) -> None:
        with self._t.lock:
            run = self._fenced(lease)
            run.status, run.result, run.lease_expires, run.error = "done", _copy(result), None, None
            run.updated_at = self.now()

    def fail(self, lease: Lease, error: str, *, final: bool = False) -> str:
        with self._t.lock:
            run = self._fenced(lease)
            run.status = "dead" if final or run.attempts >= run.max_attempts else "queued"
            run.error, run.lease_expires, run.updated_at = error, None, self.now()
            return run.status

    def release(self, lease: Lease) -> None:
        with self._t.lock:
            run = self._fenced(lease)
            run.status, run.lease_expires, run.updated_at = "queued", None, self.now()

    def interrupt(self, lease: Lease, reason: str, options: dict[str, Any]) -> None:
        with self._t.lock:
            run = self._fenced(lease)
            run.status, run.error, run.options, run.lease_expires = "interrupted", reason, _copy(options), None
            run.updated_at = self.now()

    def cancel(self, run_id: str, reason: str = "cancelled") -> None:
        with self._t.lock:
            run = self._run(run_id)
            run.status, run.fence, run.lease_expires, run.error = "cancelled", run.fence + 1, None, reason
            run.updated_at = self.now()

    def set_deploy(self, version: str, state: str, *, only_if_unknown: bool = False) -> None:
        check_deploy_state(state)
        with self._t.lock:
            if not (only_if_unknown and version in self._t.deploys):
                self._t.deploys[version] = state

    def deploys(self) -> dict[str, str]:
        with self._t.lock:
            return dict(sorted(self._t.deploys.items()))

    def end_lease(self, run_id: str, owner: str, fence: int) -> bool:
        with self._t.lock:
            run, now = self._run(run_id), self.now()
            held = run.status == "running" and run.lease_expires is not None and run.lease_expires > now
            if not held or run.owner != owner or run.fence != fence:
                return False
            run.lease_expires = run.updated_at = now
            return True

    def requeue(self, run_id: str, max_attempts: int | None = None) -> None:
        check_max_attempts(max_attempts)
        with self._t.lock:
            run = self._run(run_id)
            if run.status != "dead":
                raise StoreError(f"run {run_id!r} is {run.status}; only dead runs are requeued")
            run.status, run.attempts, run.owner, run.lease_expires = "queued", 0, None, None
            run.max_attempts = max_attempts or run.max_attempts
            run.updated_at = self.now()

    # ------------------------------------------------------------------ the checkpoint log

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
        with self._t.lock:
            run = self._fenced(lease)
            rows = self._t.checkpoints.setdefault(lease.run_id, {})
            checked_checkpoint(lease.run_id, step, parent_step, base_step, kind, max(rows, default=None))
            rows[step] = CheckpointRecord(
                lease.run_id, step, parent_step, base_step, kind, _copy(meta), len(state), self.now(), bytes(state)
            )
            run.step, run.updated_at = step, self.now()

    def _rows(self, run_id: str) -> dict[int, CheckpointRecord]:
        self._run(run_id)
        return self._t.checkpoints.get(run_id, {})

    def latest(self, run_id: str) -> CheckpointRecord | None:
        with self._t.lock:
            rows = self._rows(run_id)
            return replace(rows[max(rows)]) if rows else None

    def get(self, run_id: str, step: int) -> CheckpointRecord:
        with self._t.lock:
            row = self._rows(run_id).get(step)
            if row is None:
                raise StoreError(f"run {run_id!r} has no checkpoint of step {step}")
            return replace(row)

    def list(self, run_id: str) -> builtins.list[CheckpointRecord]:
        with self._t.lock:
            return [replace(r, state=None) for _, r in sorted(self._rows(run_id).items())]

    def checkpoints_between(self, run_id: str, first: int, last: int) -> builtins.list[CheckpointRecord]:
        with self._t.lock:
            rows = self._t.checkpoints.get(run_id, {})
            return [replace(r) for s, r in sorted(rows.items()) if first <= s <= last]

    def _add_fork(self, run: RunRecord, chain: builtins.list[CheckpointRecord]) -> None:
        with self._t.lock:
            if run.run_id in self._t.runs:
                raise RunExistsError(f"run {run.run_id!r} already exists")
            now = self.now()
            self._t.runs[run.run_id] = replace(
                run, params=_copy(run.params), options=_copy(run.options), created_at=now, updated_at=now
            )
            self._t.checkpoints[run.run_id] = {
                r.step: replace(r, run_id=run.run_id, meta=_copy(r.meta), created_at=now) for r in chain
            }

    def prune(self, run_id: str, keep: int) -> int:
        if keep < 1:
            raise StoreError(f"prune keeps at least one checkpoint, got keep={keep}")
        with self._t.lock:
            rows = self._rows(run_id)
            newest = [rows[s] for s in sorted(rows)[-keep:]]
            if not newest:
                return 0
            first = min(r.base_step for r in newest)
            gone = [s for s in rows if s < first]
            for s in gone:
                del rows[s]
            return len(gone)

    # ------------------------------------------------------------------ outbox and compensations

    def outbox_results(self, run_id: str) -> dict[str, Any]:
        with self._t.lock:
            return {
                key: _copy(e.result)
                for (rid, key), (e, _) in self._t.outbox.items()
                if rid == run_id and e.status == "done"
            }

    def outbox_entries(self, run_id: str) -> builtins.list[OutboxEntry]:
        with self._t.lock:
            rows = [(t, e) for (rid, _), (e, t) in self._t.outbox.items() if rid == run_id]
            return [replace(e, request=_copy(e.request), result=_copy(e.result)) for _, e in sorted(
                rows, key=lambda te: (te[0], te[1].key)
            )]  # fmt: skip

    def outbox_begin(self, lease: Lease, key: str, kind: str, request: Any) -> OutboxEntry:
        with self._t.lock:
            self._fenced(lease)
            found = self._t.outbox.get((lease.run_id, key))
            if found is None:
                entry = OutboxEntry(lease.run_id, key, kind, _copy(request), "pending", None, 1, lease.fence)
                self._t.outbox[(lease.run_id, key)] = (entry, self.now())
                return replace(entry, request=request)
            entry = found[0]
            if entry.status == "done":
                return OutboxEntry(
                    lease.run_id, key, kind, request, "done", _copy(entry.result), entry.attempts, lease.fence
                )
            entry.attempts, entry.fence = entry.attempts + 1, lease.fence
            return OutboxEntry(lease.run_id, key, kind, request, "pending", None, entry.attempts, lease.fence)

    def outbox_finish(self, lease: Lease, key: str, result: Any) -> None:
        with self._t.lock:
            self._fenced(lease)
            found = self._t.outbox.get((lease.run_id, key))
            if found is None or found[0].status != "pending":
                raise StoreError(f"run {lease.run_id!r}: no pending side effect {key!r} to record")
            found[0].status, found[0].result = "done", _copy(result)

    def add_compensation(self, run_id: str, key: str, fence: int, reason: str, result: Any) -> None:
        with self._t.lock:
            if (run_id, key, fence) in self._t.compensations:
                raise StoreError(f"run {run_id!r}: a compensation for {key!r} under fence {fence} exists already")
            c = Compensation(run_id, key, fence, reason, _copy(result))
            self._t.compensations[(run_id, key, fence)] = (c, self.now())

    def compensations(self, run_id: str | None = None, status: str | None = "pending") -> builtins.list[Compensation]:
        with self._t.lock:
            rows = [
                (t, c)
                for c, t in self._t.compensations.values()
                if (run_id is None or c.run_id == run_id) and (status is None or c.status == status)
            ]
            rows.sort(key=lambda tc: (tc[0], tc[1].run_id, tc[1].key))
            return [replace(c, result=_copy(c.result), outcome=_copy(c.outcome)) for _, c in rows]

    def settle_compensation(self, c: Compensation, status: str, outcome: Any) -> None:
        with self._t.lock:
            found = self._t.compensations.get((c.run_id, c.key, c.fence))
            if found is not None:
                found[0].status, found[0].outcome = status, _copy(outcome)
