"""The state of a simulation run as plain data: full snapshots, deltas, restore.

:class:`DurableSim` is a :class:`~megaactors.runtime.sim.SimRuntime` whose
:class:`~megaactors.durable.tracker.ChangeTracker` (the runtime's
:class:`~megaactors.runtime.sim_state.SimObserver`) notes what each event touches,
so that between two super-steps it can describe the run's
:class:`~megaactors.runtime.sim_state.SimState` either whole
(:meth:`DurableSim.full`) or as what changed since the last description
(:meth:`DurableSim.delta`): the records of the agents that ran, the packets sent,
ledger cells that changed (counts as what they gained) and new trace rows. A delta's
size therefore follows the activity of its super-steps, never the length of the
run. :meth:`DurableSim.genesis` stands for the state right after the start, which
is recomputed rather than stored. :meth:`DurableSim.restore_chain` rebuilds a run
from a full snapshot (or a genesis) and the deltas after it and hands it to
:meth:`~megaactors.runtime.sim.SimRuntime.restore`; the restored run continues
exactly as the original would have (same events, message ids, LLM call indices and
ledger, float for float). Nothing here reads the runtime's internals: only its
snapshot, its observer and its public methods.

In-queues are not stored message by message. The simulation delivers packets in
message-id order and an agent always takes its whole in-queue, so an in-queue is
"every stored packet addressed to the agent from its first queued packet on": a
full snapshot keeps the live packets once and one integer (the head) per agent
(``mail.live()``, ``mail.head()``; ``mail.refill()`` rebuilds the in-queues and the
channel logs from them). A delta keeps no heads: a restore derives them from the
packets addressed to each agent and the messages it took
(:mod:`megaactors.durable.queue_heads`).

Agent records (:mod:`megaactors.durable.agent_rows`), packets and ledger rows
(:mod:`megaactors.durable.state_codec`) are stored by column, so that capturing them
is a few passes of ``map`` over the agents that changed and packing them is mostly
copying bytes. Everything is msgpack-ready: ints, floats, strings, bytes, lists and
dicts. A behaviour's state must be msgpack-serializable (tuples come back as lists).

A run through a network or under a provider model adds its state under keys of its
own (:mod:`megaactors.durable.net_rows`): copies in transit, crashed agents, seen
ids, the in-queues packet by packet, the token buckets.
"""

from __future__ import annotations

from array import array
from itertools import chain, repeat
from operator import attrgetter, is_
from typing import Any

import numpy as np

from megaactors.core.behaviour import Behaviour
from megaactors.core.llm import SimulatedLLM
from megaactors.core.messages import Packet
from megaactors.core.organisation import Organisation
from megaactors.durable.agent_rows import encode_agent_rows, load_agent_rows
from megaactors.durable.narrow import narrowed, widened
from megaactors.durable.net_rows import (
    NetworkShadow,
    encode_limits,
    encode_provider_ledger,
    fill_queues,
    load_limits,
    load_network_section,
    load_provider_ledger,
    network_section,
    transit_packets,
)
from megaactors.durable.queue_heads import QueueCount
from megaactors.durable.state_codec import (
    add_cells,
    added_cells,
    append_trace,
    cells_changed,
    column_dtype,
    decode_effects,
    decode_packets,
    diff_cells,
    encode_effects,
    encode_ledger,
    encode_packets,
    encode_trace,
    int64s,
    load_ledger,
    pick_cells,
    set_cells,
)
from megaactors.durable.tracker import ChangeTracker, LLMCallHook, ToolGate
from megaactors.errors import StateError
from megaactors.runtime.events import Event
from megaactors.runtime.options import RuntimeOptions
from megaactors.runtime.sim import SimRuntime
from megaactors.runtime.sim_state import SimState

__all__ = ["ChangeTracker", "DurableSim", "StateError"]

_RECIPIENTS = attrgetter("recipients")
_PENDING = attrgetter("pending")


def _ledger_columns(state: SimState) -> dict[str, array[Any]]:
    return {**state.ledger.per_agent, "cost": state.ledger.cost_per_agent}


def _counts(column: array[Any]) -> bool:
    """Whether a per-agent ledger column holds integers (counts), not dollars."""
    return column.typecode == "q"


def _heads(state: SimState) -> array[int]:
    """The id of the first message waiting for each agent (-1: none): looked up only
    for the agents some packet not yet read by all is addressed to."""
    heads = array("q", [-1]) * len(state.agents)
    live = state.mail.live()
    if live:
        for aid in set(chain.from_iterable(map(_RECIPIENTS, live.values()))):
            heads[aid] = state.mail.head(aid)
    return heads


class DurableSim(SimRuntime):
    """A simulation runtime whose state can be written out and read back.

    Besides the :class:`SimRuntime` options: ``on_llm_call`` sees every LLM call as
    it is issued (a paid call's charge goes through it) and ``tool_gate`` runs every
    tool function (so a tool's side effect can be recorded and replayed).
    """

    def __init__(
        self,
        org: Organisation,
        behaviour: Behaviour,
        llm: Any = None,
        options: RuntimeOptions | None = None,
        *,
        on_llm_call: LLMCallHook | None = None,
        tool_gate: ToolGate | None = None,
        **option_fields: Any,
    ) -> None:
        self.tracker = ChangeTracker(org, on_llm_call, tool_gate)
        super().__init__(org, behaviour, llm, options, observer=self.tracker, **option_fields)
        if not isinstance(self.llm, SimulatedLLM):
            raise StateError(f"a durable run needs the seeded simulated LLM, not {type(self.llm).__name__}")
        self._llm_at_mark = np.zeros(0, dtype=bool)
        """Which agents had an LLM call in flight at the last description."""
        self._shadow_started: set[int] = set()
        self._marked = False
        self._shadow_awake = b""
        self._shadow_ledger: dict[str, np.ndarray] = {}
        self._shadow_trace = (0, 0)
        self._shadow_recruits = 0
        self._shadow_llm_waiting: set[int] = set()
        self._shadow_net = NetworkShadow()

    # ------------------------------------------------------------------ writing out

    def full(self) -> dict[str, Any]:
        """The whole state between two super-steps; later deltas are relative to it."""
        state = self.snapshot()
        agents = state.agents
        live = state.mail.live()
        net = state.network
        if net is not None:  # copies in transit refer to their packets too
            for p in transit_packets(net):
                live.setdefault(p.first_id, p)
        out = self._common(state)
        out.update(
            kind="full",
            n=len(agents),
            agents=encode_agent_rows(state, list(range(len(agents))), None, np.frombuffer(_heads(state), np.int64)),
            awake=bytes(state.awake),
            packets=encode_packets([p for _, p in sorted(live.items())], None),
            ledger_columns={c: col.tobytes() for c, col in _ledger_columns(state).items()},
            trace=encode_trace(state.trace, (0, 0)),
            recruits=list(state.recruiters),
            start_effects={aid: encode_effects(e) for aid, e in state.start_effects.items()},
        )
        if net is not None:
            out.update(network_section(state, None))
        self.mark_clean()
        return out

    def delta(self) -> dict[str, Any]:
        """What changed since the last :meth:`full` or :meth:`delta` (its integer
        columns narrowed: :mod:`megaactors.durable.narrow`)."""
        if not self._marked:
            raise StateError("a delta needs a full snapshot first")
        state, tracker = self.snapshot(events=False), self.tracker  # listed below only if read
        agents = state.agents
        if state.network is not None:
            state.events = self.pending_events()
        columns = _ledger_columns(state)
        # the agents whose record changed: those noted while events ran, and those
        # whose ledger row changed (every per-agent column counts the agent's own acts)
        changed = np.zeros(len(agents), dtype=bool)
        for c, col in columns.items():
            changed |= cells_changed(col, self._shadow_ledger[c])
        started = self._shadow_started - state.start_effects.keys() if self._shadow_started else set()
        noted = tracker.touched_agents | started
        if state.limits is not None:  # admitted to an LLM slot, a first attempt refused leaves no ledger trace
            noted = noted | (self._shadow_llm_waiting - set(state.llm_waiting))
        if noted:
            changed[np.fromiter(noted, dtype=np.int64, count=len(noted))] = True
        events = np.frombuffer(int64s(tracker.events), dtype=np.int64)
        ran = np.bincount(events[events >= 0], minlength=len(agents))  # network events have negative keys
        net = state.network
        if net is not None:  # a crash changes a record (in-queue, phase, maybe state and memory) outside its events
            ran[self._shadow_net.crashed(net)] += 2  # stored in full
        changed |= ran > 0
        at = np.flatnonzero(changed)
        packets = tracker.collect_packets(members_changed=len(state.recruiters) != self._shadow_recruits)
        awake = np.frombuffer(bytes(state.awake), dtype=np.uint8)
        listed = self.pending_events if net is None else lambda: state.events  # a network's: listed above
        rows = encode_agent_rows(state, at.tolist(), self._memory_kinds(at, ran[at]), events=listed)
        llm_at_mark = np.zeros(len(agents), dtype=bool)
        llm_at_mark[: len(self._llm_at_mark)] = self._llm_at_mark
        llm_at_mark[at] = False
        llm_at_mark[at[np.frombuffer(rows["llm"][0], dtype=np.int64)]] = True
        out, shadow = self._common(state), self._shadow_ledger
        out.update(
            kind="delta",
            n=len(agents),
            agents=rows,
            awake=diff_cells(awake, np.frombuffer(self._shadow_awake, dtype=np.uint8)),
            packets=packets,
            # counts as what they gained since the last description (a byte or two each),
            # dollars as they stand (float sums are not exact)
            ledger_added={c: added_cells(col, shadow[c], at) for c, col in columns.items() if _counts(col)},
            ledger_rows={c: pick_cells(col, at) for c, col in columns.items() if not _counts(col)},
            trace=encode_trace(state.trace, self._shadow_trace),
            recruits=state.recruiters[self._shadow_recruits :],
            started=sorted(started),
        )
        if net is not None:
            out.update(network_section(state, self._shadow_net, at.tolist()))
        self._shadow_awake = awake.tobytes()
        self._llm_at_mark = llm_at_mark
        self._reset_tracking(state)
        return narrowed(out)

    def mark_clean(self) -> None:
        """Take the current state as the base of the next delta."""
        state = self.snapshot()
        agents = state.agents
        self._shadow_awake = bytes(state.awake)
        waiting = map(is_, map(type, map(_PENDING, agents)), repeat(tuple))  # an LLM call in flight, in C
        self._llm_at_mark = np.fromiter(waiting, dtype=bool, count=len(agents))
        self._reset_tracking(state)
        self._marked = True

    def _reset_tracking(self, state: SimState) -> None:
        columns = _ledger_columns(state).items()
        self._shadow_ledger = {c: np.frombuffer(col, dtype=column_dtype(col)).copy() for c, col in columns}
        t = state.trace
        self._shadow_trace = (len(t.t_agent), len(t.b_agent)) if t is not None else (0, 0)
        self._shadow_recruits = len(state.recruiters)
        self._shadow_started = set(state.start_effects)
        if state.limits is not None:
            self._shadow_llm_waiting = set(state.llm_waiting)
        if state.network is not None:
            self._shadow_net.mark(state)
        self.tracker.reset()

    def _memory_kinds(self, at: np.ndarray, ran: np.ndarray) -> np.ndarray:
        """How the memory of each agent ``at`` (which ran ``ran`` events since the last
        description) is stored: 0 unchanged (no event ran), 1 that memory plus the
        LLM call then in flight (one event ran: the end of that call), 2 in full."""
        before = np.zeros(len(at), dtype=bool)
        known = at < len(self._llm_at_mark)
        before[known] = self._llm_at_mark[at[known]]
        return np.where(ran == 0, 0, np.where((ran == 1) & before, 1, 2)).astype(np.uint8)

    @staticmethod
    def _common(state: SimState) -> dict[str, Any]:
        """Clock, counters, queues at the gates and ledger totals."""
        return {
            "now": state.now,
            "seq": state.seq,
            "steps": state.events_run,
            "in_flight": state.in_flight,
            "next_id": state.next_message_id,
            "holder": state.serial_holder,
            "wall": state.wall_s,
            "tool_invocations": state.tool_invocations,
            "llm_waiting": list(state.llm_waiting),
            "serial_waiting": list(state.serial_waiting),
            "locks": dict(state.lock_holders),
            "lock_waiting": {name: list(q) for name, q in state.lock_waiting.items()},
            "recruited": dict(state.recruited),
            "ledger": encode_ledger(state.ledger),
            **({"machines": [list(c) for c in state.machines]} if state.machines is not None else {}),
            **(
                {"limits": encode_limits(state.limits), "provider": encode_provider_ledger(state.ledger)}
                if state.limits is not None
                else {}
            ),
        }

    # ------------------------------------------------------------------ reading back

    def genesis(self) -> dict[str, Any]:
        """The state right after :meth:`start`, by reference: restoring it runs the
        start again (a pure function of the run's parameters) instead of reading a
        full snapshot. Later deltas are relative to it."""
        if not self.started or self.events_run:
            raise StateError("a genesis is taken right after start")
        self.mark_clean()
        return {"kind": "start", "n": len(self.agents)}

    def restore_chain(self, chain: list[dict[str, Any]]) -> None:
        """Load a full snapshot (or a genesis) and the deltas after it into this fresh
        runtime, built with the run's organisation, behaviour, LLM and options."""
        if self.started:
            raise StateError("restore needs a runtime that has not started")
        if not chain or chain[0].get("kind") not in ("full", "start"):
            raise StateError("a restore starts from a full snapshot or a genesis")
        if any(d.get("kind") != "delta" for d in chain[1:]):
            raise StateError("only deltas may follow a full snapshot")
        base = chain[0]
        flight: dict[int, tuple[float, int]] = {}
        packets: dict[int, Packet] = {}
        queues: dict[int, list[int]] = {}
        """A run through a network: each agent's private in-queue, by packet id."""
        if base["kind"] == "start":
            self.start()
            state = self.snapshot()
            if base["n"] != len(state.agents):
                raise StateError(f"the genesis has {base['n']} agents but these parameters build {len(state.agents)}")
            packets.update(state.mail.live())
            heads = _heads(state)
            flight.update({e[2]: (e[0], e[1]) for e in state.events if e[2] >= 0})
            net_events: list[Event] = [e for e in state.events if e[2] < 0]
            if state.network is not None:
                packets.update((p.first_id, p) for p in transit_packets(state.network))
                queues.update((a, [p.first_id for p in q]) for a, q in enumerate(state.mail.inboxes) if q)
        else:
            state = self.snapshot()
            heads = self._load_full(state, base, packets, flight)
            net_events = load_network_section(state, base, packets, queues, heads)
        counted: QueueCount | None = None
        """In-queues counted from the first delta without heads (state format 3) on."""
        for d in map(widened, chain[1:]):
            self._grow(d["recruits"])
            if d["n"] != len(state.agents):
                raise StateError(f"a delta holds {d['n']} agents where {len(state.agents)} were expected")
            heads.extend([-1] * (len(state.agents) - len(heads)))
            if "heads" in d:  # state format 2
                if counted is not None:
                    raise StateError("a delta with in-queue heads follows one without")
                for aid, head in zip(*d["heads"], strict=True):
                    heads[aid] = head
            elif counted is None and state.network is None:  # the anchor: heads known, packets and counts so far
                counted = QueueCount(heads, packets, _ledger_columns(state)["received"])
            if d["awake"] is not None:
                set_cells(state.awake, *d["awake"])
            gains = d.get("ledger_added", {})  # state format 4
            for c, col in _ledger_columns(state).items():
                if c in gains:
                    add_cells(col, d["agents"]["ids"], gains[c])
                else:
                    set_cells(col, d["agents"]["ids"], d["ledger_rows"][c])
            load_agent_rows(state, d["agents"], heads, flight, self.llm, self.core.window)
            append_trace(state.trace, d["trace"], fresh=False)
            for aid in d["started"]:
                state.start_effects.pop(aid, None)
            added = decode_packets(d["packets"], self.org)
            packets.update((p.first_id, p) for p in added)
            if counted is not None:
                counted.add(added)
            if "net" in d:
                net_events = load_network_section(state, d, packets, queues)
        if len(chain) > 1 or base["kind"] == "full":
            self._load_common(state, chain[-1])
        if counted is not None:
            heads = counted.heads(packets, _ledger_columns(state)["received"])
        if state.network is None:
            _fill_inboxes(state, heads, packets)
        else:
            fill_queues(state, queues, packets)
        state.events = [(t, seq, aid) for aid, (t, seq) in flight.items()] + net_events
        state.started = True
        self.restore(state)
        self.mark_clean()

    def _load_full(
        self, state: SimState, base: dict[str, Any], packets: dict[int, Packet], flight: dict[int, tuple[float, int]]
    ) -> array[int]:
        self._grow(base["recruits"])
        if base["n"] != len(state.agents):
            raise StateError(f"the snapshot holds {base['n']} agents but these parameters build {len(state.agents)}")
        heads = array("q", [-1]) * len(state.agents)
        state.awake[:] = base["awake"]
        for c, col in _ledger_columns(state).items():
            col[:] = array(col.typecode, base["ledger_columns"][c])
        load_agent_rows(state, base["agents"], heads, flight, self.llm, self.core.window)
        append_trace(state.trace, base["trace"], fresh=True)
        state.start_effects = {int(k): decode_effects(v) for k, v in base["start_effects"].items()}
        for p in decode_packets(base["packets"], self.org):
            packets[p.first_id] = p
        return heads

    def _grow(self, recruiters: list[int]) -> None:
        """Recruit again, in order, the agents recruited by ``recruiters`` (their records
        are loaded afterwards)."""
        for recruiter in recruiters:
            self.core.recruit(self.agents[recruiter], 1)

    @staticmethod
    def _load_common(state: SimState, s: dict[str, Any]) -> None:
        state.now = s["now"]
        state.seq = s["seq"]
        state.events_run = s["steps"]
        state.in_flight = s["in_flight"]
        state.next_message_id = s["next_id"]
        if "machines" in s:
            ids, keys = s["machines"]
            state.machines = (list(ids), list(keys))
        state.serial_holder = s["holder"]
        state.wall_s = s["wall"]
        state.tool_invocations = s["tool_invocations"]
        state.llm_waiting = list(s["llm_waiting"])
        state.serial_waiting = list(s["serial_waiting"])
        state.lock_holders = dict(s["locks"])
        state.lock_waiting = {name: list(q) for name, q in s["lock_waiting"].items()}
        state.recruited = {int(k): list(v) for k, v in s["recruited"].items()}
        load_ledger(state.ledger, s["ledger"])
        if state.limits is None and "limits" in s:
            raise StateError("the run has a provider model (limits, failures or timeouts) that these parameters drop")
        if state.limits is not None and "limits" in s:  # else: a fork that adds one starts with full buckets
            load_limits(state.limits, s["limits"])
            load_provider_ledger(state.ledger, s["provider"])


def _fill_inboxes(state: SimState, heads: array[int], packets: dict[int, Packet]) -> None:
    """Rebuild the in-queues and channel logs from the live packets and the heads."""
    state.mail.refill([packets[i] for i in sorted(packets)], heads)
    for aid, head in enumerate(heads):
        if head >= 0 and state.mail.head(aid) != head:
            raise StateError(f"agent {aid}: its queued packet {head} is missing from the snapshot")
