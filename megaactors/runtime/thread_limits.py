"""Limits of a thread per agent: how many threads this machine can still start, and
the interpreter's thread switch interval while thousands of them run.

:func:`thread_capacity` reads the kernel's limits (``threads-max``, ``pid_max``, the
cgroup's ``pids.max``, ``RLIMIT_NPROC``, and ``vm.max_map_count`` for the threads'
memory mappings) and the threads already in use; the pykka runtime refuses a larger
organisation with a :class:`~megaactors.errors.ParameterError` before starting any
actor. On the reference machine ``pid_max`` is 32,768 but ``vm.max_map_count``
(65,530) binds first, at about three mappings per thread: the capacity is about
21,600 agents, and a star chat round of 21,632 agents ran there (the next thread
beyond about 22,100 fails to start).
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from megaactors.errors import ParameterError

__all__ = [
    "MAPS_PER_THREAD",
    "SWITCH_INTERVAL",
    "THREAD_RESERVE",
    "check_thread_capacity",
    "current_cpu",
    "on_one_cpu",
    "switch_interval",
    "thread_capacity",
]

THREAD_RESERVE = 128
"""Threads left to the rest of the machine when computing the capacity."""
MAPS_PER_THREAD = 3
"""Memory mappings a thread adds to the process (its stack, its guard page, and
allocator arenas): measured 2.2 for the first thousand pykka actors, 3.0 after."""

SWITCH_INTERVAL = 1.0
"""The interpreter's thread switch interval during a run, in seconds (CPython's
default is 0.005). A thread waiting for the GIL wakes once per interval to ask for
it, so thousands of actor threads waiting at once (all released at the start, or
all back from their calls) made hundreds of thousands of wake-ups a second: a star
chat round of 10,000 agents took 14–120 s, mostly in the kernel, at 0.05 s, and
about 7 s at 1 s. The interval also preempted agents in the middle of a batch. Agents
give the GIL up anyway whenever they wait (for a message, a call, a lock), so a
longer interval only bounds how long a busy stretch may run uninterrupted."""

_PROC = Path("/proc")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _cgroup_pids() -> tuple[int | None, int | None]:
    """``pids.max`` and ``pids.current`` of this process's cgroup (v2 or v1), if set."""
    try:
        lines = (_PROC / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
        elif "pids" in controllers.split(","):
            base = Path("/sys/fs/cgroup/pids") / path.lstrip("/")
        else:
            continue
        limit = _read_int(base / "pids.max")
        if limit is not None:
            return limit, _read_int(base / "pids.current")
    return None, None


def _threads_in_use() -> int:
    """Threads on the whole machine (``/proc/loadavg``), or this process's if unreadable."""
    try:
        return int((_PROC / "loadavg").read_text().split()[3].split("/")[1])
    except (OSError, IndexError, ValueError):
        return threading.active_count()


def _maps_in_use() -> int:
    try:
        with open(_PROC / "self" / "maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def thread_capacity() -> dict[str, int | None]:
    """How many more threads this process may start, and what limits it.

    Each limit is reduced by what is already in use: ``threads-max`` and ``pid_max``
    by the threads on the machine, the cgroup's ``pids.max`` by its ``pids.current``,
    ``RLIMIT_NPROC`` by the threads on the machine (a conservative stand-in for this
    user's), ``vm.max_map_count`` by this process's mappings (divided by
    :data:`MAPS_PER_THREAD`). ``capacity`` is the smallest, less :data:`THREAD_RESERVE`.
    """
    in_use = _threads_in_use()
    free: dict[str, int | None] = {"threads_in_use": in_use}
    threads_max = _read_int(_PROC / "sys" / "kernel" / "threads-max")
    pid_max = _read_int(_PROC / "sys" / "kernel" / "pid_max")
    free["threads_max"] = None if threads_max is None else threads_max - in_use
    free["pid_max"] = None if pid_max is None else pid_max - in_use
    pids_max, pids_current = _cgroup_pids()
    free["cgroup_pids_max"] = None if pids_max is None else pids_max - (pids_current or in_use)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    free["rlimit_nproc"] = None if nproc == resource.RLIM_INFINITY else nproc - in_use
    max_maps = _read_int(_PROC / "sys" / "vm" / "max_map_count")
    free["max_map_count"] = None if max_maps is None else (max_maps - _maps_in_use()) // MAPS_PER_THREAD
    limits = [v for k, v in free.items() if k != "threads_in_use" and v is not None]
    free["capacity"] = max(0, min(limits, default=1 << 20) - THREAD_RESERVE)
    return free


def check_thread_capacity(agents: int) -> None:
    """Raise :class:`ParameterError` if ``agents`` threads cannot be started here."""
    cap = thread_capacity()
    if agents > cap["capacity"]:  # type: ignore[operator]
        binding = min(
            (k for k, v in cap.items() if k not in ("capacity", "threads_in_use") and v is not None),
            key=lambda k: cap[k],  # type: ignore[arg-type, return-value]
            default="none",
        )
        raise ParameterError(
            f"agents: the pykka runtime needs one thread per agent and this machine can start at most "
            f"{cap['capacity']:,} more ({binding} is the binding limit, {cap['threads_in_use']:,} threads in use); "
            f"got {agents:,} agents — use the asyncio or sim runtime for more"
        )


@contextlib.contextmanager
def switch_interval(seconds: float | None) -> Iterator[None]:
    """The interpreter's thread switch interval set to ``seconds`` for the block
    (``None``: left as it is), restored afterwards."""
    if seconds is None:
        yield
        return
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def current_cpu() -> int | None:
    """The CPU the calling thread runs on at this moment (Linux: the ``processor``
    field of ``/proc/thread-self/stat``), or ``None`` where that cannot be read."""
    try:
        stat = Path("/proc/thread-self/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    try:
        return int(fields[36])  # field 39 of the line; fields[0] is field 3 (the state)
    except (IndexError, ValueError):
        return None


@contextlib.contextmanager
def on_one_cpu(enabled: bool) -> Iterator[None]:
    """For the block, the calling thread and every thread it starts run on one CPU
    (Linux only, else nothing changes); the caller's CPUs are restored afterwards.
    Only one thread runs Python code at a time, and handing the interpreter lock from
    a thread on one CPU to a thread on another costs more than the work many
    activations do between two hand-offs.

    The CPU is the one the calling thread runs on as the block starts (the first it
    may use if that cannot be read): the scheduler has put it where it found room, so
    processes that enter such blocks side by side (a sweep's workers, each busy on its
    own CPU) keep to different CPUs. Processes started meanwhile (a tool's subprocess,
    say) inherit the one CPU."""
    setaffinity = getattr(os, "sched_setaffinity", None)
    if not enabled or setaffinity is None:
        yield
        return
    allowed = os.sched_getaffinity(0)
    here = current_cpu()
    setaffinity(0, {here if here in allowed else min(allowed)})
    try:
        yield
    finally:
        setaffinity(0, allowed)
