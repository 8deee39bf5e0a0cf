"""Checkpointed runs of the sharded simulation: the same store, lease and fencing as
:func:`~megaactors.durable.checkpointing.run_durable`, which hands a run to
:func:`run_sharded` when its options name a number of shards.

**Windows are the super-steps.** A sharded simulation
(:class:`~megaactors.runtime.sim_shards.ShardedSimulation`) advances in windows of
the least latency between machines; a window is its super-step, so a checkpoint's
step is the number of windows run (``step_s`` does not apply). Every
``checkpoint_every`` windows the whole state — each machine's full description, once
the copies between shards are delivered — is written as one *full* checkpoint (no
deltas, no genesis), fenced by the lease, after the heartbeat is asked whether the
lease still holds (it is asked after every window too). The finished run's summary is
stored as any run's; the last window is not checkpointed.

A resume continues from the newest checkpoint on the same number of shards; the
backend (in this process or Ray actors) may differ, the result does not. What needs
the whole run in one place is refused in one line: a human's edits and stops
(interrupts), and billing through the outbox. A behaviour's
:class:`~megaactors.core.behaviour.Interrupt` is reported in the result without
stopping the run, and the run records no OpenTelemetry spans.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from megaactors.durable.packable import pack_checked
from megaactors.durable.runqueue import retry_busy
from megaactors.durable.store import CheckpointLog, CheckpointRecord, FencingError, Lease, decode_state, seal_state
from megaactors.errors import ParameterError, StateError
from megaactors.runtime.result import RunResult

TOTALS = ("messages", "bytes", "llm_calls", "tokens_in", "tokens_out", "cost_usd")
"""The ledger totals a checkpoint's metadata holds, added over the machines."""

if TYPE_CHECKING:
    from megaactors.durable.checkpointing import DurableOptions, Progress
    from megaactors.experiments.spec import RunSpec

__all__ = ["check_resumable", "check_sharding", "restored_machines", "run_sharded", "sharded_simulation"]


def check_sharding(shards: Any, backend: Any, address: Any, unshared: dict[str, bool]) -> None:
    """Refuse (:class:`ParameterError`, one line) durable options whose sharding
    does not hold together; ``unshared`` names options a sharded run cannot take
    and whether they are set."""
    if shards is None:
        if backend != "inprocess" or address is not None:
            raise ParameterError("a shard backend or address goes with a number of shards")
        return
    from megaactors.runtime.sim_shards import BACKENDS  # not loaded by an unsharded run

    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ParameterError(f"shards must be an integer >= 1, got {shards!r}")
    if backend not in BACKENDS:
        raise ParameterError(f"shard backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if address is not None and backend != "ray":
        raise ParameterError("a shard address runs shards on Ray: it goes with shard backend ray")
    for what, present in unshared.items():
        if present:
            raise ParameterError(f"a sharded checkpointed run cannot take {what}")


def sharded_simulation(spec: RunSpec, options: DurableOptions) -> Any:
    """The :class:`~megaactors.runtime.sim_shards.ShardedSimulation` of ``spec`` on
    the shards ``options`` name (a :class:`ParameterError` if it cannot be cut)."""
    from megaactors.runtime.sim_shards import ShardedSimulation

    return spec.build(
        runtime_class=ShardedSimulation,
        shards=options.shards,
        backend=options.shard_backend,
        address=options.shard_address,
    )


def check_resumable(record: CheckpointRecord, shards: int | None, where: str) -> None:
    """Refuse (:class:`StateError`) a checkpoint that is not one a run on ``shards``
    shards (None: unsharded) resumes from."""
    taken_on = record.meta.get("shards")
    if shards is None:
        if taken_on is not None:
            raise StateError(f"{where} is a checkpoint of a sharded simulation, in a run that is not sharded")
        return
    if record.kind != "full" or taken_on is None:
        raise StateError(f"{where} is not a checkpoint of a sharded simulation")
    if taken_on != shards:
        raise StateError(f"{where} was taken on {taken_on} shard(s); it resumes on {taken_on}, not {shards}")


def run_sharded(
    store: CheckpointLog,
    lease: Lease,
    spec: RunSpec,
    options: DurableOptions,
    *,
    lost: Callable[[], bool] | None,
    progress: Progress,
    on_step: Callable[[int], None] | None,
) -> RunResult:
    """Run ``spec`` sharded under ``lease`` from its newest checkpoint (or from the
    start), a full checkpoint every ``options.checkpoint_every`` windows."""
    run_id = lease.run_id
    sim = sharded_simulation(spec, options)
    latest = store.latest(run_id)
    resume_from = None
    wall_before = 0.0
    if latest is not None:
        where = f"run {run_id!r} step {latest.step}"
        check_resumable(latest, sim.shards, where)
        resume_from = decode_state(latest.state or b"", where=where)
        wall_before = latest.meta.get("wall_s", 0.0)
        progress.resumed_from = latest.step
    parent = None if latest is None else latest.step
    wall0 = time.perf_counter()

    def held(windows: int) -> None:
        if lost is not None and lost():
            raise FencingError(f"run {run_id!r}: lease lost (heartbeat) at window {windows}")

    def window_done(windows: int) -> None:
        held(windows)
        progress.super_steps = windows
        if on_step is not None:
            on_step(windows)

    def write(checkpoint: dict[str, Any]) -> None:
        nonlocal parent
        step = checkpoint["windows"]
        held(step)
        t0 = time.perf_counter()
        packed = pack_checked(checkpoint)
        blob = seal_state(packed)
        machines = checkpoint["machines"].values()
        meta: dict[str, Any] = {
            "step": step,  # the windows run
            "shards": checkpoint["shards"],
            "machines": len(machines),
            "events": sum(d["steps"] for d in machines),
            "virtual_time_s": max(d["now"] for d in machines),
            "packed_bytes": len(packed),
            "wall_s": wall_before + time.perf_counter() - wall0,
        }
        meta.update({k: sum(d["ledger"][k] for d in machines) for k in TOTALS})
        progress.capture_s += time.perf_counter() - t0
        t1 = time.perf_counter()
        retry_busy(functools.partial(store.write, lease, step, parent, step, "full", meta, blob))
        if progress.on_checkpoint is not None:
            progress.on_checkpoint(time.perf_counter() - t1, len(blob))
        parent = step
        progress.checkpoints += 1
        progress.full_snapshots += 1
        progress.checkpoint_bytes += len(blob)

    result: RunResult = sim.run(
        checkpoint_every=options.checkpoint_every, on_checkpoint=write, resume_from=resume_from, on_window=window_done
    )
    result.ledger.wall_s += wall_before
    result.params = spec.result_params()
    return result


def restored_machines(store: CheckpointLog, run_id: str, step: int) -> tuple[dict[int, Any], list[int]]:
    """The machines of sharded run ``run_id`` as they were at checkpointed window
    ``step`` (each a :class:`~megaactors.durable.state.DurableSim` running its own
    agents), restored in this process, and the machine of every agent."""
    from dataclasses import replace

    from megaactors.durable.checkpointing import DurableOptions
    from megaactors.experiments.spec import RunSpec
    from megaactors.runtime.sim_shard import SimShard

    run = store.get_run(run_id)
    options = DurableOptions.from_dict(run.options)
    record = store.get(run_id, step)
    where = f"run {run_id!r} step {step}"
    check_resumable(record, options.shards, where)
    sim = sharded_simulation(RunSpec.from_dict(run.params), replace(options, shard_backend="inprocess",
                                                                    shard_address=None))  # fmt: skip
    machines = list(range(sim.machines))
    shard = SimShard(sim.org, sim.behaviour, sim.llm, sim.options, machines, [0] * len(machines), durable=True)
    shard.restore({int(m): d for m, d in decode_state(record.state or b"", where=where)["machines"].items()})
    return shard.sims, shard.machine_of.tolist()
