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
    "REFERENCE_CODE",
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
        "parallel_speedup_is_lower_bound": False,
        "stages": {
            # stage: (input tokens, output tokens, time window start, end)
            "planning": (42_947, 12_347, 0, 60),
            "task_solving": (1_098_573, 55_022, 30, 840),
            "merging": (22_099, 1_493, 840, 870),
        },
        "total": (1_163_619, 68_862, 0, 870),
        "cost_usd": None,
        "text_token_ratio": 23,  # "about 23:1" input to output tokens in the text
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
        "text_token_ratio": 25,  # "about 25:1" in the text
        # v2 text: 9 ministers recruited, each recruiting dozens; three levels
        "level_one_agents": 9,
    },
}

STAGE_TABLES = {"gobang": "Table 5", "policy": "Table 9"}
ABLATION_TABLES = {"gobang": "Table 4", "policy": "Table 8"}

REFERENCE_LOG: dict[str, Any] = {
    "source": "the reference repository's log of one Gobang run (log.txt, logs/*.log; model gpt-4.1, April 2025)",
    "agents": 6,
    "makespan_s": 887.4,
    "llm_calls": 490,
    "tokens_in": 2_033_617,
    "tokens_out": 54_598,
    # measured by megaactors.megaagent.reference_log.analyse on the shipped log
    "latency": {
        "calls": 444,
        "prefill_s_per_token": 7.54e-5,
        "per_output_token_s": 0.00822,
        "base_median_s": 1.19,
        "base_sigma": 0.63,
    },
    "llm_busy_s": 1274.4,
    "tool_busy_s": 641.9,
    "mean_concurrency": 2.159,
    "write_file_min_s": 0.277,
    "write_file_mean_s": 1.725,
    "other_tool_mean_s": 1.25,
    "writes": 30,
    "write_conflicts": 0,
    "read_file_tokens": 929,
    "reminder_rounds": 2,
    "reminded_per_round": (3, 2),
    "calls_per_reminder": 5.6,
    "proofread_calls": 11,
}
"""The reference run, measured. ``other_tool_mean_s`` is the mean duration of its
tool calls that hold no git lock (``exec_python_file``, ``input``, ``read_file``:
19 × 0.965 s, 76 × 2.092 s, 70 × 0.425 s); ``write_file_min_s`` is its shortest
file write, the git mutex hold without waiting; ``mean_concurrency`` is LLM and tool
time summed over agents over the makespan."""

REFERENCE_CODE: dict[str, str] = {
    "main_loop_poll": "main.py: the main loop sleeps 1 s between checks that every agent is idle",
    "main_loop_rounds": (
        "main.py and examples/policy_making/main.py: once every agent is idle, every agent whose TODO file is "
        "non-empty is re-prompted; the policy loop joins all threads of a round before the next; when no TODO "
        "is left the boss reads and checks all output files"
    ),
    "wake_on_enqueue": "agent.py: Agent.enqueue starts the agent's thread when it is idle (no polling)",
    "git_mutex": (
        "utils.py: write_file holds the one git_lock through a checkout, the write, time.sleep(0.2), add, "
        "commit and merge; read_file and every prompt's TODO read hold it briefly"
    ),
    "stale_state": (
        "utils.py: write_file with an old base_commit_hash checks that commit out, commits and merges; a merge "
        "conflict is returned to the agent, which has to read the file again and rewrite it"
    ),
    "retries": "llm.py: get_llm_response retries a failed request at once, without backoff, until it has a reply",
    "memory": "config.py: MAX_MEMORY = 10 (messages in each prompt), MAX_ROUNDS = 20 (tool rounds per activation)",
    "subordinates": "config.py: MAX_SUBORDINATES = 5, checked with > (6 get through); the policy example caps at 5 too",
}
"""Where each mechanism of the reference code lives (paths in github.com/Xtra-Computing/MegaAgent)."""

COMPLEXITY_CLAIM = "§3.4: layer-to-layer communication O(log n) with groups in parallel; serial frameworks O(n)"
MAX_SUBORDINATES = 5
"""The reference code's cap on subordinates per agent (checked with ``>``)."""
RETRY_CAP = 30
"""v1/v2: retries per agent per round."""
