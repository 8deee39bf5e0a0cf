"""What keeps an activation's objects few and close (see BENCHMARKS.md, "cost per
activation against N"): counts kept as shared ints, cursors keyed by the agents' own
id objects, the out-queue list kept for the agent's life. Results are checked by the
result digests; these check the layout itself."""

from __future__ import annotations

from megaactors import ChatRound, Organisation, SimRuntime
from megaactors.core.behaviour import LLMRequest
from megaactors.core.llm import SimulatedLLM
from megaactors.core.shared_ints import SHARED_COUNTS


def _run(n: int = 600, g: int = 12) -> tuple[SimRuntime, list[list[object]]]:
    rt = SimRuntime(Organisation.two_tier(n, g), ChatRound(2), trace=False)
    outboxes = [a.outbox for a in rt.agents]
    rt.run()
    return rt, outboxes


def test_log_cursors_are_keyed_by_the_agents_own_id_objects() -> None:
    rt, _ = _run()
    logs = [*rt.mail.group_logs.values(), rt.mail.admin_log]
    assert len(logs) == 51
    for log in logs:
        assert log.cursors
        for key in log.cursors:
            assert key is rt.agents[key].id


def test_memory_windows_and_replies_hold_shared_counts() -> None:
    rt, _ = _run()
    held = [t for a in rt.agents for t in a.memory if t > 256]
    assert held  # batches of 11 messages and more: hundreds of tokens, beyond CPython's own shared ints
    assert all(t is SHARED_COUNTS[t] for t in held)
    reply = SimulatedLLM(seed=3).complete(7, 0, LLMRequest(new_tokens=900), 1000, 900)
    assert reply.tokens_in == 300 + 1000 + 900 and reply.tokens_in is SHARED_COUNTS[reply.tokens_in]
    big = SimulatedLLM(seed=3).complete(7, 0, LLMRequest(new_tokens=20_000), 0, 20_000)
    assert big.tokens_in == 20_300  # beyond the table: the plain int


def test_an_agent_keeps_its_out_queue_list() -> None:
    rt, outboxes = _run()
    assert rt.ledger.messages > 0
    assert all(a.outbox is box and not box for a, box in zip(rt.agents, outboxes, strict=True))


def test_log_byte_sums_are_shared_counts() -> None:
    rt = SimRuntime(Organisation.two_tier(600, 12), ChatRound(2), trace=False)
    rt.start()
    for _ in range(300):
        rt.step()
    sums = [s for log in rt.mail.group_logs.values() for s in log.sums if s > 256]
    assert sums
    assert all(s is SHARED_COUNTS[s] for s in sums)
