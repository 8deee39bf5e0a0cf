"""Checkpointed simulation runs: a run advances super-step by super-step and writes
its state to a :class:`~megaactors.durable.store.CheckpointStore` every K of them.

**Super-step.** Super-step 0 is the start (every ``on_start`` and the cascade at
time 0). Super-step ``n >= 1`` runs every event — LLM replies, finished tool calls,
and the deliveries, wake-ups and new batches they cause — whose virtual time falls
in the next window of ``step_s`` virtual seconds that holds an event: with windows
``[k·step_s, (k+1)·step_s)``, all events of the first window not yet run, including
those scheduled inside the window while it runs. Empty windows are skipped, so
step numbers are consecutive. The default window is one virtual second, about one
round of LLM calls at the default latencies. The boundaries depend only on virtual
time, so a resumed run cuts its super-steps exactly where the original did.

**Checkpoints.** Step 0 is written as a *genesis* (kind ``start``): the state right
after the start is a pure function of the parameters, so a restore recomputes it
instead of reading a snapshot. The last step is always written; in between, every
``checkpoint_every`` steps. A checkpoint is a *delta* (what changed since the
previous checkpoint, see :mod:`megaactors.durable.state`) unless the deltas since
the last full snapshot (or genesis) add up to more than ``full_ratio`` times its
packed size (for a genesis, an estimate of :data:`GENESIS_BYTES_PER_AGENT` per
agent); then it is a *full* snapshot. Restoring a step reads its base and the
deltas after it: at most ``1 + full_ratio`` snapshots' worth of bytes. The state is
captured and packed between super-steps; compression and the database write run on
a writer thread while the next super-step runs (at most one checkpoint behind).

**Resume.** :func:`run_durable` restores the newest checkpoint when the run has
one and continues; the simulation is a pure function of its parameters and seed,
so the resumed run repeats exactly what the lost one did after that checkpoint:
same events, message ids and LLM call indices. Side effects go through the
:class:`~megaactors.durable.outbox.Outbox`: a paid LLM call's charge is keyed by
(run id, agent, call index) and a replayed call gets its recorded result back.
"""

from __future__ import annotations

import functools
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from megaactors.core.behaviour import Behaviour, check_organisation
from megaactors.durable import spans
from megaactors.durable.interrupts import EditRefused, HumanEdits, RunInterrupted, asked, check_condition, due
from megaactors.durable.narrow import counts
from megaactors.durable.outbox import Outbox
from megaactors.durable.packable import pack_checked
from megaactors.durable.runqueue import retry_busy
from megaactors.durable.sharded import check_sharding, run_sharded
from megaactors.durable.state import DurableSim, StateError
from megaactors.durable.store import (
    CheckpointLog,
    CheckpointRecord,
    CheckpointStore,
    FencingError,
    Lease,
    decode_state,
    pack_state,
    seal_state,
)
from megaactors.experiments.spec import ParameterError, RunSpec
from megaactors.runtime.events import superstep_end
from megaactors.runtime.gc_tuning import paused_gc, quiet_gc
from megaactors.runtime.result import RunResult

__all__ = [
    "GENESIS_BYTES_PER_AGENT",
    "DurableOptions",
    "Progress",
    "fork_run",
    "preflight",
    "restored",
    "run_durable",
]

GENESIS_BYTES_PER_AGENT = 300
"""Estimated packed size of one agent in a full snapshot: the weight of a genesis
(which costs nothing to store) when deciding when the next full snapshot is due."""


@dataclass(frozen=True)
class DurableOptions:
    """How a durable run checkpoints and what it pays for."""

    checkpoint_every: int = 1
    """Write a checkpoint every this many super-steps (and always the first and last)."""
    step_s: float = 1.0
    """Width of a super-step's window of virtual time, in seconds."""
    full_ratio: float = 4.0
    """Write a full snapshot once the deltas since the last one outweigh it this many times."""
    billing_url: str | None = None
    """Charge every LLM call's cost to this billing service (through the outbox)."""
    interrupt_at: float | None = None
    """Stop for a human once the run reaches this virtual time (:mod:`~megaactors.durable.interrupts`)."""
    interrupt_when: str | None = None
    """Stop for a human once the ledger meets this condition (``cost_usd>0.5``)."""
    shards: int | None = None
    """Run the sharded simulation on this many shards, a full checkpoint every
    ``checkpoint_every`` windows (:mod:`~megaactors.durable.sharded`); None: unsharded."""
    shard_backend: str = "inprocess"
    """Where a sharded run's shards run: ``inprocess`` or ``ray``."""
    shard_address: str | None = None
    """The Ray cluster of shard backend ``ray`` (None: a local Ray instance)."""

    def __post_init__(self) -> None:
        every = self.checkpoint_every
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ParameterError(f"checkpoint every must be an integer >= 1, got {every!r}")
        if not isinstance(self.step_s, (int, float)) or not self.step_s > 0 or math.isinf(self.step_s):
            raise ParameterError(f"step seconds must be a finite number > 0, got {self.step_s!r}")
        if not isinstance(self.full_ratio, (int, float)) or not self.full_ratio > 0:
            raise ParameterError(f"full ratio must be a number > 0, got {self.full_ratio!r}")
        at = self.interrupt_at
        if at is not None and (not isinstance(at, (int, float)) or isinstance(at, bool) or not 0 <= at < math.inf):
            raise ParameterError(f"interrupt at must be a finite number of seconds >= 0, got {at!r}")
        if self.interrupt_when is not None:
            check_condition(self.interrupt_when)
        url = self.billing_url
        if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            raise ParameterError(f"billing url must be an http(s) URL, got {url!r}")
        unshared = {"interrupts (interrupt at/when)": at is not None or self.interrupt_when is not None,
                    "billing through the outbox": url is not None}  # fmt: skip
        check_sharding(self.shards, self.shard_backend, self.shard_address, unshared)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DurableOptions:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ParameterError(f"unknown durable option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**d)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.shards is None:  # stored as before sharded runs existed: older versions read them
            del d["shards"], d["shard_backend"], d["shard_address"]
        return d


@dataclass
class Progress:
    """What a durable run did in this process."""

    resumed_from: int | None = None
    """Step of the checkpoint this process started from (None: from scratch)."""
    super_steps: int = 0
    """The last super-step."""
    checkpoints: int = 0
    full_snapshots: int = 0
    checkpoint_bytes: int = 0
    capture_s: float = 0.0
    """Seconds the simulation's thread spent describing and packing states."""
    outbox_performed: int = 0
    outbox_replayed: int = 0
    on_checkpoint: Callable[[float, int], None] | None = field(default=None, repr=False, compare=False)
    """Called on the writer thread after each checkpoint write with its seconds
    (compression and write) and bytes (metrics)."""

    @property
    def steps(self) -> int:
        """Former name of :attr:`super_steps`."""
        return self.super_steps


class _Writer:
    """Writes checkpoints, choosing between full snapshots and deltas.

    The state is captured and packed on the simulation's thread; compressing it and
    writing it (both release the interpreter) happen on a writer thread with its own
    connection, at most one checkpoint behind, while the next super-step runs. A
    failed write is raised by the next :meth:`write` or by :meth:`close`."""

    def __init__(self, store: CheckpointLog, lease: Lease, full_ratio: float, progress: Progress) -> None:
        self.store, self.lease, self.full_ratio, self.progress = store, lease, full_ratio, progress
        self.base: int | None = None
        self.parent: int | None = None
        self.full_bytes = 0
        """Packed size of the newest full snapshot (estimated for a genesis)."""
        self.since_full = 0
        """Packed size of the deltas written since it."""
        self._queue: queue.Queue[tuple[Any, ...] | None] = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @staticmethod
    def _base_bytes(kind: str, packed: int, rt: DurableSim) -> int:
        """What a full snapshot weighs: its packed size, or for a genesis an estimate."""
        return packed if kind == "full" else GENESIS_BYTES_PER_AGENT * len(rt.agents)

    def resume(self, chain: list[CheckpointRecord], rt: DurableSim) -> None:
        self.base = chain[0].step
        self.full_bytes = self._base_bytes(chain[0].kind, chain[0].meta.get("packed_bytes", 0), rt)
        self.since_full = sum(r.meta.get("packed_bytes", r.nbytes) for r in chain[1:])
        self.parent = chain[-1].step

    def write(self, rt: DurableSim, step: int, note: dict[str, Any] | None = None) -> None:
        """Queue the checkpoint of ``step`` (``note``: a human's edit, kept in its metadata)."""
        self._raise()
        t0 = time.perf_counter()
        if self.base is None:
            kind, state = "start", rt.genesis()
        else:
            kind = "full" if self.since_full >= self.full_ratio * self.full_bytes else "delta"
            state = rt.full() if kind == "full" else rt.delta()
        full = kind != "delta"
        packed = pack_checked(state)
        self.progress.capture_s += time.perf_counter() - t0
        led, described = rt.ledger, counts(state)
        meta: dict[str, Any] = {
            "step": step,
            "events": rt.events_run,
            "virtual_time_s": rt.now,
            "agents_changed": len(rt.agents) if described is None else described[0],
            "packets": 0 if described is None else described[1],
            "packed_bytes": len(packed),
            "messages": led.messages,
            "bytes": led.bytes,
            "llm_calls": led.llm_calls,
            "tokens_in": led.tokens_in,
            "tokens_out": led.tokens_out,
            "cost_usd": led.cost_usd,
            "finished": rt.finished,
        }
        if note is not None:
            meta["edit"] = note
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name=f"checkpoints {self.lease.run_id}", daemon=True)
            self._thread.start()
        self._queue.put((step, self.parent, step if full else self.base, kind, meta, packed))
        if full:
            self.base, self.full_bytes, self.since_full = step, self._base_bytes(kind, len(packed), rt), 0
            self.progress.full_snapshots += kind == "full"
        else:
            self.since_full += len(packed)
        self.parent = step
        self.progress.checkpoints += 1

    def close(self) -> None:
        """Wait until every checkpoint is written; raise the first failure."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _drain(self) -> None:
        store = None
        try:
            store = self.store.reopen()
            while (item := self._queue.get()) is not None:
                step, parent, base, kind, meta, packed = item
                t0 = time.perf_counter()
                blob = seal_state(packed)
                retry_busy(functools.partial(store.write, self.lease, step, parent, base, kind, meta, blob))
                self.progress.checkpoint_bytes += len(blob)
                if self.progress.on_checkpoint is not None:
                    self.progress.on_checkpoint(time.perf_counter() - t0, len(blob))
        except BaseException as exc:  # handed to the simulation's thread
            self._error = exc
            while self._queue.get() is not None:  # let the producer finish
                pass
        finally:
            if store is not None:
                store.close()


def run_durable(
    store: CheckpointStore,
    lease: Lease,
    spec: RunSpec,
    options: DurableOptions | None = None,
    *,
    lost: Callable[[], bool] | None = None,
    behaviour: Behaviour | None = None,
    tools: dict[str, Callable[[Any], Any]] | None = None,
    progress: Progress | None = None,
    on_step: Callable[[int], None] | None = None,
    tracer: Any | None = None,
    edits: HumanEdits | None = None,
) -> RunResult:
    """Run ``spec`` under ``lease`` from its newest checkpoint (or from the start),
    checkpointing as it goes; return the result. ``lost`` is polled between
    super-steps (a heartbeat that lost the lease stops the run early);
    ``behaviour``/``tools`` replace the spec's behaviour (and give its tools) for
    Python callers, who must pass the same ones on every resume. ``tracer`` (an OpenTelemetry tracer; by
    default the global one, :mod:`megaactors.durable.spans`) records the run, its
    super-steps and LLM calls as spans. ``edits`` (a resumed run only) replaces agents'
    behaviour states and sends them a human's messages before it goes on, written as a
    checkpoint of their own (with who and when) so that every later resume replays them.
    A behaviour's :class:`~megaactors.core.behaviour.Interrupt` stops the run at the end
    of its super-step (:class:`RunInterrupted`, trigger ``effect``), checkpointed.
    Options naming shards run the sharded simulation instead (:func:`run_sharded`)."""
    if options is not None and options.shards is not None:
        if edits or behaviour is not None or tools is not None:
            raise ParameterError("a sharded checkpointed run takes no human edits, behaviour or tools of its own")
        return run_sharded(store, lease, spec, options, lost=lost, progress=progress or Progress(), on_step=on_step)
    tracer = tracer if tracer is not None else spans.tracer()
    if tracer is None:
        return _run_durable(store, lease, spec, options, lost, behaviour, tools, progress, on_step, None, edits)
    attributes = {"megaactors.run_id": lease.run_id, "megaactors.fence": lease.fence}
    attributes.update({f"megaactors.param.{k}": v for k, v in spec.as_dict().items() if v is not None})
    with tracer.start_as_current_span("run", attributes=attributes) as span:
        recording = tracer if span.is_recording() else None
        return _run_durable(store, lease, spec, options, lost, behaviour, tools, progress, on_step, recording, edits)


def _run_durable(
    store: CheckpointStore,
    lease: Lease,
    spec: RunSpec,
    options: DurableOptions | None,
    lost: Callable[[], bool] | None,
    behaviour: Behaviour | None,
    tools: dict[str, Callable[[Any], Any]] | None,
    progress: Progress | None,
    on_step: Callable[[int], None] | None,
    tracer: Any | None,
    edits: HumanEdits | None,
) -> RunResult:
    options = options or DurableOptions()
    progress = progress if progress is not None else Progress()
    outbox = Outbox(store, lease, billing_url=options.billing_url)
    run_id = lease.run_id

    def charge(agent: int, index: int, reply: Any) -> None:
        outbox.charge(f"{run_id}/{agent}/{index}", agent, index, reply.cost_usd)

    def traced(agent: int, index: int, reply: Any) -> None:
        assert tracer is not None  # only installed with one
        attributes = {"megaactors.agent": agent, "megaactors.call_index": index, "megaactors.stage": reply.stage,
                      "megaactors.tokens_in": reply.tokens_in, "megaactors.tokens_out": reply.tokens_out,
                      "megaactors.cost_usd": reply.cost_usd, "megaactors.virtual_start_s": rt.now,
                      "megaactors.latency_s": reply.latency_s}  # fmt: skip
        tracer.start_span("llm call", attributes=attributes).end()
        if options.billing_url:
            charge(agent, index, reply)

    on_llm_call = traced if tracer is not None else charge if options.billing_url else None

    def gate(agent: int, index: int, call: Any, run: Callable[[], Any]) -> Any:
        return outbox.perform(f"{run_id}/tool/{index}", "tool", {"agent": agent, "tool": call.name}, run)

    rt = _simulation(spec, behaviour, tools=tools, on_llm_call=on_llm_call, tool_gate=gate)
    writer = _Writer(store, lease, options.full_ratio, progress)
    latest = store.latest(run_id)
    # the simulation and its checkpoints make no reference cycles (see gc_tuning): the
    # collector is paused as in SimRuntime.run, unless spans or billing calls (other
    # libraries' objects, on every LLM call) run inside
    collector = quiet_gc() if tracer is not None or options.billing_url else paused_gc()
    try:
        with collector:
            wall0 = time.perf_counter()
            if latest is None:
                if edits:
                    raise EditRefused(f"run {run_id!r} has no checkpoint yet: there is no state to edit")
                if tracer is None:
                    rt.start()
                else:
                    with tracer.start_as_current_span("super-step", attributes={"megaactors.step": 0}):
                        rt.start()
                step = 0
                writer.write(rt, step)
            else:
                chain = store.chain(run_id, latest.step)
                rt.restore_chain([decode_state(r.state or b"", where=f"run {run_id!r} step {r.step}") for r in chain])
                rt.core.interrupts.clear()  # asked for before the checkpoint: they stopped the run already
                writer.resume(chain, rt)
                step = progress.resumed_from = latest.step
                if edits:
                    edits.apply(rt)
                    step += 1
                    writer.write(rt, step, note=edits.note())
                    writer.close()  # the edits are stored before the run goes on
            wall_before = rt.wall_s
            every = options.checkpoint_every
            written = step
            when = None if options.interrupt_when is None else check_condition(options.interrupt_when)
            requests = rt.core.interrupts  # the behaviour's Interrupt effects, taken here
            while not rt.finished or requests:
                if lost is not None and lost():
                    raise FencingError(f"run {run_id!r}: lease lost (heartbeat) at super-step {step}")
                fired = asked(requests) or due(rt.next_event_time, rt.ledger, options.interrupt_at, when)
                if fired is not None:
                    rt.wall_s = wall_before + time.perf_counter() - wall0
                    if written != step:
                        writer.write(rt, step)
                    writer.close()
                    progress.super_steps = step
                    raise RunInterrupted(step, rt.now, *fired)
                until = superstep_end(rt.next_event_time or 0.0, options.step_s)
                if tracer is None:
                    rt.advance(until)
                else:
                    attributes = {"megaactors.step": step + 1, "megaactors.virtual_start_s": rt.now,
                                  "megaactors.virtual_until_s": until}  # fmt: skip
                    with tracer.start_as_current_span("super-step", attributes=attributes):
                        rt.advance(until)
                step += 1
                if step % every == 0 or rt.finished:
                    rt.wall_s = wall_before + time.perf_counter() - wall0
                    writer.write(rt, step)
                    written = step
                if on_step is not None:
                    on_step(step)
            writer.close()
            rt.wall_s = wall_before + time.perf_counter() - wall0
    finally:
        writer.close()
    progress.super_steps = step
    progress.outbox_performed, progress.outbox_replayed = outbox.performed, outbox.replayed
    result = rt.result()
    result.params = spec.result_params()
    return result


def _simulation(spec: RunSpec, behaviour: Behaviour | None = None, **options: Any) -> DurableSim:
    """``spec``'s simulation for a checkpointed run, once its behaviour (by default the
    spec's) accepts the organisation; ``options`` go to :class:`DurableSim` (``trace``
    by default the spec's)."""
    org = spec.organisation()
    behaviour = behaviour if behaviour is not None else spec.build_behaviour()
    check_organisation(behaviour, org)
    options.setdefault("trace", spec.trace)
    return DurableSim(
        org,
        behaviour,
        spec.llm(),
        seed=spec.seed,
        max_concurrent_llm=spec.max_concurrent_llm,
        serial=spec.serial,
        provider=spec.provider(),
        network=spec.network(),
        faults=spec.fault_spec(),
        **options,
    )


def restored(store: CheckpointLog, run_id: str, step: int) -> DurableSim:
    """The simulation of ``run_id`` as it was at checkpointed super-step ``step``."""
    rt = _simulation(RunSpec.from_dict(store.get_run(run_id).params))
    chain = store.chain(run_id, step)
    rt.restore_chain([decode_state(r.state or b"", where=f"run {run_id!r} step {r.step}") for r in chain])
    return rt


def preflight(spec: RunSpec) -> None:
    """Start ``spec``'s run in memory and pack its state as a checkpoint would: the
    behaviour's refusal of the organisation, and a state a checkpoint cannot store
    (:class:`~megaactors.errors.UncheckpointableError`, naming the agent and the
    value), show before a durable run is created."""
    rt = _simulation(spec, trace=False)
    rt.start()
    pack_checked(rt.full())


def fork_run(
    store: CheckpointStore, run_id: str, step: int, new_run_id: str, params: dict[str, Any] | None = None
) -> None:
    """Queue a new run that continues ``run_id`` from ``step``, with other parameters
    from then on (a what-if). With the same parameters the checkpoints are copied;
    with others the state of ``step`` is rebuilt under the original parameters and
    written as one full snapshot, so the new parameters apply only after ``step``."""
    source = store.get_run(run_id)
    if params is None or params == source.params:
        store.fork(run_id, step, new_run_id)
        return
    if source.options.get("shards") is not None:
        raise ParameterError(f"run {run_id!r} is sharded: a fork copies its checkpoints, with the same parameters")
    new_spec = RunSpec.from_dict(params)  # the new parameters must be valid too
    rt = restored(store, run_id, step)
    packed = pack_state(rt.full())
    try:  # and must take the state: a fork may add a network or a provider model, not drop one
        _simulation(new_spec).restore_chain([decode_state(seal_state(packed), where=f"run {run_id!r} step {step}")])
    except StateError as exc:
        raise ParameterError(f"a fork of run {run_id!r} cannot take these parameters: {exc}") from None
    meta = {**store.get(run_id, step).meta, "forked_from": [run_id, step]}
    store.fork(run_id, step, new_run_id, params=params, snapshot=(meta, seal_state(packed)))
