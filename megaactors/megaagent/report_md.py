"""The §3 reproduction's report as Markdown, written from the report dict alone."""

from __future__ import annotations

from typing import Any

from megaactors.megaagent.markdown import interval_text, number, table, value_text
from megaactors.megaagent.paper import MAX_SUBORDINATES, REFERENCE_LOG
from megaactors.megaagent.report_sections import calibration_section, complexity_section, scenario_sections

__all__ = ["render_markdown"]


def _digits(row: dict[str, Any]) -> int:
    return 2 if row["unit"] in ("×", "$") else 0


def _summary(report: dict[str, Any]) -> list[str]:
    rows = []
    for r in report["summary_rows"]:
        d = _digits(r)
        paper = "—" if r["paper"] is None else ("> " if r["paper_is_lower_bound"] else "") + number(r["paper"], d)
        rows.append(
            [
                r["scenario"],
                r["figure"],
                f"**{r['basis']}**",
                paper,
                interval_text(r["simulation"], d),
                number(r["ratio"], 2),
            ]
        )
    return table(["scenario", "figure", "basis", "paper", "simulation, mean [95 % CI]", "ratio"], rows)


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
                interval_text(b["parallel_makespan_s"]),
                interval_text(b["parallel_busy_s"]),
                interval_text(b["mean_concurrency"], 2),
                interval_text(b["serial_over_parallel_work"], 2),
                interval_text(b["speedup"], 2),
                ("> " if b["paper_is_lower_bound"] else "") + f"{b['paper_speedup']:.2f}",
                "—" if b["paper_is_lower_bound"] else interval_text(b["needed_extra_serial_s"]),
                "—" if b["paper_is_lower_bound"] else f"{b['needed_extra_fraction']['mean']:+.0%}",
                f"{b['needed_mean_concurrency']['mean']:.2f} of {b['paper_agents']}",
            ]
        )
    lines += table(
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
            f"(or sit idle that long: {g['needed_idle_per_batch_s']['mean']:.0f} s before each of its "
            f"{g['serial_batches']['mean']:.0f} batches, as if idle agents polled every "
            f"{2 * g['needed_idle_per_batch_s']['mean']:.0f} s), or its 7 agents would have to be busy "
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
    lines += table(
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
                    interval_text(res["makespan_s"]),
                    interval_text(res["serial_makespan_s"]),
                    interval_text(res["speedup"], 2),
                    interval_text(res["mean_concurrency"], 2),
                    interval_text(res["llm_calls"]),
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
        lines += table(
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
                    " / ".join(value_text(a[k]) for k in ("low", "base_value", "high")).replace("{", ""),
                    " – ".join(interval_text(a[end]["makespan_interval"]) for end in ("low", "high")),
                    " – ".join(interval_text(a[end]["speedup_interval"], 2) for end in ("low", "high")),
                    a["why"],
                ]
            )
        lines += [
            f"**{name}** (calibrated: makespan {sens['base']['makespan_s']:,.0f} s, "
            f"speed-up {sens['base']['speedup']:.2f}×)",
            "",
        ]
        lines += table(
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
    lines += table(["scenario", "conclusion", "at the calibrated point", "at the range's ends", "verdict"], rows)
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown (figures referenced by relative path)."""
    seeds = report["seeds"]
    lines = [
        "# MegaAgent §2–§3 reproduced in simulation",
        "",
        f"Paper: {report['paper']}. Written by `megaactors reproduce section3` "
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
    lines += scenario_sections(report)
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
    lines += complexity_section(report)
    lines += ["## Paper inconsistencies", ""]
    lines += [f"- **{i['title']}**: {i['detail']}" for i in report["inconsistencies"]]
    lines += calibration_section(report)
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
