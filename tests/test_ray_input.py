"""Bad input to Ray sweeps is refused before anything starts (no cluster needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from megaactors.errors import ClusterError, ParameterError
from megaactors.experiments.sweep import SweepError, run_sweep
from megaactors.runtime.ray_cluster import parse_address

GRID = {"topology": "star", "agents": 10}


@pytest.mark.parametrize(
    ("how", "error", "needle"),
    [
        ({"executor": "dask"}, ParameterError, "unknown executor 'dask'; expected one of process, ray"),
        ({"address": "127.0.0.1:6379"}, SweepError, "give it with executor='ray'"),
        ({"executor": "ray", "address": "127.0.0.1"}, ClusterError, "HOST:PORT"),
        ({"executor": "ray", "address": "host:99999"}, ClusterError, "HOST:PORT"),
        ({"executor": "ray", "address": 6379}, ParameterError, "address must be a string"),
    ],
)
def test_bad_executor_input_is_refused_before_the_directory_is_touched(
    how: dict[str, object], error: type[Exception], needle: str, tmp_path: Path
) -> None:
    with pytest.raises(error) as info:
        run_sweep(GRID, tmp_path / "out", progress=False, **how)  # type: ignore[arg-type]
    assert needle in str(info.value)
    assert not (tmp_path / "out").exists()


def test_addresses_parse_as_host_and_port() -> None:
    assert parse_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert parse_address(" head.example:26379 ") == ("head.example", 26379)
    assert parse_address("[::1]:6379") == ("::1", 6379)
    for bad in ("", ":6379", "host:", "host:port", "host:0"):
        with pytest.raises(ClusterError, match="HOST:PORT"):
            parse_address(bad)


def test_the_command_refuses_an_address_without_the_ray_executor(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "megaactors", "sweep", "--agents", "10", "--address", "127.0.0.1:6379",
         "-o", str(tmp_path / "o"), "-q"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "executor='ray'" in lines[0]
    assert not (tmp_path / "o").exists()
