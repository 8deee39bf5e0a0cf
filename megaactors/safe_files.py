"""Files opened without surprises: no symbolic link followed, no FIFO or device read
as if it were a file, temporary files created exclusively beside their target, and an
exclusive lock that says who holds it.

:class:`Directory` keeps a descriptor of one directory and opens every file relative
to it with ``O_NOFOLLOW`` (a link planted in the directory is refused, not followed;
the directory itself may be a link — the user's choice). :func:`open_regular` opens a
path for reading and refuses anything but a regular file without blocking on it.
Problems are :class:`OSError` with the path and a plain reason.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from pathlib import Path
from typing import IO

__all__ = ["Directory", "LockHeldError", "open_regular"]

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class LockHeldError(OSError):
    """Another process holds the lock; ``holder`` is what it wrote in the lock file."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(errno.EWOULDBLOCK, "locked", str(path))
        self.holder = holder


def _refuse_link(path: Path) -> OSError:
    return OSError(errno.ELOOP, "is a symbolic link, which is not followed here", str(path))


def _regular(fd: int, path: Path) -> None:
    """Close ``fd`` and raise unless it is a regular file."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return
    os.close(fd)
    kind = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )
    raise OSError(errno.EINVAL, f"is {kind}, not a regular file", str(path))


def _blocking(fd: int) -> None:
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)


def open_regular(path: str | Path, *, follow: bool = True) -> IO[str]:
    """``path`` opened for reading text; a FIFO, device or directory is refused at
    once instead of read (or waited on); ``follow=False`` also refuses a link."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise _refuse_link(path) from None
        raise
    _regular(fd, path)
    _blocking(fd)
    return open(fd, newline="", encoding="utf-8")


class Directory:
    """A directory whose files are opened relative to it and never through a link."""

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        self.path = Path(path)
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._lock_fd: int | None = None

    def close(self) -> None:
        self.unlock()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Directory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ looking

    def exists(self, name: str) -> bool:
        """True if ``name`` is a regular file here; a link or anything else raises."""
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(st.st_mode):
            raise _refuse_link(self.path / name)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "is not a regular file", str(self.path / name))
        return True

    def _open(self, name: str, flags: int, mode: int = 0o644) -> int:
        try:
            fd = os.open(name, flags | _NOFOLLOW, mode, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refuse_link(self.path / name) from None
            exc.filename = str(self.path / name)
            raise
        _regular(fd, self.path / name)
        return fd

    # ------------------------------------------------------------------ reading and writing

    def open_text(self, name: str) -> IO[str]:
        """``name`` opened for reading text."""
        fd = self._open(name, os.O_RDONLY | os.O_NONBLOCK)
        _blocking(fd)
        return open(fd, newline="", encoding="utf-8")

    def read_text(self, name: str) -> str:
        with self.open_text(name) as f:
            return f.read()

    def append(self, name: str) -> IO[str]:
        """``name`` opened for appending text (created if missing)."""
        fd = self._open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        return open(fd, "a", newline="", encoding="utf-8")

    def replace(self, name: str, content: str | bytes) -> None:
        """Write ``content`` to a new temporary file here (created exclusively) and
        rename it over ``name``: readers see the old or the new file, never a mix, and
        a link planted at ``name`` is replaced, its target left alone."""
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = self._open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        data = content.encode() if isinstance(content, str) else content
        try:
            with open(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=self.fd)
            raise

    def drop_torn_line(self, name: str) -> None:
        """Cut a last line left without its newline by an interrupted append."""
        fd = self._open(name, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                return
            tail = os.pread(fd, min(size, 1 << 20), max(0, size - (1 << 20)))
            if tail.endswith(b"\n"):
                return
            cut = tail.rfind(b"\n")
            if cut < 0 and size > len(tail):
                return  # a last line longer than 1 MiB: leave it to the parser to name
            os.ftruncate(fd, size - len(tail) + cut + 1)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ locking

    def lock(self, name: str, holder: str) -> None:
        """Take an exclusive lock on ``name`` (created if missing) and write ``holder``
        in it; if another process holds it, raise :class:`LockHeldError` with what
        that process wrote. The kernel releases the lock when its process ends."""
        fd = self._open(name, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            os.close(fd)
            raise LockHeldError(self.path / name, text) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the lock
            self._lock_fd = None
