"""A run described as plain parameters: what the command line, sweeps and the run
queue all hand to a runtime."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from megaactors.behaviours import registry
from megaactors.behaviours.chat_round import TEXT_BYTES
from megaactors.core.behaviour import check_organisation
from megaactors.core.graph_families import FAMILIES
from megaactors.core.llm import PRICES, LatencyModel, Price, SimulatedLLM, TokenModel
from megaactors.core.organisation import GRAPH_PREFIX, Organisation
from megaactors.errors import OrganisationError, ParameterError
from megaactors.experiments.closed_forms import OPTIMAL, optimal_group_size
from megaactors.network import FaultSpec, NetworkModel, parse_faults, parse_latency, parse_machines
from megaactors.providers.limits import LIMIT_SCOPES, ProviderModel
from megaactors.providers.presets import latency_model
from megaactors.validation import Param, declared, param

if TYPE_CHECKING:
    from megaactors.runtime.result import RunResult

__all__ = ["BEHAVIOUR_PREFIX", "BUILT_IN_TOPOLOGIES", "PARAMETERS", "TOPOLOGIES", "ParameterError", "RunSpec"]

BUILT_IN_TOPOLOGIES = ("flat", "star", "two-tier", "hierarchy")
TOPOLOGIES = (*BUILT_IN_TOPOLOGIES, *FAMILIES)
"""Topologies by name; ``graph:PATH`` (a graph file) is one too."""
BEHAVIOUR_PREFIX = "behaviour."
"""``behaviour.NAME`` in a grid, ``--param`` or ``--set`` is the behaviour parameter NAME."""
_MANY = 10**9


def _runtimes() -> list[str]:
    from megaactors.runtime import RUNTIMES

    return list(RUNTIMES)


@dataclass(frozen=True)
class RunSpec:
    """Every parameter of one run, each declared once with its range, unit and help
    (:func:`~megaactors.validation.param`): the command line, sweeps, the run queue
    and forks all read these declarations. The behaviour's own parameters ride in
    ``behaviour_params`` (``behaviour.NAME`` in grids and ``NAME=VALUE`` options)."""

    topology: str = param(
        "two-tier",
        f"organisation: a built-in one, a generated graph, or {GRAPH_PREFIX}PATH (GraphML, GML, node-link JSON or an "
        "edge list; --agents then comes from the file)",
        choices=lambda: TOPOLOGIES,
        prefixes=(GRAPH_PREFIX,),
        noun="topology",
    )
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
    degree: float = param(
        4.0,
        "generated graphs: small-world neighbours K (even), scale-free edges per new node M, random mean degree",
        minimum=0,
        above_minimum=True,
        maximum=_MANY,
    )
    rewire: float = param(0.1, "small-world: probability of rewiring each edge", minimum=0, maximum=1)
    behaviour: str = param(
        "chat-round", "agent logic: a registered name (megaactors behaviours) or package.module:Class", noun="behaviour"
    )
    price_in: float | None = param(
        None, "input price (default: the model's list price)", unit="$ per M tokens", minimum=0, maximum=1e6
    )
    price_out: float | None = param(
        None, "output price (default: the model's list price)", unit="$ per M tokens", minimum=0, maximum=1e6
    )
    net_latency: str | None = param(
        None, "delivery latency: CHANNEL=SECONDS,... (intra, admin, hierarchy, cross) or one number for all", unit="s"
    )
    net_jitter: float = param(0.0, "uniform extra delivery latency of each copy", unit="s", minimum=0, maximum=86_400)
    machines: str | None = param(None, "machines: K (groups round-robin) or each group's machine, as 0,0,1,1")
    faults: str | None = param(
        None, "faults: drop=P,duplicate=P,delay=P,crash=P,... or a .toml/.json file (see the README)"
    )
    behaviour_params: dict[str, Any] = field(default_factory=dict, hash=False)
    """The behaviour's constructor arguments (plain JSON data), by name."""
    behaviour_version: str | None = field(default=None, compare=False)
    """The behaviour's version when the run was made (:mod:`~megaactors.behaviours.registry`);
    a spec with another version than the installed one is refused."""

    def __post_init__(self) -> None:
        for name, declaration in PARAMETERS.items():
            value = getattr(self, name)
            if name == "group_size" and value == OPTIMAL:
                raise ParameterError(f"group_size {OPTIMAL!r} is resolved by RunSpec.from_dict, not RunSpec()")
            checked = declaration.check(value)
            if checked is not value:
                object.__setattr__(self, name, checked)
        if not isinstance(self.behaviour_params, dict):
            raise ParameterError(f"behaviour_params must be a dict of NAME: VALUE, got {self.behaviour_params!r}")
        shared = sorted(set(self.behaviour_params) & set(PARAMETERS))
        if shared:
            raise ParameterError(
                f"behaviour parameter(s) {', '.join(shared)} are run parameters: set them as such "
                "(RunSpec.from_dict moves them)"
            )
        params = registry.check_jsonable(self.behaviour, self.behaviour_params)
        object.__setattr__(self, "behaviour_params", params)
        info = registry.resolve(self.behaviour)
        if self.behaviour_version is not None and self.behaviour_version != info.version:
            raise ParameterError(
                f"behaviour {self.behaviour!r} is version {info.version} here, but the run was made with version "
                f"{self.behaviour_version}: run it where that version is installed, or start a new run"
            )
        self.build_behaviour()  # refuses unknown or impossible behaviour parameters now, not mid-run
        if self.llm_model is not None:
            latency_model(self.llm_model)  # an unknown preset or a bad file is refused now
        self.provider().check_call_size(TokenModel().system_tokens + self.output_tokens)
        self.network()
        self.fault_spec()

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> RunSpec:
        """A spec from a mapping (a stored run, a grid point, parsed options);
        unknown names are an error and ``group_size="optimal"`` becomes the
        cost-minimising size for ``agents`` (the default size outside two-tier).
        ``behaviour.NAME`` keys are behaviour parameters; a ``graph:PATH`` topology
        gets its absolute path and the file's agent count; the installed behaviour's
        version is recorded unless the mapping names one (a stored run)."""
        params = _lift_behaviour_params(params)
        unknown = sorted(set(params) - set(PARAMETERS) - _EXTRA_FIELDS)
        if unknown:
            raise ParameterError(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(PARAMETERS))}")
        topology = params.get("topology", cls.topology)
        if isinstance(topology, str) and topology.startswith(GRAPH_PREFIX) and len(topology) > len(GRAPH_PREFIX):
            params = {**params, **_graph_file(topology)}
        if params.get("behaviour_version") is None:
            name = params.get("behaviour", cls.behaviour)
            params = {**params, "behaviour_version": registry.resolve(name).version if isinstance(name, str) else None}
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
        return Organisation.build(
            self.topology,
            self.agents,
            self.group_size,
            self.fanout,
            degree=self.degree,
            rewire=self.rewire,
            seed=self.seed,
        )

    def build_behaviour(self) -> Any:
        """The run's behaviour, built from its name, its parameters and the run
        parameters its constructor names."""
        run_parameters = {name: getattr(self, name) for name in PARAMETERS}
        return registry.build(self.behaviour, self.behaviour_params, run_parameters)

    def prices(self) -> Price:
        """The prices the run pays: the model's list price unless overridden."""
        listed = PRICES[self.model]
        return Price(
            listed.input_per_m if self.price_in is None else self.price_in,
            listed.output_per_m if self.price_out is None else self.price_out,
        )

    def llm(self) -> SimulatedLLM:
        """The simulated LLM: the latency numbers of ``llm_model`` if set, else the spec's own."""
        if self.llm_model is not None:
            latency = latency_model(self.llm_model)
        else:
            latency = LatencyModel(
                self.latency_median_s, self.latency_sigma, self.per_output_token_s, self.prefill_s_per_token
            )
        return SimulatedLLM(
            seed=self.seed,
            model=self.model,
            latency=latency,
            tokens=TokenModel(output_tokens=self.output_tokens),
            prices={**PRICES, self.model: self.prices()},
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

    def build(self, llm: Any = None, runtime_class: Any = None, **runtime_options: Any) -> Any:
        """The chosen runtime over this organisation and chat round, not yet started
        (to step it, e.g. with a :class:`~megaactors.experiments.collector.DataCollector`);
        ``llm`` replaces the simulated LLM (a real endpoint's client), ``runtime_class``
        the runtime :attr:`runtime` names (built the same way); ``runtime_options`` go
        to the runtime."""
        from megaactors.runtime import RUNTIMES

        org = self.organisation()
        behaviour = self.build_behaviour()
        check_organisation(behaviour, org)
        return (runtime_class or RUNTIMES[self.runtime])(
            org,
            behaviour,
            llm if llm is not None else self.llm(),
            seed=self.seed,
            max_concurrent_llm=self.max_concurrent_llm,
            serial=self.serial,
            trace=self.trace,
            provider=self.provider(),
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

    def execute(self, llm: Any = None, **runtime_options: Any) -> RunResult:
        """Build the organisation and run the chat round on the chosen runtime (with
        ``llm`` instead of the simulated LLM, if given); ``runtime_options`` go to that
        runtime (e.g. ``time_scale`` for a live one)."""
        result = self.build(llm, **runtime_options).run()
        result.params = self.result_params()
        return result

    def result_params(self) -> dict[str, Any]:
        """The parameters a run's summary reports beside its ledger figures."""
        prices = self.prices()
        return {
            "topology": self.topology,
            "group_size": self.group_size,
            "fanout": self.fanout,
            "degree": self.degree,
            "rewire": self.rewire,
            "rounds": self.rounds,
            "seed": self.seed,
            "model": self.model,
            "price_in": prices.input_per_m,
            "price_out": prices.output_per_m,
            "serial": self.serial,
            "behaviour": self.behaviour,
            "behaviour_params": dict(self.behaviour_params),
            "behaviour_version": self.behaviour_version or registry.resolve(self.behaviour).version,
        }


PARAMETERS: dict[str, Param] = declared(RunSpec)
"""The declaration of every run parameter, by name, in field order."""
_EXTRA_FIELDS = {"behaviour_params", "behaviour_version"}


def _lift_behaviour_params(params: dict[str, Any]) -> dict[str, Any]:
    """``behaviour.NAME`` keys into ``behaviour_params``; behaviour parameters named
    like run parameters become those run parameters."""
    dotted = {k[len(BEHAVIOUR_PREFIX) :]: v for k, v in params.items() if k.startswith(BEHAVIOUR_PREFIX)}
    given = params.get("behaviour_params") or {}
    if not isinstance(given, dict):
        raise ParameterError(f"behaviour_params must be a dict of NAME: VALUE, got {given!r}")
    if not dotted and not set(given) & set(PARAMETERS):
        return params
    out = {k: v for k, v in params.items() if not k.startswith(BEHAVIOUR_PREFIX)}
    merged = {**given, **dotted}
    for name in [k for k in merged if k in PARAMETERS]:
        out[name] = merged.pop(name)
    out["behaviour_params"] = merged
    return out


def _graph_file(topology: str) -> dict[str, Any]:
    """A graph file's absolute path and agent count, for a ``graph:PATH`` topology."""
    from megaactors.core.graph_files import graph_counts

    path = os.path.abspath(os.path.expanduser(topology[len(GRAPH_PREFIX) :]))
    try:
        counts = graph_counts(path)
    except OrganisationError as exc:
        raise ParameterError(f"topology {topology}: {exc}") from None
    return {"topology": GRAPH_PREFIX + path, "agents": counts.agents}
