"""The part of :class:`~megaactors.runtime.sim.SimRuntime` that places a run on
machines: with groups on two or more machines, message ids, dollars, latencies and
peaks are kept per machine (:mod:`megaactors.runtime.machine_link`,
:mod:`megaactors.core.machine_ledger`), so that the run gives the same result as
one sharded by machine (:mod:`megaactors.runtime.sim_shards`); a runtime given a
``machine`` simulates only that machine's agents (a shard's runtime).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from megaactors.core.agent import Agent
from megaactors.core.ledger import Ledger
from megaactors.core.machine_ledger import MachineLedger
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError
from megaactors.runtime.gates import FifoGate
from megaactors.runtime.interpreter import Interpreter
from megaactors.runtime.postman import Postman

if TYPE_CHECKING:
    from megaactors.runtime.net_delivery import NetworkDelivery
    from megaactors.runtime.sim_state import SimState

__all__ = ["SimPlacement"]


class SimPlacement:
    """Machines of a simulation (a part of ``SimRuntime``)."""

    org: Organisation
    core: Interpreter
    agents: list[Agent]
    postman: Postman
    _net: NetworkDelivery | None
    _locks: dict[str, FifoGate[Agent]]
    _machine_ledger: MachineLedger | None

    def _bind(self) -> None: ...

    def _complete(self, a: Agent) -> None: ...

    def _completion(self) -> Callable[[Agent], None]:
        """What runs when an agent's LLM or tool call finishes: with groups on two or
        more machines, the ledger first notes a returned LLM call on its machine."""
        if self._machine_ledger is None:
            return self._complete
        return self._complete_on_machine

    def _complete_on_machine(self, a: Agent) -> None:
        if type(a.pending) is tuple:  # an LLM call in flight (LLMInFlight)
            self._machine_ledger.call_done(a.id)  # type: ignore[union-attr]
        self._complete(a)

    @property
    def network_delivery(self) -> NetworkDelivery | None:
        """The network messages go through (None: each arrives at once, exactly once)."""
        return self._net

    @property
    def tool_locks(self) -> list[str]:
        """Names of the tool locks the run has taken so far."""
        return list(self._locks)

    def _place_on_machines(self, machine: int | None) -> MachineLedger | None:
        """With groups on two or more machines: message ids and sums per machine;
        ``machine``: the only one this runtime simulates."""
        link = self._net.link if self._net is not None else None
        if link is None:
            if machine is not None:
                raise ParameterError("a shard of a simulation needs groups placed on two or more machines")
            return None
        ledger = None
        if self.core.provider is None:
            ledger = MachineLedger(self.org.n, link.count, link.machine)
            self._use_ledger(ledger)
        self.postman.number_by_machine(link)
        return ledger

    def _own_agents(self) -> list[Agent]:
        """The agents this runtime simulates (every one, but in a shard)."""
        link = self._net.link if self._net is not None else None
        if link is None or link.local is None:
            return self.agents
        return [a for a, m in zip(self.agents, link.machine_of, strict=True) if m == link.local]

    def _use_ledger(self, ledger: Ledger) -> None:
        """Account into ``ledger`` from now on (a new postman stamps into it)."""
        core = self.core
        core.ledger = ledger
        log, core.postman = core.postman.stamped, Postman(self.org, ledger)
        core.postman.stamped = log
        if self._net is not None:
            self._net.postman = core.postman
        self._bind()

    def _machine_counters(self) -> tuple[list[int], list[int]] | None:
        """Each machine's next message id and next key (None: not placed)."""
        link = self._net.link if self._net is not None else None
        ids = self.postman.machine_message_ids()
        return None if link is None or ids is None else (ids, list(link.keys))

    def _restore_placement(self, state: SimState) -> None:
        """Take the ledger and the message ids (the machines' counters) of ``state``."""
        if state.ledger is not self.core.ledger:
            self._use_ledger(state.ledger)
            if isinstance(state.ledger, MachineLedger):
                self._machine_ledger = state.ledger
        link = self._net.link if self._net is not None else None
        if link is not None and state.machines is not None:
            ids, link.keys[:] = state.machines
            self.postman.number_by_machine(link, ids)
        else:
            self.postman.next_message_id = state.next_message_id
