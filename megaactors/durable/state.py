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

Agent records, packets and ledger rows are stored by column: numbers as packed
arrays (one bytes value per column), everything else (behaviour states, payloads)
as one list per column, so that capturing them is a few passes of ``map`` over the
agents that changed and packing them is mostly copying bytes. What the run's
seeded model or the rest of the record determines is not stored: an LLM reply in
flight (recomputed from the call it answers), an agent's call count (the ledger's)
and, when the agent's only event since the last description was the end of the
call then in flight, its memory (that memory plus the call).

Everything is msgpack-ready: ints, floats, strings, bytes, lists and dicts. A
behaviour's state must be msgpack-serializable (tuples come back as lists).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate, chain, compress, repeat
from operator import attrgetter, is_, itemgetter
from typing import Any

import numpy as np

from megaactors.core.agent import AgentState
from megaactors.core.behaviour import UNCHANGED, Effects, LLMRequest, Send, ToolCall
from megaactors.core.llm import LLMReply, SimulatedLLM
from megaactors.core.messages import ADMIN, CHANNELS, Packet
from megaactors.core.organisation import Organisation
from megaactors.runtime.events import EventQueue
from megaactors.runtime.postman import Postman
from megaactors.runtime.sim import _START, SimRuntime, _ToolInFlight

__all__ = ["DurableSim", "StateError"]

LLMCallHook = Callable[[int, int, LLMReply], None]
"""Called with ``(agent, call_index, reply)`` for every LLM call issued."""
ToolGate = Callable[[int, int, ToolCall, Callable[[], Any]], Any]
"""Runs a tool function: ``(agent, invocation_index, call, run) -> value``."""

_AGENT = tuple(map(attrgetter, ("state", "data", "batch_tokens", "pending", "outbox")))
_PACKET = attrgetter("first_id", "sender", "channel", "kind", "payload", "parent", "sent_at", "overhead")
_RECIPIENTS = attrgetter("recipients")
_SENDER = attrgetter("sender")
_CHANNEL = attrgetter("channel")
_MEMORY = attrgetter("memory")
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)
_THIRD = itemgetter(2)
_TOKENS_OUT = attrgetter("tokens_out")
_STAGE = attrgetter("stage")
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
    """A postman that remembers every packet it stamps until they are collected, and
    which of them went to every peer of their sender on their channel."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.new_packets: list[Packet] = []
        self.new_broadcasts: list[bool] = []

    def stamp(self, sender: int, send: Send, now: float) -> list[Packet]:
        packets = super().stamp(sender, send, now)
        self.new_packets += packets
        self.new_broadcasts += [self.broadcast and len(packets) == 1] * len(packets)
        return packets

    def forget(self) -> None:
        """Drop what was stamped so far."""
        self.new_packets, self.new_broadcasts = [], []

    def collect(self, members_changed: bool) -> tuple[dict[str, Any], np.ndarray]:
        """The packets stamped since the last collection, encoded, and the agents that
        received them (and possibly a few more). A broadcast's recipients are left
        out — they are its sender's peers on its channel — unless the organisation's
        groups changed since it was sent (``members_changed``: agents were recruited)."""
        packets, broadcasts = self.new_packets, self.new_broadcasts
        self.forget()
        if members_changed or not any(broadcasts):
            encoded = _encode_packets(packets, None)
            return encoded, np.frombuffer(encoded["recipients"], dtype=np.int64)
        encoded = _encode_packets(packets, broadcasts)
        # every member of a group or admins' channel that was broadcast to (a few more
        # than received: the groups of admins' senders too)
        org, flagged = self.org, list(compress(packets, broadcasts))
        senders = list(map(_SENDER, flagged))
        groups = set(map(org.member_group.__getitem__, senders)) | set(map(org.admin_group.__getitem__, senders))
        groups.discard(-1)
        lists = [org.groups[g] for g in groups] + ([org.admins] if ADMIN in map(_CHANNEL, flagged) else [])
        receivers = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=sum(map(len, lists)))
        return encoded, np.concatenate([np.frombuffer(encoded["recipients"], dtype=np.int64), receivers])


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


def _uniform(column: Sequence[Any]) -> list[Any]:
    """``column`` as a list, or as its one value when all its values are equal."""
    return list(values) if len(values := set(column)) == 1 else list(column)


def _spread(values: list[Any], n: int) -> Iterable[Any]:
    """The ``n`` values of a :func:`_uniform` column."""
    return repeat(values[0], n) if len(values) == 1 else values


def _encode_packets(packets: list[Packet], broadcasts: list[bool] | None) -> dict[str, Any]:
    """Packets by column: numbers in packed arrays (the recipients of all of them in
    one, with a count per packet), the rest in lists (channels, kinds and parents
    by :func:`_uniform`). A packet flagged in ``broadcasts`` went to every peer of its
    sender on its channel: its recipients are not stored (count -1)."""
    columns = list(zip(*map(_PACKET, packets), strict=True)) or [()] * 8
    first_id, sender, channel, kind, payload, parent, sent_at, overhead = columns
    lists = list(map(_RECIPIENTS, packets))
    if broadcasts is not None:
        lists = [() if b else r for r, b in zip(lists, broadcasts, strict=True)]
    count = array("q", map(len, lists))
    if broadcasts is not None:
        for i in compress(range(len(broadcasts)), broadcasts):
            count[i] = -1
    lists = [r for r in lists if r]
    recipients = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=sum(map(len, lists)))
    return {
        "first_id": array("q", first_id).tobytes(),
        "sender": array("q", sender).tobytes(),
        "channel": _uniform(channel),
        "kind": _uniform(kind),
        "payload": payload,
        "parent": _uniform(parent),
        "sent_at": array("d", sent_at).tobytes(),
        "overhead": array("q", overhead).tobytes(),
        "count": count.tobytes(),
        "recipients": recipients.tobytes(),
    }


def _decode_packets(v: dict[str, Any], org: Organisation) -> list[Packet]:
    """The packets of :func:`_encode_packets`; a broadcast's recipients are its
    sender's peers on its channel in ``org`` (as it was when the packets were sent)."""
    recipients = array("q", v["recipients"]).tolist()
    counts = array("q", v["count"])
    ends = list(accumulate(max(c, 0) for c in counts))
    return [
        Packet(
            sender,
            channel,
            kind,
            payload,
            parent,
            sent_at,
            first_id,
            recipients[end - count : end] if count >= 0 else org.peers(sender, channel),
            overhead,
        )
        for first_id, sender, channel, kind, payload, parent, sent_at, overhead, count, end in zip(
            array("q", v["first_id"]),
            array("q", v["sender"]),
            _spread(v["channel"], len(counts)),
            _spread(v["kind"], len(counts)),
            v["payload"],
            _spread(v["parent"], len(counts)),
            array("d", v["sent_at"]),
            array("q", v["overhead"]),
            counts,
            ends,
            strict=True,
        )
    ]


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


def _changed(column: array[Any], shadow: np.ndarray) -> np.ndarray:
    """Which cells of ``column`` differ from ``shadow`` (cells beyond it count as changed)."""
    current = np.frombuffer(column, dtype=_dtype(column))
    changed = np.ones(len(current), dtype=bool)
    k = min(len(shadow), len(current))
    np.not_equal(current[:k], shadow[:k], out=changed[:k])
    return changed


def _cells(column: array[Any], at: np.ndarray) -> bytes:
    """The cells of ``column`` at the indices ``at``, packed."""
    return np.frombuffer(column, dtype=_dtype(column))[at].tobytes()


def _set_cells(column: array[Any] | bytearray, at: bytes, values: bytes) -> None:
    """Write packed ``values`` into ``column`` at the packed int64 indices ``at``, in place."""
    target = np.frombuffer(column, dtype=_dtype(column))
    target[np.frombuffer(at, dtype=np.int64)] = np.frombuffer(values, dtype=target.dtype)
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
        if not isinstance(self.llm, SimulatedLLM):
            raise StateError(f"a durable run needs the seeded simulated LLM, not {type(self.llm).__name__}")
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
        """Agents noted as changed by the rare paths (tools, recruits)."""
        self._event_log = []  # the agent of every event run since the last description
        self._llm_at_mark = np.zeros(0, dtype=bool)
        """Which agents had an LLM call in flight at the last description."""
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
    # in the event log as events run (how many per agent tells how its memory changed); ledger
    # rows are compared when a delta is written; the rest are rare and noted by
    # the overrides below.

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
        return {e[2]: (e[0], e[1]) for e in self._events.events()}

    def _event_positions(self) -> tuple[list[tuple[float, int, int]], np.ndarray]:
        """The pending events and, for each agent, the position among them of the event
        it waits for (-1: none)."""
        events = self._events.events()
        n = len(events)
        where = np.full(len(self.agents), -1, dtype=np.int64)
        where[np.fromiter(map(_THIRD, events), dtype=np.int64, count=n)] = np.arange(n)
        return events, where

    # ------------------------------------------------------------------ writing out

    def full(self) -> dict[str, Any]:
        """The whole state between two super-steps; later deltas are relative to it."""
        agents = self.agents
        live = self.mail.live()
        out = self._common()
        out.update(
            kind="full",
            n=len(agents),
            agents=self._agent_rows(list(range(len(agents))), None),
            awake=bytes(self._awake),
            packets=_encode_packets([p for _, p in sorted(live.items())], None),
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
        columns = self._ledger_columns()
        # the agents whose record changed: those noted while events ran, and those
        # whose ledger row changed (every per-agent column counts the agent's own acts)
        changed = np.zeros(len(agents), dtype=bool)
        for c, col in columns.items():
            changed |= _changed(col, self._shadow_ledger[c])
        started = self._shadow_started - self._start_effects.keys() if self._shadow_started else set()
        noted = self._active | started
        if noted:
            changed[np.fromiter(noted, dtype=np.int64, count=len(noted))] = True
        ran = np.bincount(np.array(self._event_log, dtype=np.int64), minlength=len(agents))
        changed |= ran > 0
        at = np.flatnonzero(changed)
        rows = self._agent_rows(at.tolist(), self._memory_kinds(at, ran[at]))
        llm_at_mark = np.zeros(len(agents), dtype=bool)
        llm_at_mark[: len(self._llm_at_mark)] = self._llm_at_mark
        llm_at_mark[at] = False
        llm_at_mark[at[np.frombuffer(rows["llm"][0], dtype=np.int64)]] = True
        packets, receivers = self.postman.collect(members_changed=len(self.recruits) != self._shadow_recruits)
        # a head moves when an agent takes its queue (it changed) or when a queue that
        # was empty fills up while its agent is busy (awake): only those are looked at
        shadow = self._shadow_heads
        if len(shadow) < len(agents):
            shadow.extend([-1] * (len(agents) - len(shadow)))
        awake = np.frombuffer(bytes(self._awake), dtype=np.uint8)
        heads = np.frombuffer(shadow, dtype=np.int64)
        heads[at] = np.frombuffer(rows["heads"], dtype=np.int64)
        filled = np.zeros(len(agents), dtype=bool)
        filled[receivers] = True
        filled &= (heads == -1) & (awake == 1) & ~changed
        del heads
        candidates = np.flatnonzero(filled).tolist()
        found = list(map(self.mail.head, candidates))
        head_ids = [a for a, h in zip(candidates, found, strict=True) if h >= 0]
        head_values = [h for h in found if h >= 0]
        np.frombuffer(shadow, dtype=np.int64)[head_ids] = head_values
        out = self._common()
        out.update(
            kind="delta",
            n=len(agents),
            agents=rows,
            heads=[head_ids, head_values],
            awake=_diff(awake, np.frombuffer(self._shadow_awake, dtype=np.uint8)),
            packets=packets,
            ledger_rows={c: _cells(col, at) for c, col in columns.items()},
            trace=self._trace_rows(self._shadow_trace),
            recruits=self.recruits[self._shadow_recruits :],
            started=sorted(started),
        )
        self._shadow_awake = awake.tobytes()
        self._llm_at_mark = llm_at_mark
        self._reset_tracking()
        return out

    def mark_clean(self) -> None:
        """Take the current state as the base of the next delta."""
        agents = self.agents
        self._shadow_heads = self._heads()
        self._shadow_awake = bytes(self._awake)
        self._llm_at_mark = np.fromiter((type(a.pending) is tuple for a in agents), dtype=bool, count=len(agents))
        self._reset_tracking()
        self._marked = True

    def _reset_tracking(self) -> None:
        columns = self._ledger_columns().items()
        self._shadow_ledger = {c: np.frombuffer(col, dtype=_dtype(col)).copy() for c, col in columns}
        t = self.trace
        self._shadow_trace = (len(t.t_agent), len(t.b_agent)) if t is not None else (0, 0)
        self._shadow_recruits = len(self.recruits)
        self._active = set()
        self._event_log = []
        self._shadow_started = set(self._start_effects)
        self.postman.forget()

    def _ledger_columns(self) -> dict[str, array[Any]]:
        return {**self.ledger.per_agent, "cost": self.ledger.cost_per_agent}

    def _heads(self) -> array[int]:
        return array("q", map(self.mail.head, range(len(self.agents))))

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

    def _memory_kinds(self, at: np.ndarray, ran: np.ndarray) -> np.ndarray:
        """How the memory of each agent ``at`` (which ran ``ran`` events since the last
        description) is stored: 0 unchanged (no event ran), 1 that memory plus the
        LLM call then in flight (one event ran: the end of that call), 2 in full."""
        before = np.zeros(len(at), dtype=bool)
        known = at < len(self._llm_at_mark)
        before[known] = self._llm_at_mark[at[known]]
        return np.where(ran == 0, 0, np.where((ran == 1) & before, 1, 2)).astype(np.uint8)

    def _agent_rows(self, ids: list[int], memory_kinds: np.ndarray | None) -> dict[str, Any]:
        """The records of agents ``ids`` by column: ids, in-queue heads, states and
        batch tokens as packed arrays; behaviour states as a list; memories as
        ``[kinds, memories stored in full]`` (see :meth:`_memory_kinds`; kinds
        ``None``: all in full); LLM calls in flight as ``[positions, new tokens,
        output tokens, stages (just one when all are equal), times, sequences]``;
        other pending work and out-queues (both rare) by position.

        Calls are not stored: the ledger counts them. A reply in flight is not
        stored either: under the run's seeded model it is a pure function of the
        agent, its call index (``calls - 1``), its memory, the new tokens and the
        request's output tokens and stage, all in the record. Other pending work is
        a tool call ``[3, call, requested, started(, time, sequence)]``, an LLM
        request queued behind the cap ``[1, request]`` or the start effects ``0``."""
        agents = self.agents
        chosen = list(map(agents.__getitem__, ids))
        state, data, batch_tokens, pending, outbox = (list(map(get, chosen)) for get in _AGENT)
        if memory_kinds is None:
            memory = [None, list(map(_MEMORY, chosen))]
        else:
            stored = np.flatnonzero(memory_kinds == 2).tolist()
            memory = [memory_kinds.tobytes(), [chosen[i].memory for i in stored]]
        at = list(compress(range(len(ids)), map(is_, map(type, pending), repeat(tuple))))
        flying = list(map(pending.__getitem__, at))
        replies = list(map(_SECOND, flying))
        events = list(map(_THIRD, flying))  # each call in flight holds its event
        other: dict[int, Any] = {}
        if len(at) + pending.count(None) != len(pending):
            pending_events, where = self._event_positions()
            for i, p in enumerate(pending):
                if p is None or type(p) is tuple:
                    continue
                if p is _START:
                    other[i] = 0
                elif type(p) is _ToolInFlight:
                    k = int(where[ids[i]])
                    running = pending_events[k][:2] if k >= 0 else ()
                    other[i] = [3, _encode_call(p.call), p.requested, p.started, *running]
                else:
                    other[i] = [1, *_encode_request(p)]
        heads = np.fromiter(map(self.mail.head, ids), dtype=np.int64, count=len(ids))
        return {
            "ids": array("q", ids).tobytes(),
            "heads": heads.tobytes(),
            "state": bytes(state),
            "data": data,
            "memory": memory,
            "batch_tokens": array("q", batch_tokens).tobytes(),
            "llm": [
                array("q", at).tobytes(),
                list(map(_FIRST, flying)),
                array("q", map(_TOKENS_OUT, replies)).tobytes(),
                _uniform(list(map(_STAGE, replies))),
                array("d", map(_FIRST, events)).tobytes(),
                array("q", map(_SECOND, events)).tobytes(),
            ],
            "other": other,
            "outboxes": {i: [_encode_send(s) for s in o] for i, o in enumerate(outbox) if o} if any(outbox) else {},
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
            packets.update(self.mail.live())
            heads = self._heads()
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
                _set_cells(self._awake, *d["awake"])
            for c, col in self._ledger_columns().items():
                _set_cells(col, d["agents"]["ids"], d["ledger_rows"][c])
            self._load_rows(d["agents"], heads)
            self._append_trace(d["trace"], fresh=False)
            for aid in d["started"]:
                self._start_effects.pop(aid, None)
            for p in _decode_packets(d["packets"], self.org):
                packets[p.first_id] = p
        if len(chain) > 1 or base["kind"] == "full":
            self._load_common(chain[-1])
        self._fill_inboxes(heads, packets)
        del self._restored_flights
        self._events = EventQueue(self._events_width, [(t, seq, aid) for aid, (t, seq) in flight.items()])
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
        for p in _decode_packets(base["packets"], self.org):
            packets[p.first_id] = p
        return heads

    def _grow(self, recruiters: list[int]) -> None:
        """Recruit again, in order, the agents recruited by ``recruiters`` (their records
        are loaded afterwards)."""
        for recruiter in recruiters:
            SimRuntime._recruit(self, self.agents[recruiter], 1)
            self.recruits.append(recruiter)

    def _load_rows(self, rows: dict[str, Any], heads: array[int]) -> None:
        agents, flight = self.agents, self._restored_flights
        ids = array("q", rows["ids"]).tolist()
        for aid, head in zip(ids, array("q", rows["heads"]), strict=True):
            heads[aid] = head
        kinds, memories = rows["memory"]
        if kinds is None:
            for aid, memory in zip(ids, memories, strict=True):
                agents[aid].memory = memory
        else:
            stored = iter(memories)
            window = self._window
            for aid, kind in zip(ids, kinds, strict=True):
                a = agents[aid]
                if kind == 2:
                    a.memory = next(stored)
                elif kind == 1:  # the call in flight before has ended since
                    p = a.pending
                    if type(p) is not tuple:
                        raise StateError(f"agent {aid}: its memory builds on an LLM call that was not in flight")
                    a.remember_call(p[0], p[1].tokens_out, window)
        calls = self.ledger.per_agent["llm_calls"]  # an agent's calls, counted where they are paid
        for aid, state, data, batch_tokens in zip(
            ids, rows["state"], rows["data"], array("q", rows["batch_tokens"]), strict=True
        ):
            a = agents[aid]
            a.state = _STATES[state]
            a.data = data
            a.calls = calls[aid]
            a.batch_tokens = batch_tokens
            a.pending = None
            a.outbox = []
            flight.pop(aid, None)
        at, new_tokens, tokens_out, stages, times, seqs = rows["llm"]
        at, tokens_out = array("q", at), array("q", tokens_out)
        stages = _spread(stages, len(at))
        complete = self.llm.complete
        for i, n, output_tokens, stage, t, seq in zip(
            at, new_tokens, tokens_out, stages, array("d", times), array("q", seqs), strict=True
        ):
            a = agents[ids[i]]
            request = LLMRequest(n, output_tokens, stage)
            a.pending = (n, complete(a.id, a.calls - 1, request, sum(a.memory), n), (t, seq, a.id))
            flight[a.id] = (t, seq)
        for i, p in rows["other"].items():
            a = agents[ids[int(i)]]
            if p == 0:
                a.pending = _START
            elif p[0] == 3:
                f = _ToolInFlight(ToolCall(*p[1]), p[2])
                f.started = p[3]
                a.pending = f
                if len(p) > 4:
                    flight[a.id] = (p[4], p[5])
            else:
                a.pending = LLMRequest(*p[1:])
        for i, sends in rows["outboxes"].items():
            agents[ids[int(i)]].outbox = [Send(*s) for s in sends]

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
        self.mail.refill([packets[i] for i in sorted(packets)], heads)
        for aid, head in enumerate(heads):
            if head >= 0 and self.mail.head(aid) != head:
                raise StateError(f"agent {aid}: its queued packet {head} is missing from the snapshot")
