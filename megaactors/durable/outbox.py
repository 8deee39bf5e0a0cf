"""Effectively-once side effects: the outbox.

Every side effect of a run — the charge of a paid LLM call, a tool call — has an
idempotency key derived from the run and the deterministic position of the call
(run id, agent, call index). :meth:`Outbox.perform` first writes the intent under
that key (fenced by the run's lease), then performs the effect, then records its
result. When a resumed run replays the call, the recorded result comes back and
nothing is performed again. An effect whose intent was written but whose result
was not (the worker died in between) is performed again *with the same key*: the
receiver deduplicates by key, so delivery is at least once and the effect happens
once.

When an effect succeeded but recording its result failed (the lease was lost
meanwhile, or the database refused), a *compensation* is written: a fact about the
outside world, not fenced. :func:`settle_compensations` settles it once the run has
ended: if the run recorded the same effect after all (its next holder replayed the
call and the receiver answered with the same charge), the compensation is
``adopted``; otherwise the effect is undone (a refund) and it is ``compensated``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from megaactors.durable import billing
from megaactors.durable.store import CheckpointStore, Compensation, Lease, OutboxStore, StoreError
from megaactors.redact import redact

__all__ = ["Outbox", "settle_compensations"]


class Outbox:
    """Performs a run's side effects once, by idempotency key."""

    def __init__(self, store: OutboxStore, lease: Lease, *, billing_url: str | None = None) -> None:
        self.store = store
        self.lease = lease
        self.billing_url = billing_url
        self.recorded: dict[str, Any] = store.outbox_results(lease.run_id)
        self.performed = 0
        """Effects performed by this process."""
        self.replayed = 0
        """Calls answered from the record instead of being performed again."""

    def perform(self, key: str, kind: str, request: Any, action: Callable[[], Any]) -> Any:
        """The result of the effect under ``key``: recorded, or performed now."""
        recorded = self.recorded
        if key in recorded:
            self.replayed += 1
            return recorded[key]
        entry = self.store.outbox_begin(self.lease, key, kind, request)
        if entry.status == "done":
            self.replayed += 1
            recorded[key] = entry.result
            return entry.result
        result = action()
        self.performed += 1
        try:
            self.store.outbox_finish(self.lease, key, result)
        except StoreError as exc:
            self._compensation(key, result, str(exc))
            raise
        recorded[key] = result
        return result

    def charge(self, key: str, agent: int, call_index: int, amount_usd: float) -> Any:
        """Charge one paid LLM call to the billing service."""
        url = self.billing_url
        if url is None:
            raise StoreError("no billing service configured for paid calls")
        request = {"agent": agent, "call_index": call_index, "amount_usd": amount_usd, "run_id": self.lease.run_id}
        return self.perform(key, "charge", request, lambda: billing.charge(url, key, request))

    def _compensation(self, key: str, result: Any, reason: str) -> None:
        try:
            self.store.add_compensation(self.lease.run_id, key, self.lease.fence, reason, result)
        except StoreError as exc:  # the database is gone too: say so loudly, lose nothing silently
            print(
                redact(
                    f"megaactors: side effect {key!r} of run {self.lease.run_id!r} happened ({result!r}) but neither "
                    f"its result nor a compensation could be recorded: {exc}"
                ),
                file=sys.stderr,
            )


def _same_effect(recorded: Any, happened: Any) -> bool:
    if isinstance(recorded, dict) and isinstance(happened, dict) and "charge_id" in happened:
        return recorded.get("charge_id") == happened["charge_id"]
    return recorded == happened


def settle_compensations(
    store: CheckpointStore, billing_url: str | None = None, run_id: str | None = None
) -> list[Compensation]:
    """Settle the pending compensations of runs that have ended; return them as settled."""
    settled = []
    for c in store.compensations(run_id, status="pending"):
        run = store.get_run(c.run_id)
        if run.status not in ("done", "dead", "cancelled"):
            continue  # its holder may still record the effect
        recorded = store.outbox_results(c.run_id)
        if c.key in recorded and _same_effect(recorded[c.key], c.result):
            store.settle_compensation(c, "adopted", {"recorded": recorded[c.key]})
            c.status = "adopted"
        else:
            url = billing_url or run.options.get("billing_url")
            if url is None or not isinstance(c.result, dict) or "charge_id" not in c.result:
                continue  # nothing this package knows how to undo
            outcome = billing.refund(url, c.key, c.result["charge_id"])
            store.settle_compensation(c, "compensated", outcome)
            c.status, c.outcome = "compensated", outcome
        settled.append(c)
    return settled
