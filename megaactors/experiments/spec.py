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
from megaactors.network import FaultSpec, NetworkModel, parse_faults, parse_latency, parse_machines
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
    output_tokens: int = param(60, "tokens per LLM reply", unit="tokens", minimum=0, maximum=10**6)
    trace: bool = param(False, "record every state transition (memory grows with the run)")
    net_latency: str | None = param(
        None, "delivery latency: CHANNEL=SECONDS,... (intra, admin, hierarchy, cross) or one number for all", unit="s"
    )
    net_jitter: float = param(0.0, "uniform extra delivery latency of each copy", unit="s", minimum=0, maximum=86_400)
    machines: str | None = param(None, "machines: K (groups round-robin) or each group's machine, as 0,0,1,1")
    faults: str | None = param(
        None, "faults: drop=P,duplicate=P,delay=P,crash=P,... or a .toml/.json file (see the README)"
    )

    def __post_init__(self) -> None:
        for name, declaration in PARAMETERS.items():
            value = getattr(self, name)
            if name == "group_size" and value == OPTIMAL:
                raise ParameterError(f"group_size {OPTIMAL!r} is resolved by RunSpec.from_dict, not RunSpec()")
            checked = declaration.check(value)
            if checked is not value:
                object.__setattr__(self, name, checked)
        self.network()
        self.fault_spec()

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
        return SimulatedLLM(
            seed=self.seed,
            model=self.model,
            latency=LatencyModel(self.latency_median_s, self.latency_sigma, self.per_output_token_s),
            tokens=TokenModel(output_tokens=self.output_tokens),
        )

    def network(self) -> NetworkModel | None:
        """The network ``net_latency``, ``net_jitter`` and ``machines`` describe (None:
        every message arrives at once)."""
        if self.net_latency is None and not self.net_jitter and self.machines is None:
            return None
        latency, cross = parse_latency(self.net_latency) if self.net_latency is not None else ({}, 0.0)
        machines, count = parse_machines(self.machines) if self.machines is not None else (None, None)
        return NetworkModel(latency, cross, self.net_jitter, machines, count)

    def fault_spec(self) -> FaultSpec | None:
        """The faults ``faults`` describes (None: none)."""
        return None if self.faults is None else parse_faults(self.faults)

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
            **self._network_options(),
            **runtime_options,
        )

    def _network_options(self) -> dict[str, Any]:
        network, faults = self.network(), self.fault_spec()
        options: dict[str, Any] = {}
        if network is not None:
            options["network"] = network
        if faults is not None:
            options["faults"] = faults
        return options

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
