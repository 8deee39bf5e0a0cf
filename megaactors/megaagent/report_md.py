"""The §3 reproduction's report as Markdown, written from the report dict alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from megaactors.behaviours.megaagent import STAGES
from megaactors.megaagent.paper import MAX_SUBORDINATES, REFERENCE_LOG

__all__ = ["render_markdown"]


def _n(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "—"
    if digits:
        return f"{x:,.{digits}f}"
    return f"{x:,.0f}" if abs(x) >= 10 or float(x).is_integer() else f"{x:,.2f}"


def _value(v: Any) -> str:
    return "none" if v is None else str(v)


def _iv(iv: dict[str, Any], digits: int = 0) -> str:
    """``mean [lo, hi]`` (just the mean when the interval is a point)."""
    if iv["lo"] == iv["hi"]:
        return _n(iv["mean"], digits)
    return f"{_n(iv['mean'], digits)} [{_n(iv['lo'], digits)}, {_n(iv['hi'], digits)}]"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _digits(row: dict[str, Any]) -> int:
    return 2 if row["unit"] in ("×", "$") else 0


def _summary(report: dict[str, Any]) -> list[str]:
    rows = []
    for r in report["summary_rows"]:
        d = _digits(r)
        paper = "—" if r["paper"] is None else ("> " if r["paper_is_lower_bound"] else "") + _n(r["paper"], d)
        rows.append(
            [r["scenario"], r["figure"], f"**{r['basis']}**", paper, _iv(r["simulation"], d), _n(r["ratio"], 2)]
        )
    return _table(["scenario", "figure", "basis", "paper", "simulation, mean [95 % CI]", "ratio"], rows)


def _bound(report: dict[str, Any]) -> list[str]:
    lines = [
        "## The speed-up bound and the missing work",
        "",
        "If the serial run does the same work as the parallel one and is never idle, its makespan is the parallel "
        "run's busy time (LLM and tool time summed over agents), so the speed-up equals the parallel run's **mean "
        "concurrency**, busy time over makespan, whatever the latency, tool times, failures or tree. To show the "
        "paper's speed-up S, a serial run would need S × T seconds: either that much more serial work or idle time, "
        "or a parallel run whose mean concurrency is S times its work ratio.",
        "",
    ]
    rows = []
    for name, sc in report["scenarios"].items():
        b = sc["bound"]
        rows.append(
            [
                name,
                _iv(b["parallel_makespan_s"]),
                _iv(b["parallel_busy_s"]),
                _iv(b["mean_concurrency"], 2),
                _iv(b["serial_over_parallel_work"], 2),
                _iv(b["speedup"], 2),
                ("> " if b["paper_is_lower_bound"] else "") + f"{b['paper_speedup']:.2f}",
                "—" if b["paper_is_lower_bound"] else _iv(b["needed_extra_serial_s"]),
                "—" if b["paper_is_lower_bound"] else f"{b['needed_extra_fraction']['mean']:+.0%}",
                f"{b['needed_mean_concurrency']['mean']:.2f} of {b['paper_agents']}",
            ]
        )
    lines += _table(
        [
            "scenario",
            "parallel makespan T (s)",
            "busy time (s)",
            "mean concurrency (bound)",
            "serial work / parallel work",
            "speed-up",
            "paper",
            "extra serial time the paper needs (s)",
            "as a share of the serial work",
            "mean concurrency the paper needs",
        ],
        rows,
    )
    log = next(iter(report["scenarios"].values()))["bound"]["reference_log"]
    g = report["scenarios"].get("gobang", {}).get("bound")
    if g:
        lines += [
            f"The reference repository's own Gobang log shows the same limit: {log['busy_s']:,.0f} s of LLM and tool "
            f"time in a {log['makespan_s']:,.0f}-s run, a mean concurrency of {log['mean_concurrency']:.2f} with "
            f"{REFERENCE_LOG['agents']} agents. Doing the same work one agent at a time would take about "
            f"{log['busy_s']:,.0f} s ({log['mean_concurrency']:.1f}× longer); {g['paper_speedup']:.1f}× would need "
            f"{log['needed_serial_s']:,.0f} s, {log['needed_serial_s'] / log['busy_s']:.1f}× its busy time. For "
            f"Gobang the simulation's serial run would have to do {g['needed_extra_fraction']['mean']:.0%} more work "
            "(or sit idle that long), or its 7 agents would have to be busy "
            f"{g['needed_mean_concurrency']['mean'] / g['paper_agents']:.0%} of the time in parallel. Where the "
            "policy run's speed-up exceeds its mean concurrency, its serial run does less work than the parallel "
            "one (larger batches: fewer LLM calls).",
            "",
        ]
    return lines


def _mechanisms(report: dict[str, Any]) -> list[str]:
    lines = [
        "## Candidate mechanisms from the paper and the reference code",
        "",
        "Each mechanism's parameters come from the reference code or its log and were fixed before its speed-up was "
        "computed; each changed scenario is recalibrated to the paper's tokens like the baseline. *emerges* means "
        "the paper's figure is reached: the speed-up's interval reaches it (policy: lies above its lower bound), "
        "the makespan is within 20 % of it.",
        "",
    ]
    first = next(iter(report["mechanisms"].values()))
    lines += _table(
        ["mechanism", "parameters", "source"],
        [[f"{r['name']}: {r['label']}", r["parameters"], r["source"]] for r in first["rows"]],
    )
    for name, mech in report["mechanisms"].items():
        rows = []
        for r in mech["rows"]:
            res = r["result"]
            rows.append(
                [
                    r["name"],
                    _iv(res["makespan_s"]),
                    _iv(res["serial_makespan_s"]),
                    _iv(res["speedup"], 2),
                    _iv(res["mean_concurrency"], 2),
                    _iv(res["llm_calls"]),
                    "yes" if res["speedup_emerges"] else "no",
                    "yes" if res["makespan_emerges"] else "no",
                ]
            )
        paper = report["scenarios"][name]["bound"]
        lines += [
            f"**{name}** (paper: speed-up {'> ' if paper['paper_is_lower_bound'] else ''}"
            f"{paper['paper_speedup']:.2f}×)",
            "",
        ]
        lines += _table(
            [
                "mechanism",
                "makespan (s)",
                "w/o parallelism (s)",
                "speed-up",
                "mean concurrency",
                "LLM calls",
                "speed-up emerges",
                "makespan emerges",
            ],
            rows,
        )
    g = report["mechanisms"].get("gobang")
    if g:
        emerged = [r["name"] for r in g["rows"] if r["result"]["speedup_emerges"]]
        lines += [
            "Verdict: "
            + (
                f"the Gobang speed-up emerges with {', '.join(emerged)}."
                if emerged
                else "no mechanism of the reference code brings the Gobang speed-up to the paper's. Every one of "
                "them either adds work that both runs do (reminder rounds, proofreading, rewrites), or adds idle "
                "time to both (polling), or adds contention that only the parallel run suffers (the mutex, "
                "conflicts), so the speed-up stays at or below the parallel run's mean concurrency. The paper "
                "does not say how its serial run was made; whatever made it slow is not in the code it published."
            ),
            "",
            f"![Mechanisms]({report['figures']['mechanisms']})",
            "",
        ]
    return lines


def _latency(report: dict[str, Any]) -> list[str]:
    lat = REFERENCE_LOG["latency"]
    return [
        "## Prompt-length latency",
        "",
        f"Every call's latency is median·exp(σz) + prefill × input tokens + time per output token × output tokens. "
        f"The prefill term is {lat['prefill_s_per_token'] * 1e6:.1f} µs per input token (about "
        f"{1 / lat['prefill_s_per_token']:,.0f} tokens/s): the least-squares slope of {lat['calls']} call latencies "
        "of the reference log on their prompt tokens (reply tokens: "
        f"{lat['per_output_token_s'] * 1000:.1f} ms each; what is left has median {lat['base_median_s']} s and "
        f"log-spread {lat['base_sigma']}), measured by `megaactors.megaagent.reference_log`. A review reads "
        f"{REFERENCE_LOG['read_file_tokens']:,} tokens per delivery it covers (the log's mean read_file result), so "
        f"reviewing 64 deliveries adds {64 * REFERENCE_LOG['read_file_tokens'] * lat['prefill_s_per_token']:.1f} s, "
        f"and a 30,000-token merge {30_000 * lat['prefill_s_per_token']:.1f} s. The latency model is "
        "`megaactors.core.llm.LatencyModel` (`prefill_s_per_token`); the sensitivity analysis below runs prefill "
        "from none to twice this slope.",
        "",
    ]


def _sensitivity(report: dict[str, Any]) -> list[str]:
    lines = [
        "## Sensitivity",
        "",
        "Each assumption is moved to both ends of its plausible range, everything else as calibrated (the fitted "
        "tokens stay fixed), in parallel and serial over the seeds (mean [95 % CI]); the tornado and the "
        "conclusions use the means.",
        "",
        f"![Sensitivity]({report['figures']['tornado']})",
        "",
    ]
    for name, sens in report["sensitivity"].items():
        rows = []
        for a in sens["axes"]:
            rows.append(
                [
                    a["label"],
                    " / ".join(_value(a[k]) for k in ("low", "base_value", "high")).replace("{", ""),
                    f"{_iv(a['low']['makespan_interval'])} – {_iv(a['high']['makespan_interval'])}",
                    f"{_iv(a['low']['speedup_interval'], 2)} – {_iv(a['high']['speedup_interval'], 2)}",
                    a["why"],
                ]
            )
        lines += [
            f"**{name}** (calibrated: makespan {sens['base']['makespan_s']:,.0f} s, "
            f"speed-up {sens['base']['speedup']:.2f}×)",
            "",
        ]
        lines += _table(
            ["assumption", "low / base / high", "makespan (s), low – high", "speed-up, low – high", "range, and why"],
            rows,
        )
    rows = []
    for sens in report["sensitivity"].values():
        for c in sens["conclusions"]:
            rows.append(
                [
                    c["scenario"],
                    c["conclusion"],
                    "yes" if c["holds_at_base"] else "no",
                    f"{c['holds_at']}/{c['points']}",
                    "**survives**"
                    if c["survives"]
                    else (
                        "fails at every point"
                        if not c["holds_at"] and not c["holds_at_base"]
                        else "broken by " + (", ".join(c["broken_by"]) or "the calibrated point")
                    ),
                ]
            )
    lines += ["Which conclusions survive the plausible range:", ""]
    lines += _table(["scenario", "conclusion", "at the calibrated point", "at the range's ends", "verdict"], rows)
    return lines


def _scenario_sections(report: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for name, s in report["scenarios"].items():
        p = s["paper"]
        lines += [f"## {name}: tokens per stage ({p['table']}; **fitted**)", ""]
        rows = []
        for stage in STAGES:
            ours, theirs = s["stages"][stage], p["stages"][stage]
            w = s["stage_windows"][stage]
            rows.append(
                [
                    stage.replace("_", " "),
                    _n(theirs["tokens_in"]),
                    _n(ours["tokens_in"]),
                    _n(ours["tokens_in"] / theirs["tokens_in"], 2),
                    _n(theirs["tokens_out"]),
                    _n(ours["tokens_out"]),
                    f"{theirs['window_s'][0]:,}–{theirs['window_s'][1]:,}",
                    f"{_iv(w['start'])} – {_iv(w['end'])}",
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
                "paper window (s)",
                "sim window (s, **emergent**)",
            ],
            rows,
        )
        lines += [f"## {name}: ablations ({p['ablation_table']}; makespans **emergent**)", ""]
        rows = []
        for variant, a in s["ablations"].items():
            bound = "> " if a["paper_is_lower_bound"] else ""
            remark = f" ({a['paper_remark']})" if a["paper_remark"] and a["paper_agents"] else ""
            rows.append(
                [
                    variant.replace("_", " "),
                    bound + _n(a["paper_agents"]),
                    bound + _n(a["paper_makespan_s"]) + remark,
                    _iv(a["agents"]),
                    _iv(a["makespan_s"]),
                    _iv(a["llm_calls"]),
                    _iv(a["cost_usd"], 2),
                    _iv(a["retries"]),
                ]
            )
        lines += _table(
            [
                "variant",
                "paper agents",
                "paper time (s)",
                "sim agents (input)",
                "sim makespan (s)",
                "sim LLM calls",
                "sim cost ($)",
                "sim retries",
            ],
            rows,
        )
        lines += [
            "Ablation agent counts are the paper's (its tables report them as outcomes of its runs; here they are "
            "inputs), except w/o parallelism, which runs the full scenario with one agent Processing at a time.",
            "",
        ]
    return lines


def _complexity(report: dict[str, Any]) -> list[str]:
    c = report["complexity"]
    lines = [
        "## Complexity: makespan versus N (§3.4)",
        "",
        f"Claim: {c['claim']}.",
        "",
        f"The {c['base_scenario']} scenario's latency, tokens and monitoring; {c['per_agent_work']}; seeds "
        f"{c['seeds'][0]}–{c['seeds'][-1]}. Balanced trees with fan-outs {c['grid']['main_fanout']} (parallel, serial, "
        f"and parallel with the global git mutex) and {', '.join(map(str, c['grid']['other_fanouts']))}; and the "
        "paper's regime, three levels whose fan-out grows with N. Every curve is fitted with tree depth, log N, √N, "
        "N and a power law; ΔAIC and ΔBIC are against the best model (0: best; above 10: no support).",
        "",
    ]
    rows = []
    for key, entry in c["curves"].items():
        models = entry.get("models")
        if not models:
            continue
        m = models["models"]
        pts = entry["points"]
        rows.append(
            [
                key,
                f"{pts[0]['agents']:,}–{pts[-1]['agents']:,}",
                *[
                    f"{m[k]['delta_aic']:.0f} / {m[k]['delta_bic']:.0f}"
                    for k in ("depth", "log", "sqrt", "linear", "power")
                ],
                f"{m['power']['b']:.2f} ± {m['power']['b_stderr']:.2f}",
                models["best_aic"],
            ]
        )
    lines += _table(
        ["curve", "N", "depth ΔAIC/ΔBIC", "log N", "√N", "N", "power", "power exponent", "best (AIC)"], rows
    )
    main = c["curves"].get(f"fanout{c['grid']['main_fanout']}/parallel", {})
    rows = []
    for p in main.get("points", []):
        n = p["agents"]
        cells = [f"{n:,}", p["levels"], _iv(p["makespan_s"])]
        for curve in ("serial", "parallel_git_lock"):
            other = c["curves"].get(f"fanout{c['grid']['main_fanout']}/{curve}", {}).get("points", [])
            match = [q for q in other if q["agents"] == n]
            cells.append(_iv(match[0]["makespan_s"]) if match else "—")
        rows.append(cells)
    lines += _table(["N", "levels", "parallel (s)", "serial (s)", "parallel with git mutex (s)"], rows)
    three = c["curves"].get("three_levels")
    verdict = "holds" if c["claim_holds_for_balanced_trees"] else "does not hold"
    lines += [
        f"Verdict (emergent): for balanced trees the claim **{verdict}** in the simulation: the parallel curves are "
        f"best fitted by {'tree depth or log N' if c['parallel_curves_log_like'] else 'other laws'} "
        f"({', '.join(c['parallel_curves_log_like']) or 'none'}) and the serial one grows like N. This is largely "
        "built in: with a bounded fan-out and unlimited concurrency, the makespan is the critical path down and up "
        "the tree, so it follows the tree's depth, a step function of log N.",
        "",
    ]
    if three:
        t = three["models"]["models"]
        pts = three["points"]
        lines += [
            f"In the paper's own regime, three fixed levels whose fan-out grows as √N (N = {pts[0]['agents']:,}–"
            f"{pts[-1]['agents']:,}), depth is constant and cannot explain anything; the makespan goes from "
            f"{_iv(pts[0]['makespan_s'])} s to {_iv(pts[-1]['makespan_s'])} s and the best model is "
            f"**{c['three_levels_best']}** (power exponent {t['power']['b']:.2f} ± {t['power']['b_stderr']:.2f}; "
            f"ΔAIC of log N {t['log']['delta_aic']:.0f}, √N {t['sqrt']['delta_aic']:.0f}, "
            f"N {t['linear']['delta_aic']:.0f}). "
            "What grows here is one admin's load: the slowest of more workers (latency and retries), and reviews "
            "that cover more deliveries (longer prompts, and with prefill longer calls). The paper's 590-agent run "
            "(three levels) sits in this regime, where the O(log n) argument, which needs a bounded fan-out, does not "
            "apply; that the growth still looks logarithmic here is a property of maxima of many latencies, not of "
            "the hierarchy.",
            "",
        ]
    cross = c["git_mutex_doubles_makespan_from_agents"]
    lines += [
        "The git-mutex curve is the one result not built in: one lock that every agent's writes take makes the run "
        "linear in N whatever the hierarchy"
        + (f"; it at least doubles the parallel makespan from N = {cross:,} on" if cross else "")
        + ". MegaAgent's shared storage, not its communication, sets its scaling.",
        "",
        f"![Makespan versus N]({report['figures']['complexity']})",
        "",
    ]
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown (figures referenced by relative path)."""
    seeds = report["seeds"]
    lines = [
        "# MegaAgent §2–§3 reproduced in simulation",
        "",
        f"Paper: {report['paper']}. Written by `megaactors reproduce section3` in {report['wall_s']:.0f} s "
        f"({report['runs']:,} simulated runs; seeds {seeds[0]}–{seeds[-1]}, calibration on seed {report['seed']}). "
        "Every figure in the *simulation* columns is read from runs made for this report; the *paper* columns are "
        "the paper's tables (megaactors/megaagent/paper.py). Intervals are 95 % confidence intervals of the mean "
        "over the seeds. Every row says its **basis**: *input* (set from the paper or an assumption), *fitted* "
        "(calibrated to the paper, so close to it by construction) or *emergent* (an outcome of the simulated "
        "mechanism). Verdicts use emergent rows only.",
        "",
        "## Verdicts (emergent rows only)",
        "",
    ]
    for v in report["verdicts"]:
        mark = "reproduced" if v["reproduced"] else "not reproduced"
        lines.append(f"- {v['scenario']}, {v['figure']}: **{mark}** ({v['text']}).")
    lines += ["", "## Summary", ""]
    lines += _summary(report)
    lines += _bound(report)
    lines += _mechanisms(report)
    lines += _latency(report)
    lines += _sensitivity(report)
    lines += _scenario_sections(report)
    lines += [
        f"![Stage windows]({report['figures']['gantt']})",
        "",
        f"![Ablations]({report['figures']['ablations']})",
        "",
        f"![State occupancy]({report['figures']['occupancy']})",
        "",
        f"![Tokens per stage]({report['figures']['stages']})",
        "",
        f"![Gobang timeline]({report['figures']['timeline']})",
        "",
    ]
    lines += _complexity(report)
    lines += ["## Paper inconsistencies", ""]
    lines += [f"- **{i['title']}**: {i['detail']}" for i in report["inconsistencies"]]
    lines += _calibration(report)
    lines += ["", "## Assumptions", ""]
    for name, s in report["scenarios"].items():
        lines += [f"**{name}**", "", *[f"- {a}" for a in s["assumptions"]], ""]
    lines += [
        "**complexity sweep**",
        "",
        f"- The {report['complexity']['base_scenario']} scenario's latency, prices and calibrated tokens; "
        f"{report['complexity']['per_agent_work']} (the reference code's MAX_SUBORDINATES is {MAX_SUBORDINATES}).",
        "",
        "## Not reproduced",
        "",
        "- Quality columns (game metrics met, judge ratings): they need a real LLM.",
        "- What the LLM decides: how many agents to recruit, how much to talk, how many calls a task takes. Here "
        "the tree and the loops are inputs and the token counts are fitted.",
        "- Refusing agents and the replacements admins recruit for them; the chatter a reminder starts (the "
        "reference log's first reminder round drew 54 calls from agents it did not remind); API errors and "
        "their immediate retries (in the measured latencies, not modelled apart).",
        "",
    ]
    return "\n".join(lines)


def _calibration(report: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## How the token model is calibrated",
        "",
        "For each scenario, with its seed: (1) the worker's loop length is the smallest whose run makes at least as "
        f"many LLM calls as the paper's input tokens divided by the reference log's mean prompt "
        f"({report['reference_prompt_tokens']:,.0f} tokens = {REFERENCE_LOG['tokens_in']:,} / "
        f"{REFERENCE_LOG['llm_calls']} calls), or the one just below if closer; (2) each stage's output tokens per "
        "call are the paper's output tokens of the stage over the stage's calls, repeated until the call counts are "
        "stable; (3) each stage's input tokens are an affine function of the three per-stage prompt sizes; four "
        "runs measure it, a 3×3 solve gives the prompt sizes and up to three correction passes remove what prefill "
        "latency moved. Result:",
        "",
    ]
    rows = []
    for name, s in report["scenarios"].items():
        for stage in STAGES:
            pc = s["calibration"]["per_call"][stage]
            rows.append([name, stage.replace("_", " "), _n(pc["new_tokens"]), _n(pc["output_tokens"])])
    lines += _table(["scenario", "stage", "prompt tokens per call", "output tokens per call"], rows)
    for name, s in report["scenarios"].items():
        cal = s["calibration"]
        lines.append(
            f"- {name}: a worker loop of {cal['task_calls']} LLM call(s) per task; the runs make "
            f"{s['summary']['llm_calls']:,.0f} calls on average against a target of {cal['target_llm_calls']:,}; "
            f"{cal['runs']} calibration runs." + "".join(f" Note: {n}." for n in cal["notes"])
        )
    return lines
