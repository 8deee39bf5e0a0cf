"""Shared fixtures: a real PostgreSQL server for the session.

The server runs from the postgresql binaries of this machine (``/usr/lib/postgresql/*/bin``
or ``pg_ctl`` on PATH), in a temporary directory, on a free TCP port of 127.0.0.1
with its socket inside that directory. PostgreSQL refuses to run as root, so as root
it runs as the ``postgres`` user (created if missing). It is started once, on first
use, and stopped and removed at the end of the session.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest


def _pg_bindir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    pytest.fail(
        "PostgreSQL server binaries not found: install them (apt-get install -y postgresql); .ci/run does",
        pytrace=False,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unprivileged_user() -> pwd.struct_passwd | None:
    """The user the server runs as (None: the current, unprivileged, user)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
        return pwd.getpwnam("postgres")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """DSN of a fresh PostgreSQL database on a server this session started."""
    bindir = _pg_bindir()
    user = _unprivileged_user()
    base = Path(tempfile.mkdtemp(prefix="megaactors-pg-"))
    if user is not None:
        os.chown(base, user.pw_uid, user.pw_gid)

    def as_server_user(*cmd: str) -> None:
        prefix = ["runuser", "-u", user.pw_name, "--"] if user is not None else []
        out = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            log = base / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed: {out.stdout}{out.stderr}{tail}")

    data, port = base / "data", _free_port()
    as_server_user(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "-N")
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    as_server_user(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "server.log"), "-w", "-t", "60",
                   "-o", options, "start")  # fmt: skip
    try:
        as_server_user(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "megaactors")
        yield f"postgresql://postgres@127.0.0.1:{port}/megaactors"
    finally:
        as_server_user(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_dsn(postgres_server: str) -> str:
    """DSN whose tables live in a schema of their own (one per test)."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as con:
        con.execute(f"CREATE SCHEMA {schema}")
    return f"{postgres_server}?options={quote(f'-csearch_path={schema}')}"
