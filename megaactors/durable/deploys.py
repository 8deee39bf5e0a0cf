"""Rainbow deploys: several versions of megaactors serve one store at once.

Every run records the megaactors version that made it, and a worker claims only runs
of its own version, so a run always finishes on the code it started with (the
built-in behaviours carry megaactors' version; a behaviour loaded by name records its
own version with the run's parameters). A worker announces its version in the store
when it starts (:meth:`~megaactors.durable.store.RunQueueStore.set_deploy`), which is
what makes a version *known* to :func:`parse_route`.

New runs are routed between versions by weight (:func:`route`: seeded, so the same
submission routes the same way); ``drain`` marks a version ``draining`` — its
workers finish the runs already started and claim no queued ones — and
:func:`version_report` compares versions (queued, running, done, failed, mean
results) before a canary is promoted.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from megaactors.durable.store import RunQueueStore
from megaactors.errors import ParameterError

__all__ = ["REPORT_COLUMNS", "RESULT_MEANS", "canary_route", "parse_route", "route", "version_report"]

RESULT_MEANS = ("messages", "cost_usd", "virtual_time_s", "wall_s")
"""Results averaged over each version's finished runs."""
REPORT_COLUMNS = ("version", "state", "queued", "running", "done", "failed", *(f"mean_{m}" for m in RESULT_MEANS))


def parse_route(text: str, known: Iterable[str], *, option: str = "--route") -> dict[str, int]:
    """``V1=W1,V2=W2`` as weights in percent: whole numbers adding up to 100, each
    version known to the store (announced by a worker) or this one."""
    known = set(known)
    weights: dict[str, int] = {}
    for part in text.split(","):
        version, sep, weight = part.strip().partition("=")
        if not sep or not version.strip():
            raise ParameterError(f"{option}: expected VERSION=PERCENT[,VERSION=PERCENT...], got {text!r}")
        version = version.strip()
        try:
            w = int(weight)
        except ValueError:
            raise ParameterError(f"{option}: the weight of {version} must be a whole percent, got {weight!r}") from None
        if not 0 <= w <= 100:
            raise ParameterError(f"{option}: the weight of {version} must be 0 to 100, got {w}")
        if version in weights:
            raise ParameterError(f"{option}: version {version} given twice")
        if version not in known:
            raise ParameterError(
                f"{option}: version {version} is unknown to this store (known: {', '.join(sorted(known))}; "
                "a worker of a version makes it known when it starts)"
            )
        weights[version] = w
    total = sum(weights.values())
    if total != 100:
        raise ParameterError(f"{option}: the weights add up to {total}, not 100")
    return weights


def canary_route(text: str, current: str, known: Iterable[str]) -> dict[str, int]:
    """``V=PCT``: PCT percent to version V, the rest to ``current``."""
    version, sep, percent = text.partition("=")
    if not sep or not version.strip():
        raise ParameterError(f"--canary: expected VERSION=PERCENT, got {text!r}")
    if version.strip() == current:
        raise ParameterError(f"--canary: {current} is this version already; name the canary's version")
    try:
        rest = 100 - int(percent)
    except ValueError:
        raise ParameterError(f"--canary: the weight of {version} must be a whole percent, got {percent!r}") from None
    return parse_route(f"{version}={percent},{current}={rest}", known, option="--canary")


def route(count: int, weights: Mapping[str, int], seed: int) -> list[str]:
    """A version for each of ``count`` new runs, drawn by weight with ``seed``."""
    rng = random.Random(seed)
    versions = [v for v, w in weights.items() if w > 0]
    return rng.choices(versions, weights=[weights[v] for v in versions], k=count)


def version_report(store: RunQueueStore) -> list[dict[str, Any]]:
    """One row per version (announced or holding runs): its deploy state, runs by
    status (``failed``: dead-lettered) and the mean results of its finished runs."""
    deploys = store.deploys()
    rows: dict[str, dict[str, Any]] = {
        v: {"version": v, "state": state, "queued": 0, "running": 0, "done": 0, "failed": 0}
        for v, state in deploys.items()
    }
    results: dict[str, list[dict[str, Any]]] = {}
    for run in store.list_runs():
        row = rows.setdefault(
            run.version, {"version": run.version, "state": None, "queued": 0, "running": 0, "done": 0, "failed": 0}
        )
        key = "failed" if run.status == "dead" else run.status
        if key in row:
            row[key] += 1
        if run.status == "done" and isinstance(run.result, dict):
            results.setdefault(run.version, []).append(run.result)
    for version, row in rows.items():
        done = results.get(version, [])
        for m in RESULT_MEANS:
            values = [r[m] for r in done if isinstance(r.get(m), (int, float))]
            row[f"mean_{m}"] = statistics.fmean(values) if values else None
    return [rows[v] for v in sorted(rows, key=_version_key)]


def _version_key(version: str) -> tuple[Any, ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in version.replace("-", ".").split("."))
