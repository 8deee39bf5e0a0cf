"""Results stay identical per seed: every case of ``result_digests`` against the
digest recorded in ``tests/data/result_digests.json``."""

from __future__ import annotations

import json

import pytest
from result_digests import DIGESTS, cases

RECORDED = json.loads(DIGESTS.read_text())
CASES = cases()


def test_every_case_is_recorded():
    assert sorted(RECORDED) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_result_digest_unchanged(name):
    assert CASES[name]() == RECORDED[name], f"{name}: results changed"
