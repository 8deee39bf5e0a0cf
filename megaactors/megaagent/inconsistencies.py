"""Where the paper's own numbers disagree with each other, with its reference code, or
with the simulation in a way worth a comment. Every figure is computed here from
:mod:`megaactors.megaagent.paper` (and, where named, a simulated record)."""

from __future__ import annotations

from typing import Any

from megaactors.core.llm import PRICES
from megaactors.megaagent.paper import MAX_SUBORDINATES, PAPER, REFERENCE_LOG

__all__ = ["paper_inconsistencies"]


def paper_inconsistencies(simulated: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """``[{"title", "detail"}]``; ``simulated`` (the report's scenario records) adds the
    comparisons that need a run."""
    g, p = PAPER["gobang"], PAPER["policy"]
    out: list[dict[str, str]] = []
    price = PRICES[p["model"]]
    at_list = price.cost(p["total"][0], p["total"][1])
    out.append(
        {
            "title": "Policy cost",
            "detail": f"the paper reports ${p['cost_usd']:.2f}; its own token table (Table 9: "
            f"{p['total'][0]:,} input and {p['total'][1]:,} output tokens) at {p['model']}'s list price "
            f"(${price.input_per_m} and ${price.output_per_m} per million) comes to ${at_list:.2f}, "
            f"{p['cost_usd'] / at_list:.1f}× less. The report's cost rows compare with both.",
        }
    )
    ratios = []
    for name, s in (("Gobang", g), ("policy", p)):
        ratios.append(f"{name} {s['total'][0] / s['total'][1]:.1f}:1 in the table against ≈ {s['text_token_ratio']}:1")
    out.append(
        {
            "title": "Input-to-output token ratios",
            "detail": "the tables give " + "; ".join(ratios) + " in the text.",
        }
    )
    out.append(
        {
            "title": "Gobang makespan",
            "detail": f"Table 4 reports {g['makespan_s']} s for the full run; Table 5's stage windows run to "
            f"{g['total'][3]} s (merging {g['stages']['merging'][2]}–{g['stages']['merging'][3]} s). Policy: "
            f"{p['makespan_s']:,} s against windows to {p['total'][3]:,} s.",
        }
    )
    stopped = p["ablations"]["no_parallelism"]
    out.append(
        {
            "title": "Policy w/o parallelism is a lower bound on a different run",
            "detail": f"the run was stopped after more than {stopped['time_s']:,} s with more than "
            f"{stopped['agents']} agents, so '> {p['parallel_speedup']:.1f}×' compares a stopped, smaller run with "
            f"the full {p['agents']}-agent one; the figures draw it as a bound, not a value.",
        }
    )
    out.append(
        {
            "title": "Time per agent",
            "detail": f"{g['time_per_agent_s']} s (Gobang) and {p['time_per_agent_s']} s (policy) are the makespan "
            "divided by the number of agents, not a time any agent spent.",
        }
    )
    out.append(
        {
            "title": "590 agents in three levels against the reference code's caps",
            "detail": f"the reference code lets an agent recruit at most {MAX_SUBORDINATES} subordinates (checked "
            f"with >, so {MAX_SUBORDINATES + 1}); the policy prompt allows the boss 'no more than 10' more "
            f"ministers. Three levels then hold at most about 1 + 17 + 17 × {MAX_SUBORDINATES + 1} = "
            f"{1 + 17 + 17 * (MAX_SUBORDINATES + 1)} agents, not {p['agents']}.",
        }
    )
    out.append(
        {
            "title": "The reference log is not the paper's run",
            "detail": f"it is a {REFERENCE_LOG['agents']}-agent Gobang run of {REFERENCE_LOG['makespan_s']} s with "
            f"gpt-4.1 (the code's config.py), the paper's a {g['agents']}-agent GPT-4o run of {g['makespan_s']} s. "
            f"Its busy time over makespan is {REFERENCE_LOG['mean_concurrency']:.2f}: if its serial form did the "
            f"same work it would be about {REFERENCE_LOG['mean_concurrency']:.1f}× slower, not "
            f"{g['parallel_speedup']:.1f}×.",
        }
    )
    if simulated:
        a = simulated["gobang"]["ablations"]
        full, flat = a["full"]["makespan_s"]["mean"], a["no_hierarchy"]["makespan_s"]["mean"]
        paper_flat = g["ablations"]["no_hierarchy"]
        faster = "faster" if flat < full else "slower"
        out.append(
            {
                "title": "Gobang without hierarchy",
                "detail": f"the paper's run without hierarchy ({paper_flat['agents']} agents, "
                f"{paper_flat['time_s']} s) "
                f"is slower than the full one ({g['makespan_s']} s); in the simulation it is {faster} "
                f"({flat:,.0f} s against {full:,.0f} s, means over seeds): with fewer agents there is less to "
                "recruit, review and merge, and nothing in the mechanism makes a flat group slower. The paper's "
                "difference must come from what its LLM did, which a simulation with the same loop lengths "
                "cannot show.",
            }
        )
        cal = simulated["policy"]["calibration"]
        calls = simulated["policy"]["summary"]["llm_calls"]
        if abs(calls / cal["target_llm_calls"] - 1) > 0.1:
            out.append(
                {
                    "title": "Policy LLM calls against the calibration's target",
                    "detail": f"the target ({cal['target_llm_calls']:,} calls: the paper's input tokens over the "
                    f"reference log's mean prompt) is missed by {calls / cal['target_llm_calls'] - 1:+.0%}: one call "
                    f"per worker task is the shortest loop, and with checks, reviews, notes and retries the "
                    f"{p['agents']} agents already make {calls:,.0f} calls. The policy run's prompts are therefore "
                    "shorter than the Gobang log's; its token totals still match the paper (they are fitted per "
                    "stage).",
                }
            )
    return out
