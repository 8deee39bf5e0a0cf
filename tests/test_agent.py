"""The Idle -> Processing -> Response state machine."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megaactors.core.agent import LEGAL_TRANSITIONS, Agent, AgentState, TransitionError
from megaactors.core.trace import Trace

S = AgentState


def test_legal_cycle_is_recorded_in_the_trace() -> None:
    trace = Trace()
    a = Agent(7)
    for t, to in enumerate([S.PROCESSING, S.RESPONSE, S.PROCESSING, S.RESPONSE, S.IDLE]):
        a.transition(to, float(t), trace)
    assert trace.transitions() == [
        (7, "IDLE", "PROCESSING", 0.0),
        (7, "PROCESSING", "RESPONSE", 1.0),
        (7, "RESPONSE", "PROCESSING", 2.0),
        (7, "PROCESSING", "RESPONSE", 3.0),
        (7, "RESPONSE", "IDLE", 4.0),
    ]


@pytest.mark.parametrize(
    ("frm", "to"),
    [
        (S.IDLE, S.RESPONSE),
        (S.IDLE, S.IDLE),
        (S.PROCESSING, S.IDLE),
        (S.PROCESSING, S.PROCESSING),
        (S.RESPONSE, S.RESPONSE),
    ],
)
def test_illegal_transitions_raise_and_leave_the_state(frm: AgentState, to: AgentState) -> None:
    a = Agent(1)
    a.state = frm
    with pytest.raises(TransitionError, match=f"agent 1: illegal transition {frm.name} -> {to.name}"):
        a.transition(to, 0.0)
    assert a.state == frm


@given(st.lists(st.sampled_from(list(S)), max_size=30))
def test_any_sequence_follows_the_legal_table(moves: list[AgentState]) -> None:
    a, trace = Agent(0), Trace()
    for to in moves:
        before = a.state
        if (before, to) in LEGAL_TRANSITIONS:
            a.transition(to, 0.0, trace)
            assert a.state == to
        else:
            with pytest.raises(TransitionError):
                a.transition(to, 0.0, trace)
            assert a.state == before
    assert all((S[f], S[t]) in LEGAL_TRANSITIONS for _, f, t, _ in trace.transitions())


def test_take_batch_empties_the_in_queue_and_keeps_order() -> None:
    from megaactors.core.messages import Packet

    a = Agent(2)
    packets = [Packet(1, "intra", "chat", i, first_id=i, recipients=(2,)) for i in range(3)]
    a.inbox.extend(packets)
    batch = a.take_batch()
    assert [m.payload for m in batch] == [0, 1, 2]
    assert a.inbox == [] and len(batch) == 3


def test_memory_window_keeps_the_newest_items() -> None:
    a = Agent(0)
    for tokens in range(1, 8):
        a.remember(tokens, 3)
    assert a.memory == [5, 6, 7]
