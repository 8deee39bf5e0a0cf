"""Reproduce MegaAgent (arXiv:2408.09955) §2–§3 in simulation and write the report.

:func:`reproduce_section3` calibrates the two scenarios, runs them with their
ablations and over several seeds, sweeps makespan against N, and writes
``report.md`` (tables of paper figure | simulation | ratio, every assumption, the
figures), ``report.json`` and the figures into one directory. Every number in the
report is read from a run made here; the paper's numbers come from
:mod:`megaactors.megaagent.paper` and nothing else is typed in.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from megaactors.behaviours.megaagent import STAGES
from megaactors.core.agent import AgentState
from megaactors.core.llm import PRICES
from megaactors.megaagent import figures
from megaactors.megaagent.calibration import REFERENCE_PROMPT_TOKENS, calibrate
from megaactors.megaagent.complexity import DEFAULT_AGENTS, crossover, fit, sweep
from megaactors.megaagent.paper import (
    ABLATION_TABLES,
    COMPLEXITY_CLAIM,
    MAX_SUBORDINATES,
    PAPER,
    REFERENCE_LOG,
    STAGE_TABLES,
)
from megaactors.megaagent.scenarios import SCENARIOS, VARIANTS, Scenario, measure

__all__ = ["render_markdown", "reproduce_section3", "scenario_record"]

COMPLEXITY_BASE = "policy"
"""The scenario whose latency, tokens and monitoring the complexity sweep uses."""
_ABLATION_KEYS = ("agents", "levels", "makespan_s", "llm_calls", "tokens_in", "tokens_out", "cost_usd", "retries")


def _ratio(ours: float | None, paper: float | None) -> float | None:
    if ours is None or not paper:
        return None
    return round(ours / paper, 3)


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
    return [
        f"Recruitment tree: {' → '.join(f'{n:,}' for n in per_level)} agents per level "
        f"({sc.plan.agents:,} agents, {len(per_level)} levels); {tree}.",
        f"LLM latency ({sc.model}): a lognormal time to first token with median {lat.median_s} s and σ {lat.sigma}, "
        f"plus {lat.per_output_token_s} s per output token (≈ {1 / lat.per_output_token_s:.0f} tokens/s); "
        "assumed, typical of the OpenAI API in 2024–2025, not measured.",
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
        f"Shared storage: every git operation holds one global mutex for {w.git_s} s (assumed)"
        + ("." if w.git_lock else "; the mutex is disabled in this scenario."),
        f"Monitoring: an agent's checklist fails with probability {m.checklist_failure}, an admin's review of a "
        f"delivery with {m.review_failure}, the boss's review of an admin's merged result with {m.boss_failure} "
        f"(assumed; the paper gives none); a failure costs the producer {w.retry_calls} LLM call(s) and tool call(s) "
        f"(a re-merge for an admin); at most {m.retry_cap} retries per agent (paper v1/v2), the next failure "
        "ends the run with an error.",
        "Chat: on finishing, every agent shares one note with its next sibling (intra-group for workers, admin "
        "channel between admins); an idle agent that receives a note reads it in one LLM call.",
        "Delivery is instantaneous and idle agents wake at once (the paper gives no polling interval); "
        "no API rate limit.",
    ]


def _stage_row(stage: str, ours: dict[str, Any], paper: tuple[int, int, int, int]) -> dict[str, Any]:
    return {
        **ours,
        "paper_tokens_in": paper[0],
        "paper_tokens_out": paper[1],
        "paper_window_s": [paper[2], paper[3]],
        "ratio_in": _ratio(ours["tokens_in"], paper[0]),
        "ratio_out": _ratio(ours["tokens_out"], paper[1]),
    }


def scenario_record(
    name: str, seed: int = 1, spread: int = 5, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Calibrate scenario ``name``, run it with its ablations and over ``spread``
    seeds; return its report record and the artefacts figures need."""
    say = progress or (lambda _msg: None)
    paper = PAPER[name]
    cal = calibrate(SCENARIOS[name], seed)
    sc = cal.scenario
    say(f"{name}: calibrated in {cal.runs} runs (loop of {cal.task_calls} LLM calls per worker task)")
    full_run = sc.run(seed, trace=True)
    serial_run = sc.variant("no_parallelism").run(seed, trace=True)
    full, serial = measure(full_run), measure(serial_run)
    speedup = serial["makespan_s"] / full["makespan_s"]

    ablations: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        row = paper["ablations"][variant]
        paper_agents, paper_time = row["agents"], row["time_s"]
        if variant == "full":
            m = full
        elif variant == "no_parallelism":
            m = serial
        else:
            m = measure(sc.variant(variant, paper_agents).run(seed))
        ablations[variant] = {
            **{k: m[k] for k in _ABLATION_KEYS},
            "paper_agents": paper_agents,
            "paper_makespan_s": paper_time,
            "paper_is_lower_bound": bool(row.get("lower_bound", False)),
            "paper_remark": row.get("remark", ""),
            "ratio": _ratio(m["makespan_s"], paper_time),
        }
    unlocked = measure(sc.but(work=replace(sc.work, git_lock=False)).run(seed))
    ablations["no_git_mutex"] = {
        **{k: unlocked[k] for k in _ABLATION_KEYS},
        "paper_agents": None,
        "paper_makespan_s": None,
        "paper_is_lower_bound": False,
        "paper_remark": "not in the paper: git operations not serialised",
        "ratio": None,
    }
    say(f"{name}: makespan {full['makespan_s']:,.0f} s, serial {serial['makespan_s']:,.0f} s ({speedup:.2f}×)")

    seeds = list(range(seed, seed + spread))
    spread_rows = []
    for s in seeds:
        par = sc.run(s).ledger.virtual_time_s if s != seed else full["makespan_s"]
        ser = sc.variant("no_parallelism").run(s).ledger.virtual_time_s if s != seed else serial["makespan_s"]
        spread_rows.append((round(par, 3), round(ser, 3), round(ser / par, 3)))

    price = PRICES[sc.model]
    paper_in, paper_out = paper["total"][0], paper["total"][1]
    record = {
        "model": sc.model,
        "agents": full["agents"],
        "levels": full["levels"],
        "agents_per_level": full["agents_per_level"],
        "makespan_s": full["makespan_s"],
        "serial_makespan_s": serial["makespan_s"],
        "parallel_speedup": round(speedup, 3),
        "max_processing_parallel": full_run.trace.max_concurrent(AgentState.PROCESSING),
        "max_processing_serial": serial_run.trace.max_concurrent(AgentState.PROCESSING),
        "tokens_in": full["tokens_in"],
        "tokens_out": full["tokens_out"],
        "cost_usd": full["cost_usd"],
        "llm_calls": full["llm_calls"],
        "mean_prompt_tokens": full["mean_prompt_tokens"],
        "messages": full["messages"],
        "messages_by_channel": full["messages_by_channel"],
        "retries": full["retries"],
        "tool_calls": full["tool_calls"],
        "lock_wait_s": full["lock_wait_s"],
        "stages": {s: _stage_row(s, full["stages"][s], paper["stages"][s]) for s in STAGES},
        "ablations": ablations,
        "seed_spread": {
            "seeds": seeds,
            "makespan_s": [r[0] for r in spread_rows],
            "serial_makespan_s": [r[1] for r in spread_rows],
            "parallel_speedup": [r[2] for r in spread_rows],
        },
        "calibration": cal.as_dict(),
        "assumptions": scenario_assumptions(name, sc),
        "paper": {
            "source": paper["source"],
            "table": STAGE_TABLES[name],
            "ablation_table": ABLATION_TABLES[name],
            "agents": paper["agents"],
            "levels": paper["levels"],
            "makespan_s": paper["makespan_s"],
            "serial_makespan_s": paper["ablations"]["no_parallelism"]["time_s"],
            "parallel_speedup": round(paper["parallel_speedup"], 3),
            "parallel_speedup_is_lower_bound": bool(paper.get("parallel_speedup_is_lower_bound", False)),
            "tokens_in": paper_in,
            "tokens_out": paper_out,
            "cost_usd": paper["cost_usd"],
            "cost_usd_at_list_price": round(price.cost(paper_in, paper_out), 4),
            "stages": {
                s: {"tokens_in": v[0], "tokens_out": v[1], "window_s": [v[2], v[3]]} for s, v in paper["stages"].items()
            },
        },
    }
    roles = [full_run.org.role(a) for a in range(full_run.org.n)]
    return record, {"scenario": sc, "trace": full_run.trace, "roles": roles}


def complexity_record(
    base: Scenario,
    agents: Sequence[int],
    fanout: int,
    seed: int,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    rows = sweep(base, agents, fanout, seed, progress=progress)
    fits = fit(rows)
    par, ser, lock = fits.get("parallel", {}), fits.get("serial", {}), fits.get("parallel_git_lock", {})
    return {
        "claim": COMPLEXITY_CLAIM,
        "base_scenario": base.name,
        "fanout": fanout,
        "seed": seed,
        "per_agent_work": (
            "one LLM call and one tool call per worker task; admins plan, review and merge as in the scenario"
        ),
        "agents": list(agents),
        "rows": rows,
        "fits": fits,
        "slopes": {
            "parallel_s_per_decade": round(par["log"]["b_per_decade"], 3) if par else None,
            "parallel_log_r2": round(par["log"]["r2"], 4) if par else None,
            "parallel_linear_r2": round(par["linear"]["r2"], 4) if par else None,
            "serial_s_per_agent": round(ser["proportional"]["c_per_agent"], 4) if ser else None,
            "serial_proportional_r2": round(ser["proportional"]["r2"], 4) if ser else None,
            "serial_log_r2": round(ser["log"]["r2"], 4) if ser else None,
            "parallel_exponent": round(par["exponent"], 4) if par else None,
            "serial_exponent": round(ser["exponent"], 4) if ser else None,
            "git_mutex_exponent": round(lock["exponent"], 4) if lock else None,
            "git_mutex_last_exponent": round(lock["last_exponent"], 4) if lock else None,
        },
        "claim_holds": fits.get("claim_holds"),
        "summary": fits.get("summary", ""),
        "git_mutex_doubles_makespan_from_agents": crossover(rows),
    }


def reproduce_section3(
    out: Path | str,
    *,
    seed: int = 1,
    agents: Sequence[int] = DEFAULT_AGENTS,
    fanout: int = 5,
    spread: int = 5,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the whole reproduction and write ``report.md``, ``report.json`` and the
    figures into ``out``; return the report as a dict."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    scenarios: dict[str, dict[str, Any]] = {}
    artefacts: dict[str, dict[str, Any]] = {}
    for name in SCENARIOS:
        scenarios[name], artefacts[name] = scenario_record(name, seed, spread, progress)
    complexity = complexity_record(artefacts[COMPLEXITY_BASE]["scenario"], agents, fanout, seed, progress)
    files = {
        "stages": "stages.png",
        "ablations": "ablations.png",
        "complexity": "complexity.png",
        "timeline": "timeline_gobang.png",
    }
    figures.stage_figure(scenarios, out / files["stages"])
    figures.ablation_figure(scenarios, out / files["ablations"])
    figures.complexity_figure(complexity["rows"], complexity["fits"], out / files["complexity"])
    figures.timeline_figure(
        artefacts["gobang"]["trace"],
        artefacts["gobang"]["roles"],
        "Gobang: Processing intervals per agent (simulation, full MegaAgent)",
        out / files["timeline"],
    )
    report = {
        "paper": "MegaAgent, arXiv:2408.09955 v3, §2–§3",
        "seed": seed,
        "reference_log": REFERENCE_LOG,
        "reference_prompt_tokens": round(REFERENCE_PROMPT_TOKENS, 1),
        "scenarios": scenarios,
        "complexity": complexity,
        "figures": files,
        "wall_s": round(time.perf_counter() - t0, 2),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    (out / "report.md").write_text(render_markdown(report))
    return report


# ---------------------------------------------------------------------- markdown


def _num(x: Any, digits: int = 0) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and digits:
        return f"{x:,.{digits}f}"
    if isinstance(x, (int, float)):
        return f"{x:,.0f}" if abs(x) >= 10 or digits == 0 else f"{x:,.2f}"
    return str(x)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _ratio_text(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}"


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown (figures referenced by relative path)."""
    sc = report["scenarios"]
    lines = [
        "# MegaAgent §2–§3 reproduced in simulation",
        "",
        f"Paper: {report['paper']}. Written by `megaactors reproduce section3` (seed {report['seed']}, "
        f"{report['wall_s']:.0f} s of wall time). Every figure in the *simulation* columns is read from a run of "
        "the deterministic simulation made for this report; the *paper* columns are the paper's tables "
        "(megaactors/megaagent/paper.py). Token counts per stage are **calibrated** to the paper (so their ratios "
        "are close to 1 by construction); makespans, speed-ups, dollars, retries and lock waits are **outcomes** "
        "of the simulated mechanism under the assumptions listed below.",
        "",
        "## Summary",
        "",
    ]
    rows = []
    for name, s in sc.items():
        p = s["paper"]
        bound = "> " if p["parallel_speedup_is_lower_bound"] else ""
        rows += [
            [name, "agents", _num(p["agents"]), _num(s["agents"]), _ratio_text(_ratio(s["agents"], p["agents"]))],
            [name, "levels", _num(p["levels"]), _num(s["levels"]), _ratio_text(_ratio(s["levels"], p["levels"]))],
            [
                name,
                "makespan (s)",
                _num(p["makespan_s"]),
                _num(s["makespan_s"]),
                _ratio_text(_ratio(s["makespan_s"], p["makespan_s"])),
            ],
            [
                name,
                "w/o parallelism makespan (s)",
                bound + _num(p["serial_makespan_s"]),
                _num(s["serial_makespan_s"]),
                _ratio_text(_ratio(s["serial_makespan_s"], p["serial_makespan_s"])),
            ],
            [
                name,
                "parallel speed-up (serial / parallel)",
                f"{bound}{p['parallel_speedup']:.2f}×",
                f"{s['parallel_speedup']:.2f}×",
                _ratio_text(_ratio(s["parallel_speedup"], p["parallel_speedup"])),
            ],
            [
                name,
                "input tokens",
                _num(p["tokens_in"]),
                _num(s["tokens_in"]),
                _ratio_text(_ratio(s["tokens_in"], p["tokens_in"])),
            ],
            [
                name,
                "output tokens",
                _num(p["tokens_out"]),
                _num(s["tokens_out"]),
                _ratio_text(_ratio(s["tokens_out"], p["tokens_out"])),
            ],
            [
                name,
                "cost (USD)",
                "—" if p["cost_usd"] is None else f"${p['cost_usd']:.2f}",
                f"${s['cost_usd']:.2f}",
                _ratio_text(_ratio(s["cost_usd"], p["cost_usd"])),
            ],
            [
                name,
                "paper's tokens at list price (USD)",
                f"${p['cost_usd_at_list_price']:.2f}",
                f"${s['cost_usd']:.2f}",
                _ratio_text(_ratio(s["cost_usd"], p["cost_usd_at_list_price"])),
            ],
        ]
    lines += _table(["scenario", "figure", "paper", "simulation", "ratio"], rows)
    for name, s in sc.items():
        spread = s["seed_spread"]
        lines.append(
            f"- **{name}**: over seeds {spread['seeds'][0]}–{spread['seeds'][-1]} the speed-up ranges "
            f"{min(spread['parallel_speedup']):.2f}–{max(spread['parallel_speedup']):.2f}× and the makespan "
            f"{min(spread['makespan_s']):,.0f}–{max(spread['makespan_s']):,.0f} s. At most "
            f"{s['max_processing_parallel']} agents were Processing at once in parallel, "
            f"{s['max_processing_serial']} in serial. {s['llm_calls']:,} LLM calls "
            f"(mean prompt {s['mean_prompt_tokens']:,.0f} tokens; the reference log's is "
            f"{report['reference_prompt_tokens']:,.0f}), {s['messages']:,} messages "
            f"({', '.join(f'{k} {v:,}' for k, v in s['messages_by_channel'].items())}), {s['retries']} retries, "
            f"{s['lock_wait_s']:,.0f} s spent waiting for the git mutex (summed over agents)."
        )
    lines.append("")
    if any(s["paper"]["parallel_speedup_is_lower_bound"] for s in sc.values()):
        lines += [
            "The paper stopped its policy run without parallelism after 14,400 s with more than 100 agents, so its "
            "serial makespan and speed-up are lower bounds; the simulation runs the serial variant to the end with "
            "every agent of the full run.",
            "",
        ]
    lines += [
        "Why the simulated makespans differ from the paper's: the simulation has no polling interval, no API rate "
        "limit and no agent that talks more than the mechanism requires; its makespan is the critical path of LLM "
        "latencies, tool times and git-mutex waits under the stated latency assumptions. The row *w/o git mutex* "
        "below shows how much of each makespan the mutex accounts for.",
        "",
    ]
    for name, s in sc.items():
        p = s["paper"]
        lines += [f"## {name}: tokens per stage ({p['table']})", ""]
        rows = []
        for stage in STAGES:
            r = s["stages"][stage]
            rows.append(
                [
                    stage.replace("_", " "),
                    _num(r["paper_tokens_in"]),
                    _num(r["tokens_in"]),
                    _ratio_text(r["ratio_in"]),
                    _num(r["paper_tokens_out"]),
                    _num(r["tokens_out"]),
                    _ratio_text(r["ratio_out"]),
                    _num(r["llm_calls"]),
                    f"{r['paper_window_s'][0]:,}–{r['paper_window_s'][1]:,}",
                    f"{r['window_s'][0]:,.0f}–{r['window_s'][1]:,.0f}",
                ]
            )
        lines += _table(
            [
                "stage",
                "paper in",
                "sim in",
                "ratio",
                "paper out",
                "sim out",
                "ratio",
                "sim calls",
                "paper window (s)",
                "sim window (s)",
            ],
            rows,
        )
        lines += [f"## {name}: ablations ({p['ablation_table']})", ""]
        rows = []
        for variant, a in s["ablations"].items():
            bound = "> " if a["paper_is_lower_bound"] else ""
            remark = f" ({a['paper_remark']})" if a["paper_remark"] and a["paper_agents"] else ""
            rows.append(
                [
                    variant.replace("_", " "),
                    bound + _num(a["paper_agents"]),
                    bound + _num(a["paper_makespan_s"]) + remark,
                    _num(a["agents"]),
                    _num(a["makespan_s"]),
                    _ratio_text(a["ratio"]),
                    _num(a["llm_calls"]),
                    f"${a['cost_usd']:.2f}",
                    _num(a["retries"]),
                ]
            )
        lines += _table(
            [
                "variant",
                "paper agents",
                "paper time (s)",
                "sim agents",
                "sim makespan (s)",
                "ratio",
                "sim LLM calls",
                "sim cost",
                "sim retries",
            ],
            rows,
        )
        lines.append(
            "Ablation agent counts are the paper's (its tables report them as outcomes of its runs; here they are "
            "inputs), except w/o parallelism, which runs the full scenario with one agent Processing at a time."
        )
        lines.append("")
    c = report["complexity"]
    lines += ["## Complexity: makespan versus N (§3.4)", "", f"Claim: {c['claim']}.", ""]
    lines += [
        f"The {c['base_scenario']} scenario's latency, tokens and monitoring on a balanced recruitment tree with "
        f"fan-out {c['fanout']} ({c['per_agent_work']}); seed {c['seed']}. The main curves do not serialise git "
        "operations (the claim is about coordination); the third keeps the global git mutex.",
        "",
    ]
    by_n: dict[int, dict[str, Any]] = {}
    for r in c["rows"]:
        by_n.setdefault(r["agents"], {"levels": r["levels"]})[r["curve"]] = r["makespan_s"]
    rows = [
        [f"{n:,}", v["levels"], _num(v.get("parallel")), _num(v.get("serial")), _num(v.get("parallel_git_lock"))]
        for n, v in sorted(by_n.items())
    ]
    lines += _table(["agents N", "levels", "parallel (s)", "serial (s)", "parallel with git mutex (s)"], rows)
    sl = c["slopes"]
    verdict = "holds" if c["claim_holds"] else "does not hold"
    lines += [
        f"Fits: {c['summary']}.",
        "",
        f"Verdict: in the simulation the claim **{verdict}** for coordination: the parallel makespan grows by "
        f"{sl['parallel_s_per_decade']:,.0f} s per tenfold increase in N (log–log slope "
        f"{sl['parallel_exponent']:.2f}), the serial one by {sl['serial_s_per_agent']:.2f} s per agent (log–log slope "
        f"{sl['serial_exponent']:.2f}). It does not hold for MegaAgent's storage: with every git operation behind one "
        f"global mutex the parallel makespan has a log–log slope of {sl['git_mutex_exponent']:.2f} over the range and "
        f"{sl['git_mutex_last_exponent']:.2f} over its last step"
        + (
            f", and the mutex at least doubles it from N = {c['git_mutex_doubles_makespan_from_agents']:,} on"
            if c["git_mutex_doubles_makespan_from_agents"]
            else ""
        )
        + ": one lock shared by every agent makes the run linear in N whatever the hierarchy.",
        "",
        f"![Makespan versus N]({report['figures']['complexity']})",
        "",
        "## Figures",
        "",
        f"![Tokens per stage]({report['figures']['stages']})",
        "",
        f"![Ablations]({report['figures']['ablations']})",
        "",
        f"![Gobang timeline]({report['figures']['timeline']})",
        "",
        "## How the token model is calibrated",
        "",
        "For each scenario, with its seed: (1) the worker's loop length is the smallest whose run makes at least as "
        f"many LLM calls as the paper's input tokens divided by the reference log's mean prompt "
        f"({report['reference_prompt_tokens']:,.0f} tokens = {REFERENCE_LOG['tokens_in']:,} / "
        f"{REFERENCE_LOG['llm_calls']} calls), or the one just below if closer; (2) each stage's output tokens per "
        "call are the paper's output tokens of the stage over the stage's calls, repeated until the call counts are "
        "stable; (3) with outputs fixed nothing in a run depends on input tokens, so each stage's input tokens are an "
        "exact affine function of the three per-stage prompt sizes; four runs measure it and a 3×3 solve gives the "
        "prompt sizes. Result:",
        "",
    ]
    rows = []
    for name, s in sc.items():
        cal = s["calibration"]
        for stage in STAGES:
            pc = cal["per_call"][stage]
            rows.append([name, stage.replace("_", " "), _num(pc["new_tokens"]), _num(pc["output_tokens"])])
    lines += _table(["scenario", "stage", "prompt tokens per call", "output tokens per call"], rows)
    for name, s in sc.items():
        cal = s["calibration"]
        lines.append(
            f"- {name}: a worker loop of {cal['task_calls']} LLM call(s) per task; the run makes {s['llm_calls']:,} "
            f"calls against a target of {cal['target_llm_calls']:,}; {cal['runs']} calibration runs."
            + "".join(f" Note: {n}." for n in cal["notes"])
        )
    lines += ["", "## Assumptions", ""]
    for name, s in sc.items():
        lines.append(f"**{name}**")
        lines.append("")
        lines += [f"- {a}" for a in s["assumptions"]]
        lines.append("")
    lines += [
        "**complexity sweep**",
        "",
        f"- The {c['base_scenario']} scenario's latency, prices and calibrated tokens; a balanced tree with fan-out "
        f"{c['fanout']} (the reference code's MAX_SUBORDINATES is {MAX_SUBORDINATES}); {c['per_agent_work']}.",
        "",
        "## Not reproduced",
        "",
        "- Quality columns (game metrics met, judge ratings): they need a real LLM.",
        "- What the LLM decides: how many agents to recruit, how much to talk, how many calls a task takes. Here "
        "the tree and the loops are inputs and the token counts are fitted.",
        "- Refusing agents and the replacements admins recruit for them; the polling interval; API rate limits.",
        "",
    ]
    return "\n".join(lines)
