"""Objects the simulation makes on its hot path without calling their class: each
equals, field by field, the one the class makes, and sets every slot."""

from __future__ import annotations

import pytest

from megaactors import ChatRound, Organisation, SimRuntime, SimulatedLLM
from megaactors.core.behaviour import (
    UNCHANGED,
    AgentContext,
    Effects,
    LLMRequest,
    Send,
    new_context,
    new_send,
    sends_only,
)
from megaactors.core.llm import LLMReply
from megaactors.core.messages import Packet, new_packet


def _slots(obj: object) -> dict[str, object]:
    """Every slot of ``obj`` (AttributeError if one is unset)."""
    names = [name for cls in type(obj).__mro__ for name in getattr(cls, "__slots__", ())]
    assert names, f"{type(obj).__name__} has no slots"
    return {name: getattr(obj, name) for name in names}


def test_context_send_and_effects_equal_the_ones_their_class_makes() -> None:
    org = Organisation.two_tier(12, 4)
    assert _slots(new_context(3, org, 1.5, [7])) == _slots(AgentContext(3, org, 1.5, [7]))
    assert _slots(new_send([1, 2], "intra", "chat", [0, "x"])) == _slots(Send([1, 2], "intra", "chat", [0, "x"]))
    assert _slots(new_send((4,), "hierarchy", "ask", "t", 9)) == _slots(Send((4,), "hierarchy", "ask", "t", 9))
    sends = [Send([1], "intra", "chat", [0])]
    made = sends_only(sends)
    assert _slots(made) == _slots(Effects(sends=sends)) and made.state is UNCHANGED


@pytest.mark.parametrize(
    ("sender", "payload", "parent", "sent_at", "first_id"),
    [
        (0, [0, "text"], None, 0.0, 0),
        (300, {"a": [1.5, None]}, 70000, 2, 255),
        (5, "x" * 300, 3, 1e9, 1 << 33),
        *((sender, [1, "y" * 40], None, 0.5, 9) for sender in (127, 128, 255, 256, 65535, 65536)),
    ],
)
def test_a_packet_made_cheaply_equals_the_one_its_class_makes(
    sender: int, payload: object, parent: int | None, sent_at: float, first_id: int
) -> None:
    args = (sender, "intra", "chat", payload, parent, sent_at, first_id, [1, 2, 3])
    first, made, reference = new_packet(*args), new_packet(*args), Packet(*args)  # the second: names seen before
    assert _slots(first) == _slots(made) == _slots(reference)
    assert type(made.sent_at) is float and made.copy_bytes == reference.copy_bytes


def test_a_simulated_reply_sets_every_field_as_the_class_would() -> None:
    llm = SimulatedLLM(seed=4)
    reply = llm.complete(2, 5, LLMRequest(new_tokens=30, output_tokens=None, stage="chat"), 120, 30)
    fields = _slots(reply)
    expected = LLMReply(reply.tokens_in, reply.tokens_out, reply.latency_s, reply.cost_usd, "chat", 5)
    assert fields == _slots(expected) and reply == expected
    assert reply.text is None and reply.failed is None and reply.tokens_in == llm.tokens.system_tokens + 150


def test_the_deepest_queue_is_read_from_the_in_queues_once_every_log_is_read() -> None:
    """:meth:`Mailboxes.most_queued` gives the largest :meth:`queued` mid-run (logs
    unread) and at the end (every log read)."""
    rt = SimRuntime(Organisation.two_tier(60, 5), ChatRound(2), trace=False)
    rt.start()
    seen = set()
    while rt.step():
        most = rt.mail.most_queued()
        assert most == max(map(rt.queued, range(60)))
        seen.add(most > 0)
    assert seen == {True, False}
    assert rt.result().ledger.peak_queue_depth >= 1


def test_a_view_of_a_group_made_cheaply_equals_the_one_its_class_makes() -> None:
    from megaactors.core.peer_view import Without, without

    members = [10, 11, 12, 13]
    made = without(members, 2, 4)
    assert _slots(made) == _slots(Without(members, 2, 4)) and made == [10, 11, 13]


def test_a_broadcast_is_told_from_its_slices_as_from_the_peers_list() -> None:
    """:func:`is_broadcast` on the intra channel compares a one-group sender's
    recipients with its group in slices: the same answer as against ``group_peers``."""
    from megaactors.runtime.postman import is_broadcast

    org = Organisation.two_tier(40, 6)
    for sender in range(40):
        peers = org.group_peers(sender)
        cases = [peers, peers[:-1], peers[1:], peers[::-1], [*peers, sender], [sender, *peers[1:]]]
        for recipients in cases:
            expected = len(recipients) > 0 and recipients == peers
            assert is_broadcast(org, sender, list(recipients), "intra") == expected, (sender, recipients)
