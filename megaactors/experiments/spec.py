"""A run described as plain parameters: what the command line, sweeps and the run
queue all hand to a runtime."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from megaactors.behaviours.chat_round import TEXT_BYTES, ChatRound
from megaactors.core.llm import PRICES, LatencyModel, SimulatedLLM, TokenModel
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError
from megaactors.experiments.closed_forms import OPTIMAL, optimal_group_size
from megaactors.providers.limits import LIMIT_SCOPES, ProviderModel
from megaactors.providers.presets import latency_model
from megaactors.validation import Param, declared, param

if TYPE_CHECKING:
    from megaactors.runtime.result import RunResult

__all__ = ["PARAMETERS", "TOPOLOGIES", "ParameterError", "RunSpec"]

TOPOLOGIES = ("flat", "star", "two-tier", "hierarchy")
_MANY = 10**9


def _runtimes() -> list[str]:
    from megaactors.runtime import RUNTIMES

    return list(RUNTIMES)


@dataclass(frozen=True)
class RunSpec:
    """Every parameter of one chat-round run, each declared once with its range, unit
    and help (:func:`~megaactors.validation.param`): the command line, sweeps, the
    run queue and forks all read these declarations."""

    topology: str = param("two-tier", "organisation", choices=lambda: TOPOLOGIES, noun="topology")
    agents: int = param(100, "number of agents N", minimum=1, maximum=_MANY, short="-n")
    group_size: int = param(10, "two-tier group size G", minimum=1, maximum=_MANY, short="-g", words=(OPTIMAL,))
    fanout: int = param(5, "hierarchy fan-out", minimum=2, maximum=_MANY, short="-k")
    rounds: int = param(1, "chat rounds", minimum=0, maximum=10**6, short="-r")
    seed: int = param(0, "random seed", minimum=0, maximum=2**63 - 1, short="-s")
    runtime: str = param("sim", "runtime", choices=_runtimes, noun="runtime")
    model: str = param("gpt-4o-mini", "priced LLM model", choices=lambda: sorted(PRICES), noun="model")
    serial: bool = param(False, "one agent Processing at a time (the paper's w/o parallelism)")
    max_concurrent_llm: int | None = param(None, "cap on LLM calls in flight", minimum=1, maximum=_MANY)
    message_bytes: int = param(200, "payload text per message", unit="bytes", minimum=0, maximum=TEXT_BYTES)
    latency_median_s: float = param(
        1.0, "median LLM latency", unit="s", minimum=0, maximum=86_400, old_flags=("--latency-median",)
    )
    latency_sigma: float = param(0.5, "lognormal sigma of LLM latency", minimum=0, maximum=10)
    per_output_token_s: float = param(0.02, "LLM latency per output token", unit="s", minimum=0, maximum=60)
    prefill_s_per_token: float = param(0.0, "LLM latency per prompt token", unit="s", minimum=0, maximum=60)
    llm_model: str | None = param(
        None, "latency model: a preset name or a model file from 'megaactors calibrate' (sets the four latency numbers)"
    )
    output_tokens: int = param(60, "tokens per LLM reply", unit="tokens", minimum=0, maximum=10**6)
    rpm: float | None = param(None, "provider limit: LLM requests per minute", minimum=0,
                              above_minimum=True, maximum=1e12)  # fmt: skip
    tpm: float | None = param(None, "provider limit: LLM tokens (prompt + reply) per minute", unit="tokens",
                              minimum=0, above_minimum=True, maximum=1e15)  # fmt: skip
    limit_scope: str = param("run", "who shares the rate limits: the whole run or each group",
                             choices=lambda: LIMIT_SCOPES, noun="limit scope")  # fmt: skip
    max_retries: int = param(3, "retries of a rate-limited, failed or timed-out LLM call", minimum=0, maximum=1000)
    llm_failure_rate: float = param(0.0, "probability that an LLM attempt fails (server error)", minimum=0,
                                    maximum=0.99)  # fmt: skip
    llm_timeout_s: float | None = param(None, "an LLM attempt slower than this fails", unit="s", minimum=0,
                                        above_minimum=True, maximum=86_400)  # fmt: skip
    trace: bool = param(False, "record every state transition (memory grows with the run)")

    def __post_init__(self) -> None:
        for name, declaration in PARAMETERS.items():
            value = getattr(self, name)
            if name == "group_size" and value == OPTIMAL:
                raise ParameterError(f"group_size {OPTIMAL!r} is resolved by RunSpec.from_dict, not RunSpec()")
            checked = declaration.check(value)
            if checked is not value:
                object.__setattr__(self, name, checked)
        if self.llm_model is not None:
            latency_model(self.llm_model)  # an unknown preset or a bad file is refused now
        self.provider().check_call_size(TokenModel().system_tokens + self.output_tokens)

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> RunSpec:
        """A spec from a mapping (a stored run, a grid point, parsed options);
        unknown names are an error and ``group_size="optimal"`` becomes the
        cost-minimising size for ``agents`` (the default size outside two-tier)."""
        unknown = sorted(set(params) - set(PARAMETERS))
        if unknown:
            raise ParameterError(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(PARAMETERS))}")
        if params.get("group_size") == OPTIMAL:
            topology = params.get("topology", cls.topology)
            agents = PARAMETERS["agents"].check(params.get("agents", cls.agents))
            size = optimal_group_size(agents) if topology == "two-tier" else cls.group_size
            params = {**params, "group_size": size}
        return cls(**params)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def validate(self) -> None:
        """Raise :class:`ParameterError` naming the first impossible parameter (a
        spec checks itself when it is made; this checks it again)."""
        for name, declaration in PARAMETERS.items():
            declaration.check(getattr(self, name))

    def organisation(self) -> Organisation:
        return Organisation.build(self.topology, self.agents, self.group_size, self.fanout)

    def behaviour(self) -> ChatRound:
        return ChatRound(rounds=self.rounds, message_bytes=self.message_bytes, output_tokens=self.output_tokens)

    def llm(self) -> SimulatedLLM:
        """The simulated LLM: the latency numbers of ``llm_model`` if set, else the spec's own."""
        if self.llm_model is not None:
            latency = latency_model(self.llm_model)
        else:
            latency = LatencyModel(
                self.latency_median_s, self.latency_sigma, self.per_output_token_s, self.prefill_s_per_token
            )
        return SimulatedLLM(
            seed=self.seed, model=self.model, latency=latency, tokens=TokenModel(output_tokens=self.output_tokens)
        )

    def provider(self) -> ProviderModel:
        """The provider's limits, retries and failures (inactive when none is set)."""
        return ProviderModel(
            rpm=self.rpm,
            tpm=self.tpm,
            scope=self.limit_scope,
            max_retries=self.max_retries,
            failure_rate=self.llm_failure_rate,
            timeout_s=self.llm_timeout_s,
            seed=self.seed,
        )

    def check_checkpointable(self) -> None:
        """Refuse what checkpointed runs do not carry yet: the provider's limits, failures
        and timeouts (their token buckets and retries are not in a checkpoint)."""
        if self.provider().active:
            raise ParameterError(
                "checkpointed and queued runs do not take rpm, tpm, llm_failure_rate or llm_timeout_s yet"
            )

    def build(self, **runtime_options: Any) -> Any:
        """The chosen runtime over this organisation and chat round, not yet started
        (to step it, e.g. with a :class:`~megaactors.experiments.collector.DataCollector`);
        ``runtime_options`` go to the runtime."""
        from megaactors.runtime import RUNTIMES

        return RUNTIMES[self.runtime](
            self.organisation(),
            self.behaviour(),
            self.llm(),
            seed=self.seed,
            max_concurrent_llm=self.max_concurrent_llm,
            serial=self.serial,
            trace=self.trace,
            provider=self.provider(),
            **runtime_options,
        )

    def execute(self, **runtime_options: Any) -> RunResult:
        """Build the organisation and run the chat round on the chosen runtime;
        ``runtime_options`` go to that runtime (e.g. ``time_scale`` for a live one)."""
        result = self.build(**runtime_options).run()
        result.params = self.result_params()
        return result

    def result_params(self) -> dict[str, Any]:
        """The parameters a run's summary reports beside its ledger figures."""
        return {
            "topology": self.topology,
            "group_size": self.group_size,
            "fanout": self.fanout,
            "rounds": self.rounds,
            "seed": self.seed,
            "model": self.model,
            "serial": self.serial,
        }


PARAMETERS: dict[str, Param] = declared(RunSpec)
"""The declaration of every run parameter, by name, in field order."""
