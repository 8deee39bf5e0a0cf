"""A sweep's output directory: ``grid.json`` (every grid swept into it) and
``results.csv`` (one row per run, appended as runs finish, sorted at the end).

While a sweep writes, it holds an exclusive lock on ``DIR/sweep.lock`` naming its
process; a second sweep of the same directory is refused and told who holds it. No
file of the directory is opened through a symbolic link, rewrites go through a
temporary file created exclusively beside the target, and a run recorded twice is
kept once. Sweeping another grid into a directory extends it: rows already there
stay, and only runs not yet recorded are run.
"""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import IO, Any

from megaactors.experiments.result_rows import (
    ADDED_COLUMNS,
    ADDED_FIGURES,
    COLUMNS,
    SweepError,
    read_rows,
    row_key,
    to_csv,
)
from megaactors.safe_files import Directory, LockHeldError

__all__ = ["SweepDirectory"]

RESULTS = "results.csv"
GRID = "grid.json"
LOCK = "sweep.lock"


class SweepDirectory:
    """The output directory of one sweep, locked from :meth:`open` to :meth:`close`."""

    def __init__(self, out: Path, grids: list[dict[str, list[Any]]], max_messages: int | None) -> None:
        self.path = out
        self.grids = grids
        self.max_messages = max_messages
        self.dir: Directory | None = None
        self.file: IO[str] | None = None
        self.writer: csv.DictWriter[str] | None = None

    @property
    def csv(self) -> Path:
        return self.path / RESULTS

    def open(self, retry_errors: bool) -> dict[str, dict[str, Any]]:
        """Lock the directory, record the grid and return the rows already computed
        (by run key); skipped runs and, with ``retry_errors``, failed ones are left
        out so they are decided again."""
        try:
            return self._open(retry_errors)
        except BaseException:
            self.close()
            raise

    def _open(self, retry_errors: bool) -> dict[str, dict[str, Any]]:
        if self.path.exists() and not self.path.is_dir():
            raise SweepError(f"output {self.path} exists and is not a directory")
        try:
            self.dir = Directory(self.path)
            self.dir.lock(LOCK, _holder())
        except LockHeldError as exc:
            raise SweepError(
                f"another sweep is writing to {self.path} ({exc.holder or 'holder unknown'}); "
                "wait for it to finish or choose another output directory"
            ) from None
        except OSError as exc:
            if exc.filename and Path(exc.filename).parent == self.path:  # a file of the directory
                raise SweepError(f"{exc.filename}: {exc.strerror}") from None
            where = exc.filename or self.path
            raise SweepError(f"cannot use {where} as the output directory: {exc.strerror}") from None
        try:
            return self._read_and_record(retry_errors)
        except OSError as exc:
            raise SweepError(f"{exc.filename or self.path}: {exc.strerror}") from None

    def _read_and_record(self, retry_errors: bool) -> dict[str, dict[str, Any]]:
        assert self.dir is not None
        has_grid, has_csv = self.dir.exists(GRID), self.dir.exists(RESULTS)
        if has_csv and not has_grid:
            raise SweepError(f"{self.csv} exists but {GRID} does not: not a sweep directory")
        known: list[Any] = []
        if has_grid:
            try:
                stored = json.loads(self.dir.read_text(GRID))
                known = list(stored["grids"])
            except (ValueError, KeyError, TypeError) as exc:
                raise SweepError(
                    f"{self.path / GRID} is not a sweep's grid file ({exc}); remove it or choose another directory"
                ) from None
        grids = known + [g for g in self.grids if g not in known]
        record = {"grids": grids, "max_messages": self.max_messages}
        self.dir.replace(GRID, json.dumps(record, indent=1, sort_keys=True) + "\n")
        rows: dict[str, dict[str, Any]] = {}
        if has_csv:
            self.dir.drop_torn_line(RESULTS)
            with self.dir.open_text(RESULTS) as f:
                header = next(csv.reader(f), None)
            older = header is not None and set(header) <= set(COLUMNS) and set(COLUMNS) - set(header) <= ADDED
            if header is not None and tuple(header) != COLUMNS and not older:  # an older file is rewritten below
                raise SweepError(
                    f"{self.csv} has other columns than this version writes; choose another output directory"
                )
            with self.dir.open_text(RESULTS) as f:
                rows = {row_key(r): r for r in read_rows(f, self.csv)}
        self._rewrite(list(rows.values()))  # without the duplicates, if any
        self.file = self.dir.append(RESULTS)
        self.writer = csv.DictWriter(self.file, fieldnames=COLUMNS, lineterminator="\n")
        keep = ("ok",) if retry_errors else ("ok", "error")
        return {k: r for k, r in rows.items() if r["status"] in keep}

    def append(self, row: dict[str, Any]) -> None:
        assert self.writer is not None and self.file is not None
        self.writer.writerow(to_csv(row))
        self.file.flush()

    def close(self, order: list[str] | None = None) -> None:
        """Rewrite the rows in ``order`` (by run key; the order runs finish in is not
        reproducible; a skipped or retried run recorded again replaces its old row),
        then release the lock."""
        try:
            if self.file is not None:
                self.file.close()
                self.file = None
                if order is not None and self.dir is not None:
                    self._sort(order)
        finally:
            if self.dir is not None:
                self.dir.close()
                self.dir = None

    def _sort(self, order: list[str]) -> None:
        assert self.dir is not None
        with self.dir.open_text(RESULTS) as f:
            latest = {row_key(r): r for r in read_rows(f, self.csv, newest=True)}
        rank = {k: i for i, k in enumerate(order)}
        keys = sorted(latest, key=lambda k: rank.get(k, len(rank)))
        self._rewrite([latest[k] for k in keys])

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        assert self.dir is not None
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(to_csv(r) for r in rows)
        self.dir.replace(RESULTS, text.getvalue())


ADDED = {*ADDED_COLUMNS, *ADDED_FIGURES}
"""Columns a results file of an earlier version may lack (its rows read as their defaults, or blank)."""


def _holder() -> str:
    """Who holds the lock, for the message a second sweep gets."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    if program == "__main__.py":  # python -m megaactors
        program = os.path.basename(os.path.dirname(sys.argv[0]))
    command = " ".join([program, *sys.argv[1:]])
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    return f"process {os.getpid()} on {socket.gethostname()}, started {started}: {command}"[:400]
