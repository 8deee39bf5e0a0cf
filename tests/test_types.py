"""The package type-checks under mypy (configured in pyproject.toml) with no error
beyond a baseline that may only shrink (``tests/data/mypy_baseline.json``)."""

from __future__ import annotations

import pytest
from mypy_baseline import load, run_mypy


@pytest.mark.slow
def test_type_errors_stay_within_a_baseline_that_only_shrinks() -> None:
    found, output = run_mypy()
    baseline = load()
    grown = {k: n for k, n in found.items() if n > baseline.get(k, 0)}
    assert not grown, f"new type errors (by file and code: {grown}):\n{output}"
    shrunk = {k: (found.get(k, 0), n) for k, n in baseline.items() if found.get(k, 0) < n}
    assert not shrunk, f"fewer type errors than the baseline {shrunk}: run python tests/mypy_baseline.py --update"
