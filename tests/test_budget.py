"""Bounded runs: the estimate before a run starts, the machine's budget, and workers
that dead-letter queued runs over it without starting them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from megaactors import Organisation, RunSpec, expected_messages
from megaactors.durable import RunQueue, open_store
from megaactors.experiments.budget import (
    BASE_BYTES,
    DEFAULT_MAX_MESSAGES,
    Budget,
    estimate,
    format_bytes,
    machine_memory,
)
from megaactors.validation import ParameterError


@pytest.mark.parametrize("topology", ["flat", "star", "two-tier", "hierarchy"])
def test_the_message_estimate_is_the_closed_form(topology: str) -> None:
    for agents, group, rounds in [(1, 1, 1), (37, 5, 2), (200, 12, 3), (1000, 33, 0)]:
        spec = RunSpec(topology=topology, agents=agents, group_size=group, fanout=3, rounds=rounds)
        org = Organisation.build(topology, agents, group, 3)
        cost = estimate(spec)
        assert cost.messages == expected_messages(org, rounds)
        assert cost.round_messages == expected_messages(org, 1)


def test_memory_grows_with_agents_and_one_round_but_not_with_rounds() -> None:
    small, large = estimate(RunSpec(agents=1000)), estimate(RunSpec(agents=100_000))
    assert BASE_BYTES < small.memory_bytes < large.memory_bytes
    assert estimate(RunSpec(agents=1000, rounds=50)).memory_bytes == small.memory_bytes
    assert estimate(RunSpec(agents=1000, trace=True)).memory_bytes > small.memory_bytes
    assert estimate(RunSpec(agents=1000, runtime="pykka")).memory_bytes > small.memory_bytes


def test_the_machine_budget_and_its_overrides() -> None:
    memory = machine_memory()
    assert memory > 100 << 20
    budget = Budget.machine()
    assert budget.memory_bytes == int(memory * 0.9) and budget.max_messages == DEFAULT_MAX_MESSAGES
    assert estimate(RunSpec(topology="star", agents=budget.max_agents)).memory_bytes <= budget.memory_bytes
    assert Budget.machine(max_agents=5, max_messages=7) == Budget(5, 7, budget.memory_bytes)
    with pytest.raises(ParameterError, match="max_agents must be an integer >= 1"):
        Budget.machine(max_agents=0)
    assert budget.refusal(RunSpec(agents=1000)) is None
    why = Budget(10**6, 100, budget.memory_bytes).refusal(RunSpec(agents=1000, group_size=10))
    assert why == (
        "an estimated 18,900 messages exceed the budget of 100 (--max-messages); "
        f"estimate for two-tier N=1,000, G=10, 1 round(s) on sim: 18,900 messages, "
        f"{format_bytes(estimate(RunSpec(agents=1000, group_size=10)).memory_bytes)} of memory"
    )
    assert "agents exceed the budget of 999" in Budget(999, 10**9, 10**12).refusal(RunSpec(agents=1000))
    assert "of memory exceeds the 1.0 MB" in Budget(10**6, 10**9, 10**6).refusal(RunSpec(agents=10))


def test_a_worker_dead_letters_a_queued_run_over_its_budget_without_starting_it(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    with open_store(db, create=True) as store:
        queue = RunQueue(store)
        huge = queue.submit(RunSpec(topology="flat", agents=4000), run_id="huge", max_attempts=3)
        fine = queue.submit(RunSpec(topology="star", agents=20), run_id="fine")
        many = queue.submit(RunSpec(topology="star", agents=8000), run_id="many")
    out = subprocess.run(
        [sys.executable, "-m", "megaactors", "worker", "--db", db, "--exit-when-idle", "--max-agents", "5000",
         "--max-messages", "1e6"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "run 'huge' refused: an estimated 15,996,000 messages exceed the budget of 1,000,000" in out.stderr
    runs = {r["run"]: r for r in json.loads(
        subprocess.run([sys.executable, "-m", "megaactors", "runs", "--db", db, "--json"], capture_output=True,
                       text=True, timeout=60).stdout)}  # fmt: skip
    assert runs[fine]["status"] == "done"
    for refused, reason in ((huge, "messages exceed the budget"), (many, "8,000 agents exceed the budget of 5,000")):
        assert runs[refused]["status"] == "dead" and runs[refused]["attempts"] == 1
        assert runs[refused]["error"].startswith("refused: ") and reason in runs[refused]["error"]
        assert runs[refused]["steps"] is None  # never started: no checkpoint
