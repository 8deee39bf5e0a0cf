"""The step-by-step runtime: one activation at a time, on demand, on a virtual clock."""

from __future__ import annotations

import pytest

from megaactors import ChatRound, Organisation, SimRuntime, expected_messages
from megaactors.core.llm import LatencyModel, SimulatedLLM
from megaactors.runtime.conformance import GitUser
from megaactors.runtime.stepper import StepRuntime, Turn


def test_steps_run_one_agent_at_a_time_until_nothing_is_left() -> None:
    org = Organisation.two_tier(12, 4)
    rt = StepRuntime(org, ChatRound(2), seed=3)
    rt.start()
    assert rt.ledger.llm_calls == 0 and not rt.finished  # nothing runs before the first step
    assert [agent for _, agent in rt.pending()] == list(range(org.n))  # every start, in id order
    first = rt.step()
    assert isinstance(first, Turn) and first.agent == 0 and first.waits_for == "llm" and first.time == 0.0
    assert rt.ledger.llm_calls == 1 and rt.agents[0].phase.name == "PROCESSING"
    steps = [first]
    while (step := rt.step()) is not None:
        steps.append(step)
        assert step.time >= steps[-2].time  # the clock never goes back
    assert rt.finished and rt.turns == len(steps)
    assert steps[-1].waits_for == "idle" and "agent" in str(steps[-1])
    result = rt.result()
    assert result.ledger.messages == expected_messages(org, 2)
    assert result.ledger.virtual_time_s == steps[-1].time > 0


def test_agents_in_line_are_shown_with_when_they_run() -> None:
    llm = SimulatedLLM(latency=LatencyModel(median_s=2.0, sigma=0.0, per_output_token_s=0.0))
    rt = StepRuntime(Organisation.flat(3), ChatRound(), llm)
    rt.start()
    for _ in range(3):  # each agent starts its composing call
        rt.step()
    assert rt.pending() == [(2.0, 0), (2.0, 1), (2.0, 2)]  # replies due at 2 s, first called first
    rt.step()
    assert rt.clock == 2.0


def test_a_run_agrees_with_the_simulation_and_is_the_same_every_time() -> None:
    def run() -> tuple:
        result = StepRuntime(Organisation.two_tier(60, 6), ChatRound(2), seed=4).run()
        return result.ledger.messages, result.ledger.bytes, result.states, list(result.trace.t_time)

    ref = SimRuntime(Organisation.two_tier(60, 6), ChatRound(2), seed=4).run()
    first = run()
    assert first == run()
    assert (first[0], first[1], first[2]) == (ref.ledger.messages, ref.ledger.bytes, ref.states)


def test_tool_waits_are_named_and_last_their_virtual_duration() -> None:
    rt = StepRuntime(Organisation.flat(2), GitUser(), tools={"git-commit": lambda who: who})
    rt.start()
    assert [rt.step().waits_for for _ in range(2)] == ["tool", "gate"]  # agent 1 waits for the lock
    result = rt.run()
    assert [tuple(s[1:4]) for s in result.states] == [(0.0, 5.0, 0.0), (5.0, 10.0, 5.0)]  # started, ended, waited


def test_an_async_llm_is_refused() -> None:
    class Remote:
        tokens = SimulatedLLM().tokens

        async def acomplete(self, *args: object) -> None:
            return None

    with pytest.raises(ValueError, match="blocking complete"):
        StepRuntime(Organisation.flat(2), ChatRound(), Remote())
