"""Parameter sweeps: a grid of run parameters → one result row per run → CSV and DataFrame.

A *grid* maps :class:`~megaactors.experiments.spec.RunSpec` parameter names, and
``behaviour.NAME`` for a behaviour's own parameters, to lists of values (a single
value stands for a one-element list); a list of grids is their union. Every
combination becomes one run; parameters a topology ignores (``group_size`` outside
two-tier, ``fanout`` outside hierarchy, ``degree`` and ``rewire`` outside the
generated graphs) do not make distinct runs and are blank in its row.
``group_size`` may also be ``"optimal"``: the group size that minimises the
closed-form message count ``Σ sᵢ(sᵢ−1) + a(a−1)`` for that N.

Runs execute in worker processes (default: one per core), which end with the sweep's
process even when it is killed, and each finished run is appended to
``DIR/results.csv`` at once (see :mod:`~megaactors.experiments.sweep_dir`), so an
interrupted sweep resumes where it stopped and a wider grid extends the rows already
there. A run that raises becomes a row with ``status == "error"`` and the error in
``detail``; a worker process that dies (killed, out of memory) is detected and its
run recorded the same way. Runs over the budget — the closed-form message count over
``max_messages``, more agents than ``max_agents``, or more memory than the machine
has (:mod:`~megaactors.experiments.budget`) — are not executed but recorded with
``status == "skipped"``, the reason and their ``expected_messages``, so figures can
draw the closed form beyond what is feasible.

With ``executor="ray"`` the runs are Ray tasks instead, on the cluster at ``address``
or on a local Ray instance started and stopped by the sweep
(:mod:`~megaactors.experiments.ray_sweep`): the same rows, file, resume and error rows.
"""

from __future__ import annotations

import itertools
import multiprocessing
import numbers
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from megaactors.child_processes import die_with_parent
from megaactors.core.messages import CHANNELS
from megaactors.experiments.budget import Budget, estimate
from megaactors.experiments.closed_forms import OPTIMAL, closed_form_messages, optimal_group_size
from megaactors.experiments.progress import SweepProgress
from megaactors.experiments.result_rows import (
    COLUMNS,
    FIGURE_KINDS,
    PARAMS,
    USED_BY,
    ResultsError,
    SweepError,
    frame,
    load_results,
    relevant_params,
    row_key,
)
from megaactors.experiments.spec import BEHAVIOUR_PREFIX, PARAMETERS, ParameterError, RunSpec
from megaactors.experiments.sweep_dir import SweepDirectory
from megaactors.runtime.ray_cluster import ADDRESS, check_reachable, import_ray
from megaactors.validation import Param

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "COLUMNS",
    "EXECUTOR",
    "OPTIMAL",
    "PARAMS",
    "GridLike",
    "PlannedRun",
    "ResultsError",
    "SweepError",
    "closed_form_messages",
    "load_results",
    "optimal_group_size",
    "plan",
    "run_sweep",
]

_DEFAULTS = RunSpec()

EXECUTORS = ("process", "ray")
EXECUTOR = Param("executor", str, "where runs execute: worker processes here, or Ray tasks", choices=lambda: EXECUTORS)

GridLike = Mapping[str, Any] | Sequence[Mapping[str, Any]]


# ---------------------------------------------------------------------- planning


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its spec, how its group size was chosen, its closed form,
    and why it is not run (empty when it is)."""

    spec: RunSpec
    group_rule: str
    """``fixed`` or ``optimal`` for two-tier, empty otherwise."""
    expected_messages: int | None
    """``None`` when the behaviour has no closed form."""
    skip_reason: str = ""

    @property
    def skipped(self) -> bool:
        return bool(self.skip_reason)

    @property
    def params(self) -> dict[str, Any]:
        """The row's parameters: those the topology ignores are blank."""
        return {**relevant_params(self.spec.as_dict()), "group_rule": self.group_rule}

    @property
    def key(self) -> str:
        return row_key(self.params)

    def estimated_cost(self) -> float:
        """Rough run time in µs: message deliveries plus LLM calls."""
        messages = self.expected_messages if self.expected_messages is not None else 10 * self.spec.agents
        return 0.3 * messages + 10.0 * 3 * self.spec.agents * max(self.spec.rounds, 1)


def normalise_grid(grid: GridLike) -> list[dict[str, list[Any]]]:
    """The grid as a list of ``{parameter: [values]}``; unknown names and empty value
    lists are errors."""
    grids = [grid] if isinstance(grid, Mapping) else list(grid)
    if not grids:
        raise SweepError("empty grid: no parameter sets given")
    out = []
    for g in grids:
        if not isinstance(g, Mapping):
            raise SweepError(f"a grid maps parameter names to lists of values, got {type(g).__name__}")
        unknown = sorted(k for k in g if k not in PARAMETERS and not _behaviour_key(k))
        if unknown:
            raise ParameterError(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(PARAMETERS))}")
        norm: dict[str, list[Any]] = {}
        for name, value in g.items():
            values = [_plain(v) for v in (value if isinstance(value, (list, tuple, range)) else [value])]
            if not values:
                raise SweepError(f"empty grid: parameter {name!r} has no values")
            norm[name] = values
        out.append(norm)
    return out


def _behaviour_key(name: Any) -> bool:
    """True for ``behaviour.NAME``, a behaviour parameter's grid key."""
    return isinstance(name, str) and name.startswith(BEHAVIOUR_PREFIX) and name[len(BEHAVIOUR_PREFIX) :].isidentifier()


def _plain(value: Any) -> Any:
    """NumPy and other numeric scalars as Python ``int``/``float``."""
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def plan(grid: GridLike, max_messages: int | None = None, *, max_agents: int | None = None) -> list[PlannedRun]:
    """Every distinct run of the grid, in grid order, each marked skipped when it does
    not fit the budget (``max_messages``, ``max_agents``, the machine's memory); bad
    values raise :class:`~megaactors.experiments.spec.ParameterError` naming the parameter."""
    budget = Budget.machine(max_agents, max_messages)
    runs: dict[str, PlannedRun] = {}
    for g in normalise_grid(grid):
        names = list(g)
        for combo in itertools.product(*(g[n] for n in names)):
            run = _planned(dict(zip(names, combo, strict=True)), budget)
            runs.setdefault(run.key, run)
    return list(runs.values())


def _planned(given: dict[str, Any], budget: Budget) -> PlannedRun:
    params = {**_DEFAULTS.as_dict(), **given}
    topology, group_size = params["topology"], params["group_size"]
    if isinstance(group_size, str) and group_size != OPTIMAL:
        raise ParameterError(f"group_size must be an integer or {OPTIMAL!r}, got {group_size!r}")
    rule = (OPTIMAL if group_size == OPTIMAL else "fixed") if topology == "two-tier" else ""
    for name, used in USED_BY.items():  # what the topology ignores makes no distinct run
        if not used(topology):
            params[name] = getattr(_DEFAULTS, name)
    spec = RunSpec.from_dict(params)
    refusal = budget.refusal(spec)
    return PlannedRun(spec, rule, estimate(spec).messages, f"not run: {refusal}" if refusal else "")


# ---------------------------------------------------------------------- one run


def execute(params: dict[str, Any]) -> dict[str, Any]:
    """Run one spec and return its figures as row columns (``status`` ``ok``), or the
    error it raised (``status`` ``error``). Runs in a worker process."""
    t0 = time.perf_counter()
    try:
        result = RunSpec(**params).execute()
        figures = _figures(result.summary())
        per_agent = result.ledger.per_agent
        figures["max_agent_received"] = max(per_agent["received"], default=0)
        figures["max_agent_llm_calls"] = max(per_agent["llm_calls"], default=0)
    except Exception as exc:
        return {"status": "error", "detail": _one_line(exc)}
    figures["run_s"] = round(time.perf_counter() - t0, 6)
    figures["status"] = "ok"
    return figures


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for name in FIGURE_KINDS:
        if name in summary:
            row[name] = summary[name]
    for channel in CHANNELS:
        row[f"messages_{channel}"] = summary["messages_by_channel"].get(channel, 0)
        row[f"bytes_{channel}"] = summary["bytes_by_channel"].get(channel, 0)
    row["run_status"] = summary.get("status", "ok")
    for kind, count in (summary.get("faults") or {}).items():
        row[f"faults_{kind}"] = count
    return row


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:500]


# ---------------------------------------------------------------------- the sweep


def run_sweep(
    grid: GridLike,
    out: str | Path | None = None,
    *,
    workers: int | None = None,
    max_messages: int | None = None,
    max_agents: int | None = None,
    progress: bool | SweepProgress = True,
    retry_errors: bool = False,
    executor: str = "process",
    address: str | None = None,
) -> pd.DataFrame:
    """Run every run of ``grid`` and return one row per run as a DataFrame.

    With ``out``, rows are appended to ``out/results.csv`` as runs finish (the grids
    are kept in ``out/grid.json``); runs already there are not recomputed, except
    failed ones when ``retry_errors``, and runs of another grid stay. ``workers``
    processes run in parallel (default: one per core; ``0`` runs everything in this
    process, without isolation). ``progress`` is a bar (``True``), none, or a
    :class:`~megaactors.experiments.progress.SweepProgress` to report to; its units are
    estimated work, largest runs first. ``executor="ray"`` runs each run as a Ray task
    on the cluster at ``address`` (``HOST:PORT``; default: a local Ray instance), at
    most ``workers`` in flight when given.
    """
    planned = plan(grid, max_messages, max_agents=max_agents)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise SweepError(f"workers must be an integer >= 0, got {workers!r}")
    EXECUTOR.check(executor)
    ADDRESS.check(address)
    if address is not None and executor != "ray":
        raise SweepError("address is the Ray cluster's: give it with executor='ray'")
    if executor == "ray":  # refused before the directory is touched
        if address is not None:
            check_reachable(address)
        import_ray()
    store = SweepDirectory(Path(out), normalise_grid(grid), max_messages) if out is not None else None
    done: dict[str, dict[str, Any]] = store.open(retry_errors) if store else {}
    todo = [p for p in planned if p.key not in done]
    rows = dict(done)

    def record(run: PlannedRun, figures: dict[str, Any]) -> None:
        row = {**run.params, "expected_messages": run.expected_messages, **figures}
        row = {c: row.get(c) for c in COLUMNS}
        rows[run.key] = row
        if store:
            store.append(row)
        bar.advance(0.0 if run.skipped else run.estimated_cost(), error=figures["status"] == "error")

    try:
        bar = progress if isinstance(progress, SweepProgress) else SweepProgress(enabled=progress)
        bar.begin([0.0 if p.skipped else p.estimated_cost() for p in todo], len(planned))
        try:
            for run in [p for p in todo if p.skipped]:
                record(run, {"status": "skipped", "detail": run.skip_reason})
            runnable = sorted((p for p in todo if not p.skipped), key=PlannedRun.estimated_cost, reverse=True)
            if executor == "ray":
                if runnable:
                    from megaactors.experiments.ray_sweep import run_on_ray

                    tasks = [(run, run.spec.as_dict()) for run in runnable]
                    run_on_ray(tasks, execute, record, address=address, workers=workers or None)
            else:
                _run_here(runnable, _cores() if workers is None else workers, record)
        finally:
            bar.close()
    finally:
        if store:
            store.close([p.key for p in planned])
    return frame(rows[p.key] for p in planned)


def _run_here(runs: Sequence[PlannedRun], workers: int, record: Callable[[PlannedRun, dict[str, Any]], None]) -> None:
    """In worker processes of this machine (in this process when ``workers == 0``)."""
    if workers == 0:
        for run in runs:
            record(run, execute(run.spec.as_dict()))
    elif runs:
        _run_in_pool(runs, min(workers, len(runs)), record)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _mp_context() -> multiprocessing.context.BaseContext:
    """Fork where it is safe (Linux): workers inherit runtimes and behaviours registered
    at run time, also in notebooks; spawn elsewhere."""
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _pool(workers: int, context: multiprocessing.context.BaseContext) -> ProcessPoolExecutor:
    """Worker processes that end when this process dies (kill -9 included)."""
    return ProcessPoolExecutor(workers, mp_context=context, initializer=die_with_parent, initargs=(os.getpid(),))


_DIED = "the worker process died while running this (killed by a signal or out of memory)"


def _run_in_pool(
    runs: Sequence[PlannedRun], workers: int, record: Callable[[PlannedRun, dict[str, Any]], None]
) -> None:
    """At most ``workers`` runs in flight; when a worker dies, the runs that were in
    flight are re-run one at a time to tell the culprit from the bystanders."""
    queue = deque(runs)
    context = _mp_context()
    while queue:
        suspects: list[PlannedRun] = []
        pool = _pool(workers, context)
        inflight: dict[Future[dict[str, Any]], PlannedRun] = {}
        try:
            while (queue or inflight) and not suspects:
                while queue and len(inflight) < workers:
                    run = queue.popleft()
                    inflight[pool.submit(execute, run.spec.as_dict())] = run
                finished, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for future in finished:
                    run = inflight.pop(future)
                    try:
                        figures = future.result()
                    except BrokenProcessPool:
                        suspects.append(run)
                        continue
                    record(run, figures)
            suspects.extend(inflight.values())
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        for run in suspects:
            record(run, _run_alone(run, context))


def _run_alone(run: PlannedRun, context: multiprocessing.context.BaseContext) -> dict[str, Any]:
    with _pool(1, context) as pool:
        try:
            return pool.submit(execute, run.spec.as_dict()).result()
        except BrokenProcessPool:
            return {"status": "error", "detail": _DIED}
