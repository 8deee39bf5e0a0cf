"""Shared fixtures: a real PostgreSQL server for the session (:mod:`pg_server`),
started once, on first use, and stopped and removed at the end of the session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from pg_server import PostgresServer, ServerBinariesMissing


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """DSN of a fresh PostgreSQL database on a server this session started."""
    try:
        server = PostgresServer()
    except ServerBinariesMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    server.start()
    try:
        yield server.dsn
    finally:
        server.close()


@pytest.fixture
def postgres_dsn(postgres_server: str) -> str:
    """DSN whose tables live in a schema of their own (one per test)."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as con:
        con.execute(f"CREATE SCHEMA {schema}")
    return f"{postgres_server}?options={quote(f'-csearch_path={schema}')}"
