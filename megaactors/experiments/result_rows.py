"""Result rows of a sweep: their columns, their CSV form, and reading them back.

A row holds a run's parameters (blank where its topology ignores one: ``group_size``
outside two-tier, ``fanout`` outside hierarchy, ``degree`` outside the generated
graphs, ``rewire`` outside small-world; ``price_in``/``price_out`` are the prices
paid, the model's list price unless overridden), the behaviour's parameters (JSON)
and version, how its group size was chosen, its status (``ok``, ``error``,
``skipped``), its closed-form message count (blank when the behaviour has none),
its ledger figures, the run's own status (``run_status``: ``ok`` or ``stalled``),
its fault counts by kind (``faults_drop``, …, ``faults_llm``) and the provider's
counters (``rate_limited``, ``retries``, ``llm_wait_s``, ``failed_llm_calls``, …)
when the run has faults or a provider model (blank otherwise), and a ``detail``.
Reading validates every field and names the line of anything malformed; a run
recorded twice is kept once, with a warning.
Rows written before a parameter existed read as its default; before a figure
column existed, as blank.
"""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from megaactors.core.graph_families import FAMILIES
from megaactors.core.ledger import PROVIDER_COUNTERS
from megaactors.core.llm import PRICES
from megaactors.core.messages import CHANNELS
from megaactors.experiments.spec import PARAMETERS, RunSpec
from megaactors.network.faults import LLM_FAULT
from megaactors.runtime.net_delivery import COUNTERS as FAULT_COUNTERS
from megaactors.safe_files import open_regular

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "ADDED_FIGURES",
    "COLUMNS",
    "FAULT_COLUMNS",
    "FIGURE_KINDS",
    "PARAMS",
    "DuplicateRowsWarning",
    "ResultsError",
    "SweepError",
    "frame",
    "load_results",
    "read_rows",
    "relevant_params",
    "row_key",
    "to_csv",
]

PARAMS: tuple[str, ...] = tuple(PARAMETERS)
"""Run parameters, in :class:`~megaactors.experiments.spec.RunSpec` order: the first columns of every row."""

USED_BY: dict[str, Any] = {
    "group_size": lambda topology: topology == "two-tier",
    "fanout": lambda topology: topology == "hierarchy",
    "degree": lambda topology: topology in FAMILIES,
    "rewire": lambda topology: topology == "small-world",
}
"""Parameters only some topologies use: their cells are blank in the others' rows."""

STATUSES = ("ok", "error", "skipped")

# column name -> kind: str, int, float, bool, int? and float? (may be empty), json (a dict or
# list in a frame), json-text (canonical JSON text in a frame: it groups and sorts)
_PARAM_KINDS = {
    name: {int: "int", float: "float", bool: "bool"}.get(p.kind, "str")
    + ("?" if p.kind in (int, float) and (p.optional or name in USED_BY) else "")
    for name, p in PARAMETERS.items()
}
_PARAM_KINDS.update(behaviour_params="json-text", behaviour_version="str")
_DEFAULTS = RunSpec().as_dict()
ADDED_COLUMNS = (
    *("degree", "rewire", "behaviour", "price_in", "price_out", "behaviour_params", "behaviour_version"),
    *("prefill_s_per_token", "llm_model", "rpm", "tpm", "limit_scope", "max_retries", "llm_failure_rate"),
    *("llm_timeout_s", "net_latency", "net_jitter", "machines", "faults"),
)
"""Parameter columns that results files written before them lack: read as their defaults."""
FAULT_COLUMNS: tuple[str, ...] = tuple(f"faults_{kind}" for kind in (*FAULT_COUNTERS, LLM_FAULT))
"""Faults injected and recovery actions by kind (blank for a run without faults)."""
ADDED_FIGURES = ("run_status", *FAULT_COLUMNS, *PROVIDER_COUNTERS)
"""Figure columns that results files written before them lack: read as blank."""
FIGURE_KINDS: dict[str, str] = {
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
    "run_status": "str",
    **dict.fromkeys(FAULT_COLUMNS, "int?"),
    **{name: "float?" if name == "llm_wait_s" else "int?" for name in PROVIDER_COUNTERS},
}
KINDS: dict[str, str] = {
    **_PARAM_KINDS,
    "group_rule": "str",
    "status": "str",
    "expected_messages": "int?",
    **FIGURE_KINDS,
    "detail": "str",
}
COLUMNS: tuple[str, ...] = tuple(KINDS)
"""Every column of a result row, in CSV order."""


class SweepError(ValueError):
    """A grid or an output directory that cannot be swept; the text says why."""


class ResultsError(SweepError):
    """A results CSV that cannot be read; the text names the file and line."""


class DuplicateRowsWarning(UserWarning):
    """A results file records the same run more than once; the first row is kept."""


def relevant_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with the parameters its topology ignores blanked (None) and the
    prices it pays filled in (the model's list price where not overridden)."""
    out = dict(params)
    if isinstance(out.get("behaviour_params"), str):  # as a frame holds it
        out["behaviour_params"] = json.loads(out["behaviour_params"])
    for name, used in USED_BY.items():
        if not used(out.get("topology")):
            out[name] = None
    listed = PRICES.get(out.get("model", ""))
    if listed is not None:
        if out.get("price_in") is None:
            out["price_in"] = listed.input_per_m
        if out.get("price_out") is None:
            out["price_out"] = listed.output_per_m
    return out


_KEY = (*PARAMS, "behaviour_params", "group_rule")


def row_key(params: Mapping[str, Any]) -> str:
    """What identifies a run among rows: its relevant parameters, its behaviour's
    parameters and its group rule (not the behaviour's version)."""
    relevant = relevant_params(params)
    return json.dumps([relevant.get(name) for name in _KEY], sort_keys=True)


def to_csv(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as CSV cells."""
    out: dict[str, Any] = {}
    for name in COLUMNS:
        value = row.get(name)
        if value is None or (isinstance(value, float) and value != value):
            out[name] = ""
        elif KINDS[name] in ("json", "json-text"):
            out[name] = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
        else:
            out[name] = value
    return out


# ---------------------------------------------------------------------- reading


def read_rows(f: IO[str], where: str | Path, *, newest: bool = False) -> list[dict[str, Any]]:
    """Typed rows of a results CSV open as ``f`` (``where`` names it in errors), each
    run once: the first row of a run, with a :class:`DuplicateRowsWarning` if it
    repeats, or with ``newest`` its last row, silently (a run decided again appends
    a row after its old one). Anything malformed raises :class:`ResultsError`
    naming the line."""
    reader = csv.reader(f)
    try:
        header = next(reader, None)
        if header is None:
            raise ResultsError(f"{where} is empty: expected a header line with columns {', '.join(COLUMNS[:4])}, …")
        missing = [c for c in COLUMNS if c not in header and c not in ADDED_COLUMNS and c not in ADDED_FIGURES]
        if missing:
            raise ResultsError(f"{where} line 1: not a results header; missing column(s) {', '.join(missing)}")
        if len(set(header)) != len(header):
            raise ResultsError(f"{where} line 1: repeated column names")
        rows: dict[str, dict[str, Any]] = {}
        repeated: list[int] = []
        line = reader.line_num
        for record in reader:
            start, line = line + 1, reader.line_num
            if not record:
                continue
            row = _parse_row(where, start, header, record)
            key = row_key(row)
            if key in rows and not newest:
                repeated.append(start)
            else:
                rows.pop(key, None)
                rows[key] = row
    except csv.Error as exc:
        raise ResultsError(f"{where} line {reader.line_num}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{where}: not a text file ({exc.reason})") from None
    if repeated:
        shown = ", ".join(map(str, repeated[:5])) + (", …" if len(repeated) > 5 else "")
        warnings.warn(
            f"{where}: {len(repeated)} row(s) repeat a run recorded earlier (line(s) {shown}); the first row is kept",
            DuplicateRowsWarning,
            stacklevel=3,
        )
    return list(rows.values())


def _parse_row(where: str | Path, line: int, header: list[str], record: list[str]) -> dict[str, Any]:
    at = f"{where} line {line}"
    if len(record) != len(header):
        raise ResultsError(f"{at}: {len(record)} fields, expected {len(header)} (one per header column)")
    raw = dict(zip(header, record, strict=True))
    for name in ADDED_COLUMNS:  # a parameter newer than the file: its default
        if name not in raw:
            raw[name] = to_csv({name: _DEFAULTS[name]})[name]
    for name in ADDED_FIGURES:  # a figure newer than the file: blank
        raw.setdefault(name, "")
    status = raw["status"]
    if status not in STATUSES:
        raise ResultsError(f"{at}: status {status!r} is not one of {', '.join(STATUSES)}")
    row: dict[str, Any] = {}
    for name in COLUMNS:
        text = raw[name]
        kind = KINDS[name]
        optional = kind in ("int?", "float?", "str") or (name in FIGURE_KINDS and status != "ok")
        if text == "":
            if not optional:
                raise ResultsError(f"{at}: column {name!r} is empty")
            unset = kind != "str" or (name in PARAMETERS and PARAMETERS[name].optional)  # an unset text parameter
            row[name] = None if unset else ""
            continue
        try:
            row[name] = _parse(text, kind)
        except ValueError:
            raise ResultsError(f"{at}: column {name!r} is {text!r}, not {_KIND_NAMES[kind]}") from None
    return relevant_params(row)  # rows of earlier versions carry ignored parameters


_KIND_NAMES = {
    "int": "an integer",
    "int?": "an integer",
    "float": "a number",
    "float?": "a number",
    "bool": "True or False",
    "json": "JSON",
    "json-text": "JSON",
}


def _parse(text: str, kind: str) -> Any:
    if kind in ("int", "int?"):
        return int(text)
    if kind in ("float", "float?"):
        return float(text)
    if kind == "bool":
        if text not in ("True", "False"):
            raise ValueError(text)
        return text == "True"
    if kind in ("json", "json-text"):
        return json.loads(text)
    return text


def frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows as a DataFrame with one dtype per column."""
    import pandas as pd

    df = pd.DataFrame(list(rows), columns=list(COLUMNS))
    for name in COLUMNS:
        kind = KINDS[name]
        if kind in ("int", "int?"):
            df[name] = df[name].astype("Int64")
        elif kind in ("float", "float?"):
            df[name] = df[name].astype("float64")
        elif kind == "bool":
            df[name] = df[name].astype("bool")
        elif kind == "str":
            df[name] = df[name].fillna("").astype(str)
        elif kind == "json-text":
            df[name] = [_canonical(v) for v in df[name]]
    return df


def _canonical(value: Any) -> str:
    if isinstance(value, str):
        value = json.loads(value)
    return json.dumps(value if value is not None else {}, sort_keys=True, separators=(",", ":"))


def load_results(path: str | Path) -> pd.DataFrame:
    """A results CSV (or a sweep directory holding ``results.csv``) as a typed
    DataFrame, each run once; a malformed file raises :class:`ResultsError` naming
    the line, and anything but a regular file is refused without being read."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.csv"
    try:
        f = open_regular(path)
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such results file") from None
    except OSError as exc:
        raise ResultsError(f"{path} {exc.strerror}") from None
    with f:
        return frame(read_rows(f, path))
