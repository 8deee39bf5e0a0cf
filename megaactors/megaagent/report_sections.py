"""The §3 report's detailed sections: per-scenario tokens and ablations, the
complexity sweep, and how the token model is calibrated."""

from __future__ import annotations

from typing import Any

from megaactors.behaviours.megaagent import STAGES
from megaactors.megaagent.markdown import interval_text, number, table
from megaactors.megaagent.paper import REFERENCE_LOG

__all__ = ["calibration_section", "complexity_section", "scenario_sections"]


def scenario_sections(report: dict[str, Any]) -> list[str]:
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
                    number(theirs["tokens_in"]),
                    number(ours["tokens_in"]),
                    number(ours["tokens_in"] / theirs["tokens_in"], 2),
                    number(theirs["tokens_out"]),
                    number(ours["tokens_out"]),
                    f"{theirs['window_s'][0]:,}–{theirs['window_s'][1]:,}",
                    f"{interval_text(w['start'])} – {interval_text(w['end'])}",
                ]
            )
        lines += table(
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
                    bound + number(a["paper_agents"]),
                    bound + number(a["paper_makespan_s"]) + remark,
                    interval_text(a["agents"]),
                    interval_text(a["makespan_s"]),
                    interval_text(a["llm_calls"]),
                    interval_text(a["cost_usd"], 2),
                    interval_text(a["retries"]),
                ]
            )
        lines += table(
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


def complexity_section(report: dict[str, Any]) -> list[str]:
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
    lines += table(["curve", "N", "depth ΔAIC/ΔBIC", "log N", "√N", "N", "power", "power exponent", "best (AIC)"], rows)
    main = c["curves"].get(f"fanout{c['grid']['main_fanout']}/parallel", {})
    rows = []
    for p in main.get("points", []):
        n = p["agents"]
        cells = [f"{n:,}", p["levels"], interval_text(p["makespan_s"])]
        for curve in ("serial", "parallel_git_lock"):
            other = c["curves"].get(f"fanout{c['grid']['main_fanout']}/{curve}", {}).get("points", [])
            match = [q for q in other if q["agents"] == n]
            cells.append(interval_text(match[0]["makespan_s"]) if match else "—")
        rows.append(cells)
    lines += table(["N", "levels", "parallel (s)", "serial (s)", "parallel with git mutex (s)"], rows)
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
            f"{interval_text(pts[0]['makespan_s'])} s to {interval_text(pts[-1]['makespan_s'])} s and the best "
            "model is "
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


def calibration_section(report: dict[str, Any]) -> list[str]:
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
            rows.append([name, stage.replace("_", " "), number(pc["new_tokens"]), number(pc["output_tokens"])])
    lines += table(["scenario", "stage", "prompt tokens per call", "output tokens per call"], rows)
    for name, s in report["scenarios"].items():
        cal = s["calibration"]
        lines.append(
            f"- {name}: a worker loop of {cal['task_calls']} LLM call(s) per task; the runs make "
            f"{s['summary']['llm_calls']:,.0f} calls on average against a target of {cal['target_llm_calls']:,}; "
            f"{cal['runs']} calibration runs." + "".join(f" Note: {n}." for n in cal["notes"])
        )
    return lines
