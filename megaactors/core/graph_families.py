"""Generated graph families, made directly as numpy edge arrays (seeded).

* :func:`small_world` — Watts–Strogatz: a ring where each node links to its ``k``
  nearest neighbours (``k/2`` on each side), each edge rewired with probability
  ``p`` to a uniformly chosen node (no self-loops, no repeated edges);
* :func:`scale_free` — Barabási–Albert: a star of ``m + 1`` nodes, then every new
  node links to ``m`` distinct earlier nodes chosen with probability proportional
  to their degree (``m (n − m)`` edges);
* :func:`random_graph` — Erdős–Rényi ``G(n, p)`` with ``p = mean degree / (n − 1)``.

These are the models networkx implements (``watts_strogatz_graph``,
``barabasi_albert_graph``, ``gnp_random_graph``) drawn from numpy's PCG64 stream
instead: networkx builds a dict per node and per edge and takes about a minute and
a gigabyte for a million-node scale-free graph, these take seconds and the arrays.
Each returns the undirected edges as two arrays ``(u, v)``; the same seed gives the
same graph.
"""

from __future__ import annotations

import math

import numpy as np

from megaactors.errors import OrganisationError

__all__ = ["FAMILIES", "family_edge_count", "generate", "random_graph", "scale_free", "small_world"]

FAMILIES = ("small-world", "scale-free", "random")
"""Topology names of the generated families."""

Edges = tuple[np.ndarray, np.ndarray]


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def _whole(name: str, value: float) -> int:
    if value != int(value):
        raise OrganisationError(f"{name} must be a whole number, got {value!r}")
    return int(value)


def small_world(n: int, k: int, p: float, seed: int) -> Edges:
    """Watts–Strogatz ring of ``n`` nodes, ``k`` (even) neighbours each, rewiring ``p``."""
    if k < 2 or k % 2:
        raise OrganisationError(f"small-world: degree must be an even number >= 2 (k/2 on each side), got {k}")
    if k >= n:
        raise OrganisationError(f"small-world: degree {k} needs more than {k} agents, got {n}")
    if not 0.0 <= p <= 1.0:
        raise OrganisationError(f"small-world: rewire must be a probability in [0, 1], got {p}")
    rng = _rng(seed)
    half = k // 2
    u = np.tile(np.arange(n, dtype=np.int64), half)
    v = (u + np.repeat(np.arange(1, half + 1, dtype=np.int64), n)) % n
    moved = np.flatnonzero(rng.random(len(u)) < p)
    if len(moved) == 0:
        return u, v
    stay = np.ones(len(u), dtype=bool)
    stay[moved] = False
    taken = np.sort(_key(u[stay], v[stay], n))
    todo = moved
    for _ in range(64):  # each pass resolves almost every clash; a node linked to all keeps its edge
        w = rng.integers(0, n, size=len(todo))
        keys = _key(u[todo], w, n)
        ok = (w != u[todo]) & ~_member(keys, taken)
        first = np.zeros(len(todo), dtype=bool)
        _, at = np.unique(np.where(ok, keys, -1), return_index=True)
        first[at] = True
        ok &= first
        v[todo[ok]] = w[ok]
        taken = np.sort(np.concatenate([taken, keys[ok]]))
        todo = todo[~ok]
        if len(todo) == 0:
            break
    return u, v  # edges left in todo found no free partner: they keep their ring edge, as in networkx


def scale_free(n: int, m: int, seed: int) -> Edges:
    """Barabási–Albert graph of ``n`` nodes, ``m`` edges per new node."""
    if not 1 <= m < n:
        raise OrganisationError(f"scale-free: degree (edges per new node) must be >= 1 and < agents ({n}), got {m}")
    rng = _rng(seed)
    # every node once per edge end: sampling it uniformly is sampling by degree.
    # Before node t (t > m) the list holds 2m(t - m) entries, so each node's first m
    # draws are computed ahead, a chunk of nodes at a time; a repeat draws again.
    repeated = [0] * m + list(range(1, m + 1))
    chosen: list[int] = []
    spare: list[float] = []
    chunk = 1 << 15
    for first in range(m + 1, n, chunk):
        nodes = np.arange(first, min(n, first + chunk), dtype=np.int64)
        lengths = (2 * m * (nodes - m))[:, None]
        rows = (rng.random((len(nodes), m)) * lengths).astype(np.int64).tolist()
        for node, row in zip(nodes.tolist(), rows, strict=True):
            targets = [repeated[i] for i in row]
            if len(set(targets)) < m:
                length = len(repeated)
                unique = set(targets)
                while len(unique) < m:
                    if not spare:
                        spare = rng.random(chunk).tolist()
                    unique.add(repeated[int(spare.pop() * length)])
                targets = sorted(unique)
            chosen += targets
            repeated += targets
            repeated += [node] * m
    u = np.concatenate([np.zeros(m, dtype=np.int64), np.repeat(np.arange(m + 1, n, dtype=np.int64), m)])
    v = np.concatenate([np.arange(1, m + 1, dtype=np.int64), np.array(chosen, dtype=np.int64)])
    return u, v


def random_graph(n: int, mean_degree: float, seed: int) -> Edges:
    """Erdős–Rényi ``G(n, p)``, ``p = mean_degree / (n - 1)``: the number of edges is
    binomial, the edges a uniform choice of that many distinct pairs."""
    if n < 2:
        raise OrganisationError(f"random: needs at least 2 agents, got {n}")
    if not 0 < mean_degree <= n - 1:
        raise OrganisationError(f"random: mean degree must be > 0 and <= agents - 1 ({n - 1}), got {mean_degree}")
    rng = _rng(seed)
    pairs = n * (n - 1) // 2
    p = mean_degree / (n - 1)
    count = int(rng.binomial(pairs, p))
    index = np.sort(rng.choice(pairs, size=count, replace=False, shuffle=False)).astype(np.int64)
    # pair index k = j (j - 1) / 2 + i with i < j: invert the triangular numbers exactly
    j = ((1 + np.sqrt(1 + 8 * index.astype(np.float64))) / 2).astype(np.int64)
    j -= j * (j - 1) // 2 > index
    j += (j + 1) * j // 2 <= index
    i = index - j * (j - 1) // 2
    return i, j


def generate(family: str, n: int, degree: float, rewire: float, seed: int) -> Edges:
    """The undirected edges of a generated ``family`` (see :data:`FAMILIES`)."""
    if family == "small-world":
        return small_world(n, _whole("small-world: degree", degree), rewire, seed)
    if family == "scale-free":
        return scale_free(n, _whole("scale-free: degree", degree), seed)
    if family == "random":
        return random_graph(n, degree, seed)
    raise OrganisationError(f"unknown graph family {family!r}; expected one of {', '.join(FAMILIES)}")


def family_edge_count(family: str, n: int, degree: float) -> int:
    """Undirected edges of a generated graph: exact for small-world (``n k / 2``) and
    scale-free (``m (n − m)``), the expectation ``n d / 2`` for random."""
    if family == "small-world":
        return n * int(degree) // 2
    if family == "scale-free":
        m = int(degree)
        return m * (n - m) if 1 <= m < n else 0
    if family == "random":
        return math.ceil(n * degree / 2)
    raise OrganisationError(f"unknown graph family {family!r}; expected one of {', '.join(FAMILIES)}")


def _key(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    return np.minimum(u, v) * n + np.maximum(u, v)


def _member(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    at = np.searchsorted(sorted_keys, keys)
    at[at == len(sorted_keys)] = 0
    return sorted_keys[at] == keys if len(sorted_keys) else np.zeros(len(keys), dtype=bool)
