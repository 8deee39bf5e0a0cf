"""Who holds a lease, and whether that holder is a dead process on this host.

A holder's name is ``host:pid:start:suffix`` — the host, the process id, the
process's start time (seconds since the epoch, to the hundredth, from psutil) and a
random suffix that tells two claims of one process apart. A lease whose holder ran
on this host and whose process is gone — no process with that id, or one that
started at another time (a reused pid) — is ended at once instead of waiting for it
to expire. Holders on other hosts, and names in another form, are never judged:
their leases expire on the database's clock as before.
"""

from __future__ import annotations

import os
import secrets
import socket

import psutil

__all__ = ["holder_is_dead", "owner_id", "process_start"]

_START_TOLERANCE_S = 0.05
"""Start times are recorded to the hundredth of a second."""


def process_start(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds); None if there is no such process
    (or only its zombie), nan if it exists but cannot be inspected."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:  # it ended; only its exit status is left
            return None
        return float(proc.create_time())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.Error:  # e.g. access denied: it exists
        return float("nan")


def owner_id() -> str:
    """This process's name as a lease holder: host, pid, start time and a random suffix."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start(pid) or 0:.2f}:{secrets.token_hex(2)}"


def holder_is_dead(owner: str | None) -> bool:
    """True if ``owner`` names a process of this host that no longer runs."""
    parts = (owner or "").split(":")
    if len(parts) != 4 or parts[0] != socket.gethostname():
        return False
    try:
        pid, started = int(parts[1]), float(parts[2])
    except ValueError:
        return False
    now_started = process_start(pid)
    if now_started is None:
        return True
    if now_started != now_started:  # nan: it exists but cannot be inspected
        return False
    return abs(now_started - started) > _START_TOLERANCE_S
