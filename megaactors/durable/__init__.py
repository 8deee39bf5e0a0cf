"""Durable execution: checkpoints per super-step, resume after a crash, a leased run
queue with fencing, and an outbox that makes side effects effectively-once.

``open_store("runs.db")`` opens (or creates) an SQLite store;
``open_store("postgresql://...")`` a PostgreSQL one; :class:`MemoryStore` keeps
everything in this process (the reference implementation). A store is a
:class:`CheckpointStore`: a :class:`RunQueueStore` (runs and leases), a
:class:`CheckpointLog` (checkpoints, fork, prune) and an :class:`OutboxStore` (side
effects and compensations) in one database. :func:`run_durable` runs a
:class:`~megaactors.experiments.spec.RunSpec` under a lease, checkpointing as it goes, and
resumes from the newest checkpoint when the run already has one.
"""

from __future__ import annotations

from pathlib import Path

from megaactors.durable.checkpointing import DurableOptions, run_durable
from megaactors.durable.memory import MemoryStore
from megaactors.durable.runqueue import Heartbeat, RunQueue, owner_id
from megaactors.durable.state import DurableSim, StateError
from megaactors.durable.store import (
    FORMAT_VERSION,
    CheckpointLog,
    CheckpointRecord,
    CheckpointStore,
    CorruptStoreError,
    FencingError,
    FormatVersionError,
    Lease,
    LeaseHeldError,
    OutboxStore,
    RunExistsError,
    RunQueueStore,
    RunRecord,
    StoreError,
    UnknownRunError,
    VersionMismatchError,
)

__all__ = [
    "FORMAT_VERSION",
    "CheckpointLog",
    "CheckpointRecord",
    "CheckpointStore",
    "CorruptStoreError",
    "DurableOptions",
    "DurableSim",
    "FencingError",
    "FormatVersionError",
    "Heartbeat",
    "Lease",
    "LeaseHeldError",
    "MemoryStore",
    "OutboxStore",
    "RunExistsError",
    "RunQueue",
    "RunQueueStore",
    "RunRecord",
    "StateError",
    "StoreError",
    "UnknownRunError",
    "VersionMismatchError",
    "open_store",
    "owner_id",
    "run_durable",
]


def open_store(target: str | Path, *, create: bool = False, readonly: bool = False) -> CheckpointStore:
    """The store at ``target``: a PostgreSQL DSN or an SQLite file path. ``create``
    makes a new store where there is none; ``readonly`` never writes."""
    from megaactors.durable.postgres import PostgresStore, is_postgres
    from megaactors.durable.sqlite import SQLiteStore

    text = str(target)
    if is_postgres(text):
        return PostgresStore(text, create=create, readonly=readonly)
    return SQLiteStore(text, create=create, readonly=readonly)
