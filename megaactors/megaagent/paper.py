"""The paper's numbers: the only constants the reproduction compares against.

MegaAgent, arXiv:2408.09955 v3 (ACL Findings 2025), §3: Gobang game with GPT-4o
(Tables 3, 4 and 5) and national policy generation with GPT-4o-mini (Tables 6, 8
and 9); the reference repository's own log of one Gobang run. Nothing here is an
input to a simulation except where the report says so (the agent counts of the
ablation rows, which the paper's tables give as outcomes of its runs).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ABLATION_TABLES",
    "COMPLEXITY_CLAIM",
    "MAX_SUBORDINATES",
    "PAPER",
    "REFERENCE_LOG",
    "RETRY_CAP",
    "STAGE_TABLES",
]

PAPER: dict[str, dict[str, Any]] = {
    "gobang": {
        "source": "Tables 3, 4, 5 (Gobang game, GPT-4o)",
        "model": "gpt-4o",
        "agents": 7,
        "makespan_s": 800,
        "time_per_agent_s": 114,
        "levels": None,
        "ablations": {
            "full": {"agents": 7, "time_s": 800},
            "no_hierarchy": {"agents": 5, "time_s": 920},
            "no_parallelism": {"agents": 7, "time_s": 4505},
            "no_monitoring": {"agents": 7, "time_s": 300},
        },
        "parallel_speedup": 4505 / 800,
        "stages": {
            # stage: (input tokens, output tokens, time window start, end)
            "planning": (42_947, 12_347, 0, 60),
            "task_solving": (1_098_573, 55_022, 30, 840),
            "merging": (22_099, 1_493, 840, 870),
        },
        "total": (1_163_619, 68_862, 0, 870),
        "cost_usd": None,
    },
    "policy": {
        "source": "Tables 6, 8, 9 (national policy generation, GPT-4o-mini)",
        "model": "gpt-4o-mini",
        "agents": 590,
        "makespan_s": 2991,
        "time_per_agent_s": 5,
        "levels": 3,
        "ablations": {
            "full": {"agents": 590, "time_s": 2991},
            "no_hierarchy": {"agents": 19, "time_s": 450, "remark": "incomplete output"},
            # more than 100 agents, stopped after more than 14,400 s: both are lower bounds
            "no_parallelism": {"agents": 100, "time_s": 14_400, "lower_bound": True, "remark": "stopped"},
            "no_monitoring": {"agents": 50, "time_s": 667, "remark": "placeholders left"},
        },
        "parallel_speedup": 14_400 / 2991,
        "parallel_speedup_is_lower_bound": True,
        "stages": {
            "planning": (111_601, 24_103, 0, 180),
            "task_solving": (8_003_124, 343_670, 20, 2950),
            "merging": (348_264, 13_280, 2400, 3000),
        },
        "total": (8_463_989, 381_053, 0, 3000),
        "cost_usd": 3.30,
        # v2 text: 9 ministers recruited, each recruiting dozens; three levels
        "level_one_agents": 9,
    },
}

STAGE_TABLES = {"gobang": "Table 5", "policy": "Table 9"}
ABLATION_TABLES = {"gobang": "Table 4", "policy": "Table 8"}

REFERENCE_LOG: dict[str, Any] = {
    "source": "the reference repository's log of one Gobang run",
    "agents": 6,
    "makespan_s": 887,
    "llm_calls": 490,
    "tokens_in": 2_030_000,
    "tokens_out": 55_000,
}
"""Used for one assumption: the mean prompt per LLM call (about 4.1 k tokens)."""

COMPLEXITY_CLAIM = "§3.4: layer-to-layer communication O(log n) with groups in parallel; serial frameworks O(n)"
MAX_SUBORDINATES = 5
"""The reference code's cap on subordinates per agent (checked with ``>``)."""
RETRY_CAP = 30
"""v1/v2: retries per agent per round."""
