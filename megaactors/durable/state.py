"""The state of a simulation run as plain data: full snapshots, deltas, restore.

:class:`DurableSim` is a :class:`~megaactors.runtime.sim.SimRuntime` that notes what
each event touches, so that between two super-steps it can describe the run either
whole (:meth:`DurableSim.full`) or as what changed since the last description
(:meth:`DurableSim.delta`): the records of the agents that ran, the packets sent,
in-queue heads that moved, ledger cells that changed and new trace rows. A delta's
size therefore follows the activity of its super-steps, never the length of the
run. :meth:`DurableSim.genesis` stands for the state right after the start, which
is recomputed rather than stored. :meth:`DurableSim.restore` rebuilds a runtime
from a full snapshot (or a genesis) and the deltas after it; the restored run
continues exactly as the original would have (same events, message ids, LLM call
indices and ledger, float for float).

In-queues are not stored message by message. The simulation delivers packets in
message-id order and an agent always takes its whole in-queue, so an in-queue is
"every stored packet addressed to the agent from its first queued packet on": a
snapshot keeps the live packets once and one integer (the head) per agent.

Everything is msgpack-ready: ints, floats, strings, bytes, lists and dicts. A
behaviour's state must be msgpack-serializable (tuples come back as lists).
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from megaactors.agent import Agent, AgentState
from megaactors.behaviour import UNCHANGED, Effects, LLMRequest, Send, ToolCall
from megaactors.llm import LLMReply
from megaactors.messages import CHANNELS, Packet
from megaactors.runtime.postman import Postman
from megaactors.runtime.sim import _START, SimRuntime, _ToolInFlight

__all__ = ["DurableSim", "StateError"]

LLMCallHook = Callable[[int, int, LLMReply], None]
"""Called with ``(agent, call_index, reply)`` for every LLM call issued."""
ToolGate = Callable[[int, int, ToolCall, Callable[[], Any]], Any]
"""Runs a tool function: ``(agent, invocation_index, call, run) -> value``."""

_ROW = attrgetter("id", "state", "data", "memory", "calls", "batch_tokens", "pending", "outbox", "inbox")
_BASE = itemgetter(0, 1, 2, 3, 4, 5)
_FIRST = itemgetter(0)
_REPLY = attrgetter("tokens_in", "tokens_out", "latency_s", "cost_usd", "stage", "call_index", "text")
_SCALARS = (
    "messages",
    "bytes",
    "llm_calls",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "peak_queue_depth",
    "peak_llm_in_flight",
    "llm_time_s",
    "tool_calls",
    "tool_time_s",
    "lock_wait_s",
)
_STATES = tuple(AgentState)


class StateError(ValueError):
    """A snapshot does not describe a run of these parameters."""


class _RecordingPostman(Postman):
    """A postman that remembers every packet it stamps until they are collected."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.new_packets: list[Packet] = []

    def stamp(self, sender: int, send: Send, now: float) -> list[Packet]:
        packets = super().stamp(sender, send, now)
        self.new_packets.extend(packets)
        return packets


# ---------------------------------------------------------------------- value codecs


def _encode_request(r: LLMRequest) -> list[Any]:
    return [r.new_tokens, r.output_tokens, r.stage, r.prompt]


def _encode_call(c: ToolCall) -> list[Any]:
    return [c.name, c.duration_s, c.lock, c.args, c.stage]


def _encode_send(s: Send) -> list[Any]:
    recipients = s.recipients if type(s.recipients) in (list, tuple) else list(s.recipients)
    return [recipients, s.channel, s.kind, s.payload, s.parent]


def _encode_effects(e: Effects) -> list[Any]:
    return [
        e.state is not UNCHANGED,
        None if e.state is UNCHANGED else e.state,
        [_encode_send(s) for s in e.sends],
        None if e.llm is None else _encode_request(e.llm),
        None if e.tool is None else _encode_call(e.tool),
        e.recruits,
    ]


def _decode_effects(v: list[Any]) -> Effects:
    has_state, state, sends, llm, tool, recruits = v
    return Effects(
        state=state if has_state else UNCHANGED,
        sends=[Send(*s) for s in sends],
        llm=None if llm is None else LLMRequest(*llm),
        tool=None if tool is None else ToolCall(*tool),
        recruits=recruits,
    )


def _encode_packet(p: Packet) -> list[Any]:
    recipients = array("q", p.recipients).tobytes()
    return [p.first_id, p.sender, p.channel, p.kind, p.payload, p.parent, p.sent_at, recipients, p.overhead]


def _decode_packet(v: list[Any]) -> Packet:
    first_id, sender, channel, kind, payload, parent, sent_at, recipients, overhead = v
    return Packet(sender, channel, kind, payload, parent, sent_at, first_id, array("q", recipients).tolist(), overhead)


def _diff(current: np.ndarray, shadow: np.ndarray) -> tuple[bytes, bytes] | None:
    """Indices and new values of the cells that differ (``None`` when none do)."""
    if len(shadow) < len(current):
        shadow = np.concatenate([shadow, np.zeros(len(current) - len(shadow), dtype=shadow.dtype)])
    changed = np.flatnonzero(current != shadow)
    if not len(changed):
        return None
    return changed.astype(np.int64).tobytes(), current[changed].tobytes()


def _dtype(column: array[Any] | bytearray) -> type:
    if isinstance(column, bytearray):
        return np.uint8
    return np.float64 if column.typecode == "d" else np.int64


def _apply_diff(column: array[Any] | bytearray, diff: tuple[bytes, bytes]) -> None:
    """Write the changed cells of a :func:`_diff` into ``column``, in place."""
    target = np.frombuffer(column, dtype=_dtype(column))
    target[np.frombuffer(diff[0], dtype=np.int64)] = np.frombuffer(diff[1], dtype=target.dtype)
    del target  # release the buffer: the column may grow later


class DurableSim(SimRuntime):
    """A simulation runtime whose state can be written out and read back.

    Besides the :class:`SimRuntime` options: ``on_llm_call`` sees every LLM call as
    it is issued (a paid call's charge goes through it) and ``tool_gate`` runs every
    tool function (so a tool's side effect can be recorded and replayed).
    """

    def __init__(
        self,
        *args: Any,
        on_llm_call: LLMCallHook | None = None,
        tool_gate: ToolGate | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.postman = _RecordingPostman(self.org, self.ledger)
        self.on_llm_call = on_llm_call
        self.tool_gate = tool_gate
        self.tool_invocations = 0
        """Tool functions run so far (the index of the next one)."""
        self.recruits: list[int] = []
        """The recruiter of every agent recruited so far, in order."""
        if on_llm_call is not None:
            self._call_llm = self._paid_call_llm  # type: ignore[method-assign]
        self._active: set[int] = set()
        self._shadow_started: set[int] = set()
        self._marked = False
        self._shadow_heads = array("q")
        self._shadow_awake = b""
        self._shadow_ledger: dict[str, np.ndarray] = {}
        self._shadow_trace = (0, 0)
        self._shadow_recruits = 0

    # ------------------------------------------------------------------ noting changes
    #
    # An agent's record changes only when one of its events completes, when it
    # takes a batch or makes an LLM call or sends (its ledger row changes), when it
    # starts a tool, is recruited, or runs its start effects. The first is noted
    # here as events run; ledger rows are compared when a delta is written; the
    # rest are rare and noted by the overrides below.

    def advance(self, until: float) -> int:
        heap, agents, complete, drain = self._heap, self.agents, self._complete, self._drain
        note = self._active.add
        ran = 0
        while heap and heap[0][0] < until:
            t, _, aid = heapq.heappop(heap)
            self.now = t
            note(aid)
            complete(agents[aid])
            drain()
            self.steps += 1
            ran += 1
        return ran

    def step(self) -> bool:
        if self._heap:
            self._active.add(self._heap[0][2])
        return super().step()

    def _paid_call_llm(self, a: Any, request: LLMRequest) -> None:
        index = a.calls
        SimRuntime._call_llm(self, a, request)
        if a.calls != index and self.on_llm_call is not None:  # issued, not queued behind the cap
            self.on_llm_call(a.id, index, a.pending[1])

    def _run_tool(self, a: Any, flight: _ToolInFlight) -> None:
        super()._run_tool(a, flight)
        self._active.add(a.id)

    def _call_tool(self, a: Any, call: ToolCall) -> None:
        super()._call_tool(a, call)
        self._active.add(a.id)

    def _recruit(self, a: Any, count: int) -> None:
        first = len(self.agents)
        super()._recruit(a, count)
        self.recruits.extend([a.id] * count)
        self._active.update(range(first, len(self.agents)))

    def _invoke_tool(self, a: Any, call: ToolCall) -> Any:
        index = self.tool_invocations
        self.tool_invocations += 1
        if self.tool_gate is None:
            return super()._invoke_tool(a, call)
        return self.tool_gate(a.id, index, call, lambda: super(DurableSim, self)._invoke_tool(a, call))

    def _flights(self) -> dict[int, tuple[float, int]]:
        """(time, sequence) of the event each agent with a call in flight waits for."""
        if not self._heap:
            return {}
        times, seqs, aids = zip(*self._heap, strict=True)
        return dict(zip(aids, zip(times, seqs, strict=True), strict=True))

    # ------------------------------------------------------------------ writing out

    def full(self) -> dict[str, Any]:
        """The whole state between two super-steps; later deltas are relative to it."""
        agents = self.agents
        live: dict[int, Packet] = {}
        for a in agents:
            for p in a.inbox:
                live[p.first_id] = p
        out = self._common()
        out.update(
            kind="full",
            n=len(agents),
            agents=self._agent_rows(agents),
            awake=bytes(self._awake),
            packets=[_encode_packet(p) for _, p in sorted(live.items())],
            ledger_columns={c: col.tobytes() for c, col in self._ledger_columns().items()},
            trace=self._trace_rows((0, 0)),
            recruits=list(self.recruits),
            start_effects={aid: _encode_effects(e) for aid, e in self._start_effects.items()},
        )
        self.mark_clean()
        return out

    def delta(self) -> dict[str, Any]:
        """What changed since the last :meth:`full` or :meth:`delta`."""
        if not self._marked:
            raise StateError("a delta needs a full snapshot first")
        agents = self.agents
        active = self._active
        ledger_columns = {}
        for c, col in self._ledger_columns().items():
            d = _diff(np.array(col, dtype=_dtype(col)), self._shadow_ledger[c])
            if d is not None:
                ledger_columns[c] = d
                active.update(np.frombuffer(d[0], dtype=np.int64).tolist())
        started = self._shadow_started - self._start_effects.keys() if self._shadow_started else set()
        active |= started
        new_packets = self.postman.new_packets
        awake = np.frombuffer(bytes(self._awake), dtype=np.uint8)
        shadow = self._shadow_heads
        if len(shadow) < len(agents):
            shadow.extend([-1] * (len(agents) - len(shadow)))
        # a head moves when an agent takes its queue (it is active) or when a queue that
        # was empty fills up while its agent is busy (awake): only those are looked at
        packets = [_encode_packet(p) for p in new_packets]
        received = np.zeros(len(agents), dtype=bool)
        if packets:
            received[np.frombuffer(b"".join(p[7] for p in packets), dtype=np.int64)] = True
        rows = self._agent_rows([agents[i] for i in sorted(active)])
        heads = np.frombuffer(shadow, dtype=np.int64)
        filled = (heads == -1) & (awake == 1) & received
        if active:
            ids = np.frombuffer(rows["ids"], dtype=np.int64)
            heads[ids] = np.frombuffer(rows["heads"], dtype=np.int64)
            filled[ids] = False
        del heads
        head_ids, head_values = [], []
        for aid in np.flatnonzero(filled).tolist():
            inbox = agents[aid].inbox
            if inbox:
                head_ids.append(aid)
                head_values.append(inbox[0].first_id)
                shadow[aid] = inbox[0].first_id
        out = self._common()
        out.update(
            kind="delta",
            n=len(agents),
            agents=rows,
            heads=[head_ids, head_values],
            awake=_diff(awake, np.frombuffer(self._shadow_awake, dtype=np.uint8)),
            packets=packets,
            ledger_columns=ledger_columns,
            trace=self._trace_rows(self._shadow_trace),
            recruits=self.recruits[self._shadow_recruits :],
            started=sorted(started),
        )
        self._shadow_awake = awake.tobytes()
        self._reset_tracking()
        return out

    def mark_clean(self) -> None:
        """Take the current state as the base of the next delta."""
        self._shadow_heads = self._heads_of(self.agents)
        self._shadow_awake = bytes(self._awake)
        self._reset_tracking()
        self._marked = True

    def _reset_tracking(self) -> None:
        self._shadow_ledger = {c: np.array(col, dtype=_dtype(col)) for c, col in self._ledger_columns().items()}
        t = self.trace
        self._shadow_trace = (len(t.t_agent), len(t.b_agent)) if t is not None else (0, 0)
        self._shadow_recruits = len(self.recruits)
        self._active = set()
        self._shadow_started = set(self._start_effects)
        self.postman.new_packets = []

    def _ledger_columns(self) -> dict[str, array[Any]]:
        return {**self.ledger.per_agent, "cost": self.ledger.cost_per_agent}

    @staticmethod
    def _heads_of(agents: Iterable[Any]) -> array[int]:
        return array("q", [a.inbox[0].first_id if a.inbox else -1 for a in agents])

    def _trace_rows(self, start: tuple[int, int]) -> list[bytes] | None:
        """Trace rows from ``start`` = (transitions, batches) on."""
        t = self.trace
        if t is None:
            return None
        t0, b0 = start
        return [
            t.t_agent[t0:].tobytes(),
            t.t_from[t0:].tobytes(),
            t.t_to[t0:].tobytes(),
            t.t_time[t0:].tobytes(),
            t.b_agent[b0:].tobytes(),
            t.b_time[b0:].tobytes(),
            t.b_size[b0:].tobytes(),
        ]

    def _agent_rows(self, agents: list[Any]) -> dict[str, Any]:
        """Agent records in one pass: ids and in-queue heads (int64 bytes), the base
        fields, pending work, and out-queues (sparse, by position).

        Pending work is ``None``, an LLM reply in flight ``[new_tokens, reply
        fields, [time, sequence]]`` or, in ``other`` by position, a tool call ``[3,
        call, requested, started(, time, sequence)]``, an LLM request queued behind
        the cap ``[1, request]`` or the start effects ``0``."""
        flight = self._flights()
        recs = list(map(_ROW, agents))
        pending: list[Any] = []
        append = pending.append
        other: dict[int, Any] = {}
        outboxes: dict[int, Any] = {}
        reply = _REPLY
        for i, r in enumerate(recs):
            p = r[6]
            if type(p) is tuple:
                append((p[0], reply(p[1]), flight[r[0]]))
            else:
                append(None)
                if p is _START:
                    other[i] = 0
                elif type(p) is _ToolInFlight:
                    running = flight.get(r[0])
                    other[i] = [3, _encode_call(p.call), p.requested, p.started, *(running or ())]
                elif p is not None:
                    other[i] = [1, *_encode_request(p)]
            if r[7]:
                outboxes[i] = [_encode_send(s) for s in r[7]]
        return {
            "ids": array("q", map(_FIRST, recs)).tobytes(),
            "heads": array("q", [r[8][0].first_id if r[8] else -1 for r in recs]).tobytes(),
            "base": list(map(_BASE, recs)),
            "pending": pending,
            "other": other,
            "outboxes": outboxes,
        }

    def _common(self) -> dict[str, Any]:
        led = self.ledger
        return {
            "now": self.now,
            "seq": self._seq,
            "steps": self.steps,
            "in_flight": self._in_flight,
            "next_id": self.postman.next_message_id,
            "holder": None if self._holder is None else self._holder.id,
            "wall": self._wall,
            "tool_invocations": self.tool_invocations,
            "llm_waiting": [a.id for a in self._llm_waiting],
            "serial_waiting": [a.id for a in self._serial_waiting],
            "locks": {name: a.id for name, a in self._locks.items()},
            "lock_waiting": {name: [a.id for a in q] for name, q in self._lock_waiting.items()},
            "recruited": dict(self._recruited),
            "ledger": {
                **{k: getattr(led, k) for k in _SCALARS},
                "messages_by_channel": dict(led.messages_by_channel),
                "bytes_by_channel": dict(led.bytes_by_channel),
                "stages": {k: list(v) for k, v in led._stages.items()},
            },
        }

    # ------------------------------------------------------------------ reading back

    def genesis(self) -> dict[str, Any]:
        """The state right after :meth:`start`, by reference: restoring it runs the
        start again (a pure function of the run's parameters) instead of reading a
        full snapshot. Later deltas are relative to it."""
        if not self.started or self.steps:
            raise StateError("a genesis is taken right after start")
        self.mark_clean()
        return {"kind": "start", "n": len(self.agents)}

    def restore(self, chain: list[dict[str, Any]]) -> None:
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
        self._restored_flights = flight
        packets: dict[int, Packet] = {}
        if base["kind"] == "start":
            self.start()
            if base["n"] != len(self.agents):
                raise StateError(f"the genesis has {base['n']} agents but these parameters build {len(self.agents)}")
            for a in self.agents:
                for p in a.inbox:
                    packets[p.first_id] = p
            heads = self._heads_of(self.agents)
            flight.update(self._flights())
            self.started = False
        else:
            heads = self._load_full(base, packets)
        for d in chain[1:]:
            self._grow(d["recruits"])
            if d["n"] != len(self.agents):
                raise StateError(f"a delta holds {d['n']} agents where {len(self.agents)} were expected")
            heads.extend([-1] * (len(self.agents) - len(heads)))
            for aid, head in zip(*d["heads"], strict=True):
                heads[aid] = head
            if d["awake"] is not None:
                _apply_diff(self._awake, d["awake"])
            for c, diff in d["ledger_columns"].items():
                _apply_diff(self._ledger_columns()[c], diff)
            self._load_rows(d["agents"], heads)
            self._append_trace(d["trace"], fresh=False)
            for aid in d["started"]:
                self._start_effects.pop(aid, None)
            for p in d["packets"]:
                packets[p[0]] = _decode_packet(p)
        if len(chain) > 1 or base["kind"] == "full":
            self._load_common(chain[-1])
        self._fill_inboxes(heads, packets)
        del self._restored_flights
        self._heap = [(t, seq, aid) for aid, (t, seq) in flight.items()]
        heapq.heapify(self._heap)
        self.started = True
        self.mark_clean()

    def _load_full(self, base: dict[str, Any], packets: dict[int, Packet]) -> array[int]:
        self._grow(base["recruits"])
        if base["n"] != len(self.agents):
            raise StateError(f"the snapshot holds {base['n']} agents but these parameters build {len(self.agents)}")
        heads = array("q", [-1]) * len(self.agents)
        self._awake[:] = base["awake"]
        for c, col in self._ledger_columns().items():
            col[:] = array(col.typecode, base["ledger_columns"][c])
        self._load_rows(base["agents"], heads)
        self._append_trace(base["trace"], fresh=True)
        self._start_effects = {int(k): _decode_effects(v) for k, v in base["start_effects"].items()}
        for p in base["packets"]:
            packets[p[0]] = _decode_packet(p)
        return heads

    def _grow(self, recruiters: list[int]) -> None:
        for recruiter in recruiters:
            rid = self.org.recruit(recruiter)
            agent = Agent(rid)
            self.agents.append(agent)
            self._appends.append(agent.inbox.append)
            self._awake.append(0)
            self.recruits.append(recruiter)
        self.ledger.grow(self.org.n)

    def _load_rows(self, rows: dict[str, Any], heads: array[int]) -> None:
        agents, flight = self.agents, self._restored_flights
        for aid, head in zip(array("q", rows["ids"]), array("q", rows["heads"]), strict=True):
            heads[aid] = head
        pending: list[Any] = rows["pending"]
        for i, p in rows["other"].items():
            pending[int(i)] = p
        for (aid, state, data, memory, calls, batch_tokens), p in zip(rows["base"], pending, strict=True):
            a = agents[aid]
            a.state = _STATES[state]
            a.data = data
            a.memory = memory
            a.calls = calls
            a.batch_tokens = batch_tokens
            a.outbox = []
            flight.pop(aid, None)
            if p is None:
                a.pending = None
            elif type(p) is list and len(p) == 3 and type(p[1]) is list:
                a.pending = (p[0], LLMReply(*p[1]))
                flight[aid] = (p[2][0], p[2][1])
            elif p == 0:
                a.pending = _START
            elif p[0] == 3:
                f = _ToolInFlight(ToolCall(*p[1]), p[2])
                f.started = p[3]
                a.pending = f
                if len(p) > 4:
                    flight[aid] = (p[4], p[5])
            else:
                a.pending = LLMRequest(*p[1:])
        for i, sends in rows["outboxes"].items():
            agents[rows["base"][int(i)][0]].outbox = [Send(*s) for s in sends]

    def _append_trace(self, rows: list[bytes] | None, *, fresh: bool) -> None:
        t = self.trace
        if t is None or rows is None:
            return
        cols = (t.t_agent, t.t_from, t.t_to, t.t_time, t.b_agent, t.b_time, t.b_size)
        for col, data in zip(cols, rows, strict=True):
            if fresh:
                del col[:]
            col.frombytes(data)

    def _load_common(self, s: dict[str, Any]) -> None:
        agents = self.agents
        self.now = s["now"]
        self._seq = s["seq"]
        self.steps = s["steps"]
        self._in_flight = s["in_flight"]
        self.postman.next_message_id = s["next_id"]
        self._holder = None if s["holder"] is None else agents[s["holder"]]
        self._wall = s["wall"]
        self.tool_invocations = s["tool_invocations"]
        self._llm_waiting = deque(agents[i] for i in s["llm_waiting"])
        self._serial_waiting = deque(agents[i] for i in s["serial_waiting"])
        self._locks = {name: agents[i] for name, i in s["locks"].items()}
        self._lock_waiting = {name: deque(agents[i] for i in q) for name, q in s["lock_waiting"].items()}
        self._recruited = {int(k): list(v) for k, v in s["recruited"].items()}
        led, ls = self.ledger, s["ledger"]
        for k in _SCALARS:
            setattr(led, k, ls[k])
        led.messages_by_channel = {c: ls["messages_by_channel"][c] for c in CHANNELS}
        led.bytes_by_channel = {c: ls["bytes_by_channel"][c] for c in CHANNELS}
        led._stages = {k: list(v) for k, v in ls["stages"].items()}

    def _fill_inboxes(self, heads: array[int], packets: dict[int, Packet]) -> None:
        agents = self.agents
        for a in agents:
            a.inbox.clear()
        for first_id in sorted(packets):
            p = packets[first_id]
            for r in p.recipients:
                head = heads[r]
                if 0 <= head <= first_id:
                    agents[r].inbox.append(p)
        for a in agents:
            if heads[a.id] >= 0 and (not a.inbox or a.inbox[0].first_id != heads[a.id]):
                raise StateError(f"agent {a.id}: its queued packet {heads[a.id]} is missing from the snapshot")
