"""Message counts of the chat round computed arithmetically, without building an
organisation (a graph file is counted, once per version of the file), and the
group size that minimises them."""

from __future__ import annotations

from functools import lru_cache

from megaactors.core.graph_families import FAMILIES, family_edge_count
from megaactors.core.organisation import GRAPH_PREFIX
from megaactors.errors import ParameterError

__all__ = ["OPTIMAL", "closed_form_messages", "optimal_group_size"]

OPTIMAL = "optimal"
"""``group_size`` word meaning the closed-form cost-minimising group size."""


def closed_form_messages(topology: str, agents: int, group_size: int = 10, rounds: int = 1, degree: float = 4.0) -> int:
    """Messages of ``rounds`` chat rounds: flat ``N(N−1)``; star and hierarchy
    ``2(N−1)``; two-tier ``Σ sᵢ(sᵢ−1) + a(a−1)``; a graph organisation its directed
    edge count (``2|E|`` undirected): small-world ``N K``, scale-free ``2 M (N − M)``,
    random ``N d`` in expectation, a graph file's own count."""
    n = agents
    if topology.startswith(GRAPH_PREFIX):
        from megaactors.core.graph_files import graph_counts

        return rounds * graph_counts(topology[len(GRAPH_PREFIX) :]).edges
    if topology in FAMILIES:
        return rounds * 2 * family_edge_count(topology, n, degree)
    if topology == "flat":
        per_round = n * (n - 1)
    elif topology in ("star", "hierarchy"):
        per_round = 2 * (n - 1)
    elif topology == "two-tier":
        full, rest = divmod(n, group_size)
        admins = full + (rest > 0)
        per_round = full * group_size * (group_size - 1) + rest * (rest - 1) + admins * (admins - 1)
    else:
        raise ParameterError(f"no closed form for topology {topology!r}")
    return rounds * per_round


@lru_cache(maxsize=256)
def optimal_group_size(agents: int) -> int:
    """The group size G that minimises two-tier messages for ``agents`` agents (the
    smallest if several tie); close to ``(2N)^(1/3)``."""
    import numpy as np

    if isinstance(agents, bool) or not isinstance(agents, int) or agents < 1:
        raise ParameterError(f"agents must be an integer >= 1, got {agents!r}")
    # beyond 4·(2N)^(1/3) the intra-group messages alone exceed the optimum's total
    g = np.arange(1, min(agents, int(4 * (2 * agents) ** (1 / 3)) + 10) + 1, dtype=np.int64)
    full, rest = np.divmod(agents, g)
    admins = full + (rest > 0)
    cost = full * g * (g - 1) + rest * (rest - 1) + admins * (admins - 1)
    return int(g[int(np.argmin(cost))])
