"""Ray: the cluster cases (tests/ray_cases.py) on a real two-node cluster on 127.0.0.1,
inside a loopback-only network namespace (see tests/ray_cluster.py)."""

from __future__ import annotations

import pytest
from ray_cluster import namespace_refusal, run_in_namespace


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cases_on_a_two_node_ray_cluster() -> None:
    refusal = namespace_refusal()
    if refusal:
        pytest.skip(f"a Ray cluster on 127.0.0.1 {refusal}")
    out = run_in_namespace("ray_cases.py", timeout=900)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "skipped" not in out.stdout, out.stdout[-2000:]
