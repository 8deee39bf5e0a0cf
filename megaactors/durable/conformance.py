"""The checkpoint store's contract as a suite any backend can run (needs pytest and
hypothesis: the ``dev`` extra).

Checkpoints (write, latest, get, list, chain, fork, prune), the run table and its
leases (claims, expiry on the database clock, fencing, retries, dead-letter,
versions), the outbox and compensations, and a hypothesis state machine that drives
a store and a plain model side by side. A backend runs the whole suite with one
fixture, ``new_store``, that makes an empty store (a second connection to it comes
from its ``reopen()``)::

    from megaactors.durable.conformance import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def new_store(self, tmp_path):
            return lambda: MyStore(tmp_path / "runs", create=True)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from megaactors.durable.store import CheckpointRecord, CheckpointStore, Lease, decode_state, encode_state
from megaactors.errors import (
    FencingError,
    LeaseHeldError,
    RunExistsError,
    StoreError,
    UnknownRunError,
    VersionMismatchError,
)

__all__ = ["StoreConformance", "StoreMachine", "blob", "claimed", "held", "state_of"]

V = "9.9.9"
"""The runtime version the suite's runs belong to."""


def held(store: CheckpointStore, run_id: str = "r", lease_s: float = 30.0) -> Lease:
    """A new run, held by worker ``w1``."""
    lease = store.create_run(run_id, {"agents": 3}, {"every": 1}, version=V, owner="w1", lease_s=lease_s)
    assert lease is not None
    return lease


def state_of(record: CheckpointRecord | None) -> Any:
    """The decoded state of a checkpoint read with its state."""
    assert record is not None and record.state is not None
    return decode_state(record.state)


def claimed(lease: Lease | None) -> Lease:
    """A lease a claim must have returned."""
    assert lease is not None
    return lease


def blob(step: int) -> bytes:
    """A checkpoint state that says which step wrote it."""
    return encode_state({"step": step, "payload": list(range(step))})


class StoreMachine(RuleBasedStateMachine):
    """Runs, leases and checkpoints against a dictionary model of what must be there."""

    factory: Callable[[], CheckpointStore]

    @initialize()
    def setup(self) -> None:
        self.store = self.factory()
        self.tag = f"m{id(self)}{time.monotonic_ns()}"
        self.model: dict[str, list[tuple[int, int, str]]] = {}  # run -> [(step, base, kind)]
        self.leases: dict[str, Lease] = {}
        self.stale: dict[str, Lease] = {}
        self.count = 0

    def teardown(self) -> None:
        self.store.close()

    @rule()
    def create(self) -> None:
        rid = f"{self.tag}-{self.count}"
        self.count += 1
        self.leases[rid] = claimed(self.store.create_run(rid, {"n": 1}, {}, version=V, owner="w", lease_s=60))
        self.model[rid] = []

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), full=st.booleans(), gap=st.integers(1, 3))
    def write(self, data: st.DataObject, full: bool, gap: int) -> None:
        rid = data.draw(st.sampled_from(sorted(self.leases)))
        rows = self.model[rid]
        step = rows[-1][0] + gap if rows else 0
        kind = "full" if full or not rows else "delta"
        base = step if kind == "full" else rows[-1][1]
        self.store.write(self.leases[rid], step, rows[-1][0] if rows else None, base, kind, {"s": step}, blob(step % 7))
        rows.append((step, base, kind))

    @precondition(lambda self: any(self.model[r] for r in self.leases))
    @rule(data=st.data())
    def steal(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(r for r in self.leases if self.model[r])))
        self.store.cancel(rid, "stolen")  # fences the holder; the run then restarts as a fork
        self.stale[rid] = self.leases.pop(rid)

    @precondition(lambda self: self.stale)
    @rule(data=st.data())
    def stale_write_fails(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.stale)))
        with pytest.raises(FencingError):
            self.store.write(self.stale[rid], 10_000, None, 10_000, "full", {}, blob(0))

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(r for r, rows in self.model.items() if rows)))
        step, base, _ = data.draw(st.sampled_from(self.model[rid]))
        new = f"{self.tag}-{self.count}"
        self.count += 1
        self.store.fork(rid, step, new)
        self.model[new] = [r for r in self.model[rid] if base <= r[0] <= step and r[1] == base]
        self.leases[new] = self.store.claim(new, "w", V, 60)

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data(), keep=st.integers(1, 4))
    def prune(self, data: st.DataObject, keep: int) -> None:
        rid = data.draw(st.sampled_from(sorted(r for r, rows in self.model.items() if rows)))
        rows = self.model[rid]
        first = min(r[1] for r in rows[-keep:])
        assert self.store.prune(rid, keep) == sum(1 for r in rows if r[0] < first)
        self.model[rid] = [r for r in rows if r[0] >= first]

    @invariant()
    def matches_the_model(self) -> None:
        if not hasattr(self, "store"):
            return
        for rid, rows in self.model.items():
            assert [(c.step, c.base_step, c.kind) for c in self.store.list(rid)] == rows
            if rows:
                latest = self.store.latest(rid)
                assert latest is not None and latest.step == rows[-1][0]
                assert state_of(latest) == decode_state(blob(rows[-1][0] % 7))
                assert [c.step for c in self.store.chain(rid, rows[-1][0])] == [
                    r[0] for r in rows if r[1] == rows[-1][1]
                ]


class StoreConformance:
    """Every test of the store contract; subclass it and define ``new_store``."""

    @pytest.fixture
    def new_store(self) -> Callable[[], CheckpointStore]:
        raise NotImplementedError("a backend's test class defines the new_store fixture")

    @pytest.fixture
    def store(self, new_store: Callable[[], CheckpointStore]) -> Iterator[CheckpointStore]:
        s = new_store()
        yield s
        s.close()

    # ---------------------------------------------------------------------- checkpoints

    def test_write_latest_get_list_and_chain(self, store: CheckpointStore) -> None:
        lease = held(store)
        assert store.latest("r") is None
        store.write(lease, 0, None, 0, "full", {"step": 0}, blob(0))
        store.write(lease, 1, 0, 0, "delta", {"step": 1}, blob(1))
        store.write(lease, 3, 1, 0, "delta", {"step": 3, "virtual_time_s": 2.5}, blob(3))
        store.write(lease, 4, 3, 4, "full", {"step": 4}, blob(4))
        store.write(lease, 5, 4, 4, "delta", {"step": 5}, blob(5))
        latest = store.latest("r")
        assert (
            latest is not None
            and latest.step == 5
            and state_of(latest) == {"step": 5, "payload": [0] * 0 + list(range(5))}
        )
        assert store.get("r", 3).meta == {"step": 3, "virtual_time_s": 2.5}
        listed = store.list("r")
        assert [c.step for c in listed] == [0, 1, 3, 4, 5]
        assert [c.parent_step for c in listed] == [None, 0, 1, 3, 4]
        assert all(c.state is None for c in listed) and [c.nbytes for c in listed] == [
            len(blob(s)) for s in (0, 1, 3, 4, 5)
        ]
        assert [c.step for c in store.chain("r", 3)] == [0, 1, 3]
        assert [c.step for c in store.chain("r", 5)] == [4, 5]
        assert store.get_run("r").step == 5
        with pytest.raises(StoreError, match="no checkpoint of step 2"):
            store.get("r", 2)

    def test_writes_must_follow_the_latest_step(self, store: CheckpointStore) -> None:
        lease = held(store)
        store.write(lease, 0, None, 0, "full", {}, blob(0))
        with pytest.raises(StoreError, match="not after the latest"):
            store.write(lease, 0, None, 0, "full", {}, blob(0))
        with pytest.raises(StoreError, match="names parent"):
            store.write(lease, 2, None, 0, "delta", {}, blob(2))
        with pytest.raises(StoreError, match="own base"):
            store.write(lease, 2, 0, 0, "full", {}, blob(2))
        assert [c.step for c in store.list("r")] == [0]

    def test_fork_copies_the_chain_and_runs_on_its_own(self, store: CheckpointStore) -> None:
        lease = held(store)
        for step in range(6):
            store.write(
                lease,
                step,
                step - 1 if step else None,
                0 if step < 3 else 3,
                "full" if step in (0, 3) else "delta",
                {"s": step},
                blob(step),
            )
        store.fork("r", 4, "what-if", params={"agents": 3, "seed": 7})
        run = store.get_run("what-if")
        assert (run.status, run.parent_run, run.parent_step, run.params["seed"], run.version) == (
            "queued",
            "r",
            4,
            7,
            V,
        )
        assert [c.step for c in store.list("what-if")] == [3, 4]
        assert state_of(store.latest("what-if")) == decode_state(blob(4))
        lease2 = store.claim("what-if", "w2", V, 30)
        store.write(lease2, 5, 4, 3, "delta", {"forked": True}, blob(50))
        assert store.get("r", 5).meta == {"s": 5} and store.get("what-if", 5).meta == {"forked": True}
        with pytest.raises(RunExistsError):
            store.fork("r", 4, "what-if")

    def test_prune_keeps_what_the_newest_checkpoints_need(self, store: CheckpointStore) -> None:
        lease = held(store)
        kinds = ["full", "delta", "delta", "full", "delta", "delta", "delta"]
        base = 0
        for step, kind in enumerate(kinds):
            base = step if kind == "full" else base
            store.write(lease, step, step - 1 if step else None, base, kind, {}, blob(step))
        assert store.prune("r", 2) == 3
        assert [c.step for c in store.list("r")] == [3, 4, 5, 6]
        assert [c.step for c in store.chain("r", 6)] == [3, 4, 5, 6]
        assert store.prune("r", 2) == 0
        with pytest.raises(StoreError, match="at least one"):
            store.prune("r", 0)

    def test_unknown_runs_and_duplicate_ids(self, store: CheckpointStore) -> None:
        held(store)
        with pytest.raises(RunExistsError, match="already exists"):
            held(store)
        for op in (
            lambda: store.get_run("x"),
            lambda: store.latest("x"),
            lambda: store.list("x"),
            lambda: store.claim("x", "w", V, 5),
        ):
            with pytest.raises(UnknownRunError, match="'x'"):
                op()

    # ---------------------------------------------------------------------- leases and fencing

    def test_claims_take_the_oldest_run_of_their_version(self, store: CheckpointStore) -> None:
        for rid in ("a", "b"):
            store.create_run(rid, {}, {}, version=V)
            time.sleep(0.01)
        store.create_run("old", {}, {}, version="0.0.1")
        first = claimed(store.claim_next("w1", V, 30))
        second = claimed(store.claim_next("w2", V, 30))
        assert (first.run_id, first.fence, second.run_id) == ("a", 1, "b")
        assert store.claim_next("w3", V, 30) is None
        assert store.get_run("old").status == "queued"
        with pytest.raises(VersionMismatchError, match=r"0\.0\.1"):
            store.claim("old", "w", V, 30)
        with pytest.raises(LeaseHeldError, match="held by w1"):
            store.claim("a", "w3", V, 30)

    def test_an_expired_lease_is_claimed_again_and_the_old_holder_is_fenced(self, store: CheckpointStore) -> None:
        old = held(store, lease_s=0.3)
        store.write(old, 0, None, 0, "full", {}, blob(0))
        time.sleep(0.4)
        with pytest.raises(FencingError, match="expired"):
            store.write(old, 1, 0, 0, "delta", {}, blob(1))
        with pytest.raises(FencingError):
            store.renew(old, 30)
        new = claimed(store.claim_next("w2", V, 30))
        assert (new.run_id, new.fence, store.get_run("r").attempts, store.get_run("r").owner) == ("r", 2, 2, "w2")
        for write in (
            lambda: store.write(old, 1, 0, 0, "delta", {}, blob(1)),
            lambda: store.finish(old, {}),
            lambda: store.fail(old, "x"),
            lambda: store.outbox_begin(old, "k", "charge", {}),
            lambda: store.renew(old, 30),
        ):
            with pytest.raises(FencingError, match="claimed again"):
                write()
        store.write(new, 1, 0, 0, "delta", {}, blob(1))
        assert [c.step for c in store.list("r")] == [0, 1]

    def test_renewal_keeps_a_lease_alive(self, store: CheckpointStore) -> None:
        lease = held(store, lease_s=0.5)
        for _ in range(4):
            time.sleep(0.2)
            renewed = store.renew(lease, 0.5)
            assert renewed.expires_at > lease.expires_at and renewed.fence == lease.fence
            lease = renewed
        store.write(lease, 0, None, 0, "full", {}, blob(0))

    def test_cancel_fences_the_holder(self, store: CheckpointStore) -> None:
        lease = held(store)
        store.cancel("r", "operator said stop")
        with pytest.raises(FencingError, match="cancelled"):
            store.write(lease, 0, None, 0, "full", {}, blob(0))
        run = store.get_run("r")
        assert (run.status, run.error) == ("cancelled", "operator said stop")
        with pytest.raises(StoreError, match="cancelled"):
            store.claim("r", "w", V, 5)

    def test_failures_retry_then_dead_letter(self, store: CheckpointStore) -> None:
        store.create_run("r", {}, {}, version=V, max_attempts=3)
        statuses = []
        for _ in range(3):
            lease = store.claim_next("w", V, 30)
            assert lease is not None
            statuses.append(store.fail(lease, f"boom {lease.fence}"))
        assert statuses == ["queued", "queued", "dead"]
        run = store.get_run("r")
        assert (run.status, run.error, run.attempts) == ("dead", "boom 3", 3)
        assert store.claim_next("w", V, 30) is None

    def test_a_run_whose_workers_keep_vanishing_is_dead_lettered(self, store: CheckpointStore) -> None:
        store.create_run("r", {}, {}, version=V, max_attempts=2)
        assert store.claim_next("w1", V, 0.1) is not None
        time.sleep(0.15)
        assert claimed(store.claim_next("w2", V, 0.1)).fence == 2
        time.sleep(0.15)
        assert store.claim_next("w3", V, 0.1) is None
        run = store.get_run("r")
        assert run.status == "dead" and "gave up after 2 attempt(s)" in str(run.error)

    def test_a_dead_holder_s_lease_ends_at_once_and_only_for_that_holder(self, store: CheckpointStore) -> None:
        lease = held(store)
        assert not store.end_lease("r", "w2", lease.fence)  # another holder's name
        assert not store.end_lease("r", "w1", lease.fence + 1)  # another claim
        with pytest.raises(LeaseHeldError):
            store.claim("r", "w2", V, 30)
        assert store.end_lease("r", "w1", lease.fence)
        assert not store.end_lease("r", "w1", lease.fence)  # already ended
        with pytest.raises(FencingError, match="expired"):
            store.write(lease, 0, None, 0, "full", {}, blob(0))
        new = store.claim("r", "w2", V, 30)
        assert (new.fence, store.get_run("r").attempts) == (2, 2)

    def test_a_draining_version_finishes_its_runs_but_claims_no_new_ones(self, store: CheckpointStore) -> None:
        store.create_run("started", {}, {}, version=V, max_attempts=3)
        store.create_run("waiting", {}, {}, version=V)
        store.create_run("other", {}, {}, version="8.0.0")
        assert claimed(store.claim_next("w1", V, 0.2)).run_id == "started"
        store.set_deploy("8.0.0", "live", only_if_unknown=True)
        store.set_deploy(V, "draining")
        store.set_deploy(V, "live", only_if_unknown=True)  # a worker announcing itself undoes no drain
        assert store.deploys() == {"8.0.0": "live", V: "draining"}
        with pytest.raises(StoreError, match="deploy state"):
            store.set_deploy(V, "paused")
        time.sleep(0.25)  # the holder of "started" vanished: the run is finished by another worker
        assert claimed(store.claim_next("w2", V, 30)).run_id == "started"
        assert store.claim_next("w2", V, 30) is None  # "waiting" is not started while draining
        assert claimed(store.claim_next("w3", "8.0.0", 30)).run_id == "other"
        store.set_deploy(V, "live")
        assert claimed(store.claim_next("w2", V, 30)).run_id == "waiting"

    def test_an_interrupted_run_waits_for_a_claim_by_id(self, store: CheckpointStore) -> None:
        lease = held(store)
        store.interrupt(lease, "interrupted at 5 s", {"every": 2})
        run = store.get_run("r")
        assert (run.status, run.error, run.options, run.held) == (
            "interrupted",
            "interrupted at 5 s",
            {"every": 2},
            False,
        )
        with pytest.raises(FencingError, match="interrupted"):
            store.write(lease, 0, None, 0, "full", {}, blob(0))
        assert store.claim_next("w2", V, 30) is None  # workers never continue it
        again = store.claim("r", "w2", V, 30)
        assert again.fence == lease.fence + 1 and store.get_run("r").status == "running"

    def test_a_dead_run_is_requeued_with_fresh_attempts(self, store: CheckpointStore) -> None:
        store.create_run("r", {}, {}, version=V, max_attempts=1)
        lease = claimed(store.claim_next("w", V, 30))
        assert store.fail(lease, "boom") == "dead"
        with pytest.raises(UnknownRunError):
            store.requeue("nope")
        store.requeue("r", max_attempts=2)
        run = store.get_run("r")
        assert (run.status, run.attempts, run.max_attempts, run.owner) == ("queued", 0, 2, None)
        with pytest.raises(StoreError, match="only dead runs"):
            store.requeue("r")
        again = claimed(store.claim_next("w", V, 30))
        assert again.fence == lease.fence + 1
        with pytest.raises(FencingError):
            store.finish(lease, {})
        assert store.fail(again, "boom") == "queued"

    def test_concurrent_claimers_never_share_a_run(self, store: CheckpointStore) -> None:
        for i in range(12):
            store.create_run(f"r{i:02d}", {}, {}, version=V)
        got: list[str] = []
        lock = threading.Lock()

        def claimer(name: str) -> None:
            with store.reopen() as s:
                while (lease := s.claim_next(name, V, 30)) is not None:
                    with lock:
                        got.append(lease.run_id)

        threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(got) == [f"r{i:02d}" for i in range(12)]
        assert {r.fence for r in store.list_runs()} == {1}

    # ---------------------------------------------------------------------- outbox

    def test_outbox_records_once_and_replays(self, store: CheckpointStore) -> None:
        lease = held(store)
        entry = store.outbox_begin(lease, "r/1/0", "charge", {"amount_usd": 0.5})
        assert (entry.status, entry.attempts) == ("pending", 1)
        again = store.outbox_begin(lease, "r/1/0", "charge", {"amount_usd": 0.5})
        assert (again.status, again.attempts) == ("pending", 2)
        store.outbox_finish(lease, "r/1/0", {"charge_id": "ch_1"})
        assert store.outbox_begin(lease, "r/1/0", "charge", {}).result == {"charge_id": "ch_1"}
        assert store.outbox_results("r") == {"r/1/0": {"charge_id": "ch_1"}}
        with pytest.raises(StoreError, match="no pending"):
            store.outbox_finish(lease, "r/1/0", {"charge_id": "ch_2"})
        store.add_compensation("r", "r/1/1", 1, "lease lost", {"charge_id": "ch_9"})
        (c,) = store.compensations("r")
        assert (c.key, c.reason, c.result, c.status) == ("r/1/1", "lease lost", {"charge_id": "ch_9"}, "pending")
        store.settle_compensation(c, "compensated", {"refund_id": "re_1"})
        assert store.compensations("r") == []
        assert store.compensations("r", status="compensated")[0].outcome == {"refund_id": "re_1"}

    # ---------------------------------------------------------------------- a model-based state machine

    def test_fork_with_a_snapshot_starts_from_it_alone(self, store: CheckpointStore) -> None:
        lease = held(store)
        for step in range(4):
            store.write(lease, step, step - 1 if step else None, 0, "start" if step == 0 else "delta", {}, blob(step))
        store.fork("r", 2, "w", params={"agents": 3, "seed": 1}, snapshot=({"made": True}, blob(20)))
        (only,) = store.list("w")
        assert (only.step, only.kind, only.base_step, only.parent_step, only.meta) == (
            2,
            "full",
            2,
            None,
            {"made": True},
        )
        assert state_of(store.latest("w")) == decode_state(blob(20))
        assert [c.step for c in store.chain("r", 3)] == [0, 1, 2, 3]

    def test_store_state_machine(self, new_store: Callable[[], CheckpointStore]) -> None:
        machine: Any = type("Machine", (StoreMachine,), {"factory": staticmethod(new_store)})
        machine.TestCase.settings = settings(
            max_examples=20, stateful_step_count=15, deadline=None, suppress_health_check=list(HealthCheck)
        )
        machine.TestCase().runTest()
