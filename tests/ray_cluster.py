"""A real two-node Ray cluster on 127.0.0.1 for the tests, and how to run tests inside it.

Ray nodes advertise the machine's network address, so the cluster runs in a network
namespace that has only loopback: :func:`run_in_namespace` re-runs pytest on a file
of cases there (``unshare -n``, as root). Inside, :class:`LocalRayCluster` starts
each node with ``ray start --block`` as a process group of its own, with its own
ports and temp dir, and stops it by killing that group (never ``ray stop``, which
would stop every Ray on the machine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
IN_NAMESPACE = "MEGAACTORS_RAY_NAMESPACE"
_RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def namespace_refusal() -> str:
    """Why the cluster cannot run here (empty when it can)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs unshare and ip (util-linux, iproute2)"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed (pip install 'megaactors[ray]')"
    probe = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make a network namespace: {probe.stderr.strip() or 'unshare -n failed'}"
    return ""


def run_in_namespace(cases: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """pytest on ``cases`` (a file beside this one) in a loopback-only network namespace."""
    env = {**os.environ, **_RAY_ENV, IN_NAMESPACE: "1"}
    command = f"ip link set lo up && exec {sys.executable} -m pytest -q -p no:cacheprovider -x {HERE / cases}"
    unshared = ["unshare", "-n", "sh", "-c", command]
    return subprocess.run(unshared, capture_output=True, text=True, timeout=timeout, env=env, cwd=HERE.parent)


def require_namespace() -> None:
    if not os.environ.get(IN_NAMESPACE):
        pytest.skip("run inside a network namespace by tests/test_ray.py")


class LocalRayCluster:
    """A head and worker nodes on 127.0.0.1, each ``ray start --block`` in its own
    process group."""

    HEAD_PORT = 26379

    def __init__(self) -> None:
        self.temp = Path(tempfile.mkdtemp(prefix="ray"))  # short: socket paths have a length limit
        self.address = f"127.0.0.1:{self.HEAD_PORT}"
        self.nodes: list[subprocess.Popen[bytes]] = []
        path = os.pathsep.join(filter(None, [str(HERE / "data" / "ray_node_path"), os.environ.get("PYTHONPATH")]))
        self.env = {**os.environ, **_RAY_ENV, "PYTHONPATH": path}
        self.ray = Path(sys.executable).parent / "ray"

    def start(self, workers: int = 1, cpus: int = 1) -> LocalRayCluster:
        head = ["--head", f"--port={self.HEAD_PORT}", f"--temp-dir={self.temp}", "--include-dashboard=false"]
        self._start_node(head, cpus, expected=1)
        for _ in range(workers):
            self.add_node(cpus)
        return self

    def add_node(self, cpus: int = 1) -> subprocess.Popen[bytes]:
        return self._start_node([f"--address={self.address}"], cpus, expected=self.alive() + 1)

    def _start_node(self, role: list[str], cpus: int, expected: int) -> subprocess.Popen[bytes]:
        """A node, started again when it did not come up: on a loaded machine Ray's
        helpers can miss the raylet's 15 s start-up window."""
        for attempt in range(3):
            log = (self.temp / f"node{len(self.nodes)}-{attempt}.log").open("wb")
            node = subprocess.Popen(
                [str(self.ray), "start", *role, "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", "--block",
                 "--disable-usage-stats"],
                stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
            )  # fmt: skip
            if self._wait_alive(expected, node):
                self.nodes.append(node)
                return node
            self.kill(node)
        raise RuntimeError(f"a Ray node did not start three times; logs in {self.temp}")

    def _wait_alive(self, expected: int, node: subprocess.Popen[bytes], timeout: float = 90.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and node.poll() is None:
            if self.alive() >= expected:
                return True
            time.sleep(1.0)
        return False

    def alive(self) -> int:
        """Nodes the cluster sees alive (0 when the head does not answer)."""
        try:
            with socket.create_connection(("127.0.0.1", self.HEAD_PORT), timeout=2):
                pass
            probe = subprocess.run(
                [sys.executable, "-c", _COUNT_ALIVE, self.address], capture_output=True, text=True, env=self.env,
                timeout=60,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return 0
        return int(probe.stdout.strip() or 0) if probe.returncode == 0 else 0

    def running_on(self, node: subprocess.Popen[bytes], title: str) -> bool:
        """A process of ``node`` whose command line starts with ``title`` (``ray::execute``)."""
        return any(_cmdline(pid).startswith(title) for pid in _descendants(node.pid))

    @staticmethod
    def kill(node: subprocess.Popen[bytes]) -> None:
        """SIGKILL to the node: its process group (raylet, agents) and every process
        it started (workers run in sessions of their own)."""
        doomed = _descendants(node.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)
        _kill(doomed)
        node.wait(timeout=30)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            self.kill(node)
        _kill(namespace_processes())  # anything a node left behind (this namespace is ours)
        shutil.rmtree(self.temp, ignore_errors=True)


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` in the process tree."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def namespace_processes(title: str = "") -> list[int]:
    """Processes of this network namespace other than this one and its parents (the
    namespace exists for these tests only), whose command line starts with ``title``."""
    mine = os.readlink("/proc/self/ns/net")
    spared = {os.getpid(), os.getppid()}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/net") != mine:
                continue
        except OSError:
            continue
        if _cmdline(int(entry)).startswith(title):
            found.append(int(entry))
    return found


_COUNT_ALIVE = """
import sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(sum(1 for n in ray.nodes() if n["Alive"]))
"""
