"""Checkpoints of state format 2 (deltas with in-queue heads), 3 (deltas with the
values of ledger cells) and 4 (deltas with int64 columns) still restore, alone and
followed by deltas of the format written now (no heads: a restore counts them;
ledger counts as gains; integer columns narrowed).

``data/format2_chain.msgpack`` holds the sealed checkpoints (headers of format 2)
that megaactors af3abe8 wrote for :func:`reference`'s run, made with::

    git worktree add --detach /tmp/f2 af3abe8
    cd /tmp && PYTHONPATH=/tmp/f2:$REPO/tests python -c \\
        "import test_state_formats as t; t.write_chain('$REPO/tests/data/format2_chain.msgpack')"

``data/format3_chain.msgpack`` those of format 3, written the same way by
megaactors 79dcb44 (into ``format3_chain.msgpack``), and ``data/format4_chain.msgpack``
those of format 4 (deltas with int64 columns), written the same way by megaactors
7e4f6f2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from test_resume import _heads, _outcome, _runtime, _wire

from megaactors.durable import blob
from megaactors.durable.blob import decode_state, seal_state
from megaactors.durable.narrow import widened
from megaactors.durable.packable import pack_checked
from megaactors.durable.state import DurableSim, StateError
from megaactors.runtime.events import superstep_end

CHAIN = Path(__file__).parent / "data" / "format2_chain.msgpack"
CHAIN3 = Path(__file__).parent / "data" / "format3_chain.msgpack"
CHAIN4 = Path(__file__).parent / "data" / "format4_chain.msgpack"
ARGS = ((25, 3), 3, 2, False, None)
"""A hierarchy of 25 agents (fanout 3), Busy over 3 rounds, seed 2, no serial token,
no cap: recruits, tool calls behind a lock, notes on tree edges and broadcasts."""
FULLS = (False, False, False, True)
"""Which super-steps after the genesis are written as full snapshots (cycled)."""
WINDOW = 0.5


def write_chain(path: str) -> None:
    """Write the sealed checkpoints of :data:`ARGS`'s run, one per super-step."""
    rt = _runtime(DurableSim, *ARGS)
    rt.start()
    blobs = [seal_state(pack_checked(rt.genesis()))]
    while not rt.finished:
        rt.advance(superstep_end(rt.next_event_time, WINDOW))
        full = FULLS[(len(blobs) - 1) % len(FULLS)]
        blobs.append(seal_state(pack_checked(rt.full() if full else rt.delta())))
    Path(path).write_bytes(msgpack.packb(blobs))


def reference() -> tuple[list[list[int]], Any]:
    """The in-queue heads after every super-step of the run and its outcome."""
    rt = _runtime(DurableSim, *ARGS)
    rt.start()
    heads = [_heads(rt)]
    while not rt.finished:
        rt.advance(superstep_end(rt.next_event_time, WINDOW))
        heads.append(_heads(rt))
    return heads, _outcome(rt)


def _base(chain: list[dict[str, Any]], k: int) -> int:
    return max(j for j in range(k + 1) if chain[j]["kind"] in ("full", "start"))


def _chain(path: Path, version: int) -> list[dict[str, Any]]:
    blobs = msgpack.unpackb(path.read_bytes())
    assert all(b[4:6] == version.to_bytes(2, "big") for b in blobs)  # written in that format
    return [decode_state(b, where=f"step {i}") for i, b in enumerate(blobs)]


@pytest.fixture(scope="module")
def old_chain() -> list[dict[str, Any]]:
    return _chain(CHAIN, 2)


@pytest.fixture(scope="module")
def format3_chain() -> list[dict[str, Any]]:
    return _chain(CHAIN3, 3)


@pytest.fixture(scope="module")
def format4_chain() -> list[dict[str, Any]]:
    return _chain(CHAIN4, 4)


def _restored(chain: list[dict[str, Any]], k: int) -> DurableSim:
    """The run restored at step ``k`` of ``chain`` (from a copy: a restored agent's
    state is the snapshot's own list, which the run goes on to change)."""
    rt = _runtime(DurableSim, *ARGS)
    rt.restore_chain(_wire(chain[_base(chain, k) : k + 1]))
    return rt


def test_format2_checkpoints_restore_every_step_exactly(old_chain: list[dict[str, Any]]) -> None:
    heads, expected = reference()
    assert len(old_chain) == len(heads) and any("heads" in d for d in old_chain if d["kind"] == "delta")
    for k in range(len(old_chain)):
        rt = _restored(old_chain, k)
        assert _heads(rt) == heads[k], f"in-queues restored at step {k}"
        rt.run()
        assert _outcome(rt) == expected, f"restored at step {k}"


def test_format3_checkpoints_restore_every_step_exactly(format3_chain: list[dict[str, Any]]) -> None:
    heads, expected = reference()
    deltas = [d for d in format3_chain if d["kind"] == "delta"]
    assert len(format3_chain) == len(heads) and deltas
    assert not any("heads" in d or "ledger_added" in d for d in deltas)  # the values of ledger cells
    for k in range(len(format3_chain)):
        rt = _restored(format3_chain, k)
        assert _heads(rt) == heads[k], f"in-queues restored at step {k}"
        rt.run()
        assert _outcome(rt) == expected, f"restored at step {k}"


def test_format4_checkpoints_restore_every_step_exactly(format4_chain: list[dict[str, Any]]) -> None:
    heads, expected = reference()
    deltas = [d for d in format4_chain if d["kind"] == "delta"]
    assert len(format4_chain) == len(heads) and deltas
    assert all("ledger_added" in d and "narrow" not in d for d in deltas)  # int64 columns
    for k in range(len(format4_chain)):
        rt = _restored(format4_chain, k)
        assert _heads(rt) == heads[k], f"in-queues restored at step {k}"
        rt.run()
        assert _outcome(rt) == expected, f"restored at step {k}"


@pytest.mark.parametrize(
    ("version", "resumed_at"), [(2, 1), (2, 2), (2, 6), (3, 1), (3, 2), (3, 6), (4, 1), (4, 2), (4, 6)]
)
def test_an_older_run_resumed_goes_on_in_the_current_format(
    old_chain: list[dict[str, Any]],
    format3_chain: list[dict[str, Any]],
    format4_chain: list[dict[str, Any]],
    version: int,
    resumed_at: int,
) -> None:
    """Resumed at a delta of format 2, 3 or 4, a run writes deltas of the current
    format after it (no heads, ledger counts as gains, integer columns narrowed): a
    chain of both kinds restores every later step exactly."""
    heads, expected = reference()
    chain = {2: old_chain, 3: format3_chain, 4: format4_chain}[version][: resumed_at + 1]
    assert chain[-1]["kind"] == "delta"
    rt = _restored(chain, resumed_at)
    while not rt.finished:
        rt.advance(superstep_end(rt.next_event_time, WINDOW))
        chain.append(_wire(rt.delta()))
    assert _outcome(rt) == expected
    assert blob.STATE_FORMAT == 5
    assert all("heads" not in d and "ledger_added" in d and "narrow" in d for d in chain[resumed_at + 1 :])
    for k in range(resumed_at + 1, len(chain)):
        again = _restored(chain, k)
        assert _heads(again) == heads[k], f"in-queues restored at step {k}"
        again.run()
        assert _outcome(again) == expected, f"restored at step {k}"


def test_counts_that_contradict_the_packets_are_refused() -> None:
    """A delta whose received counts say an agent took more than was ever addressed
    to it cannot name its in-queue: the restore says so instead of guessing."""
    rt = _runtime(DurableSim, *ARGS)
    rt.start()
    chain = [_wire(rt.genesis())]
    for _ in range(3):
        rt.advance(superstep_end(rt.next_event_time, WINDOW))
        chain.append(_wire(rt.delta()))
    last = chain[-1]
    ids = np.frombuffer(widened(last)["agents"]["ids"], dtype=np.int64)
    assert len(ids)
    last["ledger_added"]["received"] = np.full(len(ids), 10**6, dtype=np.int64).tobytes()
    with pytest.raises(StateError, match=rf"agent {ids[0]}: -\d+ message\(s\) queued by the counts"):
        _runtime(DurableSim, *ARGS).restore_chain(chain)
