"""Fitting a scenario's token model to the paper's per-stage split (Tables 5 and 9).

Three steps, each a handful of simulated runs with the scenario's seed:

1. **Loop length.** ``Work.task_calls`` (LLM calls in a worker's function-call loop)
   is the smallest value whose run makes at least as many LLM calls as the paper's
   input tokens divided by the reference log's mean prompt (2.03 M tokens over 490
   calls), or the one just below if that is closer. It fixes how many calls share the
   tokens, so prompts come out near the size the reference code actually sends.
2. **Output tokens per call**, per stage: the paper's output tokens of the stage
   divided by the stage's LLM calls, repeated until the call counts stop changing
   (reply length changes latency, hence batching and the number of calls).
3. **New prompt tokens per call**, per stage. With the outputs fixed, each stage's
   input tokens are an affine function of the three per-stage prompt sizes (through
   the memory window, one stage's prompts feed the next calls' inputs), exact when
   latency does not depend on the prompt and nearly so with prefill latency (longer
   prompts shift timing, hence batching, a little). Four runs measure that function;
   solving the 3×3 system gives the prompt sizes that reproduce the paper's input
   tokens, and up to three correction passes (one run each) remove what prefill
   moved.

Everything else (system prompt, memory window, latency, tool times, monitoring
probabilities) stays as stated in the scenario.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from megaactors.behaviours.megaagent import STAGES, StageTokens, TokenPlan
from megaactors.megaagent.paper import PAPER, REFERENCE_LOG
from megaactors.megaagent.scenarios import Scenario

__all__ = ["REFERENCE_PROMPT_TOKENS", "Calibration", "calibrate", "stage_targets"]

REFERENCE_PROMPT_TOKENS = REFERENCE_LOG["tokens_in"] / REFERENCE_LOG["llm_calls"]
"""Mean prompt per LLM call in the reference repository's Gobang log (≈ 4,143 tokens)."""

_PROBE = 1000  # prompt tokens added to one stage to measure its effect
_CORRECTIONS = 3


@dataclass
class Calibration:
    """A calibrated scenario and how it was obtained."""

    scenario: Scenario
    targets: dict[str, tuple[int, int]]
    task_calls: int
    target_calls: int
    output_rounds: int
    runs: int
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        t = self.scenario.tokens
        return {
            "task_calls": self.task_calls,
            "target_llm_calls": self.target_calls,
            "reference_prompt_tokens": round(REFERENCE_PROMPT_TOKENS, 1),
            "output_rounds": self.output_rounds,
            "runs": self.runs,
            "per_call": {
                s: {"new_tokens": t.stage(s).new_tokens, "output_tokens": t.stage(s).output_tokens} for s in STAGES
            },
            "notes": list(self.notes),
        }


def stage_targets(name: str) -> dict[str, tuple[int, int]]:
    """``stage -> (input tokens, output tokens)`` from the paper's table for scenario ``name``."""
    return {s: (row[0], row[1]) for s, row in PAPER[name]["stages"].items()}


def _by_stage(scenario: Scenario, seed: int) -> dict[str, dict[str, float]]:
    led = scenario.run(seed).ledger
    return {s: led.by_stage.get(s, {"llm_calls": 0, "tokens_in": 0, "tokens_out": 0}) for s in STAGES}


def _with_tokens(scenario: Scenario, new: dict[str, int], out: dict[str, int]) -> Scenario:
    plan = TokenPlan(*(StageTokens(max(1, int(new[s])), max(1, int(out[s]))) for s in STAGES))
    return scenario.but(tokens=plan)


def calibrate(
    scenario: Scenario,
    seed: int = 1,
    targets: dict[str, tuple[int, int]] | None = None,
    *,
    fit_loop: bool = True,
    max_task_calls: int = 400,
) -> Calibration:
    """Fit ``scenario``'s per-stage tokens (and loop length) to ``targets``
    (default: the paper's table for the scenario's name)."""
    targets = targets or stage_targets(scenario.name)
    runs = 0
    notes: list[str] = []
    total_in = sum(t[0] for t in targets.values())
    target_calls = round(total_in / REFERENCE_PROMPT_TOKENS)

    # 1. loop length
    if fit_loop:
        best = None
        for m in range(scenario.work.deliveries, max_task_calls + 1):
            calls = scenario.but(work=replace(scenario.work, task_calls=m)).run(seed).ledger.llm_calls
            runs += 1
            if best is None or abs(calls - target_calls) < abs(best[1] - target_calls):
                best = (m, calls)
            if calls >= target_calls:
                break
        assert best is not None
        scenario = scenario.but(work=replace(scenario.work, task_calls=best[0]))
        if best[1] < 0.8 * target_calls or best[1] > 1.2 * target_calls:
            notes.append(f"loop length {best[0]} gives {best[1]} LLM calls against a target of {target_calls}")

    # 2. output tokens per call
    new = {s: scenario.tokens.stage(s).new_tokens for s in STAGES}
    out = {s: scenario.tokens.stage(s).output_tokens for s in STAGES}
    rounds = 0
    calls_seen: dict[str, float] = {}
    for rounds in range(1, 9):  # noqa: B007 - the count is reported
        stats = _by_stage(_with_tokens(scenario, new, out), seed)
        runs += 1
        calls = {s: stats[s]["llm_calls"] for s in STAGES}
        missing = [s for s in STAGES if not calls[s]]
        if missing:
            raise ValueError(f"scenario {scenario.name!r} makes no LLM call in stage(s) {', '.join(missing)}")
        if calls == calls_seen:
            break
        calls_seen = calls
        out = {s: max(1, round(targets[s][1] / calls[s])) for s in STAGES}
    scenario = _with_tokens(scenario, new, out)

    # 3. prompt tokens per call: input = base + M @ new, exactly
    zero = dict.fromkeys(STAGES, 1)  # 1, not 0: see StageTokens
    base_stats = _by_stage(_with_tokens(scenario, zero, out), seed)
    runs += 1
    base = np.array([base_stats[s]["tokens_in"] for s in STAGES], dtype=float)
    columns = []
    for s in STAGES:
        probe = dict(zero, **{s: 1 + _PROBE})
        stats = _by_stage(_with_tokens(scenario, probe, out), seed)
        runs += 1
        columns.append((np.array([stats[x]["tokens_in"] for x in STAGES], dtype=float) - base) / _PROBE)
    m = np.column_stack(columns)
    want = np.array([targets[s][0] for s in STAGES], dtype=float)
    free = list(range(len(STAGES)))
    solution = np.zeros(len(STAGES))
    while free:  # non-negative least squares by elimination: a stage that would need a
        # negative prompt gets none, and the others are solved again
        sub = np.linalg.lstsq(m[np.ix_(free, free)], (want - base)[free], rcond=None)[0]
        if (sub >= 0).all():
            solution[free] = sub
            break
        worst = free[int(np.argmin(sub))]
        notes.append(
            f"stage {STAGES[worst]} exceeds its input tokens even with a 1-token prompt (memory and messages "
            "alone are more than the target)"
        )
        free.remove(worst)
    new = {s: 1 + round(solution[i]) for i, s in enumerate(STAGES)}
    for _ in range(_CORRECTIONS):  # prefill: timing, hence batching, moves with the prompts
        stats = _by_stage(_with_tokens(scenario, new, out), seed)
        runs += 1
        got = np.array([stats[x]["tokens_in"] for x in STAGES], dtype=float)
        off = (want - got)[free] if free else np.zeros(0)
        if not free or np.all(np.abs(off) <= 0.002 * want[free]):
            break
        step = np.linalg.lstsq(m[np.ix_(free, free)], off, rcond=None)[0]
        for k, i in enumerate(free):
            new[STAGES[i]] = max(1, round(new[STAGES[i]] + step[k]))
    return Calibration(
        scenario=_with_tokens(scenario, new, out),
        targets=targets,
        task_calls=scenario.work.task_calls,
        target_calls=target_calls,
        output_rounds=rounds,
        runs=runs,
        notes=notes,
    )
