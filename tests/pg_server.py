"""A real PostgreSQL server in a temporary directory, for tests: started, restarted
and stopped on demand.

The server runs from the postgresql binaries of this machine (``/usr/lib/postgresql/*/bin``
or ``pg_ctl`` on PATH), on a free TCP port of 127.0.0.1 with its socket inside its
directory. PostgreSQL refuses to run as root, so as root it runs as the ``postgres``
user (created if missing).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PostgresServer", "ServerBinariesMissing"]


class ServerBinariesMissing(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def _pg_bindir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    raise ServerBinariesMissing(
        "PostgreSQL server binaries not found: install them (apt-get install -y postgresql); .ci/run does"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unprivileged_user() -> pwd.struct_passwd | None:
    """The user the server runs as (None: the current, unprivileged, user)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
        return pwd.getpwnam("postgres")


class PostgresServer:
    """One server with one database, ``megaactors``; :attr:`dsn` connects to it."""

    def __init__(self) -> None:
        self.bindir = _pg_bindir()
        self.user = _unprivileged_user()
        self.base = Path(tempfile.mkdtemp(prefix="megaactors-pg-"))
        if self.user is not None:
            os.chown(self.base, self.user.pw_uid, self.user.pw_gid)
        self.data, self.port = self.base / "data", _free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/megaactors"

    def _as_server_user(self, *cmd: str) -> None:
        prefix = ["runuser", "-u", self.user.pw_name, "--"] if self.user is not None else []
        out = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            log = self.base / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed: {out.stdout}{out.stderr}{tail}")

    def _pg_ctl(self, *args: str) -> None:
        self._as_server_user(str(self.bindir / "pg_ctl"), "-D", str(self.data), *args)

    def start(self) -> PostgresServer:
        """Create the cluster and the database, and start the server."""
        self._as_server_user(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                             "-E", "UTF8", "-N")  # fmt: skip
        self.resume()
        self._as_server_user(str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U",
                             "postgres", "megaactors")  # fmt: skip
        return self

    def resume(self) -> None:
        """Start the (stopped) server again."""
        options = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._pg_ctl("-l", str(self.base / "server.log"), "-w", "-t", "60", "-o", options, "start")

    def halt(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: connections are cut; ``immediate``: as a crash)."""
        self._pg_ctl("-m", mode, "-w", "stop")

    def close(self) -> None:
        try:
            self.halt("immediate")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
