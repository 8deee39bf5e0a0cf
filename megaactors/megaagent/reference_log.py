"""What the reference repository's own Gobang log says about its run, measured.

The reference code (github.com/Xtra-Computing/MegaAgent) ships the log of one run:
``log.txt`` (every LLM call's running token totals, with a timestamp) and
``logs/<agent>.log`` (every message, LLM reply and tool result of one agent, with a
timestamp). :func:`analyse` rebuilds from them each LLM call's interval (from the
agent's previous entry to its reply) and each tool call's (from the reply naming the
function to the function's result), pairs calls with their token counts by time, and
returns the figures the reproduction takes its measured parameters from:

* the latency model: least squares of latency on input and output tokens, and the
  median and log-spread of what is left;
* busy time (LLM and tool time summed over agents) against the makespan: the
  run's mean concurrency, which bounds what one-at-a-time execution could lose;
* tool durations by name (the shortest ``write_file`` is the mutex hold without
  waiting);
* the main loop's reminder rounds, the LLM calls each reminder caused and the
  boss's proofreading; write conflicts; the size of what ``read_file`` returns.

The numbers it gives for the shipped log are pinned in
:data:`megaactors.megaagent.paper.REFERENCE_LOG`; run
``python -m megaactors.megaagent.reference_log DIR`` on a checkout to recompute them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["analyse"]

_AGENT_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - (\w+) - INFO - (.*)")
_ROOT_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): (.*)")
_TOKENS = re.compile(r"^Input token: (\d+), Output token: (\d+)")
_ELAPSED = re.compile(r"^Time elapsed: ([\d.]+) seconds")
_FUNCTION_CALL = re.compile(r"'function_call': \{'name': '(\w+)'")
_FUNCTION_RESULT = re.compile(r"^\{'role': 'function', 'name': '(\w+)'")
_REMINDER = "Other agents have terminated"
_PROOFREAD = "All the agents have terminated"
_CONFLICT = ("Merge conflict", "incorrect commit hash", "Git error")


def _time(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _entries(path: Path, pattern: re.Pattern[str]) -> list[tuple[float, list[str]]]:
    """Log entries as (time, lines): a line that starts no entry continues the last."""
    out: list[tuple[float, list[str]]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = pattern.match(line)
        if m:
            out.append((_time(m.group(1)), list(m.groups()[1:])))
        elif out:
            out[-1][1][-1] += "\n" + line
    return out


def _agent_events(path: Path) -> list[tuple[float, str, str | None, str]]:
    """(time, kind, function, text) of every entry: kind is user, assistant or function."""
    events = []
    for t, (_, body) in _entries(path, _AGENT_LINE):
        if body.startswith("{'role': 'assistant'"):
            fn = _FUNCTION_CALL.search(body)
            events.append((t, "assistant", fn.group(1) if fn else None, body))
        elif body.startswith("{'role': 'function'"):
            fn = _FUNCTION_RESULT.match(body)
            events.append((t, "function", fn.group(1) if fn else None, body))
        elif body.startswith(("{'role': 'user'", "{'role': 'system'", "user:")):
            events.append((t, "user", None, body))
    return events


def _latency_fit(latency: np.ndarray, tokens_in: np.ndarray, tokens_out: np.ndarray) -> dict[str, float]:
    x = np.column_stack([np.ones_like(latency), tokens_in, tokens_out])
    (_, per_in, per_out), *_ = np.linalg.lstsq(x, latency, rcond=None)
    base = np.clip(latency - per_in * tokens_in - per_out * tokens_out, 0.05, None)
    return {
        "calls": len(latency),
        "prefill_s_per_token": float(per_in),
        "per_output_token_s": float(per_out),
        "base_median_s": float(np.median(base)),
        "base_sigma": float(np.std(np.log(base))),
    }


def analyse(directory: Path | str) -> dict[str, Any]:
    """Measure the run logged in ``directory`` (``log.txt`` and ``logs/*.log``)."""
    directory = Path(directory)
    root = directory / "log.txt"
    agent_files = sorted((directory / "logs").glob("*.log"))
    if not root.is_file() or not agent_files:
        raise FileNotFoundError(f"{directory} holds no log.txt and logs/*.log of a reference run")
    tokens: list[tuple[float, int, int]] = []
    previous = (0, 0)
    makespan = None
    for t, (body,) in _entries(root, _ROOT_LINE):
        m = _TOKENS.match(body)
        if m:
            now = (int(m.group(1)), int(m.group(2)))
            tokens.append((t, now[0] - previous[0], now[1] - previous[1]))
            previous = now
        m = _ELAPSED.match(body)
        if m:
            makespan = float(m.group(1))
    calls: list[tuple[str, float, float]] = []
    tools: dict[str, list[float]] = defaultdict(list)
    reminders: list[dict[str, Any]] = []
    conflicts = writes = 0
    read_chars: list[int] = []
    for path in agent_files:
        agent = path.stem
        events = _agent_events(path)
        for k, (t, kind, fn, body) in enumerate(events):
            if kind == "assistant" and k:
                calls.append((agent, events[k - 1][0], t))
            elif kind == "function" and k and events[k - 1][1] == "assistant":
                tools[fn or "?"].append(t - events[k - 1][0])
                if fn == "write_file":
                    writes += 1
                    conflicts += any(c in body for c in _CONFLICT)
                elif fn == "read_file":
                    read_chars.append(len(body))
            elif kind == "user" and (_REMINDER in body or _PROOFREAD in body):
                n = 0
                for later in events[k + 1 :]:
                    if later[1] == "assistant":
                        n += 1
                        if later[2] == "terminate":
                            break
                reminders.append({"agent": agent, "time": t, "calls": n, "proofread": _PROOFREAD in body})
    if not calls or not tokens:
        raise ValueError(f"{directory}: no LLM call found in the logs")
    makespan = makespan or max(c[2] for c in calls) - min(c[1] for c in calls)
    ends = np.array([c[2] for c in calls])
    pairs = []
    for t, tin, tout in tokens:  # the token line is logged in the same millisecond as the reply
        k = int(np.argmin(np.abs(ends - t)))
        if abs(ends[k] - t) < 0.05:
            pairs.append((calls[k][2] - calls[k][1], tin, tout))
    lat, tin, tout = (np.array(col, dtype=float) for col in zip(*pairs, strict=True))
    llm_busy = float(sum(c[2] - c[1] for c in calls))
    tool_busy = float(sum(sum(v) for v in tools.values()))
    rounds = sorted({round(r["time"]) for r in reminders if not r["proofread"]})
    plain = [r for r in reminders if not r["proofread"]]
    agents = [p.stem for p in agent_files]
    return {
        "agents": len(agents),
        "llm_calls": len(tokens),
        "tokens_in": previous[0],
        "tokens_out": previous[1],
        "makespan_s": round(makespan, 1),
        "latency": _latency_fit(lat, tin, tout),
        "llm_busy_s": round(llm_busy, 1),
        "tool_busy_s": round(tool_busy, 1),
        "mean_concurrency": round((llm_busy + tool_busy) / makespan, 3),
        "tools": {
            name: {"calls": len(v), "mean_s": round(float(np.mean(v)), 3), "min_s": round(float(np.min(v)), 3)}
            for name, v in sorted(tools.items())
        },
        "writes": writes,
        "write_conflicts": conflicts,
        "read_file_tokens": round(float(np.mean(read_chars)) / 4, 1) if read_chars else 0.0,
        "reminder_rounds": len(_cluster(rounds)),
        "reminded_per_round": [sum(1 for r in plain if c[0] <= round(r["time"]) <= c[-1]) for c in _cluster(rounds)],
        "calls_per_reminder": round(float(np.mean([r["calls"] for r in plain])), 2) if plain else 0.0,
        "proofread_calls": sum(r["calls"] for r in reminders if r["proofread"]),
    }


def _cluster(times: list[int], gap: int = 30) -> list[list[int]]:
    """Reminder times grouped into rounds (a round's reminders come within seconds)."""
    groups: list[list[int]] = []
    for t in times:
        if groups and t - groups[-1][-1] <= gap:
            groups[-1].append(t)
        else:
            groups.append([t])
    return groups


def main(argv: list[str]) -> int:
    """``python -m megaactors.megaagent.reference_log DIR``: the figures as JSON (exit 2 on bad input)."""
    if len(argv) != 1:
        print(
            "usage: python -m megaactors.megaagent.reference_log DIR  (a checkout holding log.txt and logs/)",
            file=sys.stderr,
        )
        return 2
    try:
        stats = analyse(argv[0])
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(stats, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
