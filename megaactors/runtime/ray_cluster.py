"""A Ray cluster to run on: an existing one at ``HOST:PORT``, or a local instance.

:func:`ray_session` connects (``ray.init(address=...)``) or starts a local instance
when no address is given, and on leaving disconnects, which also stops a local
instance it started. What can go wrong before anything runs is one
:class:`~megaactors.errors.ClusterError` line: Ray missing, an address that is not
``HOST:PORT``, nothing listening there (checked with a plain TCP connection, so an
unreachable address fails in seconds rather than after Ray's minute of retries), a
cluster of another Ray or Python version, or one whose nodes run another megaactors.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from megaactors.errors import ClusterError
from megaactors.validation import Param

__all__ = ["ADDRESS", "ClusterError", "check_reachable", "import_ray", "parse_address", "ray_session"]

ADDRESS = Param(
    "address",
    str,
    "a Ray cluster's HOST:PORT (its head's GCS port); default: a local Ray instance started and stopped here",
    optional=True,
)

_CONNECT_TIMEOUT_S = 5.0
_LOCAL_ATTEMPTS = 2
"""A local instance is started again once: on a loaded machine Ray's helpers can miss
the raylet's 15 s start-up window, and a second start finds their files cached."""


def import_ray() -> Any:
    """The ``ray`` module, or a :class:`ClusterError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ClusterError("Ray is not installed: pip install 'megaactors[ray]'") from None
    return ray


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` as a host and a port number; anything else is a :class:`ClusterError`."""
    host, sep, port_text = address.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ClusterError(f"--address must be HOST:PORT of a Ray head, got {address!r}")
    return host.strip("[]"), int(port_text)


def check_reachable(address: str) -> None:
    """Something listens at ``address`` (``HOST:PORT``), else a :class:`ClusterError`."""
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ClusterError(f"cannot reach a Ray cluster at {address}: {exc.strerror or exc}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


@contextmanager
def ray_session(address: str | None = None, *, num_cpus: int | None = None) -> Iterator[Any]:
    """Ray connected to the cluster at ``address`` (or a local instance with
    ``num_cpus`` CPUs), disconnected on leaving; yields the ``ray`` module."""
    ray = import_ray()
    if address is not None:
        check_reachable(address)
    if ray.is_initialized():
        raise ClusterError("Ray is already connected in this process; disconnect (ray.shutdown()) first")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    options: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
    if address is None:
        options.update(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1")
    attempts = 1 if address is not None else _LOCAL_ATTEMPTS
    for attempt in range(attempts):
        try:
            ray.init(address=address, **options)
            break
        except Exception as exc:  # Ray raises a bare Exception for a node that did not start
            ray.shutdown()
            if attempt + 1 == attempts:
                where = f"the Ray cluster at {address}" if address else "a local Ray instance"
                raise ClusterError(f"cannot connect to {where}: {_one_line(exc)}") from None
    try:
        _check_versions(ray)
        yield ray
    finally:
        ray.shutdown()


def _versions() -> tuple[str, str]:
    import megaactors

    return megaactors.__version__, f"{sys.version_info.major}.{sys.version_info.minor}"


def _check_versions(ray: Any) -> None:
    """The cluster's workers run the megaactors and Python this process runs."""
    theirs = ray.get(ray.remote(num_cpus=0)(_versions).remote(), timeout=120)
    ours = _versions()
    if tuple(theirs) != ours:
        raise ClusterError(
            f"the Ray cluster's workers run megaactors {theirs[0]} on Python {theirs[1]}, "
            f"this process megaactors {ours[0]} on Python {ours[1]}: install the same on every node"
        )
