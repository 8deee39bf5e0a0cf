"""Organisations read from graph files, chosen by extension.

* ``.graphml`` (GraphML), ``.gml`` (GML), ``.json`` (networkx node-link JSON, with
  ``links`` or ``edges``) — read with networkx; node attributes ``parent``,
  ``group``, ``role`` and edge attributes ``channel`` refine the organisation
  (:mod:`megaactors.core.org_graph`); the file says whether it is directed;
* ``.edgelist``, ``.edges``, ``.txt``, ``.csv``, ``.tsv`` — an edge list, read
  without networkx: one edge ``u v`` per line (whitespace or commas), an optional
  third column naming the edge's channel (anything else there, such as a weight,
  is ignored), a line with one node for an isolated node, ``#`` comments, and a
  ``source,target`` header allowed on the first line. Undirected, unless a comment
  line ``# directed`` comes before the first edge. Integer labels are ordered by
  value, others by first appearance.

Every problem is an :class:`~megaactors.errors.OrganisationError` naming the file
and, where the format tells it, the line.
"""

from __future__ import annotations

import inspect
import json
import os
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from megaactors.core.graph import CHANNEL_CODES
from megaactors.errors import OrganisationError

if TYPE_CHECKING:
    from megaactors.core.organisation import Organisation

__all__ = ["EDGE_LIST_SUFFIXES", "GRAPH_SUFFIXES", "GraphCounts", "graph_counts", "read_organisation"]

EDGE_LIST_SUFFIXES = (".edgelist", ".edges", ".txt", ".csv", ".tsv")
GRAPH_SUFFIXES = (".graphml", ".gml", ".json", *EDGE_LIST_SUFFIXES)


def read_organisation(path: str | Path) -> Organisation:
    """The organisation a graph file describes."""
    from megaactors.core.org_graph import from_edges, from_networkx

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in GRAPH_SUFFIXES:
        raise OrganisationError(
            f"{path}: unknown graph file type {suffix or '(no extension)'!r}; "
            f"expected one of {', '.join(GRAPH_SUFFIXES)}"
        )
    text = _read_text(path)
    if suffix in EDGE_LIST_SUFFIXES:
        names, src, dst, chan, directed = _parse_edge_list(path, text)
        try:
            return from_edges(names, src, dst, chan, directed=directed)
        except OrganisationError as exc:
            raise OrganisationError(f"{path}: {exc}") from None
    graph = _read_networkx(path, suffix, text)
    try:
        return from_networkx(graph)
    except OrganisationError as exc:
        raise OrganisationError(f"{path}: {exc}") from None


class GraphCounts(tuple[int, int]):
    """``(agents, directed edges)`` of a graph file."""

    __slots__ = ()

    @property
    def agents(self) -> int:
        return self[0]

    @property
    def edges(self) -> int:
        return self[1]


def graph_counts(path: str | Path) -> GraphCounts:
    """Agents and directed edges of a graph file (read once per version of the file:
    budgets and sweeps ask before every run)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise OrganisationError(f"{path}: cannot read the graph file: {exc.strerror}") from None
    return _counts(os.path.abspath(path), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=16)
def _counts(path: str, mtime_ns: int, size: int) -> GraphCounts:
    org = read_organisation(path)
    edges = org.graph.edge_count if org.graph is not None else _structural_edges(org)
    return GraphCounts((org.n, edges))


def _structural_edges(org: Organisation) -> int:
    """Directed pairs an organisation given by attributes lets talk (each once)."""
    return sum(len(peers) for a in range(org.n) for _, peers in org.contacts(a))


# ---------------------------------------------------------------------- reading


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise OrganisationError(f"{path}: is a directory, not a graph file") from None
    except OSError as exc:
        raise OrganisationError(f"{path}: cannot read the graph file: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise OrganisationError(f"{path} line {line}: not UTF-8 text ({exc.reason})") from None


def _read_networkx(path: Path, suffix: str, text: str) -> nx.Graph:
    try:
        if suffix == ".graphml":
            return nx.parse_graphml(text)
        if suffix == ".gml":
            try:
                return nx.parse_gml(text)
            except nx.NetworkXError as exc:
                if "label" not in str(exc):
                    raise
                return nx.parse_gml(text, label=None)  # nodes without labels: named by their ids
        data = json.loads(text)
        if not isinstance(data, dict) or "nodes" not in data:
            raise OrganisationError(f"{path}: not node-link JSON (an object with 'nodes' and 'links' or 'edges')")
        key = "links" if "links" in data else "edges"
        option = "edges" if "edges" in inspect.signature(nx.node_link_graph).parameters else "link"
        return nx.node_link_graph(data, **{option: key})
    except OrganisationError:
        raise
    except ET.ParseError as exc:
        line = exc.position[0]
        raise OrganisationError(f"{path} line {line}: malformed GraphML: {_first_line(exc)}") from None
    except json.JSONDecodeError as exc:
        raise OrganisationError(f"{path} line {exc.lineno}: malformed JSON: {exc.msg}") from None
    except (nx.NetworkXError, KeyError, TypeError, ValueError, AttributeError) as exc:
        kind = {".graphml": "GraphML", ".gml": "GML"}.get(suffix, "node-link JSON")
        raise OrganisationError(f"{path}: malformed {kind}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _label(token: str) -> Any:
    try:
        return int(token)
    except ValueError:
        return token


def _parse_edge_list(path: Path, text: str) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, bool]:
    """Node names, edge arrays (channel ``-1``: derive) and directedness of an edge list."""
    index: dict[Any, int] = {}
    src: list[int] = []
    dst: list[int] = []
    chan: list[int] = []
    directed = False
    comma = path.suffix.lower() == ".csv"
    first = _first_line_number(text)
    for number, line in enumerate(text.splitlines(), start=1):
        body = line.split("#", 1)[0]
        if not body.strip():
            if not src and line.strip().lower().lstrip("#").strip() == "directed":
                directed = True
            continue
        tokens = body.replace(",", " ").split() if comma or "," in body else body.split()
        if number == first and [t.lower() for t in tokens[:2]] == ["source", "target"]:
            continue
        ids = []
        for token in tokens[:2]:
            label = _label(token)
            ids.append(index.setdefault(label, len(index)))
        if len(ids) == 1:
            continue
        u, v = ids
        if u == v:
            raise OrganisationError(
                f"{path} line {number}: self-loop at node {tokens[0]!r}: an agent cannot message itself"
            )
        src.append(u)
        dst.append(v)
        chan.append(CHANNEL_CODES.get(tokens[2], -1) if len(tokens) > 2 else -1)
    if not index:
        raise OrganisationError(f"{path}: no nodes (an edge list has one edge 'u v' per line)")
    names = list(index)
    order = np.arange(len(names), dtype=np.int64)
    if all(isinstance(name, int) for name in names):  # number agents in the order of their labels
        ranked = sorted(range(len(names)), key=names.__getitem__)
        order[np.array(ranked, dtype=np.int64)] = np.arange(len(names), dtype=np.int64)
        names = [names[i] for i in ranked]
    s = order[np.array(src, dtype=np.int64)] if src else np.zeros(0, dtype=np.int64)
    d = order[np.array(dst, dtype=np.int64)] if dst else np.zeros(0, dtype=np.int64)
    return names, s, d, np.array(chan, dtype=np.int64), directed


def _first_line_number(text: str) -> int:
    for number, line in enumerate(text.splitlines(), start=1):
        if line.split("#", 1)[0].strip():
            return number
    return 0
