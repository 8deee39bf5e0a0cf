"""The rate-limit experiment: its points, floors and where parallelism stops paying."""

from __future__ import annotations

import pytest

from megaactors.experiments.rate_limits import SIMULATE_UP_TO, SIMULATE_WORK, limits_figure, run_point, stops_paying
from megaactors.providers.presets import RATE_LIMIT_PRESETS


def test_a_point_runs_unlimited_and_under_each_preset(tmp_path) -> None:
    rows = {r["limits"]: r for r in run_point("two-tier", 300, "prompt-length")}
    free, tier1, tier5 = rows["no limit"], rows["openai-tier1-mini"], rows["openai-tier5-mini"]
    assert free["simulated"] and free["speedup"] > 10
    # tier 5 does not bind at 300 agents: the same run
    assert tier5["simulated"] and tier5["rate_limited"] == 0 and tier5["makespan_s"] == free["makespan_s"]
    # tier 1's limits do: no shorter than the calls over the RPM or the tokens over the TPM
    limits = RATE_LIMIT_PRESETS["openai-tier1-mini"]
    floor = max(free["llm_calls"] / (limits.rpm / 60), free["tokens"] / (limits.tpm / 60))
    assert tier1["floor_s"] == pytest.approx(floor) and tier1["makespan_s"] >= floor * 0.99
    ratio = floor / free["makespan_s"]
    assert tier1["simulated"] == (ratio <= SIMULATE_UP_TO and 300 * ratio <= SIMULATE_WORK)
    assert tier1["speedup"] < free["speedup"]
    limits_figure(list(rows.values()), tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000


def test_parallelism_stops_paying_where_ten_times_the_agents_gain_little() -> None:
    rows = [
        {"topology": "t", "latency": "l", "limits": "x", "agents": n, "speedup": s}
        for n, s in ((10, 5.0), (100, 40.0), (1000, 45.0), (10000, 46.0))
    ] + [{"topology": "t", "latency": "l", "limits": "free", "agents": n, "speedup": n / 2} for n in (10, 100, 1000)]
    assert stops_paying(rows) == {("t", "l", "x"): 100, ("t", "l", "free"): None}
