"""A delta's integer columns narrowed (state format 5) come back exactly as int64."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from megaactors import RunSpec
from megaactors.durable.checkpointing import _simulation
from megaactors.durable.narrow import counts, narrow_ints, narrowed, widen_ints, widened
from megaactors.errors import StateError
from megaactors.runtime.events import superstep_end


def _q(values: list[int]) -> bytes:
    return np.array(values, dtype=np.int64).tobytes()


def _delta(ids: list[int], first_ids: list[int], extreme: int) -> dict[str, object]:
    n, m = len(ids), len(first_ids)
    return {
        "kind": "delta",
        "agents": {
            "ids": _q(ids),
            "batch_tokens": _q([extreme, 0, 3][:n] + [1] * (n - 3)),
            "llm": [_q(list(range(n))), [1] * n, _q([60] * n), ["chat"], b"\0" * 8 * n, _q([-extreme] * n)],
        },
        "packets": {
            "first_id": _q(first_ids),
            "sender": _q([5] * m),
            "overhead": _q([229] * m),
            "count": _q([-1] * m),
            "payload": [[0, "x"]] * m,
        },
    }


@pytest.mark.parametrize("extreme", [7, 300, 70_000, 2**40, 2**63 - 1])
@pytest.mark.parametrize(("ids", "first_ids"), [([], []), ([4], [9]), ([0, 2, 3, 900], [10, 40, 3, 2**50])])
def test_narrowed_columns_widen_to_the_same_bytes(ids: list[int], first_ids: list[int], extreme: int) -> None:
    delta = _delta(ids, first_ids, extreme)
    before = copy.deepcopy(delta)
    small = narrowed(delta)
    assert small["narrow"] == [len(ids), len(ids), len(first_ids)]
    assert counts(small) == counts(before) == (len(ids), len(first_ids))
    assert widened(small) == before
    if ids and extreme < 128:  # one byte a value where eight were
        assert len(small["agents"]["batch_tokens"]) == len(ids)


def test_a_deltas_columns_are_narrowed_and_read_back() -> None:
    rt = _simulation(RunSpec(topology="two-tier", agents=200, group_size=8, rounds=1, seed=2))
    rt.start()
    rt.genesis()
    rt.advance(superstep_end(rt.next_event_time or 0.0, 1.0))
    delta = rt.delta()
    n, flying, sent = delta["narrow"]
    assert n > 10 and sent > 10
    wide = widened(delta)
    ids = np.frombuffer(wide["agents"]["ids"], dtype=np.int64)
    assert len(ids) == n and (np.diff(ids) > 0).all()
    assert len(delta["agents"]["ids"]) < 8 * n and len(delta["packets"]["sender"]) < 8 * sent
    assert len(wide["agents"]["llm"][5]) == 8 * flying


def test_a_column_of_the_wrong_length_is_refused() -> None:
    delta = narrowed(_delta([1, 2, 3], [5, 6], 7))
    delta["agents"]["batch_tokens"] += b"\0"
    with pytest.raises(StateError, match="4 bytes of batch tokens for 3 values"):
        widened(delta)
    with pytest.raises(StateError, match="column lengths are not three integers"):
        widened({**delta, "narrow": ["x"]})
    assert widen_ints(narrow_ints(np.array([-129, 5], dtype=np.int64)), 2, "x").tolist() == [-129, 5]
