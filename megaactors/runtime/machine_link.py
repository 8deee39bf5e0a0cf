"""What makes a run placed on several machines independent of how it is sharded.

A simulation whose groups are placed on two or more machines (``--machines``) can be
run as one process or cut into shards by machine
(:mod:`megaactors.runtime.sim_shards`); for both to give the same result, nothing a
machine does may depend on the order in which the events of *different* machines
are taken. A :class:`MachineLink` supplies the two keys that would otherwise be
global:

* message ids: each machine stamps ids from its own counter, machine ``m`` from
  ``m * ID_STRIDE`` (machine 0 from 0, so a run on one machine is unchanged);
* the key of a copy crossing machines: ``REMOTE_BASE + m * KEY_STRIDE + i`` for the
  ``i``-th such copy sent by machine ``m``. At equal times an event with this key
  comes after every event scheduled on the recipient's machine itself (their keys
  are its own sequence numbers, below ``REMOTE_BASE``) and arrivals from other
  machines go by (sender machine, order sent), whichever process pushed them when.

In a shard, :attr:`MachineLink.local` names the machine the runtime simulates:
copies for agents of other machines go into :attr:`MachineLink.outbox` instead of
its own events.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

from megaactors.core.messages import Packet

__all__ = ["ID_STRIDE", "KEY_STRIDE", "REMOTE_BASE", "MachineLink", "Outgoing"]

ID_STRIDE = 1 << 28
"""Message ids of machine ``m`` start at ``m * ID_STRIDE``."""
REMOTE_BASE = 1 << 62
"""Keys of copies between machines start here (local sequence numbers stay below)."""
KEY_STRIDE = 1 << 40
"""Keys of copies sent by machine ``m`` start at ``REMOTE_BASE + m * KEY_STRIDE``."""

Outgoing = tuple[float, int, Packet, int, int]
"""A copy leaving a shard: (arrival time, event key, packet, recipient, attempt)."""


class MachineLink:
    """Machine of every agent, per-machine counters, and (in a shard) the outbox."""

    __slots__ = ("_machine", "count", "keys", "local", "machine_of", "outbox")

    def __init__(self, machine: Callable[[int], int], n_agents: int, count: int, local: int | None = None) -> None:
        if count > 1 << 16:
            raise ValueError(f"at most {1 << 16} machines, got {count}")
        self._machine = machine
        self.count = count
        """Number of machines."""
        self.machine_of = array("H", map(machine, range(n_agents)))
        """Machine of each agent of the organisation as it started."""
        self.keys = [REMOTE_BASE + m * KEY_STRIDE for m in range(count)]
        """Next key of a copy sent by each machine."""
        self.local = local
        """The machine a shard simulates (None: every machine, in one process)."""
        self.outbox: list[Outgoing] = []
        """Copies for other machines sent since the outbox was last emptied (a shard's)."""

    def machine(self, agent: int) -> int:
        """The machine ``agent`` runs on."""
        return self.machine_of[agent] if agent < len(self.machine_of) else self._machine(agent)

    def next_key(self, machine: int) -> int:
        """The key of the next copy ``machine`` sends to another machine."""
        key = self.keys[machine]
        if key >= REMOTE_BASE + (machine + 1) * KEY_STRIDE:
            raise OverflowError(f"machine {machine} sent more than {KEY_STRIDE} copies to other machines")
        self.keys[machine] = key + 1
        return key

    def first_id(self, machine: int) -> int:
        """The first message id of ``machine``."""
        return machine * ID_STRIDE
