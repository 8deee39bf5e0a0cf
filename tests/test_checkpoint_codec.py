"""The checkpoint codecs' fast paths write what the plain ones wrote: msgpack with
strict types, numbers packed by ``struct``, packets read in one pass."""

from __future__ import annotations

import collections
import enum
from array import array

import msgpack
import numpy as np
import pytest

from megaactors import Organisation, RunSpec
from megaactors.core.behaviour import LLMRequest
from megaactors.core.messages import ADMIN, INTRA, Packet
from megaactors.durable.agent_rows import encode_agent_rows
from megaactors.durable.blob import pack_state
from megaactors.durable.checkpointing import _simulation
from megaactors.durable.state_codec import add_cells, added_cells, decode_packets, encode_packets, float64s, int64s
from megaactors.errors import StateError
from megaactors.runtime.events import superstep_end


class _Level(enum.IntEnum):
    HIGH = 3


class _Colour(str, enum.Enum):  # noqa: UP042 - str() of its member is not its value: packed as the value
    RED = "red"


_Pair = collections.namedtuple("_Pair", "a b")

PACKABLE = [
    _Level.HIGH,
    _Colour.RED,
    np.float64(1.5),
    (1, (2, [3])),
    _Pair(1, [2.0]),
    collections.OrderedDict(b=1, a=2),
    collections.defaultdict(list, {1: [2]}),
    bytearray(b"ab"),
    memoryview(b"cd"),
    {"k": (_Level.HIGH, None, True)},
    msgpack.ExtType(5, b"x"),
    2**64 - 1,
    -(2**63),
    "é",
]


@pytest.mark.parametrize("value", PACKABLE, ids=lambda v: type(v).__name__)
def test_strict_packing_writes_the_bytes_of_plain_packing(value: object) -> None:
    assert pack_state(value) == msgpack.packb(value, use_bin_type=True)


@pytest.mark.parametrize("value", [{1, 2}, np.int64(3), [object()], 2**64])
def test_strict_packing_refuses_what_plain_packing_refuses(value: object) -> None:
    with pytest.raises((TypeError, OverflowError)):
        msgpack.packb(value, use_bin_type=True)
    with pytest.raises((TypeError, OverflowError)):
        pack_state(value)


def test_struct_packing_writes_the_bytes_of_arrays() -> None:
    ints, floats = [0, -1, 2**63 - 1, -(2**63), 7], [0.5, -2.0, 1e300, 3]
    assert int64s(ints) == array("q", ints).tobytes()
    assert int64s(range(5)) == array("q", range(5)).tobytes()
    assert float64s(floats) == array("d", floats).tobytes()
    assert int64s([]) == b"" == float64s(())
    with pytest.raises(Exception):  # noqa: B017 - array and struct both refuse, each its own way
        int64s([1.5])


def _packets(org: Organisation) -> list[Packet]:
    return [
        Packet(1, INTRA, "chat", [0, "hi"], None, 0.5, 10, org.peers(1, INTRA)),
        Packet(0, ADMIN, "chat", [1, "yo"], 3, 1.0, 20, org.peers(0, ADMIN)),
        Packet(2, INTRA, "direct", [2, "x"], None, 1.5, 30, [1]),
    ]


@pytest.mark.parametrize("flags", [None, [True, True, False], [True, True, True]])
def test_packets_come_back_as_they_were_sent(flags: list[bool] | None) -> None:
    org = Organisation.two_tier(12, 4)
    packets = _packets(org) if flags != [True, True, True] else _packets(org)[:2] + _packets(org)[:1]
    encoded = encode_packets(packets, None if flags is None else np.array(flags))
    decoded = decode_packets(msgpack.unpackb(pack_state(encoded), raw=False), org)
    fields = ("first_id", "sender", "channel", "kind", "payload", "parent", "sent_at", "overhead")
    for before, after in zip(packets, decoded, strict=True):
        assert [getattr(after, f) for f in fields] == [getattr(before, f) for f in fields]
        assert list(after.recipients) == list(before.recipients)
    counts = np.frombuffer(encoded["count"], dtype=np.int64).tolist()
    assert counts == [-1 if f else len(p.recipients) for p, f in zip(packets, flags or [False] * 3, strict=True)]


def test_agent_records_of_none_and_of_some() -> None:
    rt = _simulation(RunSpec(topology="two-tier", agents=40, group_size=5, rounds=1, seed=3))
    rt.start()
    rt.genesis()
    rt.advance(superstep_end(rt.next_event_time or 0.0, 1.0))
    state = rt.snapshot()
    empty = encode_agent_rows(state, [], np.zeros(0, dtype=np.uint8))
    assert empty["ids"] == b"" and empty["data"] == [] and empty["llm"][0] == b""
    one = encode_agent_rows(state, [5], None)
    assert one["data"] == [state.agents[5].data] and one["memory"] == [None, [state.agents[5].memory]]
    ids = [0, 5, 17]
    rows = encode_agent_rows(state, ids, None)
    assert rows["data"] == [state.agents[i].data for i in ids]
    assert rows["state"] == bytes(state.agents[i].phase for i in ids)
    flying = [k for k, i in enumerate(ids) if type(state.agents[i].pending) is tuple]
    assert np.frombuffer(rows["llm"][0], dtype=np.int64).tolist() == flying
    calls = [state.agents[ids[k]] for k in flying]
    assert calls and all(len(a.pending) == 6 for a in calls)  # the plain path's lean form: the event alone
    requests = [a.pending[3] for a in calls]
    new_tokens = [
        a.batch_tokens if r.new_tokens is None else r.new_tokens for a, r in zip(calls, requests, strict=True)
    ]
    assert rows["llm"][1] == new_tokens
    assert rows["llm"][2] == int64s([r.output_tokens for r in requests])
    assert rows["llm"][4] == float64s([a.pending[0] for a in calls])


@pytest.mark.parametrize("kinds", [1, 3, 12])
def test_calls_in_flight_read_by_request_give_what_each_call_holds(kinds: int) -> None:
    rt = _simulation(RunSpec(topology="two-tier", agents=60, group_size=5, rounds=1, seed=3))
    rt.start()
    state = rt.snapshot()
    ids = [a.id for a in state.agents if type(a.pending) is tuple]
    assert len(ids) > 2 * kinds
    # requests of several kinds (new tokens given or the batch's, output tokens, stages) spread over the calls
    made = [LLMRequest(None if k % 2 else 10 * k, 7 + k, f"stage{k % 2}") for k in range(kinds)]
    for k, aid in enumerate(ids):
        a = state.agents[aid]
        a.batch_tokens = 100 + aid
        a.pending = (*a.pending[:3], made[k % kinds], *a.pending[4:])
    rows = encode_agent_rows(state, ids, None)
    requests = [state.agents[aid].pending[3] for aid in ids]
    assert rows["llm"][1] == [
        100 + aid if r.new_tokens is None else r.new_tokens for aid, r in zip(ids, requests, strict=True)
    ]
    assert rows["llm"][2] == int64s([r.output_tokens for r in requests])
    stages = [r.stage for r in requests]
    assert rows["llm"][3] == (stages if kinds > 1 else stages[:1])


@pytest.mark.parametrize(
    ("gains", "width"),
    [([0, 1, -128, 127], 1), ([300, -2], 2), ([70_000, 0, -5], 4), ([2**40, -(2**40)], 8), ([], 0)],
)
def test_ledger_gains_come_back_exactly_in_the_narrowest_width(gains: list[int], width: int) -> None:
    before = array("q", [5, 7, 9, 11, 13])
    after = array("q", before)
    for i, g in enumerate(gains):
        after[i] += g
    at = np.arange(len(gains), dtype=np.int64)
    packed = added_cells(after, np.frombuffer(before, dtype=np.int64).copy(), at)
    assert len(packed) == width * len(gains)
    restored = array("q", before)
    add_cells(restored, at.tobytes(), packed)
    assert restored == after


def test_ledger_gains_of_agents_beyond_the_shadow_count_from_zero() -> None:
    column = array("q", [1, 2, 3, 400, 5])  # agents 3 and 4 recruited since the shadow
    at = np.array([1, 3, 4], dtype=np.int64)
    packed = added_cells(column, np.array([1, 0, 3], dtype=np.int64), at)
    assert np.frombuffer(packed, dtype=np.int16).tolist() == [2, 400, 5]
    grown = array("q", [1, 0, 3, 0, 0])
    add_cells(grown, at.tobytes(), packed)
    assert grown == column


def test_ledger_gains_of_the_wrong_length_are_refused() -> None:
    with pytest.raises(StateError, match="3 bytes of ledger gains for 2 agents"):
        add_cells(array("q", [0, 0]), np.arange(2, dtype=np.int64).tobytes(), b"abc")
