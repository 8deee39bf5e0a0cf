"""Seeded fault decisions, each a pure function of what it is about.

Every decision is a counter-based draw (:func:`~megaactors.core.llm.stream_uniform`)
keyed by the copy it concerns — (message id, recipient, attempt) — or by (agent,
batch index) for a crash, with one stream per purpose. No generator is shared, so
a decision never depends on the order in which a runtime happens to deliver
messages, and every runtime that keys the same copy the same way agrees with the
simulation.
"""

from __future__ import annotations

from megaactors.core.llm import stream_uniform
from megaactors.core.organisation import Organisation
from megaactors.network.faults import FaultSpec
from megaactors.network.model import NetworkModel

__all__ = ["CRASH_STREAM", "DELAY_STREAM", "DROP_STREAM", "DUPLICATE_STREAM", "JITTER_STREAM", "FaultDecisions"]

DROP_STREAM = 0x4E0001
DUPLICATE_STREAM = 0x4E0002
DELAY_STREAM = 0x4E0003
JITTER_STREAM = 0x4E0004
CRASH_STREAM = 0x4E0005
_ATTEMPT = 1 << 32
_STREAMS = {"drop": DROP_STREAM, "duplicate": DUPLICATE_STREAM, "delay": DELAY_STREAM}


class FaultDecisions:
    """What happens to each copy and each batch of one run."""

    def __init__(self, seed: int, org: Organisation, network: NetworkModel, faults: FaultSpec) -> None:
        self.seed = seed
        self.org = org
        self.network = network
        self.faults = faults
        self.group_machine = network.group_machines(org)
        machine_count = max(self.group_machine, default=0) + 1
        if network.machine_count is not None:
            machine_count = network.machine_count
        self.machine_count = machine_count
        faults.check(org, machine_count)
        self._fixed = None if faults.windows or faults.channels else {k: float(getattr(faults, k)) for k in _STREAMS}
        """Probability of each message fault when no window or channel rule varies it."""
        self._partition_sides = [
            (p.start, p.end, frozenset(p.groups), frozenset(p.machines)) for p in faults.partitions
        ]

    def machine(self, agent: int) -> int:
        """The machine ``agent`` runs on (0 without machines)."""
        placed = self.group_machine
        if not placed:
            return 0
        group = self.org.member_group[agent]
        if group < 0:
            return 0
        return placed[group] if group < len(placed) else group % self.machine_count  # a group formed during the run

    def _draw(self, msg_id: int, recipient: int, attempt: int, stream: int) -> float:
        return stream_uniform(self.seed, msg_id, recipient + attempt * _ATTEMPT, stream)

    def latency(self, msg_id: int, recipient: int, attempt: int, channel: str, sender: int) -> float:
        """Time the copy takes: its channel's (or ``cross``) minimum plus jitter."""
        network = self.network
        cross = bool(self.group_machine) and self.machine(sender) != self.machine(recipient)
        base = network.base_latency(channel, cross)
        if network.jitter_s:
            base += network.jitter_s * self._draw(msg_id, recipient, attempt, JITTER_STREAM)
        return base

    def happens(self, kind: str, msg_id: int, recipient: int, attempt: int, channel: str, now: float) -> bool:
        """Whether message fault ``kind`` (drop, duplicate, delay) hits the copy."""
        fixed = self._fixed
        p = fixed[kind] if fixed is not None else self.faults.probability(kind, channel, now)
        return bool(p) and stream_uniform(self.seed, msg_id, recipient + attempt * _ATTEMPT, _STREAMS[kind]) < p

    def crashes(self, agent: int, batch_index: int) -> bool:
        """Whether ``agent`` crashes as it takes its ``batch_index``-th batch."""
        p = self.faults.crash
        return bool(p) and stream_uniform(self.seed, agent, batch_index, CRASH_STREAM) < p

    def partitioned(self, sender: int, recipient: int, now: float) -> bool:
        """Whether a partition separates ``sender`` from ``recipient`` at ``now``."""
        if not self._partition_sides:
            return False
        member = self.org.member_group
        for start, end, groups, machines in self._partition_sides:
            if start <= now < end:
                if groups:
                    a, b = member[sender] in groups, member[recipient] in groups
                else:
                    a, b = self.machine(sender) in machines, self.machine(recipient) in machines
                if a != b:
                    return True
        return False
