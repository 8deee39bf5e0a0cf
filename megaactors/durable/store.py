"""The checkpoint store: what every durable backend offers, by concept.

One database holds everything durable about runs, and its contract comes in three
parts, each an abstract class a consumer can ask for alone:

* :class:`RunQueueStore` — **runs and leases**: one row per run (parameters, status
  ``queued``/``running``/``interrupted``/``done``/``dead``/``cancelled``, owner, lease expiry on the
  database's clock, fencing token, attempts, the runtime version, the last error and
  the result); claims, renewals, retries and the dead letter;
* :class:`CheckpointLog` — **the checkpoint log**: one row per checkpointed
  super-step (step, parent step, kind — ``full`` snapshot, ``delta`` on top of the
  previous row, or ``start``: the state right after the start, which a restore
  recomputes — the base it builds on, metadata and the state blob,
  :mod:`megaactors.durable.blob`), with fork and prune;
* :class:`OutboxStore` — **the outbox and compensations**: side effects by
  idempotency key (the intent, then the result), and side effects that happened
  but could not be recorded.

Every write on behalf of a run's holder is *fenced*: it carries the fencing token
of the claim it acts under and fails with :class:`FencingError` once the run was
claimed again, cancelled, or the lease expired (on the database's clock).
:class:`CheckpointStore` is all three over one database: :mod:`megaactors.durable.sqlite`
and :mod:`megaactors.durable.postgres` implement it over the same SQL,
:mod:`megaactors.durable.memory` in plain dictionaries (the reference), and
:mod:`megaactors.durable.conformance` checks any of them.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from megaactors.durable.blob import (
    FORMAT,
    FORMAT_VERSION,
    check_header,
    decode_state,
    encode_state,
    pack_state,
    seal_state,
)
from megaactors.errors import (
    CorruptStoreError,
    FencingError,
    FormatVersionError,
    LeaseHeldError,
    RunExistsError,
    StoreBusyError,
    StoreError,
    UnknownRunError,
    VersionMismatchError,
)

__all__ = [
    "DEPLOY_STATES",
    "FORMAT",
    "FORMAT_VERSION",
    "KINDS",
    "STATUSES",
    "CheckpointLog",
    "CheckpointRecord",
    "CheckpointStore",
    "Compensation",
    "CorruptStoreError",
    "FencingError",
    "FormatVersionError",
    "Lease",
    "LeaseHeldError",
    "OutboxEntry",
    "OutboxStore",
    "RunExistsError",
    "RunQueueStore",
    "RunRecord",
    "StoreBusyError",
    "StoreConnection",
    "StoreError",
    "UnknownRunError",
    "VersionMismatchError",
    "check_deploy_state",
    "check_header",
    "check_max_attempts",
    "check_new_run",
    "checked_checkpoint",
    "decode_state",
    "encode_state",
    "fence_error",
    "pack_state",
    "seal_state",
]

STATUSES = ("queued", "running", "interrupted", "done", "dead", "cancelled")
DEPLOY_STATES = ("live", "draining")
"""A version's deploy state: its workers claim queued runs (``live``), or only finish
the runs already started (``draining``)."""
KINDS = ("full", "delta", "start")
"""Kinds of checkpoint."""


@dataclass(frozen=True)
class Lease:
    """The right to write on behalf of a run, until ``expires_at`` (database clock)."""

    run_id: str
    owner: str
    fence: int
    expires_at: float


@dataclass
class RunRecord:
    """One row of the run table."""

    run_id: str
    params: dict[str, Any]
    options: dict[str, Any]
    status: str
    owner: str | None
    lease_expires: float | None
    fence: int
    attempts: int
    max_attempts: int
    version: str
    created_at: float
    updated_at: float
    step: int | None = None
    error: str | None = None
    result: dict[str, Any] | None = None
    parent_run: str | None = None
    parent_step: int | None = None
    now: float = 0.0
    """The database's clock when the row was read."""

    @property
    def held(self) -> bool:
        """Running under a lease that has not expired."""
        return self.status == "running" and self.lease_expires is not None and self.lease_expires > self.now


@dataclass
class CheckpointRecord:
    """One checkpointed super-step (``state`` is None when listed without it)."""

    run_id: str
    step: int
    parent_step: int | None
    base_step: int
    kind: str
    meta: dict[str, Any]
    nbytes: int
    created_at: float
    state: bytes | None = None


@dataclass
class OutboxEntry:
    """A side effect by idempotency key."""

    run_id: str
    key: str
    kind: str
    request: Any
    status: str
    result: Any = None
    attempts: int = 1
    fence: int = 0


@dataclass
class Compensation:
    """A side effect that succeeded but whose result could not be recorded."""

    run_id: str
    key: str
    fence: int
    reason: str
    result: Any
    status: str = "pending"
    outcome: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


def fence_error(
    lease: Lease, fence: int, owner: str | None, status: str, expires: float | None, now: float
) -> FencingError | None:
    """Why ``lease`` no longer holds its run, given the run's row and the database
    clock ``now`` (None: it holds)."""
    run = lease.run_id
    if status in ("done", "dead", "cancelled"):
        return FencingError(f"run {run!r}: lease lost — the run is {status}")
    if fence != lease.fence:
        return FencingError(
            f"run {run!r}: lease lost — it was claimed again (fence {fence}, owner {owner}); "
            f"this worker holds fence {lease.fence}"
        )
    if status != "running":
        return FencingError(f"run {run!r}: lease lost — the run is {status}")
    if expires is None or expires <= now:
        return FencingError(f"run {run!r}: lease lost — it expired {now - (expires or now):.1f} s ago")
    return None


def checked_checkpoint(
    run_id: str, step: int, parent_step: int | None, base_step: int, kind: str, latest: int | None
) -> None:
    """Raise :class:`StoreError` unless a checkpoint of ``kind`` for ``step`` (after
    ``parent_step``, on ``base_step``) may follow the run's ``latest`` one."""
    if kind not in KINDS:
        raise StoreError(f"a checkpoint is 'full', 'delta' or 'start', got {kind!r}")
    if kind != "delta" and base_step != step:
        raise StoreError(f"a {kind} checkpoint is its own base (step {step}, base {base_step})")
    if latest is not None and step <= latest:
        raise StoreError(f"run {run_id!r}: step {step} is not after the latest checkpoint {latest}")
    if latest != parent_step:
        raise StoreError(f"run {run_id!r}: step {step} names parent {parent_step}; latest is {latest}")


def check_new_run(run_id: Any, max_attempts: int | None) -> None:
    """Raise :class:`StoreError` unless ``run_id`` is a non-empty string and
    ``max_attempts`` is None (kept as it is) or at least 1."""
    if not isinstance(run_id, str) or not run_id:
        raise StoreError(f"a run id must be a non-empty string, got {run_id!r}")
    check_max_attempts(max_attempts)


def check_max_attempts(max_attempts: int | None) -> None:
    """Raise :class:`StoreError` unless ``max_attempts`` is None (kept as it is) or at least 1."""
    if max_attempts is not None and max_attempts < 1:
        raise StoreError(f"max attempts must be >= 1, got {max_attempts}")


def check_deploy_state(state: str) -> None:
    """Raise :class:`StoreError` unless ``state`` is one of :data:`DEPLOY_STATES`."""
    if state not in DEPLOY_STATES:
        raise StoreError(f"a deploy state is one of {', '.join(DEPLOY_STATES)}, got {state!r}")


class StoreConnection(ABC):
    """What every part of a store has: where it lives, a clock, connections."""

    target: str
    """Where the store lives (a file path, a PostgreSQL DSN, ``memory:...``)."""

    @abstractmethod
    def reopen(self) -> Any:
        """A second connection to the same store (for another thread)."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def now(self) -> float:
        """The database's clock, in seconds since the epoch."""


class RunQueueStore(StoreConnection):
    """Runs as rows, claimed under leases with fencing, retried, dead-lettered."""

    @abstractmethod
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
        """Add a run: queued, or (with ``owner``) running under a fresh lease returned."""

    @abstractmethod
    def get_run(self, run_id: str) -> RunRecord:
        """The run's row; :class:`UnknownRunError` if there is none."""

    @abstractmethod
    def list_runs(self, status: str | None = None) -> list[RunRecord]:
        """Every run (or those with ``status``), oldest first."""

    @abstractmethod
    def claim(self, run_id: str, owner: str, version: str, lease_s: float) -> Lease:
        """Take the lease of one queued run, or of a running one whose lease expired."""

    @abstractmethod
    def claim_next(self, owner: str, version: str, lease_s: float) -> Lease | None:
        """Take the oldest claimable run of ``version`` (None when there is none): a
        queued one unless the version is draining, or a running one whose lease
        expired. Runs whose lease expired after their last allowed attempt become ``dead``."""

    @abstractmethod
    def renew(self, lease: Lease, lease_s: float) -> Lease:
        """Extend a lease (the heartbeat); :class:`FencingError` if it was lost."""

    @abstractmethod
    def finish(self, lease: Lease, result: dict[str, Any]) -> None:
        """Mark the run done with its result."""

    @abstractmethod
    def fail(self, lease: Lease, error: str, *, final: bool = False) -> str:
        """Record a failed attempt: queued again, or ``dead`` after the last allowed
        attempt or, with ``final``, at once (a run that can never succeed). Returns
        the new status."""

    @abstractmethod
    def release(self, lease: Lease) -> None:
        """Give a run back to the queue without finishing it."""

    @abstractmethod
    def interrupt(self, lease: Lease, reason: str, options: dict[str, Any]) -> None:
        """Stop a run at a point for a human to look at (status ``interrupted``; only
        a claim by id — ``resume`` — continues it, workers never do), recording why
        and the options it continues with (fenced)."""

    @abstractmethod
    def cancel(self, run_id: str, reason: str = "cancelled") -> None:
        """Stop a run for good; its holder's next write fails."""

    @abstractmethod
    def set_deploy(self, version: str, state: str, *, only_if_unknown: bool = False) -> None:
        """Record ``version``'s deploy state (:data:`DEPLOY_STATES`); with
        ``only_if_unknown``, only if the version has none yet (a worker announcing itself)."""

    @abstractmethod
    def deploys(self) -> dict[str, str]:
        """Every version with a deploy state, and that state."""

    @abstractmethod
    def end_lease(self, run_id: str, owner: str, fence: int) -> bool:
        """End the lease of a holder known to be dead: the run's lease expires now if
        ``owner`` still holds it under ``fence``; return whether it did."""

    @abstractmethod
    def requeue(self, run_id: str, max_attempts: int | None = None) -> None:
        """Put a dead-lettered run back in the queue with its attempts counted from
        zero (and, if given, a new ``max_attempts``); :class:`StoreError` unless it is dead."""


class CheckpointLog(StoreConnection):
    """One checkpoint per super-step of a run: written fenced, read back as chains,
    forked into new runs, pruned."""

    @abstractmethod
    def get_run(self, run_id: str) -> RunRecord:
        """The run's row (a fork copies its parameters; see :class:`RunQueueStore`)."""

    @abstractmethod
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
        """Add the checkpoint of super-step ``step`` (fenced)."""

    @abstractmethod
    def latest(self, run_id: str) -> CheckpointRecord | None:
        """The newest checkpoint (with its state), or None."""

    @abstractmethod
    def get(self, run_id: str, step: int) -> CheckpointRecord:
        """The checkpoint of ``step`` (with its state)."""

    @abstractmethod
    def list(self, run_id: str) -> builtins.list[CheckpointRecord]:
        """Every checkpoint of a run, oldest first, without states."""

    def chain(self, run_id: str, step: int) -> builtins.list[CheckpointRecord]:
        """What restoring ``step`` needs: its full snapshot and the deltas up to it."""
        target = self.get(run_id, step)
        rows = [r for r in self.checkpoints_between(run_id, target.base_step, step) if r.base_step == target.base_step]
        if not rows or rows[0].step != target.base_step or rows[0].kind not in ("full", "start"):
            raise CorruptStoreError(f"run {run_id!r}: the full snapshot of step {target.base_step} is missing")
        expected = target.base_step
        for r in rows[1:]:
            if r.parent_step != expected:
                raise CorruptStoreError(f"run {run_id!r}: step {r.step} follows {r.parent_step}, not {expected}")
            expected = r.step
        return rows

    @abstractmethod
    def checkpoints_between(self, run_id: str, first: int, last: int) -> builtins.list[CheckpointRecord]:
        """Checkpoints with ``first <= step <= last`` with their states, oldest first."""

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
        """A new queued run that starts from ``step`` of ``run_id`` (a what-if): it
        gets a copy of the checkpoints that restore ``step``, or, with ``snapshot``
        (metadata and state), that full snapshot of ``step`` alone."""
        check_new_run(new_run_id, max_attempts)
        source = self.get_run(run_id)
        if snapshot is None:
            chain = self.chain(run_id, step)
        else:
            self.get(run_id, step)  # the source step must exist; its chain is not copied
            meta, state = snapshot
            chain = [CheckpointRecord(new_run_id, step, None, step, "full", meta, len(state), 0.0, state)]
        run = RunRecord(
            new_run_id,
            source.params if params is None else params,
            source.options if options is None else options,
            "queued", None, None, 0, 0,
            source.max_attempts if max_attempts is None else max_attempts,
            source.version, 0.0, 0.0, step=step, parent_run=run_id, parent_step=step,
        )  # fmt: skip
        self._add_fork(run, chain)

    @abstractmethod
    def _add_fork(self, run: RunRecord, chain: builtins.list[CheckpointRecord]) -> None:
        """Add the forked ``run`` (its times are the store's to set) with copies of
        ``chain`` as its checkpoints, in one write; :class:`RunExistsError` if its id is taken."""

    @abstractmethod
    def prune(self, run_id: str, keep: int) -> int:
        """Delete checkpoints that restoring the newest ``keep`` ones does not need;
        return how many were deleted."""


class OutboxStore(StoreConnection):
    """Side effects by idempotency key, and compensations for the unrecorded ones."""

    @abstractmethod
    def outbox_results(self, run_id: str) -> dict[str, Any]:
        """Results of every recorded side effect of a run, by key."""

    @abstractmethod
    def outbox_entries(self, run_id: str) -> list[OutboxEntry]: ...

    @abstractmethod
    def outbox_begin(self, lease: Lease, key: str, kind: str, request: Any) -> OutboxEntry:
        """Write the intent of a side effect (fenced); returns the entry, which is
        already ``done`` (with its result) if the effect was recorded before."""

    @abstractmethod
    def outbox_finish(self, lease: Lease, key: str, result: Any) -> None:
        """Record a side effect's result (fenced)."""

    @abstractmethod
    def add_compensation(self, run_id: str, key: str, fence: int, reason: str, result: Any) -> None:
        """Note a side effect that happened but could not be recorded (not fenced:
        it reports a fact of the outside world)."""

    @abstractmethod
    def compensations(self, run_id: str | None = None, status: str | None = "pending") -> list[Compensation]: ...

    @abstractmethod
    def settle_compensation(self, c: Compensation, status: str, outcome: Any) -> None:
        """Record how a compensation ended (``adopted`` or ``compensated``)."""


class CheckpointStore(RunQueueStore, CheckpointLog, OutboxStore):
    """Runs and leases, the checkpoint log, and the outbox, in one database."""

    @abstractmethod
    def reopen(self) -> CheckpointStore:
        """A second connection to the same store (for another thread)."""

    def __enter__(self) -> CheckpointStore:
        return self
