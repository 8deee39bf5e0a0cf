"""The simulation's explicit state: snapshot() between two events, restore() into a
fresh runtime, and the run goes on exactly as if never interrupted; and durable runs
on the in-memory reference store."""

from __future__ import annotations

import json
from typing import Any

import pytest

from megaactors import ChatRound, Organisation, RunSpec, SimRuntime
from megaactors.core.llm import LLMReply, SimulatedLLM
from megaactors.durable import DurableOptions, MemoryStore, run_durable
from megaactors.runtime.conformance import GitUser, Recruiter
from megaactors.runtime.sim_state import START, SimState


def outcome(rt: Any) -> tuple[str, Any]:
    summary = rt.result().summary()
    summary.pop("wall_s")
    return json.dumps(summary, sort_keys=True), ([a.data for a in rt.agents], rt.trace.as_dict())


CASES = {
    "chat": (lambda: Organisation.two_tier(40, 6), lambda: ChatRound(3), {}),
    "serial": (lambda: Organisation.two_tier(20, 5), lambda: ChatRound(2), {"serial": True}),
    "capped": (lambda: Organisation.flat(8), lambda: ChatRound(2), {"max_concurrent_llm": 2}),
    "locks": (lambda: Organisation.flat(5), GitUser, {"tools": {"git-commit": lambda who: who}}),
    "recruits": (lambda: Organisation.hierarchy(1, 3), Recruiter, {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("at", [0, 1, 5, 17])
def test_a_snapshot_restored_into_a_fresh_runtime_continues_exactly(case: str, at: int) -> None:
    make_org, make_behaviour, options = CASES[case]
    reference = SimRuntime(make_org(), make_behaviour(), seed=2, **options)
    reference.run()
    original = SimRuntime(make_org(), make_behaviour(), seed=2, **options)
    original.start()
    for _ in range(at):
        original.step()
    state = original.snapshot()
    assert isinstance(state, SimState) and state.events_run == min(at, original.events_run)
    org = make_org()
    for recruiter in state.recruiters:  # the organisation the state was taken in
        org.recruit(recruiter)
    fresh = SimRuntime(org, make_behaviour(), seed=2, **options)
    fresh.restore(state)
    fresh.run()
    assert outcome(fresh) == outcome(reference)


class _OtherModel(SimulatedLLM):
    """The seeded model under another type: its calls in flight keep the general form."""


def test_a_call_in_flight_in_the_lean_form_ends_as_in_the_general_one() -> None:
    lean = SimRuntime(Organisation.two_tier(60, 5), ChatRound(2), seed=4)
    general = SimRuntime(Organisation.two_tier(60, 5), ChatRound(2), llm=_OtherModel(seed=4))
    lean.start()
    general.start()
    flying = [a for a in lean.agents if a.pending is not None]
    assert flying and all(a.pending[2] == a.id and a.pending[3].output_tokens == 60 for a in flying)
    assert all(len(a.pending) == 3 and type(a.pending[1]) is LLMReply for a in general.agents if a.pending)
    assert all(len(event) == 3 for event in lean.snapshot().events)  # (time, sequence, agent), as documented
    lean.run()
    general.run()
    assert outcome(lean) == outcome(general)


def test_a_snapshot_without_its_events_lists_them_on_demand() -> None:
    rt = SimRuntime(Organisation.two_tier(60, 5), ChatRound(2), seed=4)
    rt.start()
    rt.advance(1.0)
    whole, lean = rt.snapshot(), rt.snapshot(events=False)
    assert len(whole.events) > 10 and lean.events == []
    assert sorted(rt.pending_events()) == sorted(whole.events)
    assert lean.agents is whole.agents and lean.now == whole.now and lean.seq == whole.seq


def test_a_snapshot_lists_who_waits_at_each_gate() -> None:
    rt = SimRuntime(Organisation.flat(4), GitUser(), serial=True, tools={"git-commit": lambda who: who})
    rt.start()
    state = rt.snapshot()
    assert state.serial_holder == 0 and state.serial_waiting == [1, 2, 3]
    assert [a.pending for a in state.agents[1:]] == [START] * 3
    assert state.lock_holders == {"git": 0} and state.lock_waiting == {}
    assert [event[2] for event in state.events] == [0]


def test_a_durable_run_resumes_from_the_memory_store() -> None:
    spec = RunSpec(topology="two-tier", agents=200, group_size=10, rounds=2, seed=5)
    reference = spec.execute().summary()
    store = MemoryStore()
    lease = store.create_run("r", spec.as_dict(), {}, version="t", owner="me", lease_s=60)

    class Lost(Exception):
        pass

    def lose(step: int) -> None:
        if step == 3:
            raise Lost

    with pytest.raises(Lost):
        run_durable(store, lease, spec, DurableOptions(step_s=0.5), on_step=lose)
    assert store.latest("r").step == 3
    resumed = run_durable(store.reopen(), lease, spec, DurableOptions(step_s=0.5)).summary()
    for summary in (reference, resumed):
        summary.pop("wall_s")
    assert resumed == reference
