"""A run described as plain parameters: what the command line, sweeps and the run
queue all hand to a runtime."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from megaactors.behaviours.chat_round import ChatRound
from megaactors.core.llm import PRICES, LatencyModel, SimulatedLLM, TokenModel
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError
from megaactors.runtime.result import RunResult

__all__ = ["TOPOLOGIES", "ParameterError", "RunSpec"]

TOPOLOGIES = ("flat", "star", "two-tier", "hierarchy")


@dataclass(frozen=True)
class RunSpec:
    """Every parameter of one chat-round run."""

    topology: str = "two-tier"
    agents: int = 100
    group_size: int = 10
    fanout: int = 5
    rounds: int = 1
    seed: int = 0
    runtime: str = "sim"
    model: str = "gpt-4o-mini"
    serial: bool = False
    max_concurrent_llm: int | None = None
    message_bytes: int = 200
    latency_median_s: float = 1.0
    latency_sigma: float = 0.5
    per_output_token_s: float = 0.02
    output_tokens: int = 60
    trace: bool = False

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> RunSpec:
        """A spec from a mapping; unknown names are an error."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - names)
        if unknown:
            raise ParameterError(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**params)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def validate(self) -> None:
        """Raise :class:`ParameterError` naming the first impossible parameter."""

        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ParameterError(message)

        def integer(name: str, minimum: int) -> None:
            value = getattr(self, name)
            need(
                isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
                f"{name.replace('_', ' ')} must be an integer >= {minimum}, got {value!r}",
            )

        need(
            self.topology in TOPOLOGIES, f"unknown topology {self.topology!r}; expected one of {', '.join(TOPOLOGIES)}"
        )
        integer("agents", 1)
        integer("group_size", 1)
        integer("fanout", 2)
        integer("rounds", 0)
        integer("seed", 0)
        integer("message_bytes", 0)
        integer("output_tokens", 0)
        if self.max_concurrent_llm is not None:
            integer("max_concurrent_llm", 1)
        need(self.model in PRICES, f"unknown model {self.model!r}; priced models: {', '.join(sorted(PRICES))}")
        for name in ("latency_median_s", "latency_sigma", "per_output_token_s"):
            value = getattr(self, name)
            need(
                isinstance(value, (int, float)) and value >= 0,
                f"{name.replace('_', ' ')} must be a number >= 0, got {value!r}",
            )
        from megaactors.runtime import RUNTIMES

        need(self.runtime in RUNTIMES, f"unknown runtime {self.runtime!r}; expected one of {', '.join(RUNTIMES)}")

    def organisation(self) -> Organisation:
        return Organisation.build(self.topology, self.agents, self.group_size, self.fanout)

    def behaviour(self) -> ChatRound:
        return ChatRound(rounds=self.rounds, message_bytes=self.message_bytes, output_tokens=self.output_tokens)

    def llm(self) -> SimulatedLLM:
        return SimulatedLLM(
            seed=self.seed,
            model=self.model,
            latency=LatencyModel(self.latency_median_s, self.latency_sigma, self.per_output_token_s),
            tokens=TokenModel(output_tokens=self.output_tokens),
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
