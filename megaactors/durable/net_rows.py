"""What a network and a provider model add to a checkpoint, and back.

A run through a network (:mod:`megaactors.runtime.net_delivery`) or under a provider
model (:mod:`megaactors.providers.limits`) carries state that a run without them does
not have; a checkpoint of such a run stores it under keys that other runs never
write, so their checkpoints are unchanged:

* ``net``: the copies in transit (re-sends and restarts too) by column — event key
  (its sequence number), time, kind, packet, recipient (or agent), attempt —, the
  crashed agents and when they restart, crash counts, fault counts, copies lost for
  good, and the message ids seen by the agents whose set grew (every agent in a full
  snapshot);
* ``queues``: the private in-queues, packet by packet. Through a network copies
  arrive out of id order, repeat or never arrive, so an in-queue is not "every
  packet addressed to the agent from its head on" (:mod:`megaactors.durable.state`);
* ``limits``: the provider's token buckets;
* the ledger's provider counters (:func:`encode_provider_ledger`).

Everything is msgpack-ready: packed arrays, lists and dicts of numbers.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import chain
from operator import attrgetter
from typing import Any

from megaactors.core.ledger import PROVIDER_COUNTERS, Ledger
from megaactors.core.messages import Packet
from megaactors.errors import StateError
from megaactors.providers.limits import LimitState, TokenBucket
from megaactors.runtime.events import Event
from megaactors.runtime.net_delivery import RESTART, NetworkState
from megaactors.runtime.sim_state import SimState

__all__ = [
    "NetworkShadow",
    "QueueMarks",
    "encode_limits",
    "encode_network",
    "encode_provider_ledger",
    "encode_queues",
    "fill_queues",
    "load_limits",
    "load_network",
    "load_network_section",
    "load_provider_ledger",
    "load_queues",
    "network_events",
    "network_section",
    "queue_marks",
    "transit_packets",
]

_FIRST_ID = attrgetter("first_id")

QueueMarks = list[tuple[int, int]]
"""Per agent, the length of its private in-queue and the id of its last packet: an
in-queue only grows at its end or is emptied whole (a batch taken, a crash), so a
mark that did not move means an unchanged in-queue unless its agent took a batch or
crashed (and then its record is stored anyway)."""


def queue_marks(inboxes: list[list[Packet]]) -> QueueMarks:
    return [(len(q), q[-1].first_id if q else -1) for q in inboxes]


def encode_queues(inboxes: list[list[Packet]], ids: list[int]) -> list[bytes]:
    """The private in-queues of agents ``ids``: ``[ids, lengths, packet ids]`` packed."""
    queues = [inboxes[a] for a in ids]
    return [
        array("q", ids).tobytes(),
        array("q", map(len, queues)).tobytes(),
        array("q", map(_FIRST_ID, chain.from_iterable(queues))).tobytes(),
    ]


def load_queues(rows: list[bytes], queues: dict[int, list[int]]) -> None:
    """Note in ``queues`` the in-queues (packet ids) of :func:`encode_queues`."""
    ids, lengths, packet_ids = (array("q", r) for r in rows)
    at = 0
    for aid, n in zip(ids, lengths, strict=True):
        queues[aid] = packet_ids[at : at + n].tolist()
        at += n


def transit_packets(state: NetworkState) -> list[Packet]:
    """The packets the network still carries a copy of (or will send again)."""
    return [entry[1] for entry in state.transit.values() if entry[0] != RESTART]


def encode_network(state: NetworkState, events: list[Event], seen_of: list[int] | None) -> dict[str, Any]:
    """``state`` with the times of its pending ``events``; the seen ids of agents
    ``seen_of`` (None: of every agent)."""
    times = {-aid: t for t, _, aid in events if aid < 0}
    keys = list(state.transit)
    entries = list(state.transit.values())
    restart = [e[0] == RESTART for e in entries]
    seen = state.seen if seen_of is None else {a: state.seen[a] for a in seen_of}
    return {
        "keys": array("q", keys).tobytes(),
        "times": array("d", map(times.__getitem__, keys)).tobytes(),
        "kinds": bytes(e[0] for e in entries),
        "packets": array("q", (-1 if r else e[1].first_id for e, r in zip(entries, restart, strict=True))).tobytes(),
        "targets": array("q", (e[1] if r else e[2] for e, r in zip(entries, restart, strict=True))).tobytes(),
        "attempts": array("q", (0 if r else e[3] for e, r in zip(entries, restart, strict=True))).tobytes(),
        "down": dict(state.down),
        "crashes": dict(state.crashes),
        "counts": dict(state.counts),
        "undelivered": dict(state.undelivered),
        "seen": {a: array("q", sorted(ids)).tobytes() for a, ids in seen.items()},
    }


def load_network(state: NetworkState, v: dict[str, Any], packets: dict[int, Packet]) -> None:
    """Set ``state`` to :func:`encode_network`'s ``v`` (``seen`` only for the agents
    it holds); copies refer to ``packets`` by id."""
    state.transit = {}
    for key, kind, packet_id, target, attempt in zip(
        array("q", v["keys"]), v["kinds"], array("q", v["packets"]), array("q", v["targets"]),
        array("q", v["attempts"]), strict=True,
    ):  # fmt: skip
        if kind == RESTART:
            state.transit[key] = (RESTART, target)
            continue
        packet = packets.get(packet_id)
        if packet is None:
            raise StateError(f"a copy in transit to agent {target} refers to packet {packet_id}, not in the snapshot")
        state.transit[key] = (kind, packet, target, attempt)
    state.down = {int(a): t for a, t in v["down"].items()}
    state.crashes = {int(a): n for a, n in v["crashes"].items()}
    state.counts = dict(v["counts"])
    state.undelivered = {int(a): n for a, n in v["undelivered"].items()}
    for a, ids in v["seen"].items():
        state.seen[int(a)] = set(array("q", ids))


def network_events(v: dict[str, Any]) -> list[Event]:
    """The pending network events of :func:`encode_network`'s ``v`` (key = sequence)."""
    return [(t, key, -key) for key, t in zip(array("q", v["keys"]), array("d", v["times"]), strict=True)]


class NetworkShadow:
    """What a network looked like at the last description of a run, to tell what a
    delta must hold: in-queue marks, crash counts, and how many ids each agent had seen."""

    def __init__(self) -> None:
        self.queues: QueueMarks = []
        self.crashes: dict[int, int] = {}
        self.seen: dict[int, int] = {}

    def mark(self, state: SimState) -> None:
        net = state.network
        assert net is not None
        self.queues = queue_marks(state.mail.inboxes)
        self.crashes = dict(net.crashes)
        self.seen = {a: len(ids) for a, ids in net.seen.items()}

    def crashed(self, net: NetworkState) -> list[int]:
        """The agents that crashed since the mark."""
        return [a for a, n in net.crashes.items() if self.crashes.get(a, 0) != n]


def network_section(state: SimState, shadow: NetworkShadow | None, changed: Sequence[int] = ()) -> dict[str, Any]:
    """The ``net`` and ``queues`` of a full snapshot (``shadow`` None) or of a delta
    since ``shadow``'s mark, whose agents ``changed`` (their records are stored)."""
    net, inboxes = state.network, state.mail.inboxes
    assert net is not None
    if shadow is None:
        return {"net": encode_network(net, state.events, None),
                "queues": encode_queues(inboxes, [a for a, q in enumerate(inboxes) if q])}  # fmt: skip
    marks, before = queue_marks(inboxes), shadow.queues
    moved = set(changed)
    moved.update(a for a, m in enumerate(marks) if a >= len(before) or before[a] != m)
    grew = [a for a, ids in net.seen.items() if shadow.seen.get(a) != len(ids)]
    return {"net": encode_network(net, state.events, grew), "queues": encode_queues(inboxes, sorted(moved))}


def load_network_section(
    state: SimState,
    s: dict[str, Any],
    packets: dict[int, Packet],
    queues: dict[int, list[int]],
    heads: array[int] | None = None,
) -> list[Event]:
    """Load the network's state of a full snapshot or delta ``s`` into ``state``, its
    in-queues into ``queues``; return its pending network events. A full snapshot of
    a run without a network (its in-queue ``heads`` given) is taken as a network with
    nothing in transit: a fork that adds one."""
    if state.network is None:
        if "net" in s:
            raise StateError("the run has a network (latency or faults) that these parameters drop")
        return []
    if "net" not in s:
        if heads is None:
            raise StateError("these parameters have a network but the snapshot holds no network state")
        state.mail.refill([packets[i] for i in sorted(packets)], heads)
        queues.update((a, [p.first_id for p in state.mail.take(a)[0]]) for a in range(len(state.agents)))
        return []
    load_network(state.network, s["net"], packets)
    load_queues(s["queues"], queues)
    return network_events(s["net"])


def fill_queues(state: SimState, queues: dict[int, list[int]], packets: dict[int, Packet]) -> None:
    """Rebuild the private in-queues of a run through a network, packet by packet."""
    state.mail.refill([], [-1] * len(state.agents))
    inboxes = state.mail.inboxes
    for aid, ids in queues.items():
        missing = [i for i in ids if i not in packets]
        if missing:
            raise StateError(f"agent {aid}: its queued packet {missing[0]} is missing from the snapshot")
        inboxes[aid][:] = [packets[i] for i in ids]


def encode_limits(limits: LimitState) -> dict[str, Any]:
    """The token buckets: per kind, scope key -> ``[capacity, rate, level, updated]``."""
    return {
        kind: {k: [b.capacity, b.rate, b.level, b.updated] for k, b in getattr(limits, kind).items()}
        for kind in ("requests", "tokens")
    }


def load_limits(limits: LimitState, v: dict[str, Any]) -> None:
    for kind in ("requests", "tokens"):
        setattr(limits, kind, {int(k): TokenBucket(*b) for k, b in v[kind].items()})


def encode_provider_ledger(ledger: Ledger) -> dict[str, Any]:
    """The ledger's provider counters (429s, errors, timeouts, retries, backoff, failed calls)."""
    return {k: getattr(ledger, k) for k in PROVIDER_COUNTERS}


def load_provider_ledger(ledger: Ledger, v: dict[str, Any]) -> None:
    for k in PROVIDER_COUNTERS:
        setattr(ledger, k, v[k])
