"""A communication graph: which agent may message which, edge by edge.

An edge ``(a, b, channel)`` is the permission for agent ``a`` to message agent ``b``
on ``channel``; an undirected graph gives each edge in both directions. Edges are
stored as compressed rows (CSR) sorted by (sender, channel, recipient), so the agents
``a`` may reach on a channel are one slice of one integer array: a million agents
with a few million edges cost tens of megabytes and no Python object per edge.
Agents recruited at run time, and the edges that link them to their recruiters,
go into a small overlay beside the arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from megaactors.core.messages import CHANNELS, INTRA
from megaactors.errors import OrganisationError

__all__ = ["CHANNEL_CODES", "CommunicationGraph"]

CHANNEL_CODES: dict[str, int] = {channel: code for code, channel in enumerate(CHANNELS)}
"""The code of each channel in the per-edge channel arrays."""
_K = len(CHANNELS)


class CommunicationGraph:
    """Directed edges, each with a channel, over agents ``0 .. n-1``.

    ``sources``, ``targets`` (and ``channels``, codes of :data:`CHANNEL_CODES`;
    default: every edge on the intra-group channel) are parallel integer arrays.
    With ``directed=False`` every edge also goes the other way. A pair given twice
    is one edge, on the channel given first; a self-loop or an agent outside
    ``0 .. n-1`` is an :class:`~megaactors.errors.OrganisationError` (``names``
    name the culprit).
    """

    def __init__(
        self,
        n: int,
        sources: Any,
        targets: Any,
        channels: Any = None,
        *,
        directed: bool,
        names: Sequence[Any] | None = None,
    ) -> None:
        src = np.asarray(sources, dtype=np.int64).ravel()
        dst = np.asarray(targets, dtype=np.int64).ravel()
        if src.shape != dst.shape:
            raise OrganisationError(f"{len(src)} edge sources but {len(dst)} edge targets")
        chan = np.zeros(len(src), dtype=np.int64) if channels is None else np.asarray(channels, dtype=np.int64).ravel()
        if chan.shape != src.shape:
            raise OrganisationError(f"{len(chan)} edge channels for {len(src)} edges")
        if len(src):
            low, high = min(int(src.min()), int(dst.min())), max(int(src.max()), int(dst.max()))
            if low < 0 or high >= n:
                raise OrganisationError(f"an edge names agent {low if low < 0 else high}, outside 0..{n - 1}")
            if int(chan.min()) < 0 or int(chan.max()) >= _K:
                raise OrganisationError(f"edge channel codes are 0..{_K - 1} ({', '.join(CHANNELS)})")
            loops = np.flatnonzero(src == dst)
            if len(loops):
                node = int(src[loops[0]])
                shown = repr(names[node]) if names is not None else str(node)
                raise OrganisationError(
                    f"self-loop at node {shown}: an agent cannot message itself (remove the edge {shown}-{shown})"
                )
        if not directed:
            src, dst, chan = np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([chan, chan])
        _, first = np.unique(src * n + dst, return_index=True)  # one edge per pair, its first channel
        src, dst, chan = src[first], dst[first], chan[first]
        # one key per edge: sorting the keys sorts by (sender, channel, recipient)
        keys = np.sort((src * _K + chan) * n + dst)
        del src, dst, chan, first
        slots, recipients = np.divmod(keys, n)
        del keys
        ptr = np.zeros(n * _K + 1, dtype=np.int64)
        np.cumsum(np.bincount(slots, minlength=n * _K), out=ptr[1:])
        self.n = n
        self.directed = directed
        self._ptr = ptr
        """Row ``a * K + channel`` of the edges spans ``_targets[ptr[row] : ptr[row + 1]]``."""
        self._targets = recipients.astype(np.int32 if n < 2**31 else np.int64)
        self._in_degree = np.bincount(recipients, minlength=n).astype(np.int64)
        self.channels_used = tuple(CHANNELS[c] for c in np.unique(slots % _K).tolist())
        """The channels at least one edge is on."""
        self._base = n
        self._extra: dict[int, list[list[int]]] = {}
        """Edges added after construction: sender -> recipients per channel code."""
        self._extra_in: dict[int, int] = {}

    # ------------------------------------------------------------------ queries

    @property
    def edge_count(self) -> int:
        """Directed edges: the messages of one round in which every edge carries one."""
        return len(self._targets) + sum(len(r) for rows in self._extra.values() for r in rows)

    def peers(self, a: int, channel: str) -> list[int]:
        """The agents ``a`` may message on ``channel``, in increasing order (none on a
        channel that does not exist)."""
        code = CHANNEL_CODES.get(channel)
        if code is None:
            return []
        if 0 <= a < self._base:
            row = a * _K + code
            out: list[int] = self._targets[self._ptr[row] : self._ptr[row + 1]].tolist()
        else:
            out = []
        extra = self._extra.get(a)
        if extra is not None and extra[code]:
            out = sorted(out + extra[code])
        return out

    def contacts(self, a: int) -> list[tuple[str, list[int]]]:
        """Every channel on which ``a`` may message someone, with those agents."""
        out = []
        for channel in self.channels_used if a not in self._extra else CHANNELS:
            peers = self.peers(a, channel)
            if peers:
                out.append((channel, peers))
        return out

    def out_degree(self, a: int) -> int:
        """How many (recipient, channel) edges leave ``a``."""
        base = 0
        if 0 <= a < self._base:
            base = int(self._ptr[(a + 1) * _K] - self._ptr[a * _K])
        extra = self._extra.get(a)
        return base + (sum(map(len, extra)) if extra else 0)

    def in_degree(self, a: int) -> int:
        """How many (sender, channel) edges reach ``a``: its messages of one round."""
        base = int(self._in_degree[a]) if 0 <= a < self._base else 0
        return base + self._extra_in.get(a, 0)

    def channel_of(self, a: int, b: int) -> str | None:
        """The channel of the edge ``a -> b``, or ``None`` when there is none."""
        for channel in self.channels_used:
            if self.has_edge(a, b, channel):
                return channel
        return None

    def has_edge(self, a: int, b: int, channel: str) -> bool:
        """True if the edge ``a -> b`` exists on ``channel``."""
        code = CHANNEL_CODES.get(channel)
        if code is None:
            return False
        if 0 <= a < self._base:
            row = a * _K + code
            lo, hi = int(self._ptr[row]), int(self._ptr[row + 1])
            if lo < hi:
                i = lo + int(np.searchsorted(self._targets[lo:hi], b))
                if i < hi and int(self._targets[i]) == b:
                    return True
        extra = self._extra.get(a)
        return extra is not None and b in extra[code]

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every directed edge as arrays ``(sources, targets, channel codes)``."""
        counts = np.diff(self._ptr)
        slots = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        src, chan = np.divmod(slots, _K)
        dst = self._targets.astype(np.int64)
        if self._extra:
            more = [(a, code, b) for a, rows in self._extra.items() for code, row in enumerate(rows) for b in row]
            extra = np.array(more, dtype=np.int64).reshape(-1, 3)
            src, chan, dst = (np.concatenate([x, extra[:, i]]) for i, x in enumerate((src, chan, dst)))
        return src, dst, chan

    @property
    def nbytes(self) -> int:
        """Bytes held by the edge arrays."""
        return self._ptr.nbytes + self._targets.nbytes + self._in_degree.nbytes

    # ------------------------------------------------------------------ growing

    def add_agent(self) -> int:
        """Append an agent with no edges; return its id."""
        self.n += 1
        return self.n - 1

    def add_edge(self, a: int, b: int, channel: str = INTRA) -> None:
        """Let ``a`` message ``b`` on ``channel`` (kept in the overlay; an edge that
        exists already keeps its channel)."""
        if a == b:
            raise OrganisationError(f"agent {a} cannot message itself")
        if self.channel_of(a, b) is not None:
            return
        rows = self._extra.setdefault(a, [[] for _ in CHANNELS])
        rows[CHANNEL_CODES[channel]].append(b)
        self._extra_in[b] = self._extra_in.get(b, 0) + 1
        if channel not in self.channels_used:
            self.channels_used = tuple(c for c in CHANNELS if c in (*self.channels_used, channel))
