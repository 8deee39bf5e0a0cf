"""The checkpoint log in SQL (the :class:`~megaactors.durable.store.CheckpointLog` part)."""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import Any

from megaactors.durable.sql_base import SQLConnection, to_json
from megaactors.durable.store import CheckpointLog, CheckpointRecord, Lease, RunRecord, checked_checkpoint
from megaactors.errors import RunExistsError, StoreError

__all__ = ["SQLCheckpointLog"]


class SQLCheckpointLog(SQLConnection, CheckpointLog):
    """Checkpoints as rows of ``megaactors_checkpoints``, written fenced."""

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
        with self._write():
            self._fenced(lease)
            latest = self._one("SELECT MAX(step) FROM megaactors_checkpoints WHERE run_id = ?", (lease.run_id,))[0]
            checked_checkpoint(lease.run_id, step, parent_step, base_step, kind, latest)
            self._run(
                "INSERT INTO megaactors_checkpoints (run_id, step, parent_step, base_step, kind, meta, nbytes, "
                "created_at, state) VALUES (?, ?, ?, ?, ?, ?, ?, {NOW}, ?)",
                (lease.run_id, step, parent_step, base_step, kind, to_json(meta), len(state), state),
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

    def list(self, run_id: str) -> builtins.list[CheckpointRecord]:
        self._known(run_id)
        rows = self._all(f"SELECT {self._CP} FROM megaactors_checkpoints WHERE run_id = ? ORDER BY step", (run_id,))
        return [self._row_to_cp(r) for r in rows]

    def checkpoints_between(self, run_id: str, first: int, last: int) -> builtins.list[CheckpointRecord]:
        rows = self._all(
            f"SELECT {self._CP}, state FROM megaactors_checkpoints WHERE run_id = ? AND step >= ? AND step <= ? "
            "ORDER BY step",
            (run_id, first, last),
        )
        return [self._row_to_cp(r) for r in rows]

    def _add_fork(self, run: RunRecord, chain: builtins.list[CheckpointRecord]) -> None:
        with self._write():
            if self._one("SELECT 1 FROM megaactors_runs WHERE run_id = ?", (run.run_id,)) is not None:
                raise RunExistsError(f"run {run.run_id!r} already exists")
            self._run(
                "INSERT INTO megaactors_runs (run_id, params, options, status, fence, attempts, max_attempts, "
                "version, created_at, updated_at, step, parent_run, parent_step) "
                "VALUES (?, ?, ?, 'queued', 0, 0, ?, ?, {NOW}, {NOW}, ?, ?, ?)",
                (
                    run.run_id,
                    to_json(run.params),
                    to_json(run.options),
                    run.max_attempts,
                    run.version,
                    run.step,
                    run.parent_run,
                    run.parent_step,
                ),
            )
            for r in chain:
                self._run(
                    "INSERT INTO megaactors_checkpoints (run_id, step, parent_step, base_step, kind, meta, nbytes, "
                    "created_at, state) VALUES (?, ?, ?, ?, ?, ?, ?, {NOW}, ?)",
                    (run.run_id, r.step, r.parent_step, r.base_step, r.kind, to_json(r.meta), r.nbytes, r.state),
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
