"""The SQL checkpoint store: its three parts over one connection.

:class:`SQLStore` is a :class:`~megaactors.durable.store.CheckpointStore` made of the
run queue (:mod:`~megaactors.durable.sql_runs`), the checkpoint log
(:mod:`~megaactors.durable.sql_log`) and the outbox (:mod:`~megaactors.durable.sql_outbox`),
which share the schema and dialect plumbing of :mod:`~megaactors.durable.sql_base`.
A backend subclasses it and supplies its dialect and connection.
"""

from __future__ import annotations

from megaactors.durable.sql_base import TABLES, schema
from megaactors.durable.sql_log import SQLCheckpointLog
from megaactors.durable.sql_outbox import SQLOutbox
from megaactors.durable.sql_runs import SQLRunQueue
from megaactors.durable.store import CheckpointStore

__all__ = ["TABLES", "SQLStore", "schema"]


class SQLStore(SQLRunQueue, SQLCheckpointLog, SQLOutbox, CheckpointStore):
    """A :class:`~megaactors.durable.store.CheckpointStore` over a DB-API connection;
    subclasses set the dialect."""
