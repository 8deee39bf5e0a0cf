"""The two runs of MegaAgent §3 as simulated scenarios, their ablations and what a
run measures.

A :class:`Scenario` is everything one simulated run needs besides the seed: the
recruitment plan, the function-call loop, monitoring, the main loop, per-stage
tokens, the priced model, its latency and the API's limits. :data:`GOBANG` and
:data:`POLICY` hold the stated assumptions (their token counts are starting points:
:mod:`megaactors.megaagent.calibration` fits them to the paper's per-stage split).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from megaactors.behaviours.megaagent import (
    STAGES,
    MegaAgent,
    Monitoring,
    OuterLoop,
    StageTokens,
    TokenPlan,
    TreePlan,
    Work,
    stage_windows,
    total_retries,
)
from megaactors.core.llm import PRICES, LatencyModel, SimulatedLLM, TokenModel
from megaactors.core.organisation import Organisation
from megaactors.megaagent.paper import PAPER, REFERENCE_LOG
from megaactors.providers.limits import ProviderModel
from megaactors.runtime.result import RunResult
from megaactors.runtime.sim import SimRuntime

__all__ = [
    "GOBANG",
    "POLICY",
    "PREFILL_S_PER_TOKEN",
    "REVIEW_TOKENS",
    "SCENARIOS",
    "VARIANTS",
    "ApiLimits",
    "Scenario",
    "measure",
    "policy_plan",
]

VARIANTS = ("full", "no_parallelism", "no_hierarchy", "no_monitoring")
"""The ablations of Tables 4 and 8."""

PREFILL_S_PER_TOKEN = REFERENCE_LOG["latency"]["prefill_s_per_token"]
"""Seconds of latency per prompt token: the least-squares slope of the reference log's
call latencies on their input tokens (gpt-4.1, 444 calls; about 13,000 tokens/s)."""
REVIEW_TOKENS = REFERENCE_LOG["read_file_tokens"]
"""Tokens a reviewer reads per delivery: the mean ``read_file`` result of the reference log."""


@dataclass(frozen=True)
class ApiLimits:
    """What the LLM provider allows: a cap on calls in flight (extra calls wait in
    order) and its rate limits, retries and failures."""

    max_concurrent_llm: int | None = None
    provider: ProviderModel | None = None

    def __post_init__(self) -> None:
        cap = self.max_concurrent_llm
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
            raise ValueError(f"max_concurrent_llm must be an integer >= 1 or None, got {cap!r}")


@dataclass(frozen=True)
class Scenario:
    """One simulated MegaAgent run, but for its seed."""

    name: str
    plan: TreePlan
    tokens: TokenPlan
    work: Work = field(default_factory=Work)
    monitoring: Monitoring = field(default_factory=Monitoring)
    model: str = "gpt-4o-mini"
    latency: LatencyModel = field(default_factory=LatencyModel)
    system_tokens: int = 500
    memory_window: int = 10
    bytes_per_token: int = 4
    fanout_cap: int | None = None
    """Recruits per agent the organisation allows (``None``: the plan's largest fan-out)."""
    serial: bool = False
    """One agent Processing at a time (the "w/o parallelism" ablation)."""
    outer_loop: OuterLoop = field(default_factory=OuterLoop)
    limits: ApiLimits = field(default_factory=ApiLimits)

    def __post_init__(self) -> None:
        if self.model not in PRICES:
            raise ValueError(f"unknown model {self.model!r}; priced models: {', '.join(sorted(PRICES))}")

    @property
    def cap(self) -> int:
        return self.fanout_cap if self.fanout_cap is not None else self.plan.max_fanout

    def organisation(self) -> Organisation:
        """A lone boss; everyone else is recruited during the run."""
        return Organisation.hierarchy(1, max(2, self.cap))

    def llm(self, seed: int) -> SimulatedLLM:
        return SimulatedLLM(
            seed=seed,
            model=self.model,
            latency=self.latency,
            tokens=TokenModel(
                system_tokens=self.system_tokens,
                bytes_per_token=self.bytes_per_token,
                memory_window=self.memory_window,
                output_tokens=self.tokens.task_solving.output_tokens,
            ),
        )

    def behaviour(self, seed: int) -> MegaAgent:
        return MegaAgent(
            self.plan,
            self.tokens,
            self.work,
            self.monitoring,
            seed=seed,
            bytes_per_token=self.bytes_per_token,
            outer_loop=self.outer_loop,
        )

    def runtime(self, seed: int = 1, *, trace: bool = False) -> SimRuntime:
        return SimRuntime(
            self.organisation(),
            self.behaviour(seed),
            self.llm(seed),
            seed=seed,
            serial=self.serial,
            trace=trace,
            max_concurrent_llm=self.limits.max_concurrent_llm,
            provider=self.limits.provider,
        )

    def run(self, seed: int = 1, *, trace: bool = False) -> RunResult:
        result = self.runtime(seed, trace=trace).run()
        result.params = {"scenario": self.name, "seed": seed, "model": self.model, "serial": self.serial}
        return result

    def but(self, **changes: Any) -> Scenario:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def variant(self, name: str, agents: int | None = None) -> Scenario:
        """The ablation ``name`` of this scenario, with ``agents`` agents (default: the same)."""
        n = self.plan.agents if agents is None else agents
        if name == "full":
            return self.but(plan=TreePlan(n, self.plan.fanouts))
        if name == "no_parallelism":
            return self.but(plan=TreePlan(n, self.plan.fanouts), serial=True)
        if name == "no_hierarchy":
            return self.but(plan=TreePlan.flat(n), fanout_cap=None)
        if name == "no_monitoring":
            return self.but(plan=TreePlan(n, self.plan.fanouts), monitoring=replace(self.monitoring, enabled=False))
        raise ValueError(f"unknown variant {name!r}; expected one of {', '.join(VARIANTS)}")


def measure(result: RunResult) -> dict[str, Any]:
    """The figures the report compares, all read from one run."""
    led, org = result.ledger, result.org
    per_level = [0] * (org.depth() + 1)
    for lvl in org.level:
        per_level[lvl] += 1
    windows = stage_windows(result.states)
    stages = {}
    for stage in STAGES:
        row = led.by_stage.get(stage, {"llm_calls": 0, "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0})
        stages[stage] = {
            "llm_calls": int(row["llm_calls"]),
            "tokens_in": int(row["tokens_in"]),
            "tokens_out": int(row["tokens_out"]),
            "cost_usd": round(row["cost_usd"], 6),
            "window_s": [round(x, 3) for x in windows.get(stage, [0.0, 0.0])],
        }
    return {
        "agents": org.n,
        "levels": len(per_level),
        "agents_per_level": per_level,
        "makespan_s": round(led.virtual_time_s, 3),
        "tokens_in": led.tokens_in,
        "tokens_out": led.tokens_out,
        "cost_usd": round(led.cost_usd, 6),
        "llm_calls": led.llm_calls,
        "mean_prompt_tokens": round(led.tokens_in / led.llm_calls, 1) if led.llm_calls else 0.0,
        "messages": led.messages,
        "messages_by_channel": dict(led.messages_by_channel),
        "bytes": led.bytes,
        "retries": total_retries(result.states),
        "tool_calls": led.tool_calls,
        "lock_wait_s": round(led.lock_wait_s, 3),
        "llm_time_s": round(led.llm_time_s, 3),
        "tool_time_s": round(led.tool_time_s, 3),
        "busy_s": round(led.llm_time_s + led.tool_time_s, 3),
        "mean_concurrency": round((led.llm_time_s + led.tool_time_s) / led.virtual_time_s, 4)
        if led.virtual_time_s
        else 0.0,
        "conflicts": sum(s["conflicts"] for s in result.states),
        "batches": sum(led.per_agent["batches"]),
        "peak_llm_in_flight": led.peak_llm_in_flight,
        "stages": stages,
    }


def policy_plan(agents: int) -> TreePlan:
    """Boss → the paper's 9 ministers → everyone else split evenly among them (three levels)."""
    ministers = PAPER["policy"]["level_one_agents"]
    return TreePlan(agents, (ministers, -(-(agents - 1 - ministers) // ministers)))


# ---------------------------------------------------------------------- the two runs
# Token counts below are starting points for the calibration, not results.

GOBANG = Scenario(
    name="gobang",
    plan=TreePlan(7, (2, 2)),  # boss → 2 admins → 2 workers each: 7 agents, three levels
    tokens=TokenPlan(StageTokens(2000, 3000), StageTokens(500, 200), StageTokens(1000, 300)),
    work=Work(task_calls=40, deliveries=4, retry_calls=2, git_s=0.5, tool_s=2.0, review_tokens=REVIEW_TOKENS),
    monitoring=Monitoring(checklist_failure=0.2, review_failure=0.2, boss_failure=0.1, retry_cap=30),
    model="gpt-4o",
    latency=LatencyModel(median_s=1.0, sigma=0.5, per_output_token_s=0.0125, prefill_s_per_token=PREFILL_S_PER_TOKEN),
)

POLICY = Scenario(
    name="policy",
    plan=policy_plan(590),  # boss → 9 ministers → 580 testers and experts: three levels
    tokens=TokenPlan(StageTokens(2000, 2000), StageTokens(500, 150), StageTokens(1000, 500)),
    work=Work(task_calls=3, retry_calls=1, git_s=0.5, tool_s=0.5, review_tokens=REVIEW_TOKENS),
    monitoring=Monitoring(checklist_failure=0.2, review_failure=0.2, boss_failure=0.1, retry_cap=30),
    model="gpt-4o-mini",
    latency=LatencyModel(median_s=0.8, sigma=0.5, per_output_token_s=0.010, prefill_s_per_token=PREFILL_S_PER_TOKEN),
)

SCENARIOS: dict[str, Scenario] = {"gobang": GOBANG, "policy": POLICY}
