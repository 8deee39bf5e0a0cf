"""Effectively-once side effects: paid LLM calls charged to a real billing service on
127.0.0.1 while workers are killed again and again; every charge exactly once.
Tool calls replayed from the record; compensations when recording fails."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from megaactors import Effects, LLMRequest, Organisation, RunSpec, Send, ToolCall
from megaactors.core.messages import HIERARCHY
from megaactors.durable import DurableOptions, FencingError, RunQueue, open_store, run_durable
from megaactors.durable.billing import BillingService, charge, ledger
from megaactors.durable.checkpointing import Progress
from megaactors.durable.outbox import settle_compensations

SPECS = [RunSpec(topology="two-tier", agents=200, group_size=10, rounds=3, seed=s) for s in (1, 2, 3)]


def expected_charges(run_id: str, spec: RunSpec) -> tuple[set[str], float]:
    result = spec.execute()
    calls = result.ledger.per_agent["llm_calls"]
    return {f"{run_id}/{a}/{i}" for a in range(len(calls)) for i in range(calls[a])}, result.ledger.cost_usd


def test_killing_workers_again_and_again_charges_every_call_exactly_once(tmp_path: Path) -> None:
    db = str(tmp_path / "paid.db")
    rng = random.Random(3)
    with BillingService() as billing:
        with open_store(db, create=True) as store:
            queue = RunQueue(store)
            ids = [queue.submit(s, {"billing_url": billing.url, "step_s": 0.5}, max_attempts=50) for s in SPECS]
        kills = mid_work = 0
        while kills < 12:
            w = subprocess.Popen(
                [sys.executable, "-m", "megaactors", "worker", "--db", db, "--lease", "0.4", "--poll", "0.05"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            # kill once this worker has charged something (a loaded machine may take seconds
            # to start it), then a little later: mid-work whatever the machine's speed
            started, deadline = len(billing.charges), time.monotonic() + 20
            while len(billing.charges) == started and time.monotonic() < deadline and w.poll() is None:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.4))
            before = len(billing.charges)
            w.send_signal(signal.SIGKILL)
            w.wait()
            kills += 1
            with open_store(db, readonly=True) as store:
                unfinished = [r for r in store.list_runs() if r.status != "done"]
            if unfinished and before > 0:
                mid_work += 1
            if not unfinished:
                break
        final = subprocess.run(
            [sys.executable, "-m", "megaactors", "worker", "--db", db, "--lease", "5", "--exit-when-idle"],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert final.returncode == 0, final.stderr
        book = ledger(billing.url)
    expected: set[str] = set()
    total = 0.0
    for run_id, spec in zip(ids, SPECS, strict=True):
        keys, cost = expected_charges(run_id, spec)
        expected |= keys
        total += cost
    assert mid_work >= 5, f"only {mid_work} of {kills} kills fell in the middle of the paid work"
    assert set(book["charges"]) == expected  # every paid call charged...
    assert all(book["requests"][k] >= 1 for k in expected)
    assert book["refunds"] == {}
    assert book["total_usd"] == pytest.approx(total, rel=1e-9)  # ...once: the amounts add up to the ledger
    repeats = sum(book["requests"].values()) - len(book["charges"])
    assert repeats <= kills, f"{repeats} repeated charge requests for {kills} kills: replays called again"
    with open_store(db, readonly=True) as store:
        runs = {r.run_id: r for r in store.list_runs()}
        for run_id, spec in zip(ids, SPECS, strict=True):
            assert runs[run_id].status == "done"
            entries = store.outbox_entries(run_id)
            assert all(e.status == "done" for e in entries)
            assert {e.key for e in entries} == expected_charges(run_id, spec)[0]
            assert {e.key: e.result["charge_id"] for e in entries} == {
                k: v["charge_id"] for k, v in book["charges"].items() if k.startswith(run_id + "/")
            }
            result = dict(runs[run_id].result)
            ref = spec.execute().summary()
            result.pop("wall_s"), ref.pop("wall_s")
            assert result == ref
        assert max(r.attempts for r in runs.values()) >= 2


def test_the_client_retries_with_the_same_key_until_the_service_answers() -> None:
    with BillingService() as billing:
        billing.fail_next = 3
        first = charge(billing.url, "k1", {"amount_usd": 0.25})
        again = charge(billing.url, "k1", {"amount_usd": 0.25})
        assert first == again and first["charge_id"] == "ch_1"
        assert billing.requests == {"k1": 5} and len(billing.charges) == 1


def _claimed(store: Any, run_id: str, owner: str) -> Any:
    return store.claim(run_id, owner, "0.1.0", 30)


def test_a_charge_made_by_a_worker_that_lost_its_lease_is_adopted(tmp_path: Path) -> None:
    """The lease moves to another worker while a charge is in flight: recording it
    fails, a compensation is written; the new holder replays the call, the service
    answers with the same charge, and the compensation is settled as adopted."""
    db = tmp_path / "c.db"
    spec = SPECS[0]
    with BillingService() as billing, open_store(db, create=True) as store:
        options = DurableOptions(billing_url=billing.url)
        lease_a = store.create_run("r", spec.as_dict(), options.as_dict(), version="0.1.0", owner="A", lease_s=30)
        taken: list[Any] = []

        def steal(key: str) -> None:
            if key == "r/7/1" and not taken:
                with open_store(db) as other:
                    other.cancel("r", "moved")  # fences A out...
                    other._execute("UPDATE megaactors_runs SET status = 'queued' WHERE run_id = 'r'")
                    taken.append(_claimed(other, "r", "B"))  # ...and B holds it now

        billing.on_charge = steal
        with pytest.raises(FencingError):
            run_durable(store, lease_a, spec, options)
        (c,) = store.compensations("r")
        assert c.key == "r/7/1" and c.result["charge_id"] == billing.charges["r/7/1"]["charge_id"]
        assert settle_compensations(store) == []  # the run is still being worked on: wait
        result = run_durable(store, taken[0], spec, options)
        store.finish(taken[0], result.summary())
        (settled,) = settle_compensations(store)
        assert settled.status == "adopted"
        assert billing.requests["r/7/1"] == 2 and billing.refunds == {}
        keys, cost = expected_charges("r", spec)
        assert set(billing.charges) == keys
        assert sum(c["amount_usd"] for c in billing.charges.values()) == pytest.approx(cost, rel=1e-9)


def test_a_charge_whose_run_was_cancelled_is_refunded(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    spec = SPECS[1]
    with BillingService() as billing, open_store(db, create=True) as store:
        options = DurableOptions(billing_url=billing.url)
        lease = store.create_run("r", spec.as_dict(), options.as_dict(), version="0.1.0", owner="A", lease_s=30)

        def cancel(key: str) -> None:
            if key == "r/3/0":
                with open_store(db) as other:
                    other.cancel("r", "customer cancelled")

        billing.on_charge = cancel
        with pytest.raises(FencingError, match="cancelled"):
            run_durable(store, lease, spec, options)
        (settled,) = settle_compensations(store)
        assert settled.status == "compensated" and settled.outcome["charge_id"] == billing.charges["r/3/0"]["charge_id"]
        assert set(billing.refunds) == {"r/3/0"}
        assert settle_compensations(store) == []  # settled once
        recorded = store.outbox_results("r")
        assert "r/3/0" not in recorded
        assert ledger(billing.url)["total_usd"] == pytest.approx(sum(c["amount_usd"] for c in recorded.values()))


class Deploys:
    """Every agent runs a deploy tool (a side effect) after each read, then reports up."""

    name = "deploys"

    def init(self, agent: int, org: Organisation) -> list[int]:
        return [0, 0]

    def on_start(self, ctx: Any, state: list[int]) -> Effects | None:
        return Effects(tool=ToolCall("deploy", 0.7, lock="prod", args=[ctx.agent, 0]))

    def on_batch(self, ctx: Any, state: list[int], batch: Any) -> Effects:
        state[0] += len(batch)
        return Effects(tool=ToolCall("deploy", 0.7, lock="prod", args=[ctx.agent, state[0]]))

    def on_tool(self, ctx: Any, state: list[int], result: Any) -> Effects:
        state[1] += result.result
        return Effects(llm=LLMRequest(new_tokens=10))

    def on_reply(self, ctx: Any, state: list[int], reply: Any) -> Effects:
        parent = ctx.org.parent[ctx.agent]
        if parent < 0 or state[0] > 2:
            return Effects()
        return Effects(sends=[Send([parent], HIERARCHY, "deployed", state[1])])


def test_tool_calls_are_replayed_from_the_record_after_a_crash(tmp_path: Path) -> None:
    spec = RunSpec(topology="hierarchy", agents=12, fanout=3, seed=4)
    calls: list[Any] = []

    def deploy(args: list[int]) -> int:
        calls.append(tuple(args))
        return args[0] * 100 + args[1] + len(calls) * 0  # depends on the call only

    from megaactors.runtime.sim import SimRuntime

    ref = SimRuntime(spec.organisation(), Deploys(), spec.llm(), seed=4, tools={"deploy": deploy}).run()
    reference, reference_calls = ref.summary(), list(calls)
    calls.clear()
    with open_store(tmp_path / "t.db", create=True) as store:
        lease = store.create_run("t", spec.as_dict(), {}, version="0.1.0", owner="A", lease_s=30)
        options = DurableOptions(checkpoint_every=4, step_s=0.5)

        def crash(step: int) -> None:
            if step == 10:
                raise KeyboardInterrupt("crash between checkpoints")

        with pytest.raises(KeyboardInterrupt):
            run_durable(store, lease, spec, options, behaviour=Deploys(), tools={"deploy": deploy}, on_step=crash)
        before_crash = len(calls)
        assert store.latest("t").step == 8 and before_crash > len(store.outbox_results("t")) - 1 > 0
        store.cancel("t")
        store._execute("UPDATE megaactors_runs SET status = 'queued' WHERE run_id = 't'")
        lease_b = _claimed(store, "t", "B")
        progress = Progress()
        result = run_durable(store, lease_b, spec, options, behaviour=Deploys(), tools={"deploy": deploy},
                             progress=progress)  # fmt: skip
    assert progress.resumed_from == 8 and progress.outbox_replayed > 0
    assert sorted(calls) == sorted(reference_calls)  # every deploy ran once, none twice
    summary = result.summary()
    for s in (summary, reference):
        s.pop("wall_s")
    assert {k: v for k, v in summary.items() if k in reference} == {k: reference[k] for k in summary if k in reference}


def test_billing_service_creates_nothing_from_a_truncated_or_amountless_request() -> None:
    import socket
    from urllib.parse import urlparse

    from megaactors.durable.billing import BillingError

    with BillingService() as billing:
        url = urlparse(billing.url)
        with socket.create_connection((url.hostname, url.port)) as s:  # a client killed mid-request
            s.sendall(
                b"POST /charges HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Idempotency-Key: cut\r\nContent-Length: 100\r\n\r\n"
                b'{"amount'
            )
        with pytest.raises(BillingError, match=r"HTTP 400: .*non-negative amount_usd"):
            charge(billing.url, "no-amount", {"agent": 1})
        book = ledger(billing.url)
        assert book["charges"] == {}
        assert charge(billing.url, "cut", {"amount_usd": 0.5})["amount_usd"] == 0.5
