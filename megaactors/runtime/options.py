"""What every runtime is: the :class:`Runtime` protocol, its :class:`RuntimeOptions`,
and the registry of runtimes by name.

Every runtime is built the same way::

    Runtime(org, behaviour, llm=None, options=None, **option_fields)

where ``options`` is a :class:`RuntimeOptions` and ``option_fields`` are any of its
fields (``seed=1, serial=True`` is ``RuntimeOptions(seed=1, serial=True)``); a runtime
may take a few keyword options of its own besides (``event_loop`` for asyncio,
``switch_interval`` for pykka). ``run()`` returns a
:class:`~megaactors.runtime.result.RunResult`. A runtime joins the command line,
sweeps and the conformance suite by adding itself to :data:`RUNTIMES`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Protocol

from megaactors.errors import ParameterError

if TYPE_CHECKING:
    from megaactors.core.ledger import Ledger
    from megaactors.core.organisation import Organisation
    from megaactors.network import FaultSpec, NetworkModel
    from megaactors.providers.limits import ProviderModel
    from megaactors.runtime.result import RunResult

__all__ = ["DEFAULT_TIME_SCALE", "Runtime", "RuntimeFactory", "RuntimeOptions"]

DEFAULT_TIME_SCALE = 0.01
"""Wall seconds per virtual second on a live runtime by default: a 1 s simulated LLM
call waits 10 ms."""


@dataclass(frozen=True)
class RuntimeOptions:
    """How a run executes, whatever runtime executes it."""

    seed: int = 0
    """Seed of the default simulated LLM."""
    max_concurrent_llm: int | None = None
    """Cap on LLM calls in flight (an API rate limit); extra calls wait in FIFO order."""
    serial: bool = False
    """One agent Processing at a time (MegaAgent's "w/o parallelism")."""
    trace: bool = True
    """Record every state transition and batch."""
    tools: Mapping[str, Callable[[Any], Any]] | None = None
    """Tool functions by name; a tool call with no function returns None."""
    time_scale: float | None = None
    """Live runtimes: wall seconds per virtual second (None: :data:`DEFAULT_TIME_SCALE`).
    Runtimes in virtual time ignore it."""
    provider: ProviderModel | None = None
    """The LLM provider's rate limits, retries and failures
    (:class:`~megaactors.providers.limits.ProviderModel`; None: every call answers).
    Applied to the simulated LLM; a real endpoint's client retries by itself."""
    network: NetworkModel | None = None
    """Delivery latency per channel and placement on machines (None: instantaneous)."""
    faults: FaultSpec | None = None
    """Seeded faults and recovery (None: none; see :mod:`megaactors.network.faults`)."""

    def __post_init__(self) -> None:
        cap = self.max_concurrent_llm
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
            raise ParameterError(f"max concurrent llm must be an integer >= 1, got {cap!r}")
        scale = self.time_scale
        if scale is not None and (
            not isinstance(scale, (int, float)) or isinstance(scale, bool) or not 0 < scale < math.inf
        ):
            raise ParameterError(f"time scale must be a finite number > 0, got {scale!r}")

    @classmethod
    def build(cls, options: RuntimeOptions | None = None, **changes: Any) -> RuntimeOptions:
        """``options`` (default: the defaults) with ``changes`` applied; an unknown
        name is a :class:`~megaactors.errors.ParameterError`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ParameterError(f"unknown runtime option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        base = options if options is not None else cls()
        return replace(base, **changes) if changes else base

    def llm_provider(self) -> ProviderModel | None:
        """The provider model LLM calls go through: :attr:`provider` with the injected
        LLM faults of :attr:`faults` (``llm``), which share its retry path; a default
        one seeded with :attr:`seed` when only the faults fail calls."""
        faults = self.faults
        if faults is None or not faults.may("llm"):
            return self.provider
        from megaactors.providers.limits import ProviderModel

        return replace(self.provider or ProviderModel(seed=self.seed), faults=faults)

    @property
    def wall_per_virtual_s(self) -> float:
        """:attr:`time_scale`, or its default."""
        return DEFAULT_TIME_SCALE if self.time_scale is None else float(self.time_scale)


class Runtime(Protocol):
    """A runtime: executes one behaviour over one organisation and reports the run."""

    name: str
    """The runtime's name in :data:`RUNTIMES` and in every result."""
    org: Organisation
    ledger: Ledger
    options: RuntimeOptions

    def run(self) -> RunResult:
        """Run until no agent has anything left to do; return the result."""
        ...

    def result(self) -> RunResult:
        """Ledger, trace and behaviour states as they stand."""
        ...


RuntimeFactory = Callable[..., Runtime]
"""What :data:`~megaactors.runtime.RUNTIMES` holds: a runtime class, called as
``factory(org, behaviour, llm=None, options=None, **option_fields)``."""
