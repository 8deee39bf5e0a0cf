"""Runtimes execute behaviours; the simulation runtime is the default.

``RUNTIMES`` maps a runtime's name to its class. Every runtime is constructed as
``Runtime(org, behaviour, llm, *, seed, max_concurrent_llm, serial, trace)`` and
returns a :class:`RunResult` from ``run()``.
"""

from megaactors.runtime.result import RunResult
from megaactors.runtime.sim import SimRuntime

RUNTIMES: dict[str, type] = {"sim": SimRuntime}

__all__ = ["RUNTIMES", "RunResult", "SimRuntime"]
