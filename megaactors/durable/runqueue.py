"""The leased run queue: runs as rows, claimed under leases, renewed by heartbeat.

A worker claims a run (oldest first, of its own runtime version): the claim sets
the owner, a lease expiring ``lease_s`` seconds later on the database's clock, and
increments the run's fencing token and attempt count. A :class:`Heartbeat` renews
the lease from a background thread. Every later write names the fencing token of
its claim, so once the lease has expired — or another worker has claimed the run
— the old holder's writes fail with :class:`~megaactors.durable.store.FencingError`.

A run whose attempt fails goes back to the queue until it has used
``max_attempts`` claims; then it is ``dead``, with its last error recorded. A run
whose worker vanished is claimed again once its lease has expired, and counts
that as a failed attempt too, so no run loops forever. A holder that is a dead
process of this host (:mod:`megaactors.durable.holders`) loses its lease at once:
claims take its runs over without waiting for the lease to run out.

A busy or unreachable database (:class:`~megaactors.errors.StoreBusyError`: SQLite's
"database is locked", a PostgreSQL server restarting) is tried again with growing
pauses by :func:`retry_busy`.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from megaactors.durable.holders import holder_is_dead, owner_id
from megaactors.durable.store import FencingError, Lease, LeaseHeldError, RunQueueStore, StoreBusyError, StoreError
from megaactors.experiments.spec import RunSpec

__all__ = ["BUSY_RETRY_S", "DEFAULT_LEASE_S", "Heartbeat", "RunQueue", "owner_id", "retry_busy"]

DEFAULT_LEASE_S = 30.0
BUSY_RETRY_S = 120.0
"""How long :func:`retry_busy` keeps trying a busy or unreachable database."""

T = TypeVar("T")


def retry_busy(
    call: Callable[[], T], *, give_up_s: float = BUSY_RETRY_S, log: Callable[[str], None] | None = None
) -> T:
    """``call()``, tried again while the database is busy or out of reach
    (:class:`StoreBusyError`), pausing 0.05 s, then twice as long each time (at most
    2 s, with jitter), for up to ``give_up_s`` seconds; then the error is raised."""
    deadline, pause = time.monotonic() + give_up_s, 0.05
    while True:
        try:
            return call()
        except StoreBusyError as exc:
            if time.monotonic() + pause > deadline:
                raise
            if log is not None:
                log(f"database busy ({exc}); trying again in {pause:.2f} s")
            time.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(2.0, pause * 2)


def _version() -> str:
    from megaactors import __version__

    return __version__


class RunQueue:
    """Submits and claims runs of this runtime version."""

    def __init__(self, store: RunQueueStore, version: str | None = None) -> None:
        self.store = store
        self.version = version or _version()
        self.takeovers = 0
        """Leases of dead holders ended by this queue."""

    def submit(
        self,
        spec: RunSpec,
        options: dict[str, Any] | None = None,
        *,
        run_id: str | None = None,
        max_attempts: int = 3,
        version: str | None = None,
    ) -> str:
        """Queue a run (for workers of ``version``, by default this one); return its id."""
        run_id = run_id or uuid.uuid4().hex[:12]
        self.store.create_run(
            run_id, spec.as_dict(), options or {}, version=version or self.version, max_attempts=max_attempts
        )
        return run_id

    def announce(self) -> None:
        """Make this version known to the store (``live``), unless it already is
        (a drain stays in force)."""
        self.store.set_deploy(self.version, "live", only_if_unknown=True)

    @property
    def draining(self) -> bool:
        return self.store.deploys().get(self.version) == "draining"

    def claim_next(self, owner: str, lease_s: float = DEFAULT_LEASE_S) -> Lease | None:
        """Take the oldest claimable run of this version, after ending the leases of
        dead holders on this host."""
        self.end_dead_leases()
        return self.store.claim_next(owner, self.version, lease_s)

    def claim(self, run_id: str, owner: str, lease_s: float = DEFAULT_LEASE_S, *, wait_s: float = 0.0) -> Lease:
        """Claim one run, taking it over at once from a dead holder on this host; with
        ``wait_s``, wait that long for a live holder's lease to expire."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return self.store.claim(run_id, owner, self.version, lease_s)
            except LeaseHeldError:
                run = self.store.get_run(run_id)
                if run.held and holder_is_dead(run.owner) and self.store.end_lease(run_id, run.owner or "", run.fence):
                    self.takeovers += 1
                    continue
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def end_dead_leases(self) -> list[str]:
        """End the leases of this version's runs whose holder is a dead process of
        this host; return those runs' ids."""
        ended = [
            r.run_id
            for r in self.store.list_runs("running")
            if r.version == self.version
            and r.held
            and holder_is_dead(r.owner)
            and self.store.end_lease(r.run_id, r.owner or "", r.fence)
        ]
        self.takeovers += len(ended)
        return ended


class Heartbeat:
    """Renews a lease every third of its length from a background thread.

    ``lost`` turns true when a renewal is refused (the run was claimed again or
    cancelled, or the lease expired before it could be renewed); ``error`` says why.
    """

    def __init__(
        self,
        store: RunQueueStore,
        lease: Lease,
        lease_s: float = DEFAULT_LEASE_S,
        on_renew: Callable[[], None] | None = None,
    ) -> None:
        self._target = store
        self._on_renew = on_renew
        self.lease = lease
        self.lease_s = lease_s
        self.error: str | None = None
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat {lease.run_id}", daemon=True)

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _beat(self) -> None:
        try:
            store = self._target.reopen()
        except StoreError as exc:
            self.error = str(exc)
            self._lost.set()
            return
        try:
            while not self._stop.wait(self.lease_s / 3):
                try:
                    self.lease = store.renew(self.lease, self.lease_s)
                    if self._on_renew is not None:
                        self._on_renew()
                except FencingError as exc:
                    self.error = str(exc)
                    self._lost.set()
                    return
                except StoreError as exc:  # a busy or unreachable database: try again next beat
                    self.error = str(exc)
        finally:
            store.close()
