"""Agent records of a simulation as columns, and back.

A checkpoint stores the records of the agents that changed (all of them in a full
snapshot) by column: ids, in-queue heads (a full snapshot only: a restore derives
those of a delta), phases and batch tokens as packed arrays;
behaviour states as a list; memories as ``[kinds, memories stored in full]``; LLM
calls in flight as ``[positions, new tokens, output tokens, stages (just one when
all are equal), times, sequences]``; other pending work and out-queues (both rare)
by position.

Calls are not stored: the ledger counts them. A reply in flight is not stored either:
under the run's seeded model it is a pure function of the agent, its call index
(``calls - 1``), its memory, the new tokens and the request's output tokens and
stage, all in the record. A memory whose only change since the last description is
the end of the call then in flight is stored as "that memory plus the call" (kind
1); unchanged (kind 0) or in full (kind 2) otherwise. Other pending work is a tool
call ``[3, call, requested, started(, time, sequence)]``, an LLM request queued
behind the cap ``[1, request]``, a call waiting to try again under the provider
model ``[2, new tokens, output tokens, stage, first attempt's time, next attempt,
time, sequence]`` (its reply as drawn is recomputed like one in flight) or the start
effects ``0``.

Under a provider model (``state.limits`` set) a record also stores the agent's call
count (``calls``: a call that failed for good takes an index the ledger does not
count) and each reply in flight's latency and failure (``replies``: a retried
attempt redraws its latency; a failed call's reply is not the model's).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import compress, repeat
from operator import is_, itemgetter
from typing import Any

import numpy as np

from megaactors.core.agent import Agent, Phase
from megaactors.core.behaviour import LLMRequest, Send, ToolCall
from megaactors.core.llm import LLMReply, SimulatedLLM
from megaactors.durable.state_codec import (
    encode_call,
    encode_request,
    encode_send,
    float64s,
    int64s,
    spread,
    uniform,
)
from megaactors.errors import StateError
from megaactors.runtime.events import Event
from megaactors.runtime.sim_state import START, LLMRetry, SimState, ToolInFlight

__all__ = ["encode_agent_rows", "load_agent_rows"]

_THIRD = itemgetter(2)
_PHASES = tuple(Phase)


def _event_positions(state: SimState, listed: list[Event]) -> tuple[list[Event], np.ndarray]:
    """The pending events (``listed``) and, for each agent, the position among them
    of the event it waits for (-1: none)."""
    events = [e for e in listed if e[2] >= 0]  # not the network's (negative keys)
    n = len(events)
    where = np.full(len(state.agents), -1, dtype=np.int64)
    where[np.fromiter(map(_THIRD, events), dtype=np.int64, count=n)] = np.arange(n)
    return events, where


def encode_agent_rows(
    state: SimState,
    ids: list[int],
    memory_kinds: np.ndarray | None,
    heads: np.ndarray | None = None,
    events: Callable[[], list[Event]] | None = None,
) -> dict[str, Any]:
    """The records of agents ``ids`` by column (memory ``kinds`` None: all in full;
    ``heads``: their in-queue heads, stored when given; ``events``: lists the pending
    events when a record needs them, for a ``state`` taken without them; by default
    ``state.events``).

    The records are picked by one ``itemgetter`` call; each column is then one list
    comprehension (on CPython 3.11 its specialised attribute or item read costs
    half the instructions of ``map`` with an ``attrgetter``, and no tuple per
    record is made to split again). Numbers are packed by :func:`int64s`."""
    chosen = _pick(state.agents, ids)
    pending = [a.pending for a in chosen]
    memory: list[Any]
    if memory_kinds is None:
        memory = [None, [a.memory for a in chosen]]
    else:
        stored = np.flatnonzero(memory_kinds == 2).tolist()
        memory = [memory_kinds.tobytes(), [chosen[i].memory for i in stored]]
    types = list(map(type, pending))
    flown = types.count(tuple)
    if flown == len(pending):  # every agent waits for an LLM call (or there are none)
        at: Sequence[int] = range(flown)
        flying: Sequence[Any] = pending
    else:
        at = list(compress(range(len(ids)), map(is_, types, repeat(tuple))))
        flying = list(map(pending.__getitem__, at))
    other: dict[int, Any] = {}
    if flown + types.count(type(None)) != len(pending):
        other = _other_pending(state, ids, pending, state.events if events is None else events())
    batch_tokens = [a.batch_tokens for a in chosen]
    replies: list[LLMReply] = []  # the lean form is the plain path's: no provider model
    due: Sequence[Any] = flying  # the events the calls wait for (a lean call is its event)
    sizes = list(map(len, flying))
    lean = None
    if flying and sizes.count(_LEAN) == len(sizes):  # every call in the lean form (see sim_state.LLMInFlight)
        lean = _lean_columns(batch_tokens if flown == len(pending) else [batch_tokens[i] for i in at], flying)
    if lean is not None:
        new_tokens, tokens_out, stages = lean
    elif sizes.count(3) == len(sizes):  # none in the lean form
        replies = [p[1] for p in flying]
        new_tokens, tokens_out = [p[0] for p in flying], int64s([r.tokens_out for r in replies])
        stages, due = uniform([r.stage for r in replies]), [p[2] for p in flying]  # each call holds its event
    else:
        new_tokens, outs, stage_list, due = _flight_columns([chosen[i] for i in at], flying)
        tokens_out, stages = int64s(outs), uniform(stage_list)
    provider: dict[str, Any] = {}
    if state.limits is not None:
        provider["calls"] = int64s([a.calls for a in chosen])
        provider["replies"] = [float64s([r.latency_s for r in replies]), [r.failed for r in replies]]
    return {
        "ids": int64s(ids),
        **({"heads": heads.tobytes()} if heads is not None else {}),
        "state": bytes([a.phase for a in chosen]),
        "data": [a.data for a in chosen],
        "memory": memory,
        "batch_tokens": int64s(batch_tokens),
        "llm": [
            int64s(at),
            new_tokens,
            tokens_out,
            stages,
            float64s([e[0] for e in due]),
            int64s([e[1] for e in due]),
        ],
        "other": other,
        "outboxes": _outboxes(chosen),
        **provider,
    }


_LEAN = 6
"""The length of a call in flight in the lean form (its event, grown)."""
_FEW_REQUESTS = 8
"""At most this many distinct requests in flight are read by column (:func:`_lean_columns`)."""


def _lean_columns(batch_tokens: list[int], flying: Sequence[Any]) -> tuple[list[int], bytes, list[Any]] | None:
    """New tokens, packed output tokens and :func:`uniform` stages of calls in flight
    in the lean form (``batch_tokens``: their agents'), read once per distinct
    request (a behaviour issues a few request objects again and again), told apart
    by identity in C (``map`` with ``is_``); None when there are more than
    :data:`_FEW_REQUESTS` of them."""
    requests = [p[3] for p in flying]
    n = len(requests)
    first = requests[0]
    mine = np.fromiter(map(is_, requests, repeat(first)), dtype=bool, count=n)
    if mine.all():
        new_tokens = batch_tokens if first.new_tokens is None else [first.new_tokens] * n
        return new_tokens, int64s([first.output_tokens] * n), [first.stage]
    new = np.array(batch_tokens, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    stage = np.empty(n, dtype=object)
    left = np.ones(n, dtype=bool)
    stages = set()
    for _ in range(_FEW_REQUESTS):
        r = requests[int(np.argmax(left))]
        if r is not first:
            mine = np.fromiter(map(is_, requests, repeat(r)), dtype=bool, count=n)
        if r.new_tokens is not None:
            new[mine] = r.new_tokens
        out[mine] = r.output_tokens
        stage[mine] = r.stage
        stages.add(r.stage)
        left &= ~mine
        if not left.any():
            return new.tolist(), out.tobytes(), list(stages) if len(stages) == 1 else stage.tolist()
    return None


def _pick(agents: list[Any], ids: list[int]) -> Sequence[Any]:
    """``[agents[i] for i in ids]`` in one C call."""
    if len(ids) > 1:
        return itemgetter(*ids)(agents)
    return [agents[i] for i in ids]


def _outboxes(chosen: Sequence[Any]) -> dict[int, Any]:
    """The out-queues that hold sends, by position (rarely any between super-steps)."""
    if not [a for a in chosen if a.outbox]:
        return {}
    return {i: [encode_send(s) for s in a.outbox] for i, a in enumerate(chosen) if a.outbox}


def _flight_columns(agents: list[Agent], flying: Sequence[Any]) -> tuple[list[int], list[int], list[str], list[Any]]:
    """New tokens, output tokens, stages and events of calls in flight, in the lean form
    (the event alone, see :data:`~megaactors.runtime.sim_state.LLMInFlight`) or not."""
    new_tokens, tokens_out, stages, events = [], [], [], []
    for a, p in zip(agents, flying, strict=True):
        if len(p) == 3:
            n, reply, event = p
            out, stage = reply.tokens_out, reply.stage
        else:
            r = p[3]
            n = a.batch_tokens if r.new_tokens is None else r.new_tokens
            out, stage, event = r.output_tokens, r.stage, p
        new_tokens.append(n)
        tokens_out.append(out)
        stages.append(stage)
        events.append(event)
    return new_tokens, tokens_out, stages, events


def _other_pending(state: SimState, ids: list[int], pending: Sequence[Any], listed: list[Event]) -> dict[int, Any]:
    """The pending work of records ``ids`` other than LLM calls in flight, by position
    (``listed``: the pending events)."""
    other: dict[int, Any] = {}
    pending_events, where = _event_positions(state, listed)
    for i, p in enumerate(pending):
        if p is None or type(p) is tuple:
            continue
        if p is START:
            other[i] = 0
        elif type(p) is ToolInFlight:
            k = int(where[ids[i]])
            running = pending_events[k][:2] if k >= 0 else ()
            other[i] = [3, encode_call(p.call), p.requested, p.started, *running]
        elif type(p) is LLMRetry:
            r = p.reply
            t, seq, _ = pending_events[int(where[ids[i]])]
            other[i] = [2, p.new_tokens, r.tokens_out, r.stage, p.first, p.attempt, t, seq]
        else:
            other[i] = [1, *encode_request(p)]
    return other


def load_agent_rows(
    state: SimState,
    rows: dict[str, Any],
    heads: array[int],
    flight: dict[int, tuple[float, int]],
    llm: SimulatedLLM,
    window: int,
) -> None:
    """Load rows of :func:`encode_agent_rows` into ``state``'s agents; note their
    in-queue heads (if stored) in ``heads`` and the events their calls in flight wait for in
    ``flight`` (replies recomputed with ``llm``; ``window`` is the memory window)."""
    agents = state.agents
    ids = array("q", rows["ids"]).tolist()
    if "heads" in rows:
        for aid, head in zip(ids, array("q", rows["heads"]), strict=True):
            heads[aid] = head
    kinds, memories = rows["memory"]
    if kinds is None:
        for aid, memory in zip(ids, memories, strict=True):
            agents[aid].memory = memory
    else:
        stored = iter(memories)
        for aid, kind in zip(ids, kinds, strict=True):
            a = agents[aid]
            if kind == 2:
                a.memory = next(stored)
            elif kind == 1:  # the call in flight before has ended since
                p = a.pending
                if type(p) is not tuple:
                    raise StateError(f"agent {aid}: its memory builds on an LLM call that was not in flight")
                if len(p) == 3:
                    a.remember_call(p[0], p[1].tokens_out, window)
                else:  # the lean form
                    r = p[3]
                    a.remember_call(a.batch_tokens if r.new_tokens is None else r.new_tokens, r.output_tokens, window)
    calls = state.ledger.per_agent["llm_calls"]  # an agent's calls, counted where they are paid
    for aid, phase, data, batch_tokens in zip(
        ids, rows["state"], rows["data"], array("q", rows["batch_tokens"]), strict=True
    ):
        a = agents[aid]
        a.phase = _PHASES[phase]
        a.data = data
        a.calls = calls[aid]
        a.batch_tokens = batch_tokens
        a.pending = None
        a.outbox = []
        flight.pop(aid, None)
    if "calls" in rows:
        for aid, count in zip(ids, array("q", rows["calls"]), strict=True):
            agents[aid].calls = count
    at, new_tokens, tokens_out, stages, times, seqs = rows["llm"]
    at, tokens_out = array("q", at), array("q", tokens_out)
    flown = "replies" in rows  # under a provider model
    latencies, failures = (array("d", rows["replies"][0]), rows["replies"][1]) if flown else (array("d"), [])
    complete = llm.complete
    for k, (i, n, output_tokens, stage, t, seq) in enumerate(
        zip(at, new_tokens, tokens_out, spread(stages, len(at)), array("d", times), array("q", seqs), strict=True)
    ):
        a = agents[ids[i]]
        request = LLMRequest(n, output_tokens, stage)
        reply = complete(a.id, a.calls - 1, request, sum(a.memory), n)
        if flown:
            reply = _as_flown(reply, latencies[k], failures[k])
        a.pending = (n, reply, (t, seq, a.id))
        flight[a.id] = (t, seq)
    for i, p in rows["other"].items():
        a = agents[ids[int(i)]]
        if p == 0:
            a.pending = START
        elif p[0] == 3:
            a.pending = ToolInFlight(ToolCall(*p[1]), p[2], p[3])
            if len(p) > 4:
                flight[a.id] = (p[4], p[5])
        elif p[0] == 2:
            _, n, output_tokens, stage, first, attempt, t, seq = p
            reply = complete(a.id, a.calls, LLMRequest(n, output_tokens, stage), sum(a.memory), n)
            a.pending = LLMRetry(n, reply, first, attempt)
            flight[a.id] = (t, seq)
        else:
            a.pending = LLMRequest(*p[1:])
    for i, sends in rows["outboxes"].items():
        agents[ids[int(i)]].outbox = [Send(*s) for s in sends]


def _as_flown(reply: LLMReply, latency_s: float, failed: str | None) -> LLMReply:
    """The reply the model drew, as the provider model let it through: a retried
    attempt's latency, or the failed reply of a call whose retries ran out."""
    if failed is not None:
        return reply.failed_as(failed, latency_s)
    return reply if reply.latency_s == latency_s else replace(reply, latency_s=latency_s)
