"""The chaos suite (:mod:`chaos`), one trial of each scenario: random SIGKILL and
SIGSTOP of workers (SQLite and PostgreSQL), PostgreSQL restarted mid-run, a store on a
full disk, concurrent and killed sweeps. ``python tests/chaos.py --long`` runs more."""

from __future__ import annotations

import pytest
from chaos import Tally, run_all


@pytest.fixture(scope="module")
def tallies() -> dict[tuple[str, str], Tally]:
    return {(t.scenario, t.backend): t for t in run_all(long=False, seed=1)}


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario",
    [("workers", "sqlite"), ("workers", "postgres"), ("postgres-restart", "postgres"), ("disk-full", "sqlite"),
     ("sweeps", "files")],
)  # fmt: skip
def test_chaos(tallies: dict[tuple[str, str], Tally], scenario: tuple[str, str]) -> None:
    tally = tallies[scenario]
    if tally.skipped:
        pytest.skip(tally.skipped)
    assert tally.trials >= 1 and tally.faults >= 1
    assert not tally.failures, tally.failures
