"""Runtimes execute behaviours; the simulation runtime is the default.

Every runtime has the :class:`~megaactors.runtime.options.Runtime` protocol and is
built as ``Runtime(org, behaviour, llm=None, options=None, **option_fields)`` with a
:class:`~megaactors.runtime.options.RuntimeOptions`; ``run()`` returns a
:class:`RunResult`. ``RUNTIMES`` maps each runtime's name to its class: a runtime
registered there is offered by the command line and sweeps and run through the
conformance suite.
"""

from megaactors.runtime.aio import AsyncioRuntime
from megaactors.runtime.options import Runtime, RuntimeFactory, RuntimeOptions
from megaactors.runtime.result import RunResult
from megaactors.runtime.sim import SimRuntime
from megaactors.runtime.stepper import StepRuntime
from megaactors.runtime.threads import PykkaRuntime

RUNTIMES: dict[str, RuntimeFactory] = {
    "sim": SimRuntime,
    "asyncio": AsyncioRuntime,
    "pykka": PykkaRuntime,
    "step": StepRuntime,
}

__all__ = [
    "RUNTIMES",
    "AsyncioRuntime",
    "PykkaRuntime",
    "RunResult",
    "Runtime",
    "RuntimeFactory",
    "RuntimeOptions",
    "SimRuntime",
    "StepRuntime",
]
