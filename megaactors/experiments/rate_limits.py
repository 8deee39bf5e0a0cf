"""What a provider's rate limits do to makespan and parallel speed-up as organisations grow.

For each organisation (two-tier with groups of 10, a hierarchy of fan-out 10), each N
and each latency model (the prompt ignored, or read at the reference log's prefill
rate) one chat round runs without limits and under each rate-limit preset of
:data:`~megaactors.providers.presets.RATE_LIMIT_PRESETS` (OpenAI's published tiers;
the default retry policy: 3 retries with full-jitter backoff, then the chat round
asks again). The **speed-up** is the serial makespan (one agent at a time, one call at a
time: the sum of every call's latency, or the limit's floor if that is longer) over the
parallel one; under a limit it falls towards 1 as the floor takes over.

A limit caps throughput: no run can be shorter than its calls over the RPM or its
tokens over the TPM (the *floor*, from the unlimited run's counts). Where the floor is
more than :data:`SIMULATE_UP_TO` times the unlimited makespan, or N times that ratio
exceeds :data:`SIMULATE_WORK` (every waiting agent retries every few seconds, so the
attempts to simulate grow as N × floor), the point is reported at its floor
(``simulated = False``), a lower bound: simulating every retry would cost much and show
nothing new.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from megaactors.experiments.spec import RunSpec
from megaactors.providers.presets import RATE_LIMIT_PRESETS

__all__ = [
    "COLUMNS",
    "SIMULATE_UP_TO",
    "SIMULATE_WORK",
    "limits_figure",
    "run_point",
    "run_rate_limits",
    "stops_paying",
]

SIMULATE_UP_TO = 10.0
"""Simulate a limited run only if its floor is at most this many unlimited makespans..."""
SIMULATE_WORK = 200_000.0
"""... and N times that ratio is at most this."""
NO_LIMIT = "no limit"
COLUMNS = (
    "topology", "agents", "latency", "limits", "simulated", "makespan_s", "speedup", "llm_calls", "tokens",
    "rate_limited", "retries", "failed_llm_calls", "floor_s", "wall_s",
)  # fmt: skip


def _prefill() -> float:
    from megaactors.megaagent.scenarios import PREFILL_S_PER_TOKEN

    return float(PREFILL_S_PER_TOKEN)


def latencies() -> dict[str, float]:
    """The two latency models: prefill seconds per prompt token."""
    return {"prompt ignored": 0.0, "prompt-length": _prefill()}


def _spec(topology: str, agents: int, prefill: float, seed: int, **limits: Any) -> RunSpec:
    return RunSpec(topology=topology, agents=agents, group_size=10, fanout=10, seed=seed,
                   prefill_s_per_token=prefill, **limits)  # fmt: skip


def run_point(topology: str, agents: int, latency: str, seed: int = 1) -> list[dict[str, Any]]:
    """One organisation and latency model: the unlimited run and every preset."""
    prefill = latencies()[latency]
    free = _spec(topology, agents, prefill, seed).execute().summary()
    serial = free["llm_time_s"]
    rows = [_row(topology, agents, latency, NO_LIMIT, free, serial, floor=0.0)]
    for name, limits in RATE_LIMIT_PRESETS.items():
        floor = max(free["llm_calls"] / (limits.rpm / 60), (free["tokens_in"] + free["tokens_out"]) / (limits.tpm / 60))
        ratio = floor / free["virtual_time_s"]
        if ratio > SIMULATE_UP_TO or agents * ratio > SIMULATE_WORK:
            rows.append(_floor_row(topology, agents, latency, name, free, serial, floor))
            continue
        summary = _spec(topology, agents, prefill, seed, rpm=limits.rpm, tpm=limits.tpm).execute().summary()
        rows.append(_row(topology, agents, latency, name, summary, summary["llm_time_s"], floor))
    return rows


def _row(topology: str, agents: int, latency: str, limits: str, s: dict[str, Any], serial: float, floor: float):
    makespan = s["virtual_time_s"]
    return {
        "topology": topology, "agents": agents, "latency": latency, "limits": limits, "simulated": True,
        "makespan_s": makespan, "speedup": max(serial, floor) / makespan if makespan else 1.0,
        "llm_calls": s["llm_calls"],
        "tokens": s["tokens_in"] + s["tokens_out"], "rate_limited": s.get("rate_limited", 0),
        "retries": s.get("retries", 0), "failed_llm_calls": s.get("failed_llm_calls", 0),
        "floor_s": floor, "wall_s": s["wall_s"],
    }  # fmt: skip


def _floor_row(topology: str, agents: int, latency: str, limits: str, free: dict[str, Any], serial: float,
               floor: float) -> dict[str, Any]:  # fmt: skip
    row = _row(topology, agents, latency, limits, free, serial, floor)
    row.update(simulated=False, makespan_s=floor, speedup=max(serial, floor) / floor, rate_limited=None, retries=None,
               failed_llm_calls=None, wall_s=0.0)  # fmt: skip
    return row


def run_rate_limits(
    agents: Sequence[int], topologies: Sequence[str] = ("two-tier", "hierarchy"), seed: int = 1, log: Any = None
) -> list[dict[str, Any]]:
    """Every point of the grid (``log`` is called with each row as it comes)."""
    rows: list[dict[str, Any]] = []
    for topology in topologies:
        for latency in latencies():
            for n in agents:
                for row in run_point(topology, n, latency, seed):
                    rows.append(row)
                    if log is not None:
                        log(row)
    return rows


def stops_paying(rows: Iterable[dict[str, Any]], gain: float = 1.2) -> dict[tuple[str, str, str], int | None]:
    """Per (topology, latency, limits): the smallest N from which ten times as many
    agents gain less than ``gain`` × the speed-up (None: parallelism still pays at the
    largest N)."""
    series: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for r in rows:
        series.setdefault((r["topology"], r["latency"], r["limits"]), []).append((r["agents"], r["speedup"]))
    out: dict[tuple[str, str, str], int | None] = {}
    for key, points in series.items():
        points.sort()
        out[key] = next((n for (n, s), (_, s_next) in itertools.pairwise(points) if s_next < gain * s), None)
    return out


def limits_figure(rows: list[dict[str, Any]], path: Path) -> None:
    """Makespan and speed-up against N, one column per organisation; simulated points
    filled, floors (lower bounds) hollow."""
    from matplotlib.figure import Figure  # not pyplot: drawing never changes a notebook's backend

    topologies = sorted({r["topology"] for r in rows}, reverse=True)
    fig = Figure(figsize=(6 * len(topologies), 8))
    axes = fig.subplots(2, len(topologies), squeeze=False)
    styles = {name: f"C{i}" for i, name in enumerate([NO_LIMIT, *RATE_LIMIT_PRESETS])}
    for col, topology in enumerate(topologies):
        for latency, dash in zip(latencies(), ("-", "--"), strict=True):
            for limits, colour in styles.items():
                mine = (r for r in rows if (r["topology"], r["latency"], r["limits"]) == (topology, latency, limits))
                pts = sorted((r["agents"], r["makespan_s"], r["speedup"], r["simulated"]) for r in mine)
                if not pts:
                    continue
                ns = [p[0] for p in pts]
                for row, value in ((0, 1), (1, 2)):
                    ax = axes[row][col]
                    ax.plot(ns, [p[value] for p in pts], dash, color=colour, label=f"{limits}, {latency}")
                    for n, *vals, simulated in pts:
                        ax.plot(n, vals[value - 1], "o", color=colour, fillstyle="full" if simulated else "none")
        for row, label in ((0, "makespan [s, virtual]"), (1, "speed-up (serial / parallel makespan)")):
            ax = axes[row][col]
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("agents N")
            ax.set_ylabel(label)
            ax.set_title(f"{topology}: one chat round")
            ax.grid(True, which="both", alpha=0.3)
    axes[1][0].legend(fontsize=7)
    fig.suptitle("Rate limits (OpenAI tiers for gpt-4o-mini) — hollow points: throughput floor, a lower bound")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
