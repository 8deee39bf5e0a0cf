"""The ledger's per-agent columns, written through journals and added in bulk.

A column is an ``array('q')`` (dollars: ``array('d')``) with one cell per agent: 8
bytes each, however large the count. Adding to one cell from Python costs about a
thousand machine instructions (the array boxes the old value and parses the new
one), and a run adds to about seven cells per LLM call. So the hot path appends to a
journal instead — the agent and the amounts of one LLM call, one batch taken or one
send — and :meth:`AgentColumns.fold` adds a journal into the columns in bulk
(``numpy.add.at``, which adds in journal order: a float column gets the very sums,
bit for bit, that adding one by one would give). A journal is folded once it holds
:data:`FOLD_AT` entries and whenever the columns are read, so readers never see a
pending amount and the journals never hold more than a few thousand entries.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

__all__ = ["AGENT_COLUMNS", "FOLD_AT", "AgentColumns"]

AGENT_COLUMNS = ("sent", "received", "bytes_sent", "bytes_received", "llm_calls", "tokens_in", "tokens_out", "batches")
FOLD_AT = 4096
"""Entries a journal holds before the writer folds it."""
_SMALL = 32
"""A journal shorter than this is added cell by cell (numpy's fixed cost is larger)."""


class AgentColumns:
    """Per-agent counters with write journals (see the module's docstring).

    ``calls``, ``batches`` and ``sends`` are the journals, lists the hot path appends
    to and then calls :meth:`fold` when the first of them reaches :data:`FOLD_AT`:
    ``calls`` = (agents, tokens in, tokens out, dollars), one entry per LLM call (the
    dollars an ``array('d')``: no float object kept per entry);
    ``batches`` = (agents, messages, bytes), one per batch taken; ``sends`` =
    (agents, messages, bytes), one per send stamped."""

    __slots__ = ("_columns", "_cost", "batches", "calls", "sends")

    def __init__(self, n_agents: int = 0) -> None:
        self._columns: dict[str, array[int]] = {c: array("q", bytes(8 * n_agents)) for c in AGENT_COLUMNS}
        self._cost: array[float] = array("d", bytes(8 * n_agents))
        self.calls: tuple[list[int], list[int], list[int], array[float]] = ([], [], [], array("d"))
        self.batches: tuple[list[int], list[int], list[int]] = ([], [], [])
        self.sends: tuple[list[int], list[int], list[int]] = ([], [], [])

    @property
    def columns(self) -> dict[str, array[int]]:
        """Column name -> one count per agent (every journal folded in)."""
        self.fold()
        return self._columns

    @property
    def cost(self) -> array[float]:
        """Dollars per agent (every journal folded in)."""
        self.fold()
        return self._cost

    def __len__(self) -> int:
        return len(self._cost)

    def grow(self, n_agents: int) -> None:
        """Make room for agents recruited at run time."""
        extra = n_agents - len(self._cost)
        if extra > 0:
            self.fold()
            for col in self._columns.values():
                col.extend(array("q", bytes(8 * extra)))
            self._cost.extend(array("d", bytes(8 * extra)))

    def note(self, journal: tuple[list[int], list[int], list[int]], agent: int, count: int, nbytes: int) -> None:
        """Journal a batch taken or a send stamped (``journal``: :attr:`batches` or
        :attr:`sends`) of ``count`` messages and ``nbytes`` bytes by ``agent``."""
        agents, counts, sizes = journal
        agents.append(agent)
        counts.append(count)
        sizes.append(nbytes)
        if len(agents) >= FOLD_AT:
            self.fold()

    def fold(self) -> None:
        """Add every journal into the columns and empty it."""
        cols = self._columns
        agents, tokens_in, tokens_out, cost = self.calls
        if agents:
            where = _where(agents)
            _add(cols["llm_calls"], where, None)
            _add(cols["tokens_in"], where, tokens_in)
            _add(cols["tokens_out"], where, tokens_out)
            _add(self._cost, where, cost)
            _clear(self.calls)
        agents, messages, sizes = self.batches
        if agents:
            where = _where(agents)
            _add(cols["batches"], where, None)
            _add(cols["received"], where, messages)
            _add(cols["bytes_received"], where, sizes)
            _clear(self.batches)
        agents, messages, sizes = self.sends
        if agents:
            where = _where(agents)
            _add(cols["sent"], where, messages)
            _add(cols["bytes_sent"], where, sizes)
            _clear(self.sends)


def _clear(journal: tuple[Any, ...]) -> None:
    for part in journal:
        del part[:]


def _where(agents: list[int]) -> list[int] | np.ndarray:
    """A journal's agents as :func:`_add` takes them: the list itself when it is short,
    else an index array (through ``array('q')``, which converts a list of ints about
    five times faster than ``numpy.array`` does)."""
    if len(agents) < _SMALL:
        return agents
    return np.frombuffer(array("q", agents), dtype=np.int64)


def _add(column: array[Any], where: list[int] | np.ndarray, amounts: list[int] | array[float] | None) -> None:
    """``column[where[i]] += amounts[i]`` (1 when ``amounts`` is None), in order
    (``where``: from :func:`_where`)."""
    if type(where) is list:
        if amounts is None:
            for a in where:
                column[a] += 1
        else:
            for a, x in zip(where, amounts, strict=True):
                column[a] += x
        return
    typecode = column.typecode
    dtype = np.float64 if typecode == "d" else np.int64
    if amounts is None:
        add: Any = 1
    else:
        add = np.frombuffer(amounts if type(amounts) is array else array(typecode, amounts), dtype=dtype)
    np.add.at(np.frombuffer(column, dtype=dtype), where, add)
