"""Per-step data collection: model-level and agent-level series of a run as DataFrames.

:class:`DataCollector` follows Mesa's convention — ``collect(model)`` records one row
of model variables and one row per agent, ``model_frame()`` / ``agent_frame()``
(also spelled ``get_model_vars_dataframe()`` / ``get_agent_vars_dataframe()``) return
them — and adds the driving loop a simulation needs: :meth:`DataCollector.run` starts
a runtime and collects after every super-step (every event in the next window of
``step_s`` virtual seconds that holds one, as durable runs checkpoint) or after every
``every_events`` events.

It needs only what :class:`Steppable` declares (``start``, ``step``, ``advance``,
``next_event_time``, ``finished``, ``now``, ``steps``, ``agents`` with their ``state``,
``queued(agent)`` and a ``ledger``), so any runtime that exposes those can be collected
from.

Model columns: ``step`` (collections so far), ``events``, ``time`` (virtual seconds),
``idle`` / ``processing`` / ``response`` (agents in each state), ``queued`` (messages
waiting in all in-queues), ``longest_queue``, and the running totals ``messages``,
``bytes``, ``llm_calls``, ``tokens_in``, ``tokens_out``, ``tokens``, ``cost_usd``.
Agent columns: ``step``, ``time``, ``agent``, ``state``, ``queue`` and the agent's running
``sent``, ``received``, ``llm_calls``, ``tokens_in``, ``tokens_out``, ``cost_usd``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from megaactors.core.agent import AgentState
from megaactors.core.ledger import Ledger
from megaactors.runtime.events import superstep_end
from megaactors.runtime.gc_tuning import paused_gc

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "AGENT_VARIABLES",
    "MODEL_VARIABLES",
    "CollectorError",
    "DataCollector",
    "Steppable",
    "superstep_end",
]

MODEL_VARIABLES = (
    "step",
    "events",
    "time",
    "idle",
    "processing",
    "response",
    "queued",
    "longest_queue",
    "messages",
    "bytes",
    "llm_calls",
    "tokens_in",
    "tokens_out",
    "tokens",
    "cost_usd",
)
AGENT_VARIABLES = (
    "step",
    "time",
    "agent",
    "state",
    "queue",
    "sent",
    "received",
    "llm_calls",
    "tokens_in",
    "tokens_out",
    "cost_usd",
)
_LEDGER_TOTALS = ("messages", "bytes", "llm_calls", "tokens_in", "tokens_out")
_AGENT_COUNTS = ("sent", "received", "llm_calls", "tokens_in", "tokens_out")
_FORMATS = (".csv", ".parquet")


class CollectorError(ValueError):
    """Bad collection settings or output path; the text names what is wrong."""


class AgentView(Protocol):
    """What the collector reads of an agent."""

    @property
    def state(self) -> AgentState: ...


class Steppable(Protocol):
    """A runtime the collector can drive and read, e.g. :class:`~megaactors.runtime.sim.SimRuntime`."""

    @property
    def agents(self) -> Sequence[AgentView]: ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def now(self) -> float: ...

    @property
    def steps(self) -> int: ...

    @property
    def started(self) -> bool: ...

    @property
    def finished(self) -> bool: ...

    @property
    def next_event_time(self) -> float | None: ...

    def queued(self, agent: int) -> int:
        """How many messages wait in ``agent``'s in-queue."""
        ...

    def start(self) -> None: ...

    def step(self) -> bool: ...

    def advance(self, until: float) -> int: ...


class DataCollector:
    """Records model-level and agent-level variables of a run, one row per collection.

    ``every_events=k`` collects after every ``k`` events; otherwise after every
    super-step of ``step_s`` virtual seconds. ``agents=False`` skips the agent-level
    rows (each collection costs O(N) either way, for the state counts and queues).
    ``model_reporters`` / ``agent_reporters`` add columns: a name and a function of
    the runtime, or of the runtime and an agent's id.
    """

    def __init__(
        self,
        *,
        step_s: float = 1.0,
        every_events: int | None = None,
        agents: bool = True,
        model_reporters: Mapping[str, Callable[[Any], Any]] | None = None,
        agent_reporters: Mapping[str, Callable[[Any, int], Any]] | None = None,
    ) -> None:
        if not (isinstance(step_s, (int, float)) and 0 < step_s < math.inf):
            raise CollectorError(f"step seconds must be a finite number > 0, got {step_s!r}")
        if every_events is not None and (
            not isinstance(every_events, int) or isinstance(every_events, bool) or every_events < 1
        ):
            raise CollectorError(f"every events must be an integer >= 1, got {every_events!r}")
        taken = set(MODEL_VARIABLES) | set(AGENT_VARIABLES)
        for name in [*(model_reporters or {}), *(agent_reporters or {})]:
            if name in taken:
                raise CollectorError(f"reporter name {name!r} is a built-in column; choose another")
        self.step_s = float(step_s)
        self.every_events = every_events
        self.agents = agents
        self.model_reporters = dict(model_reporters or {})
        self.agent_reporters = dict(agent_reporters or {})
        self._model_rows: list[tuple[Any, ...]] = []
        self._agent_rows: list[tuple[Any, ...]] = []

    # ------------------------------------------------------------------ recording

    @property
    def collections(self) -> int:
        """Rows of model variables recorded so far."""
        return len(self._model_rows)

    def collect(self, runtime: Steppable) -> None:
        """Record the runtime as it stands: one model row and (if enabled) one row per agent."""
        step, now, ledger = len(self._model_rows), runtime.now, runtime.ledger
        counts = [0, 0, 0]
        agents = runtime.agents
        for a in agents:
            counts[a.state] += 1
        depths = list(map(runtime.queued, range(len(agents))))
        queued, longest = sum(depths), max(depths, default=0)
        totals = [getattr(ledger, name) for name in _LEDGER_TOTALS]
        extra = [f(runtime) for f in self.model_reporters.values()]
        tokens, cost = totals[3] + totals[4], ledger.cost_usd
        self._model_rows.append((step, runtime.steps, now, *counts, queued, longest, *totals, tokens, cost, *extra))
        if self.agents:
            self._collect_agents(runtime, step, now, depths)

    def _collect_agents(self, runtime: Steppable, step: int, now: float, depths: list[int]) -> None:
        ledger = runtime.ledger
        columns = [ledger.per_agent[c] for c in _AGENT_COUNTS]
        cost = ledger.cost_per_agent
        reporters = list(self.agent_reporters.values())
        rows = self._agent_rows
        names = [s.name for s in AgentState]
        for i, a in enumerate(runtime.agents):
            extra = [f(runtime, i) for f in reporters]
            rows.append((step, now, i, names[a.state], depths[i], *(c[i] for c in columns), cost[i], *extra))

    # ------------------------------------------------------------------ driving

    def advance(self, runtime: Steppable, *, events: int | None = None) -> bool:
        """Run one collection interval and collect: ``events`` events if given, else the
        collector's interval (``every_events`` events, or a super-step). Starts (and
        collects) a runtime that has not started instead. Returns False once nothing
        is left to run."""
        if not runtime.started:
            runtime.start()
            self.collect(runtime)
            return not runtime.finished
        if runtime.finished:
            return False
        count = events if events is not None else self.every_events
        if count is not None:
            for _ in range(count):
                if not runtime.step():
                    break
        else:
            nxt = runtime.next_event_time
            runtime.advance(superstep_end(nxt if nxt is not None else runtime.now, self.step_s))
        self.collect(runtime)
        return not runtime.finished

    def run(self, runtime: Steppable, until: float = math.inf) -> DataCollector:
        """Drive ``runtime`` to its end (or virtual time ``until``), collecting at
        every interval; returns this collector. The cyclic collector is paused
        meanwhile, as in :meth:`SimRuntime.run <megaactors.runtime.sim.SimRuntime.run>`."""
        with paused_gc():
            if not runtime.started:
                self.advance(runtime)
            while not runtime.finished:
                nxt = runtime.next_event_time
                if nxt is None or nxt >= until:
                    break
                self.advance(runtime)
        return self

    # ------------------------------------------------------------------ results

    def model_frame(self) -> pd.DataFrame:
        """Model variables, one row per collection."""
        import pandas as pd

        return pd.DataFrame(self._model_rows, columns=[*MODEL_VARIABLES, *self.model_reporters])

    def agent_frame(self) -> pd.DataFrame:
        """Agent variables, one row per agent per collection (``step``, ``agent`` first)."""
        import pandas as pd

        frame = pd.DataFrame(self._agent_rows, columns=[*AGENT_VARIABLES, *self.agent_reporters])
        frame["state"] = pd.Categorical(frame["state"], categories=[s.name for s in AgentState])
        return frame

    get_model_vars_dataframe = model_frame
    get_agent_vars_dataframe = agent_frame

    def save(self, path: str | Path) -> list[Path]:
        """Write the model series to ``path`` (``.csv`` or ``.parquet``) and, when agent
        rows were collected, the agent series beside it as ``NAME.agents.SUFFIX``.
        Each file is written to a temporary name and renamed, so a failure leaves
        nothing half-written. Returns the paths written."""
        path = Path(path)
        check_output_path(path)
        frames = [(path, self.model_frame())]
        if self.agents:
            frames.append((agents_path(path), self.agent_frame()))
        written = []
        for target, frame in frames:
            tmp = target.with_name(f".{target.name}.partial")
            try:
                if target.suffix == ".parquet":
                    frame.to_parquet(tmp, index=False)
                else:
                    frame.to_csv(tmp, index=False)
                tmp.replace(target)
            finally:
                tmp.unlink(missing_ok=True)
            written.append(target)
        return written


def agents_path(path: Path) -> Path:
    """Where :meth:`DataCollector.save` puts the agent series for model series at ``path``."""
    return path.with_name(f"{path.stem}.agents{path.suffix}")


def check_output_path(path: str | Path) -> Path:
    """Raise :class:`CollectorError` unless ``path`` can take collected series: a
    ``.csv`` or ``.parquet`` name in an existing directory (Parquet needs pyarrow)."""
    path = Path(path)
    if path.suffix not in _FORMATS:
        raise CollectorError(f"collect output {str(path)!r} must end in .csv or .parquet")
    if not path.parent.is_dir():
        raise CollectorError(f"collect output directory {str(path.parent)!r} does not exist")
    if path.suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise CollectorError(
                "writing .parquet needs pyarrow (pip install 'megaactors[data]'); or collect to .csv"
            ) from None
    return path
