"""A simulation sharded by machine that gives the same result as the unsharded one.

``ShardedSimulation(org, behaviour, options, shards=K).run()`` (``megaactors run
--runtime sim --shards K --machines M --net-latency cross=S``) cuts a run whose
groups are placed on ``M`` machines into ``K <= M`` shards, machine ``m`` on shard
``m mod K``; each shard simulates its machines (:class:`~megaactors.runtime.sim_shard.SimShard`).
Time advances in conservative windows ``[t, t + S)``, ``t`` the earliest event of
any shard and ``S`` the least time a copy between two machines takes: nothing sent
in a window can arrive in it, so each shard runs its window alone; the copies for
other shards are handed over, one batch per shard, at the window's end. The run
ends when no shard has an event left and no copy is in transit.

With the same seed and network settings the result (summary, counts and bytes per
channel, ledger, per-agent figures, final states) is the same for every ``K`` and
equal to :class:`~megaactors.runtime.sim.SimRuntime`'s: a run placed on machines
numbers messages, breaks ties and adds dollars per machine
(:mod:`megaactors.runtime.machine_link`). Shards run in this process, one after
the other (``backend="inprocess"``), or as Ray actors (``backend="ray"``, on the
cluster at ``address`` or a local Ray instance).

What the whole run shares has no place in a shard and is refused: serial mode,
``max_concurrent_llm``, a provider model (run-scope rate limits), faults,
recruiting and named tool locks (the last two when they happen). A sharded run
keeps no trace; ``peak_llm_in_flight`` is the sum of the machines' peaks. Its
checkpoints (:meth:`ShardedSimulation.run`) go to a durable store through
:mod:`megaactors.durable.sharded`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from megaactors.core.behaviour import Behaviour
from megaactors.core.llm import SimulatedLLM
from megaactors.core.machine_ledger import MachineLedger
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError
from megaactors.network.decisions import FaultDecisions
from megaactors.network.faults import FaultSpec
from megaactors.runtime.gc_tuning import paused_gc
from megaactors.runtime.machine_link import Outgoing
from megaactors.runtime.options import RuntimeOptions
from megaactors.runtime.result import RunResult
from megaactors.runtime.sim_shard import MachinePart, SimShard, WindowReport

__all__ = ["BACKENDS", "ShardedSimulation", "check_shardable"]

BACKENDS = ("inprocess", "ray")
"""Where shards run: in the coordinator's process, or as Ray actors."""


def check_shardable(org: Organisation, options: RuntimeOptions, shards: int) -> int:
    """The number of machines of a run that may be cut into ``shards``; a
    :class:`ParameterError` (one line) naming what stands in the way."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ParameterError(f"shards must be an integer >= 1, got {shards!r}")
    network = options.network
    if network is None or not network.placed:
        raise ParameterError("a sharded simulation needs groups placed on machines (--machines M)")
    if not network.cross_s > 0:
        raise ParameterError(
            "a sharded simulation needs a latency between machines > 0 (--net-latency cross=S): it is the window"
        )
    machines = FaultDecisions(options.seed, org, network, FaultSpec()).machine_count
    if machines < 2:
        raise ParameterError("a sharded simulation needs groups placed on two or more machines")
    if shards > machines:
        raise ParameterError(f"shards ({shards}) must not exceed the machines ({machines})")
    if shards > len(org.groups):
        raise ParameterError(f"shards ({shards}) must not exceed the groups ({len(org.groups)})")
    shared = [
        ("serial mode", options.serial),
        ("max_concurrent_llm", options.max_concurrent_llm is not None),
        (
            "a provider model (its rate limits are the whole run's)",
            options.provider is not None and options.provider.active,
        ),
        ("faults", options.faults is not None and options.faults.active),
    ]
    for what, present in shared:
        if present:
            raise ParameterError(f"a sharded simulation cannot share {what} between shards")
    return machines


class ShardedSimulation:
    """A simulation cut into shards by machine (see the module docstring)."""

    name = "sim"

    def __init__(
        self,
        org: Organisation,
        behaviour: Behaviour,
        llm: Any = None,
        options: RuntimeOptions | None = None,
        *,
        shards: int,
        backend: str = "inprocess",
        address: str | None = None,
        **option_fields: Any,
    ) -> None:
        options = RuntimeOptions.build(options, **option_fields)
        if backend not in BACKENDS:
            raise ParameterError(f"shard backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.machines = check_shardable(org, options, shards)
        self.org, self.behaviour, self.shards, self.backend, self.address = org, behaviour, shards, backend, address
        self.options = RuntimeOptions.build(options, trace=False)
        self.llm = llm if llm is not None else SimulatedLLM(seed=options.seed)
        self.windows = 0
        """Windows run so far."""
        self.startup_s = 0.0
        """Time the last run took to set its shards up (for Ray: connect, start actors)."""
        self.shard_peak_rss_kb: list[int] = []
        """Peak resident memory of each shard's process once the run is over (KiB)."""

    def _shard_args(self, durable: bool) -> list[tuple[Any, ...]]:
        shard_of = [m % self.shards for m in range(self.machines)]
        mine = [[m for m in range(self.machines) if shard_of[m] == s] for s in range(self.shards)]
        return [
            (self.org, self.behaviour, self.llm, self.options, mine[s], shard_of, durable) for s in range(self.shards)
        ]

    def run(
        self,
        checkpoint_every: int | None = None,
        on_checkpoint: Callable[[dict[str, Any]], None] | None = None,
        resume_from: dict[str, Any] | None = None,
        on_window: Callable[[int], None] | None = None,
    ) -> RunResult:
        """Run every window until nothing is left; return the merged result.

        With ``checkpoint_every`` N, every N windows ``on_checkpoint`` gets the whole
        state as plain data (each machine's :meth:`DurableSim.full()
        <megaactors.durable.state.DurableSim.full>` once the copies between shards
        are delivered); ``resume_from`` continues from such a checkpoint, taken with
        the same organisation, behaviour, options and number of shards (and takes
        no checkpoint of the window it resumes at). ``on_window`` gets the number of
        windows run after each one (it may raise to stop the run)."""
        if checkpoint_every is not None and (checkpoint_every < 1 or on_checkpoint is None):
            raise ParameterError("checkpoint_every must be >= 1 and comes with on_checkpoint")
        durable = checkpoint_every is not None or resume_from is not None
        wall0 = time.perf_counter()
        every = [() for _ in range(self.shards)]
        with paused_gc(), self._shard_calls(durable) as call:  # shards in this process: as SimRuntime.run
            self.startup_s = time.perf_counter() - wall0
            if resume_from is None:
                reports: list[WindowReport] = call("start", every)
            else:
                reports = call("restore", [(self._check_checkpoint(resume_from, s),) for s in range(self.shards)])
                self.windows = resume_from["windows"]
            resumed_at = self.windows
            while True:
                soonest = min(r.next_time for r in reports)
                if soonest == float("inf"):
                    break
                incoming = _by_recipient_shard(reports, self.shards)
                if checkpoint_every is not None and self.windows != resumed_at and self.windows % checkpoint_every == 0:
                    reports = call("accept", [(incoming[s],) for s in range(self.shards)])
                    incoming = [[] for _ in range(self.shards)]
                    described = {m: d for ds in call("full", every) for m, d in ds.items()}
                    checkpoint = {"windows": self.windows, "shards": self.shards, "machines": described}
                    on_checkpoint(checkpoint)  # type: ignore[misc]
                    soonest = min(r.next_time for r in reports)
                until = soonest + self.options.network.lookahead_s  # type: ignore[union-attr]
                reports = call("advance", [(until, incoming[s]) for s in range(self.shards)])
                self.windows += 1
                if on_window is not None:
                    on_window(self.windows)
            parts: list[MachinePart] = [p for ps in call("parts", every) for p in ps]
            self.shard_peak_rss_kb = call("peak_rss_kb", every)
            return merge_parts(self.org, self.machines, parts, time.perf_counter() - wall0)

    def _check_checkpoint(self, checkpoint: dict[str, Any], shard: int) -> dict[int, dict[str, Any]]:
        """The machines of ``shard`` in ``checkpoint``, refused if it does not fit."""
        if checkpoint.get("shards") != self.shards:
            raise ParameterError(f"the checkpoint is of {checkpoint.get('shards')} shard(s), not {self.shards}")
        described = {int(m): d for m, d in checkpoint["machines"].items()}
        if sorted(described) != list(range(self.machines)):
            raise ParameterError(f"the checkpoint describes machines {sorted(described)}, not 0 to {self.machines - 1}")
        return {m: d for m, d in described.items() if m % self.shards == shard}

    @contextmanager
    def _shard_calls(self, durable: bool) -> Iterator[Callable[[str, list[tuple[Any, ...]]], list[Any]]]:
        """A function calling one method on every shard with its arguments."""
        if self.backend == "inprocess":
            local = [SimShard(*args) for args in self._shard_args(durable)]
            yield lambda method, args: [getattr(s, method)(*a) for s, a in zip(local, args, strict=True)]
            return
        from megaactors.runtime.sim_shards_ray import ray_shards

        with ray_shards(self._shard_args(durable), self.address) as call:
            yield call


def _by_recipient_shard(reports: list[WindowReport], shards: int) -> list[list[list[Outgoing]]]:
    """The copies every shard sent, gathered by the shard they are for."""
    incoming: list[list[list[Outgoing]]] = [[] for _ in range(shards)]
    for r in reports:
        for shard, copies in r.outgoing.items():
            incoming[shard].append(copies)
    return incoming


def merge_parts(org: Organisation, machines: int, parts: list[MachinePart], wall_s: float) -> RunResult:
    """The run's result from every machine's part (added in machine order)."""
    parts = sorted(parts, key=lambda p: p.machine)
    machine_of = np.zeros(org.n, dtype=np.int64)
    for p in parts:
        machine_of[p.agents] = p.machine
    ledger = MachineLedger(org.n, machines, machine_of.__getitem__)
    for p in parts:
        ledger.add_part(p.ledger, p.agents)
        ledger.add_machine_part(p.machine, p.machine_figures)
    ledger.settle()
    ledger.virtual_time_s = max((p.virtual_time_s for p in parts), default=0.0)
    ledger.wall_s = wall_s
    states: list[Any] = [None] * org.n
    for p in parts:
        for agent, state in zip(p.agents.tolist(), p.states, strict=True):
            states[agent] = state
    counts = {k: sum(p.fault_counts[k] for p in parts) for k in parts[0].fault_counts}
    stalled = dict(sorted(item for p in parts for item in p.stalled.items()))
    result = RunResult(
        runtime="sim",
        org=org,
        ledger=ledger,
        trace=None,
        states=states,
        faults={**counts, "llm": 0},
        stalled=stalled,
        interrupts=[i for p in parts for i in p.interrupts],
        status="stalled" if stalled else "ok",
    )
    return result
