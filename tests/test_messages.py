"""The envelope codec: round trips, sizes and validation of untrusted bytes."""

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from megaactors.core.messages import (
    CHANNELS,
    MAX_MESSAGE_BYTES,
    Batch,
    Message,
    MessageError,
    Packet,
    decode,
    encode,
    encoded_size,
    int_size,
    int_size_total,
    str_size,
)

ids = st.integers(min_value=0, max_value=2**64 - 1)
payloads = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=10,
)
messages = st.builds(
    Message.of,
    ids,
    ids,
    ids,
    st.sampled_from(CHANNELS),
    st.text(min_size=1, max_size=40),
    payloads,
    st.none() | ids,
    st.floats(min_value=0, max_value=1e9),
)


@given(messages)
def test_round_trip_preserves_every_field(msg: Message) -> None:
    back = decode(encode(msg))
    assert back == msg
    assert back.as_tuple() == msg.as_tuple()


@given(messages)
def test_arithmetic_size_equals_encoded_length(msg: Message) -> None:
    assert encoded_size(msg) == len(encode(msg)) == msg.size


@given(st.integers(-(2**63), 2**64 - 1))
def test_int_size_matches_msgpack(n: int) -> None:
    assert int_size(n) == len(msgpack.packb(n))


@given(st.text())
def test_str_size_matches_msgpack(s: str) -> None:
    assert str_size(s) == len(msgpack.packb(s))


@given(st.integers(0, 2**33), st.integers(0, 70000))
def test_int_size_total_is_the_sum(lo: int, span: int) -> None:
    assert int_size_total(lo, lo + span) == sum(int_size(i) for i in range(lo, lo + span))


def test_packet_copies_get_consecutive_ids_in_recipient_order() -> None:
    packet = Packet(3, "intra", "chat", [1, "hi"], None, 2.5, first_id=100, recipients=(7, 5, 9))
    batch = Batch(5, [packet])
    (m,) = list(batch)
    assert (m.id, m.sender, m.recipient, m.payload) == (101, 3, 5, [1, "hi"])
    assert batch.nbytes() == len(encode(m))


def test_batch_of_rejects_a_message_for_someone_else() -> None:
    m = Message.of(1, 2, 3, "intra", "chat", None)
    with pytest.raises(MessageError, match="not the copy"):
        Batch.of(4, [m])


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "empty"),
        ("text", "expected bytes"),
        (b"\xc1", "not a msgpack"),
        (msgpack.packb({"id": 1}), "array of 8"),
        (msgpack.packb([1, 2, 3]), "8 fields"),
        (msgpack.packb(["x", 1, 2, "intra", "k", None, None, 0.0]), "'id' must be an integer"),
        (msgpack.packb([1, -1, 2, "intra", "k", None, None, 0.0]), "'sender' must be non-negative"),
        (msgpack.packb([1, 1, 2, "radio", "k", None, None, 0.0]), "'channel'"),
        (msgpack.packb([1, 1, 2, "intra", "", None, None, 0.0]), "'kind'"),
        (msgpack.packb([1, 1, 2, "intra", "k", None, "p", 0.0]), "'parent'"),
        (msgpack.packb([1, 1, 2, "intra", "k", None, None, -3.0]), "'sent_at'"),
        (msgpack.packb([1, 1, 2, "intra", "k", None, None, 0.0]) + b"\x00", "trailing"),
        (b"\x98" + b"\xc0" * 3, "not a msgpack"),
    ],
)
def test_decode_rejects_bad_input_with_a_named_problem(data: bytes, problem: str) -> None:
    with pytest.raises(MessageError, match=problem):
        decode(data)


def test_decode_enforces_the_size_cap() -> None:
    big = encode(Message.of(1, 1, 2, "intra", "k", "x" * 200))
    with pytest.raises(MessageError, match="exceeds the cap"):
        decode(big, max_bytes=100)
    assert len(big) < MAX_MESSAGE_BYTES
    assert decode(big).payload == "x" * 200


@given(st.binary(max_size=64))
def test_decode_of_arbitrary_bytes_raises_only_message_error(data: bytes) -> None:
    try:
        msg = decode(data)
    except MessageError:
        return
    assert decode(encode(msg)) == msg


def test_unserializable_payload_is_a_message_error() -> None:
    with pytest.raises(MessageError, match="not serializable"):
        encode(Message.of(1, 1, 2, "intra", "k", object()))


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (msgpack.packb([1, 1, 2, "intra", "k", None, None, float("inf")]), "'sent_at' must be a finite"),
        (msgpack.packb([1, 1, 2, "intra", "k", None, None, float("nan")]), "'sent_at' must be a finite"),
        (b"\x91" * 5000 + b"\xc0", "not a msgpack message: nested too deeply"),
    ],
)
def test_decode_names_non_finite_times_and_deep_nesting(data: bytes, problem: str) -> None:
    with pytest.raises(MessageError, match=problem):
        decode(data)


@given(st.binary(max_size=64), st.sampled_from(["B", "b", "c", "H", "i", "q", "d"]))
def test_decode_reads_any_memoryview_as_its_bytes(data: bytes, fmt: str) -> None:
    import array

    size = array.array(fmt if fmt != "c" else "b").itemsize
    padded = data + b"\x00" * (-len(data) % size)
    view = memoryview(padded).cast(fmt)
    try:
        expected: object = decode(padded)
    except MessageError as exc:
        expected = type(exc)
    try:
        got: object = decode(view)
    except MessageError as exc:
        got = type(exc)
    assert got == expected
    message = Message.of(7, 1, 2, "intra", "k", ["p"], None, 1.5)
    raw = encode(message)
    assert decode(memoryview(raw)) == message
