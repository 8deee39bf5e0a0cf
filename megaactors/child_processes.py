"""Child processes that end when their parent dies, SIGKILL included.

On Linux a child asks the kernel for ``SIGKILL`` when its parent dies
(``prctl(PR_SET_PDEATHSIG)``, through ctypes); elsewhere, or if that call fails, a
daemon thread checks every half second whether the parent is still its parent.
Either way the child also checks once at once, in case the parent died before the
request was made. Pool workers of a sweep and the processes of ``worker --jobs``
call :func:`die_with_parent` first thing, so no orphan keeps running (or claiming
runs) after its parent is killed.

The kernel sends the signal when the *thread* that created the child ends; the
callers here create their children from the thread that waits for them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.5


def die_with_parent(parent_pid: int, *, kernel: bool = True) -> None:
    """End this process as soon as process ``parent_pid`` (its parent) is gone
    (``kernel=False`` uses the watching thread even on Linux)."""
    if not (kernel and _ask_the_kernel()):
        threading.Thread(target=_watch, args=(parent_pid,), name="parent watch", daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before we asked
        os._exit(1)


def _ask_the_kernel() -> bool:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)``; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        threading.Event().wait(WATCH_INTERVAL_S)
    os.kill(os.getpid(), signal.SIGKILL)
