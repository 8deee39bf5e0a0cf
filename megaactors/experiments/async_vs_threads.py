"""Async versus threads: N simulated LLM calls started at once on each live runtime.

Every one of N agents makes one simulated LLM call of exactly ``latency_ms`` (no
messages), once on the asyncio runtime (a task per agent) and once on the pykka
runtime (a thread per agent), each in a fresh Python process so that its peak
resident memory is its own. Reported per side: the wall time of the whole run
(creating the tasks or threads, the calls, stopping), the time of the calls alone
(from releasing the agents to the last reply), the peak RSS of the process, and
the memory each call added (peak RSS less the RSS before the agents were created,
over N) and how many calls were in flight at once at the peak — which on threads can
stay far below N, when calls finish before the last threads start. The peak is the kernel's high-water mark (``VmHWM``),
reset just before the run where Linux allows it.

    python -m megaactors.experiments.async_vs_threads asyncio 500 50   # one side, JSON on stdout
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from megaactors.core.behaviour import Effects, LLMRequest
from megaactors.core.llm import LatencyModel, SimulatedLLM
from megaactors.core.organisation import Organisation

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["KINDS", "OneCall", "compare", "comparison_figure", "format_comparison", "measure", "measure_here"]

KINDS = ("asyncio", "threads")


class OneCall:
    """Each agent makes one LLM call at start and sends nothing."""

    name = "one-call"

    def init(self, agent: int, org: Organisation) -> None:
        return None

    def on_start(self, ctx: Any, state: Any) -> Effects:
        return Effects(llm=LLMRequest(new_tokens=0, stage="call"))

    def on_batch(self, ctx: Any, state: Any, batch: Any) -> Effects:
        return Effects()

    def on_reply(self, ctx: Any, state: Any, reply: Any) -> Effects:
        return Effects()


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak_rss() -> bool:
    """Make the kernel's peak-RSS mark start again from the current RSS (Linux)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _peak_rss_mb() -> float:
    """Peak RSS since the last reset (``VmHWM``), else since the process started."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_here(kind: str, calls: int, latency_ms: float) -> dict[str, float]:
    """Start ``calls`` calls of ``latency_ms`` at once on ``kind`` in this process."""
    from megaactors.runtime import AsyncioRuntime, PykkaRuntime

    cls = {"asyncio": AsyncioRuntime, "threads": PykkaRuntime}[kind]
    org = Organisation.flat(calls)
    llm = SimulatedLLM(latency=LatencyModel(median_s=latency_ms / 1000, sigma=0.0, per_output_token_s=0.0))
    before = _rss_mb()
    _reset_peak_rss()
    result = cls(org, OneCall(), llm, time_scale=1.0, trace=False).run()
    peak = _peak_rss_mb()
    ledger = result.ledger
    return {
        "wall_s": round(ledger.wall_s, 4),
        "calls_s": round(ledger.virtual_time_s, 4),
        "peak_rss_mb": round(peak, 1),
        "rss_per_call_kb": round(max(0.0, peak - before) * 1024 / calls, 2),
        "peak_in_flight": ledger.peak_llm_in_flight,
        "llm_calls": ledger.llm_calls,
    }


def measure(kind: str, calls: int, latency_ms: float) -> dict[str, float]:
    """:func:`measure_here` in a fresh Python process."""
    out = subprocess.run(
        [sys.executable, "-m", "megaactors.experiments.async_vs_threads", kind, str(calls), repr(float(latency_ms))],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the {kind} side failed: {last}")
    return json.loads(out.stdout)


def compare(calls: int, latency_ms: float) -> dict[str, dict[str, float]]:
    """Both sides, one after the other: ``{"asyncio": {...}, "threads": {...}}``."""
    return {kind: measure(kind, calls, latency_ms) for kind in KINDS}


def format_comparison(result: dict[str, dict[str, float]], calls: int, latency_ms: float) -> str:
    """A readable table and what it says about the expectations."""
    lines = [f"{calls:,} simulated LLM calls of {latency_ms:g} ms started at once"]
    for kind in KINDS:
        r = result[kind]
        flight = f"{r['peak_in_flight']:,} of {calls:,} in flight at once"
        lines.append(
            f"  {kind:<8} wall {r['wall_s']:7.3f} s (calls {r['calls_s']:.3f} s, {flight})"
            f"   peak RSS {r['peak_rss_mb']:7.1f} MB ({r['rss_per_call_kb']:.1f} KB per call)"
        )
    a, t = result["asyncio"], result["threads"]
    slower = t["wall_s"] / a["wall_s"] if a["wall_s"] else float("inf")
    heavier = t["rss_per_call_kb"] / a["rss_per_call_kb"] if a["rss_per_call_kb"] else float("inf")
    lines.append(
        f"  asyncio under 1 s: {'yes' if a['wall_s'] < 1.0 else 'no'}; "
        f"threads took {slower:.2f}x the wall time and {heavier:.1f}x the memory per call"
    )
    return "\n".join(lines)


def comparison_figure(rows: list[dict[str, Any]], latency_ms: float) -> Figure:
    """Wall time (left) and memory per call (right) versus N, one line per runtime,
    from rows of :func:`measure` with ``runtime`` and ``calls``. N counts calls started
    at once; where fewer were ever in flight together, the point says how many."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    for kind, marker, colour in zip(KINDS, "os", ("tab:blue", "tab:orange"), strict=True):
        mine = sorted((r for r in rows if r["runtime"] == kind), key=lambda r: r["calls"])
        xs = [r["calls"] for r in mine]
        left.plot(xs, [r["wall_s"] for r in mine], marker=marker, color=colour, label=f"{kind}: whole run")
        left.plot(xs, [r["calls_s"] for r in mine], marker=marker, color=colour, ls="--", label=f"{kind}: calls only")
        right.plot(xs, [r["rss_per_call_kb"] for r in mine], marker=marker, color=colour, label=kind)
        for r in mine:
            if r["peak_in_flight"] < r["calls"]:
                left.annotate(
                    f"{kind}: {r['peak_in_flight']:,} of {r['calls']:,} in flight at once",
                    (r["calls"], r["wall_s"]),
                    xytext=(-6, 10),
                    textcoords="offset points",
                    ha="right",
                    fontsize=7,
                    color=colour,
                )
    left.axhline(1.0, color="grey", lw=0.8, ls=":", label="1 s")
    left.set(xscale="log", yscale="log", xlabel="LLM calls started at once, N", ylabel="wall time (s)")
    left.set_title(f"{latency_ms:g} ms simulated calls: wall time")
    right.set(xscale="log", xlabel="LLM calls started at once, N", ylabel="peak RSS added per call (KB)")
    right.set_title("memory per call")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return fig


if __name__ == "__main__":
    kind, n, ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    print(json.dumps(measure_here(kind, n, ms)))
