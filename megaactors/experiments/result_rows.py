"""Result rows of a sweep: their columns, their CSV form, and reading them back.

A row holds a run's parameters (blank where its topology ignores one: ``group_size``
outside two-tier, ``fanout`` outside hierarchy), how its group size was chosen, its
status (``ok``, ``error``, ``skipped``), its closed-form message count, its ledger
figures and a ``detail``. Reading validates every field and names the line of
anything malformed; a run recorded twice is kept once, with a warning.
"""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from megaactors.core.messages import CHANNELS
from megaactors.experiments.spec import PARAMETERS, TOPOLOGIES, RunSpec
from megaactors.safe_files import open_regular

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "COLUMNS",
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

IGNORED_BY: dict[str, tuple[str, ...]] = {
    "group_size": tuple(t for t in TOPOLOGIES if t != "two-tier"),
    "fanout": tuple(t for t in TOPOLOGIES if t != "hierarchy"),
}
"""Parameters that topologies ignore: their cells are blank in those rows."""

STATUSES = ("ok", "error", "skipped")

ADDED_PARAMETERS = ("net_latency", "net_jitter", "machines", "faults")
"""Parameters added after results files were first written: a file without their
columns has them at their defaults."""

# column name -> kind: str, int, float, bool, int? (may be empty), json
_PARAM_KINDS = {
    name: ("int?" if p.optional or name in IGNORED_BY else "int")
    if p.kind is int
    else {float: "float", bool: "bool"}.get(p.kind, "str")
    for name, p in PARAMETERS.items()
}
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
}
KINDS: dict[str, str] = {
    **_PARAM_KINDS,
    "group_rule": "str",
    "status": "str",
    "expected_messages": "int",
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
    """``params`` with the parameters its topology ignores blanked (None)."""
    out = dict(params)
    for name, topologies in IGNORED_BY.items():
        if out.get("topology") in topologies:
            out[name] = None
    return out


def row_key(params: Mapping[str, Any]) -> str:
    """What identifies a run among rows: its relevant parameters and group rule."""
    relevant = relevant_params(params)
    return json.dumps([relevant.get(name) for name in (*PARAMS, "group_rule")])


def to_csv(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as CSV cells."""
    out: dict[str, Any] = {}
    for name in COLUMNS:
        value = row.get(name)
        if value is None or (isinstance(value, float) and value != value):
            out[name] = ""
        elif KINDS[name] == "json":
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
        missing = [c for c in COLUMNS if c not in header and c not in ADDED_PARAMETERS]
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
    for name in [p for p in ADDED_PARAMETERS if p not in raw]:  # a file of an earlier version: at its default
        default = getattr(RunSpec, name)
        raw[name] = "" if default is None else str(default)
    status = raw["status"]
    if status not in STATUSES:
        raise ResultsError(f"{at}: status {status!r} is not one of {', '.join(STATUSES)}")
    row: dict[str, Any] = {}
    for name in COLUMNS:
        text = raw[name]
        kind = KINDS[name]
        optional = kind in ("int?", "str") or (name in FIGURE_KINDS and status != "ok") or name == "expected_messages"
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


def frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows as a DataFrame with one dtype per column."""
    import pandas as pd

    df = pd.DataFrame(list(rows), columns=list(COLUMNS))
    for name in COLUMNS:
        kind = KINDS[name]
        if kind in ("int", "int?"):
            df[name] = df[name].astype("Int64")
        elif kind == "float":
            df[name] = df[name].astype("float64")
        elif kind == "bool":
            df[name] = df[name].astype("bool")
        elif kind == "str":
            df[name] = df[name].fillna("").astype(str)
    return df


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
