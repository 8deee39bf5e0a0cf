"""Parameter sweeps: a grid of run parameters → one result row per run → CSV and DataFrame.

A *grid* maps :class:`~megaactors.experiments.spec.RunSpec` parameter names to lists of values
(a single value stands for a one-element list); a list of grids is their union. Every
combination becomes one run; parameters a topology ignores (``group_size`` outside
two-tier, ``fanout`` outside hierarchy) are set to their defaults so each distinct run
happens once. ``group_size`` may also be ``"optimal"``: the group size that minimises
the closed-form message count ``Σ sᵢ(sᵢ−1) + a(a−1)`` for that N.

Runs execute in worker processes (default: one per core) and each finished run is
appended to ``DIR/results.csv`` at once, so an interrupted sweep resumes where it
stopped: rows already in the file are not recomputed. A run that raises becomes a row
with ``status == "error"`` and the error in ``detail``; a worker process that dies
(killed, out of memory) is detected and its run recorded the same way. Runs whose
closed-form message count exceeds ``max_messages`` are not executed but recorded with
``status == "skipped"`` and their ``expected_messages``, so figures can draw the closed
form beyond what is feasible.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import multiprocessing
import numbers
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from megaactors.core.messages import CHANNELS
from megaactors.experiments.progress import SweepProgress
from megaactors.experiments.spec import ParameterError, RunSpec

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "COLUMNS",
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

OPTIMAL = "optimal"
"""``group_size`` value meaning the closed-form cost-minimising group size."""

PARAMS: tuple[str, ...] = tuple(f.name for f in fields(RunSpec))
"""Run parameters, in :class:`RunSpec` order: the first columns of every row."""

_DEFAULTS = RunSpec()
_STATUSES = ("ok", "error", "skipped")

# column name -> kind: str, int, float, bool, int? (may be empty), json
_PARAM_KINDS = {
    f.name: {"int": "int", "float": "float", "bool": "bool", "int | None": "int?"}.get(str(f.type), "str")
    for f in fields(RunSpec)
}
_FIGURE_KINDS: dict[str, str] = {
    "groups": "int",
    "levels": "int",
    "messages": "int",
    **{f"messages_{c}": "int" for c in CHANNELS},
    "bytes": "int",
    **{f"bytes_{c}": "int" for c in CHANNELS},
    "llm_calls": "int",
    "tokens_in": "int",
    "tokens_out": "int",
    "cost_usd": "float",
    "batches": "int",
    "virtual_time_s": "float",
    "wall_s": "float",
    "run_s": "float",
    "peak_queue_depth": "int",
    "peak_llm_in_flight": "int",
    "llm_time_s": "float",
    "tool_calls": "int",
    "tool_time_s": "float",
    "lock_wait_s": "float",
    "max_agent_received": "int",
    "max_agent_llm_calls": "int",
    "by_stage": "json",
    "by_level": "json",
}
_KINDS: dict[str, str] = {
    **_PARAM_KINDS,
    "group_rule": "str",
    "status": "str",
    "expected_messages": "int",
    **_FIGURE_KINDS,
    "detail": "str",
}
COLUMNS: tuple[str, ...] = tuple(_KINDS)
"""Every column of a result row, in CSV order."""

GridLike = Mapping[str, Any] | Sequence[Mapping[str, Any]]


class SweepError(ValueError):
    """A grid or an output directory that cannot be swept; the text says why."""


class ResultsError(SweepError):
    """A results CSV that cannot be read; the text names the file and line."""


# ---------------------------------------------------------------------- closed forms


def closed_form_messages(topology: str, agents: int, group_size: int = 10, rounds: int = 1) -> int:
    """Messages of ``rounds`` chat rounds, computed arithmetically (no organisation built):
    flat ``N(N−1)``; star and hierarchy ``2(N−1)``; two-tier ``Σ sᵢ(sᵢ−1) + a(a−1)``."""
    n = agents
    if topology == "flat":
        per_round = n * (n - 1)
    elif topology in ("star", "hierarchy"):
        per_round = 2 * (n - 1)
    elif topology == "two-tier":
        full, rest = divmod(n, group_size)
        admins = full + (rest > 0)
        per_round = full * group_size * (group_size - 1) + rest * (rest - 1) + admins * (admins - 1)
    else:
        raise SweepError(f"no closed form for topology {topology!r}")
    return rounds * per_round


@lru_cache(maxsize=256)
def optimal_group_size(agents: int) -> int:
    """The group size G that minimises two-tier messages for ``agents`` agents (the
    smallest if several tie); close to ``(2N)^(1/3)``."""
    import numpy as np

    if agents < 1:
        raise SweepError(f"agents must be >= 1, got {agents}")
    # beyond 4·(2N)^(1/3) the intra-group messages alone exceed the optimum's total
    g = np.arange(1, min(agents, int(4 * (2 * agents) ** (1 / 3)) + 10) + 1, dtype=np.int64)
    full, rest = np.divmod(agents, g)
    admins = full + (rest > 0)
    cost = full * g * (g - 1) + rest * (rest - 1) + admins * (admins - 1)
    return int(g[int(np.argmin(cost))])


# ---------------------------------------------------------------------- planning


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its spec, how its group size was chosen and its closed form."""

    spec: RunSpec
    group_rule: str
    """``fixed`` or ``optimal`` for two-tier, empty otherwise."""
    expected_messages: int
    skipped: bool = False

    @property
    def params(self) -> dict[str, Any]:
        return {**self.spec.as_dict(), "group_rule": self.group_rule}

    @property
    def key(self) -> str:
        return _key(self.params)

    def estimated_cost(self) -> float:
        """Rough run time in µs: message deliveries plus LLM calls."""
        return 0.3 * self.expected_messages + 10.0 * 3 * self.spec.agents * max(self.spec.rounds, 1)


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps([params.get(name) for name in (*PARAMS, "group_rule")])


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
        RunSpec.from_dict({k: getattr(_DEFAULTS, k, None) for k in g})  # unknown names -> ParameterError
        norm: dict[str, list[Any]] = {}
        for name, value in g.items():
            values = [_plain(v) for v in (value if isinstance(value, (list, tuple, range)) else [value])]
            if not values:
                raise SweepError(f"empty grid: parameter {name!r} has no values")
            norm[name] = values
        out.append(norm)
    return out


def _plain(value: Any) -> Any:
    """NumPy and other numeric scalars as Python ``int``/``float``."""
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def plan(grid: GridLike, max_messages: int | None = None) -> list[PlannedRun]:
    """Every distinct run of the grid, in grid order; bad values raise
    :class:`~megaactors.experiments.spec.ParameterError` naming the parameter."""
    if max_messages is not None and (not isinstance(max_messages, int) or max_messages < 0):
        raise SweepError(f"max messages must be an integer >= 0, got {max_messages!r}")
    runs: dict[str, PlannedRun] = {}
    for g in normalise_grid(grid):
        names = list(g)
        for combo in itertools.product(*(g[n] for n in names)):
            run = _planned(dict(zip(names, combo, strict=True)), max_messages)
            runs.setdefault(run.key, run)
    return list(runs.values())


def _planned(given: dict[str, Any], max_messages: int | None) -> PlannedRun:
    params = {**_DEFAULTS.as_dict(), **given}
    for name, kind in _PARAM_KINDS.items():
        value = params[name]
        if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            params[name] = float(value)
    topology, group_size = params["topology"], params["group_size"]
    rule = ""
    if isinstance(group_size, str) and group_size != OPTIMAL:
        raise ParameterError(f"group size must be an integer or {OPTIMAL!r}, got {group_size!r}")
    if topology == "two-tier":
        rule = "fixed"
        if group_size == OPTIMAL:
            agents = params["agents"]
            if not isinstance(agents, int) or isinstance(agents, bool) or agents < 1:
                raise ParameterError(f"agents must be an integer >= 1, got {agents!r}")
            params["group_size"], rule = optimal_group_size(agents), OPTIMAL
    else:
        params["group_size"] = _DEFAULTS.group_size
    if topology != "hierarchy":
        params["fanout"] = _DEFAULTS.fanout
    spec = RunSpec(**params)
    expected = closed_form_messages(spec.topology, spec.agents, spec.group_size, spec.rounds)
    skipped = max_messages is not None and expected > max_messages
    return PlannedRun(spec, rule, expected, skipped)


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
    for name in _FIGURE_KINDS:
        if name in summary:
            row[name] = summary[name]
    for channel in CHANNELS:
        row[f"messages_{channel}"] = summary["messages_by_channel"].get(channel, 0)
        row[f"bytes_{channel}"] = summary["bytes_by_channel"].get(channel, 0)
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
    progress: bool | SweepProgress = True,
    retry_errors: bool = False,
) -> pd.DataFrame:
    """Run every run of ``grid`` and return one row per run as a DataFrame.

    With ``out``, rows are appended to ``out/results.csv`` as runs finish (the grid is
    kept in ``out/grid.json``); runs already there are not recomputed, except failed
    ones when ``retry_errors``. ``workers`` processes run in parallel (default: one per
    core; ``0`` runs everything in this process, without isolation). ``progress`` is
    a bar (``True``), none, or a :class:`~megaactors.experiments.progress.SweepProgress`
    to report to; its units are estimated work, largest runs first.
    """
    planned = plan(grid, max_messages)
    store = _Store(Path(out), normalise_grid(grid), max_messages) if out is not None else None
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

    bar = progress if isinstance(progress, SweepProgress) else SweepProgress(enabled=progress)
    bar.begin([0.0 if p.skipped else p.estimated_cost() for p in todo], len(planned))
    try:
        for run in [p for p in todo if p.skipped]:
            record(run, {"status": "skipped", "detail": _skip_reason(run, max_messages)})
        runnable = sorted((p for p in todo if not p.skipped), key=PlannedRun.estimated_cost, reverse=True)
        if workers is None:
            workers = _cores()
        if workers < 0:
            raise SweepError(f"workers must be >= 0, got {workers}")
        if workers == 0:
            for run in runnable:
                record(run, execute(run.spec.as_dict()))
        elif runnable:
            _run_in_pool(runnable, min(workers, len(runnable)), record)
    finally:
        bar.close()
        if store:
            store.close([p.key for p in planned])
    ordered = [rows[p.key] for p in planned]
    return _frame(ordered)


def _skip_reason(run: PlannedRun, max_messages: int | None) -> str:
    return f"not run: closed form of {run.expected_messages:,} messages exceeds the budget of {max_messages:,}"


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
        pool = ProcessPoolExecutor(workers, mp_context=context)
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
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        try:
            return pool.submit(execute, run.spec.as_dict()).result()
        except BrokenProcessPool:
            return {"status": "error", "detail": _DIED}


# ---------------------------------------------------------------------- the output directory


class _Store:
    """``DIR/grid.json`` and ``DIR/results.csv``: append as runs finish, sort at the end."""

    def __init__(self, out: Path, grids: list[dict[str, list[Any]]], max_messages: int | None) -> None:
        self.dir = out
        self.csv = out / "results.csv"
        self.grid_file = out / "grid.json"
        self.grid = {"grids": grids, "max_messages": max_messages}
        self.file: io.TextIOWrapper | None = None
        self.writer: csv.DictWriter[str] | None = None

    def open(self, retry_errors: bool) -> dict[str, dict[str, Any]]:
        if self.dir.exists() and not self.dir.is_dir():
            raise SweepError(f"output {self.dir} exists and is not a directory")
        self.dir.mkdir(parents=True, exist_ok=True)
        grid_json = json.dumps(self.grid, sort_keys=True)
        if self.grid_file.exists():
            try:
                stored = json.loads(self.grid_file.read_text())
            except ValueError as exc:
                raise SweepError(
                    f"{self.grid_file} is not valid JSON ({exc}); remove it or choose another directory"
                ) from None
            if json.dumps(stored, sort_keys=True) != grid_json:
                raise SweepError(
                    f"{self.dir} holds results of a different grid ({_grid_difference(stored, self.grid)}); "
                    "choose another output directory or delete this one"
                )
        elif self.csv.exists():
            raise SweepError(f"{self.csv} exists but {self.grid_file.name} does not: not a sweep directory")
        else:
            self.grid_file.write_text(json.dumps(self.grid, indent=1, sort_keys=True) + "\n")
        rows: dict[str, dict[str, Any]] = {}
        if self.csv.exists():
            _drop_torn_last_line(self.csv)
            with self.csv.open(newline="") as f:
                header = next(csv.reader(f), None)
            if header is not None and tuple(header) != COLUMNS:
                raise SweepError(
                    f"{self.csv} has other columns than this version writes; choose another output directory"
                )
            for row in _read_rows(self.csv):
                rows[_key(row)] = row
            if retry_errors and any(r["status"] == "error" for r in rows.values()):
                rows = {k: r for k, r in rows.items() if r["status"] != "error"}
                self._rewrite(list(rows.values()))
        new = not self.csv.exists() or self.csv.stat().st_size == 0
        self.file = self.csv.open("a", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=COLUMNS, lineterminator="\n")
        if new:
            self.writer.writeheader()
            self.file.flush()
        return rows

    def append(self, row: dict[str, Any]) -> None:
        assert self.writer is not None and self.file is not None
        self.writer.writerow(_to_csv(row))
        self.file.flush()

    def close(self, order: list[str]) -> None:
        """Close the file and rewrite it in grid order (the order runs finished in is
        not reproducible)."""
        if self.file is None:
            return
        self.file.close()
        self.file = None
        rank = {k: i for i, k in enumerate(order)}
        rows = sorted(_read_rows(self.csv), key=lambda r: rank.get(_key(r), len(rank)))
        self._rewrite(rows)

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        tmp = self.csv.with_suffix(".csv.tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(_to_csv(r) for r in rows)
        os.replace(tmp, self.csv)


def _grid_difference(stored: Any, new: dict[str, Any]) -> str:
    """What changed between the stored grid and the new one, briefly."""
    if not isinstance(stored, dict):
        return "unreadable stored grid"
    changes = []
    old_grids, new_grids = stored.get("grids") or [], new["grids"]
    if len(old_grids) != len(new_grids):
        changes.append(f"{len(old_grids)} parameter set(s) before, {len(new_grids)} now")
    else:
        for i, (a, b) in enumerate(zip(old_grids, new_grids, strict=True)):
            where = f"set {i + 1}: " if len(new_grids) > 1 else ""
            for name in sorted(set(a) | set(b)):
                if a.get(name) != b.get(name):
                    changes.append(f"{where}{name} was {a.get(name)}, now {b.get(name)}")
    if stored.get("max_messages") != new["max_messages"]:
        changes.append(f"max messages was {stored.get('max_messages')}, now {new['max_messages']}")
    shown = "; ".join(changes[:3]) + (f"; and {len(changes) - 3} more" if len(changes) > 3 else "")
    return shown or "parameters differ"


def _drop_torn_last_line(path: Path) -> None:
    """Remove a last line cut short by an interrupted append (no final newline)."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with path.open("r+b") as f:
            f.truncate(cut)


def _to_csv(row: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in COLUMNS:
        value = row.get(name)
        if value is None or (isinstance(value, float) and value != value):
            out[name] = ""
        elif _KINDS[name] == "json":
            out[name] = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
        else:
            out[name] = value
    return out


# ---------------------------------------------------------------------- reading results


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """Typed rows of a results CSV; anything malformed raises :class:`ResultsError`
    naming the line."""
    try:
        f = path.open(newline="")
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such results file") from None
    except IsADirectoryError:
        raise ResultsError(f"{path} is a directory, not a results CSV") from None
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None:
                raise ResultsError(f"{path} is empty: expected a header line with columns {', '.join(COLUMNS[:4])}, …")
            missing = [c for c in COLUMNS if c not in header]
            if missing:
                raise ResultsError(f"{path} line 1: not a results header; missing column(s) {', '.join(missing)}")
            if len(set(header)) != len(header):
                raise ResultsError(f"{path} line 1: repeated column names")
            rows = []
            line = reader.line_num
            for record in reader:
                start, line = line + 1, reader.line_num
                if not record:
                    continue
                rows.append(_parse_row(path, start, header, record))
        except csv.Error as exc:
            raise ResultsError(f"{path} line {reader.line_num}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ResultsError(f"{path}: not a text file ({exc.reason})") from None
    return rows


def _parse_row(path: Path, line: int, header: list[str], record: list[str]) -> dict[str, Any]:
    where = f"{path} line {line}"
    if len(record) != len(header):
        raise ResultsError(f"{where}: {len(record)} fields, expected {len(header)} (one per header column)")
    raw = dict(zip(header, record, strict=True))
    status = raw["status"]
    if status not in _STATUSES:
        raise ResultsError(f"{where}: status {status!r} is not one of {', '.join(_STATUSES)}")
    row: dict[str, Any] = {}
    for name in COLUMNS:
        text = raw[name]
        kind = _KINDS[name]
        optional = kind in ("int?", "str") or (name in _FIGURE_KINDS and status != "ok") or name == "expected_messages"
        if text == "":
            if not optional:
                raise ResultsError(f"{where}: column {name!r} is empty")
            row[name] = "" if kind == "str" else None
            continue
        try:
            row[name] = _parse(text, kind)
        except ValueError:
            raise ResultsError(f"{where}: column {name!r} is {text!r}, not {_KIND_NAMES[kind]}") from None
    return row


_KIND_NAMES = {"int": "an integer", "int?": "an integer", "float": "a number", "bool": "True or False", "json": "JSON"}


def _parse(text: str, kind: str) -> Any:
    if kind in ("int", "int?"):
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "bool":
        if text not in ("True", "False"):
            raise ValueError(text)
        return text == "True"
    if kind == "json":
        return json.loads(text)
    return text


def _frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame(list(rows), columns=list(COLUMNS))
    for name in COLUMNS:
        kind = _KINDS[name]
        if kind in ("int", "int?"):
            frame[name] = frame[name].astype("Int64")
        elif kind == "float":
            frame[name] = frame[name].astype("float64")
        elif kind == "bool":
            frame[name] = frame[name].astype("bool")
        elif kind == "str":
            frame[name] = frame[name].fillna("").astype(str)
    return frame


def load_results(path: str | Path) -> pd.DataFrame:
    """A results CSV (or a sweep directory holding ``results.csv``) as a typed
    DataFrame; a malformed file raises :class:`ResultsError` naming the line."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.csv"
    return _frame(_read_rows(path))
