"""What one scenario's runs say: intervals over seeds, every figure labelled with its
basis, the speed-up bound and the work the paper's speed-up would need.

A figure's *basis* tells where it comes from: ``input`` (set from the paper or an
assumption), ``fitted`` (calibrated to the paper) or ``emergent`` (an outcome of the
simulated mechanism). Verdicts are drawn from emergent rows only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from megaactors.behaviours.megaagent import STAGES
from megaactors.core.llm import PRICES
from megaactors.megaagent.paper import PAPER, REFERENCE_LOG
from megaactors.megaagent.scenarios import Scenario, measure
from megaactors.megaagent.stats import interval

__all__ = [
    "BASES",
    "ablation_record",
    "bound_record",
    "measured",
    "mechanism_record",
    "scenario_assumptions",
    "speedups",
    "summary_rows",
    "verdicts",
]

BASES = ("input", "fitted", "emergent")
_KEEP = (
    "agents",
    "levels",
    "makespan_s",
    "llm_calls",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "retries",
    "messages",
    "lock_wait_s",
    "busy_s",
    "mean_concurrency",
    "conflicts",
    "peak_llm_in_flight",
    "mean_prompt_tokens",
    "batches",
)


def measured(scenario: Scenario, seed: int) -> dict[str, Any]:
    """One run's figures (a module-level function, so a process pool can run it)."""
    m = measure(scenario.run(seed))
    out = {k: m[k] for k in _KEEP}
    out["seed"] = seed
    out["stages"] = {s: {k: m["stages"][s][k] for k in ("tokens_in", "tokens_out", "window_s")} for s in STAGES}
    return out


def _iv(runs: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    return interval([r[key] for r in runs])


def speedups(full: Sequence[dict[str, Any]], serial: Sequence[dict[str, Any]]) -> list[float]:
    """Serial over parallel makespan, seed by seed."""
    return [s["makespan_s"] / f["makespan_s"] for f, s in zip(full, serial, strict=True)]


def ablation_record(name: str, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Every ablation's figures over seeds, beside the paper's."""
    out = {}
    for variant, rs in runs.items():
        row = PAPER[name]["ablations"].get(variant, {})
        out[variant] = {
            **{k: _iv(rs, k) for k in ("agents", "makespan_s", "llm_calls", "cost_usd", "retries")},
            "paper_agents": row.get("agents"),
            "paper_makespan_s": row.get("time_s"),
            "paper_is_lower_bound": bool(row.get("lower_bound", False)),
            "paper_remark": row.get("remark", "" if row else "not in the paper: git operations not serialised"),
        }
    return out


def bound_record(name: str, full: list[dict[str, Any]], serial: list[dict[str, Any]]) -> dict[str, Any]:
    """The speed-up bound (busy time over makespan) and what the paper's speed-up needs.

    With the same work in both runs and no idle time in the serial one, speed-up =
    serial makespan / parallel makespan = busy time / parallel makespan: the parallel
    run's mean concurrency. The paper's speed-up ``S`` therefore needs a serial run of
    ``S × T`` seconds: ``S × T − W_serial`` more than the simulation's, or a parallel
    run whose mean concurrency is ``S × W_parallel / W_serial``."""
    paper = PAPER[name]
    s_paper = paper["parallel_speedup"]
    need_extra = [s_paper * f["makespan_s"] - s["busy_s"] for f, s in zip(full, serial, strict=True)]
    need_conc = [s_paper * f["busy_s"] / s["busy_s"] for f, s in zip(full, serial, strict=True)]
    return {
        "parallel_makespan_s": _iv(full, "makespan_s"),
        "parallel_busy_s": _iv(full, "busy_s"),
        "serial_busy_s": _iv(serial, "busy_s"),
        "mean_concurrency": _iv(full, "mean_concurrency"),
        "speedup": interval(speedups(full, serial)),
        "serial_over_parallel_work": interval([s["busy_s"] / f["busy_s"] for f, s in zip(full, serial, strict=True)]),
        "paper_speedup": round(s_paper, 3),
        "paper_is_lower_bound": paper["parallel_speedup_is_lower_bound"],
        "paper_agents": paper["agents"],
        "needed_extra_serial_s": interval(need_extra),
        "needed_extra_fraction": interval([e / s["busy_s"] for e, s in zip(need_extra, serial, strict=True)]),
        "needed_mean_concurrency": interval(need_conc),
        "needed_idle_per_batch_s": interval([e / s["batches"] for e, s in zip(need_extra, serial, strict=True)]),
        "serial_batches": _iv(serial, "batches"),
        "reference_log": {
            "busy_s": round(REFERENCE_LOG["llm_busy_s"] + REFERENCE_LOG["tool_busy_s"], 1),
            "makespan_s": REFERENCE_LOG["makespan_s"],
            "mean_concurrency": REFERENCE_LOG["mean_concurrency"],
            "needed_serial_s": round(s_paper * REFERENCE_LOG["makespan_s"], 1),
        },
    }


def mechanism_record(name: str, full: list[dict[str, Any]], serial: list[dict[str, Any]]) -> dict[str, Any]:
    """A mechanism's emergent timings over seeds and whether the paper's appear."""
    paper = PAPER[name]
    sp = interval(speedups(full, serial))
    mk, ser = _iv(full, "makespan_s"), _iv(serial, "makespan_s")
    target = paper["parallel_speedup"]
    lower = paper["parallel_speedup_is_lower_bound"]
    serial_paper = paper["ablations"]["no_parallelism"]["time_s"]
    return {
        "makespan_s": mk,
        "serial_makespan_s": ser,
        "speedup": sp,
        "mean_concurrency": _iv(full, "mean_concurrency"),
        "llm_calls": _iv(full, "llm_calls"),
        "conflicts": _iv(full, "conflicts"),
        "speedup_emerges": bool(sp["hi"] >= target) if not lower else bool(sp["lo"] > target),
        "makespan_emerges": bool(abs(mk["mean"] / paper["makespan_s"] - 1) <= 0.2),
        "serial_emerges": bool(ser["mean"] > serial_paper)
        if lower
        else bool(abs(ser["mean"] / serial_paper - 1) <= 0.2),
    }


def _row(
    name: str, figure: str, basis: str, paper: float | None, sim: dict[str, Any], *, bound: bool = False, unit: str = ""
) -> dict[str, Any]:
    assert basis in BASES
    return {
        "scenario": name,
        "figure": figure,
        "basis": basis,
        "paper": paper,
        "paper_is_lower_bound": bound,
        "simulation": sim,
        "ratio": round(sim["mean"] / paper, 3) if paper else None,
        "unit": unit,
    }


def summary_rows(name: str, runs: dict[str, list[dict[str, Any]]], bound: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary table of one scenario, every row with its basis."""
    paper, full, serial = PAPER[name], runs["full"], runs["no_parallelism"]
    price = PRICES[paper["model"]]
    lower = paper["parallel_speedup_is_lower_bound"]
    at_list = price.cost(paper["total"][0], paper["total"][1])
    rows = [
        _row(name, "agents", "input", paper["agents"], _iv(full, "agents")),
        _row(name, "levels", "input", paper["levels"], _iv(full, "levels")),
        _row(name, "makespan (s)", "emergent", paper["makespan_s"], _iv(full, "makespan_s"), unit="s"),
        _row(
            name,
            "w/o parallelism makespan (s)",
            "emergent",
            paper["ablations"]["no_parallelism"]["time_s"],
            _iv(serial, "makespan_s"),
            bound=lower,
            unit="s",
        ),
        _row(name, "parallel speed-up", "emergent", paper["parallel_speedup"], bound["speedup"], bound=lower, unit="×"),
        _row(name, "mean concurrency (speed-up bound)", "emergent", None, bound["mean_concurrency"], unit="×"),
        _row(name, "retries", "emergent", None, _iv(full, "retries")),
        _row(name, "messages", "emergent", None, _iv(full, "messages")),
        _row(name, "git mutex wait, summed (s)", "emergent", None, _iv(full, "lock_wait_s"), unit="s"),
        _row(name, "LLM calls", "fitted", None, _iv(full, "llm_calls")),
        _row(name, "input tokens", "fitted", paper["total"][0], _iv(full, "tokens_in")),
        _row(name, "output tokens", "fitted", paper["total"][1], _iv(full, "tokens_out")),
        _row(name, "cost (USD)", "fitted", paper["cost_usd"], _iv(full, "cost_usd"), unit="$"),
        _row(name, "cost of the paper's tokens at list price (USD)", "input", at_list, _iv(full, "cost_usd"), unit="$"),
    ]
    for stage in STAGES:
        ends = [r["stages"][stage]["window_s"][1] for r in full]
        rows.append(
            _row(
                name, f"{stage.replace('_', ' ')} window end (s)", "emergent", paper["stages"][stage][3], interval(ends)
            )
        )
    return rows


def verdicts(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Headline verdicts, each from one emergent row with a paper figure: does the
    paper's figure lie inside the simulation's interval (for a lower bound: above it)?"""
    out = []
    for r in rows:
        if r["basis"] != "emergent" or r["paper"] is None:
            continue
        sim, paper = r["simulation"], r["paper"]
        shown = f"{paper:,.2f}" if r["unit"] == "×" else f"{paper:,.0f}"
        ours = f"{sim['mean']:,.2f}" if r["unit"] == "×" else f"{sim['mean']:,.0f}"
        if r["paper_is_lower_bound"]:
            holds = sim["lo"] > paper
            text = f"{ours}, above the paper's lower bound of {shown}" if holds else f"{ours}, not above > {shown}"
        else:
            holds = sim["lo"] <= paper <= sim["hi"]
            side = "below" if sim["hi"] < paper else "above"
            text = (
                f"{ours}; the paper's {shown} lies in the interval" if holds else f"{ours}, {side} the paper's {shown}"
            )
        out.append({"scenario": r["scenario"], "figure": r["figure"], "reproduced": bool(holds), "text": text})
    return out


def scenario_assumptions(name: str, sc: Scenario) -> list[str]:
    """Every assumption of a scenario, written from its values."""
    lat, w, m = sc.latency, sc.work, sc.monitoring
    price = PRICES[sc.model]
    per_level = sc.plan.per_level()
    tree = {
        "gobang": (
            "assumed (the paper gives no tree): the boss splits the game between two admins who recruit two "
            "developers each; the reference repository's example run has a leader, an architect handing work to "
            "two developers, an integrator and a tester"
        ),
        "policy": (
            f"the paper's {PAPER['policy']['level_one_agents']} ministers (v2 text) under the boss, the other "
            f"agents split evenly among them as testers and experts; fan-out cap {sc.cap} (the reference code's "
            "prompt lets a minister recruit at most 5 citizens, which cannot give 590 agents in three levels)"
        ),
    }.get(name, "assumed")
    cap = sc.limits.max_concurrent_llm
    return [
        f"Recruitment tree: {' → '.join(f'{n:,}' for n in per_level)} agents per level "
        f"({sc.plan.agents:,} agents, {len(per_level)} levels); {tree}.",
        f"LLM latency ({sc.model}): a lognormal time to first token with median {lat.median_s} s and σ {lat.sigma} "
        f"(assumed, typical of the OpenAI API in 2024–2025), plus {lat.per_output_token_s} s per output token "
        f"(≈ {1 / lat.per_output_token_s:.0f} tokens/s, assumed), plus {lat.prefill_s_per_token * 1e6:.1f} µs per "
        "input token (prefill: the reference log's least-squares slope of latency on prompt tokens, 444 gpt-4.1 "
        "calls; for gpt-4o-mini probably an overestimate).",
        f"Prices: ${price.input_per_m} per million input and ${price.output_per_m} per million output tokens "
        f"({sc.model} list price, megaactors.core.llm.PRICES).",
        f"Prompt: a system prompt of {sc.system_tokens} tokens (assumed; the reference log's first call reads 325) "
        f"plus a memory window of the last {sc.memory_window} items, the prompt and reply of each of the last "
        f"{sc.memory_window // 2} calls (the reference code keeps MAX_MEMORY = 10), plus the messages of the batch "
        "(4 bytes per token) and the stage's prompt tokens (calibrated).",
        f"Planning: a loop of {w.plan_calls} LLM calls per admin, each followed by a git operation "
        "(writing the plan, then recruiting), as in the reference log's first calls.",
        f"Task solving: each worker makes {w.task_calls} LLM calls, each followed by a tool call (alternately a file "
        f"write, which is a git operation, and a code run or file read of {w.tool_s} s), delivered in "
        f"{w.deliveries} part(s) that its admin reviews; the loop length is calibrated (below).",
        f"Reviews: an admin's review call reads {w.review_tokens} tokens per delivery it covers (the reference "
        "log's mean read_file result), so reviewing a batch of k deliveries costs k times as many prompt tokens.",
        f"Shared storage: every git operation holds one global mutex for {w.git_s} s (assumed)"
        + ("." if w.git_lock else "; the mutex is disabled in this scenario."),
        f"Monitoring: an agent's checklist fails with probability {m.checklist_failure}, an admin's review of a "
        f"delivery with {m.review_failure}, the boss's review of an admin's merged result with {m.boss_failure} "
        f"(assumed; the paper gives none); a failure costs the producer {w.retry_calls} LLM call(s) and tool call(s) "
        f"(a re-merge for an admin); at most {m.retry_cap} retries per agent (paper v1/v2), the next failure "
        "ends the run with an error.",
        "Chat: on finishing, every agent shares one note with its next sibling (intra-group for workers, admin "
        "channel between admins); an idle agent that receives a note reads it in one LLM call.",
        "Delivery is instantaneous and idle agents wake at once (the reference code starts an agent's thread on "
        "every message; the polling mechanism below tests a delay); "
        + (f"at most {cap} LLM calls in flight." if cap else "no API rate limit."),
    ]
