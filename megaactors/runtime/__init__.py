"""Runtimes execute behaviours; the simulation runtime is the default.

``RUNTIMES`` maps a runtime's name to its class. Every runtime is constructed as
``Runtime(org, behaviour, llm, *, seed, max_concurrent_llm, serial, trace)`` and
returns a :class:`RunResult` from ``run()``. The live runtimes (``asyncio``,
``pykka``) also take ``time_scale``: wall seconds per virtual second.
"""

from megaactors.runtime.aio import AsyncioRuntime
from megaactors.runtime.result import RunResult
from megaactors.runtime.sim import SimRuntime
from megaactors.runtime.threads import PykkaRuntime

RUNTIMES: dict[str, type] = {"sim": SimRuntime, "asyncio": AsyncioRuntime, "pykka": PykkaRuntime}

__all__ = ["RUNTIMES", "AsyncioRuntime", "PykkaRuntime", "RunResult", "SimRuntime"]
