#!/usr/bin/env python3
"""Checkpoint overhead and checkpoint size, against the same run without checkpoints.

1. Wall time: a 10,000-agent two-tier chat round (group size 27) on the simulation
   runtime, bare and checkpointed every super-step into a fresh SQLite file, in the
   same process; the best of ``--repeat`` runs each. Target: at most 1.15x.
2. Size: a run of at least 1,000 super-steps (two-tier, many rounds) checkpointed
   every super-step: bytes per step at the start, middle and end, the least-squares
   slope of delta size over the steps, and the full snapshots written.

With ``--network`` both runs of 1. go through a network (latency and jitter, 1 % of
copies dropped and sent again) under a provider model (an RPM limit, 1 % failed
attempts): what checkpointing the copies in transit, in-queues and token buckets adds.

    python benchmarks/checkpoint_overhead.py [--agents 10000] [--repeat 3] [--network] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from megaactors import RunSpec
from megaactors.durable import DurableOptions, open_store, run_durable
from megaactors.durable.checkpointing import Progress

STEP_S = 1.0


def bare(spec: RunSpec) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    result = spec.execute()
    return time.perf_counter() - t0, result.summary()


def checkpointed(spec: RunSpec, options: DurableOptions, directory: Path, name: str) -> tuple[float, Any, Progress]:
    store = open_store(directory / f"{name}.db", create=True)
    lease = store.create_run(name, spec.as_dict(), options.as_dict(), version="bench", owner="bench", lease_s=3600)
    progress = Progress()
    t0 = time.perf_counter()
    result = run_durable(store, lease, spec, options, progress=progress)
    elapsed = time.perf_counter() - t0
    rows = store.list(name)
    store.close()
    return elapsed, (result.summary(), rows), progress


NETWORK = {"net_latency": "intra=0.005,admin=0.05", "net_jitter": 0.01, "faults": "drop=0.01", "rpm": 60_000.0,
           "llm_failure_rate": 0.01}  # fmt: skip
"""The network, faults and provider model of ``--network``."""


def overhead(
    agents: int, group_size: int, repeat: int, directory: Path, step_s: float, network: bool = False
) -> dict[str, Any]:
    spec = RunSpec(topology="two-tier", agents=agents, group_size=group_size, rounds=1, seed=1,
                   **(NETWORK if network else {}))  # fmt: skip
    options = DurableOptions(checkpoint_every=1, step_s=step_s)
    bare_s, ckpt_s, last = [], [], None
    for i in range(repeat):  # interleaved so that both see the same machine
        b, summary = bare(spec)
        c, (csummary, rows), progress = checkpointed(spec, options, directory, f"overhead{i}")
        for s in (summary, csummary):
            s.pop("wall_s")
        assert summary == csummary, "a checkpointed run must report what a bare run reports"
        bare_s.append(b)
        ckpt_s.append(c)
        last = (rows, progress)
    rows, progress = last
    return {
        "agents": agents,
        "group_size": group_size,
        "network": network,
        "step_s": step_s,
        "super_steps": progress.super_steps,
        "checkpoints": progress.checkpoints,
        "full_snapshots": progress.full_snapshots,
        "bare_s": round(min(bare_s), 3),
        "checkpointed_s": round(min(ckpt_s), 3),
        "ratio": round(min(ckpt_s) / min(bare_s), 3),
        "capture_s": round(progress.capture_s, 3),
        "checkpoint_bytes": progress.checkpoint_bytes,
        "bytes_per_step": [r.nbytes for r in rows],
    }


def growth(directory: Path) -> dict[str, Any]:
    spec = RunSpec(topology="two-tier", agents=1000, group_size=10, rounds=60, seed=2)
    options = DurableOptions(checkpoint_every=1, step_s=0.25)
    elapsed, (_, rows), progress = checkpointed(spec, options, directory, "growth")
    deltas = [(r.step, r.nbytes) for r in rows if r.kind == "delta"]
    n = len(deltas)
    xs, ys = [s for s, _ in deltas], [b for _, b in deltas]
    slope = statistics.linear_regression(xs, ys).slope if n > 1 else 0.0
    tenth = max(1, n // 10)
    fulls = [(r.step, r.nbytes) for r in rows if r.kind == "full"]
    return {
        "agents": 1000,
        "rounds": 60,
        "super_steps": progress.super_steps,
        "seconds": round(elapsed, 2),
        "delta_bytes_first_tenth": round(statistics.mean(ys[:tenth])),
        "delta_bytes_middle_tenth": round(statistics.mean(ys[n // 2 - tenth // 2 : n // 2 + tenth - tenth // 2])),
        "delta_bytes_last_tenth": round(statistics.mean(ys[-tenth:])),
        "delta_bytes_max": max(ys),
        "delta_slope_bytes_per_step": round(slope, 3),
        "full_snapshots": len(fulls),
        "full_snapshot_bytes_first_last_mean": [fulls[0][1], fulls[-1][1], round(statistics.mean(b for _, b in fulls))]
        if fulls
        else None,
        "total_bytes": sum(r.nbytes for r in rows),
        "mean_bytes_per_step": round(sum(r.nbytes for r in rows) / len(rows)),
        "database_bytes": (directory / "growth.db").stat().st_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--group-size", type=int, default=27)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--step-seconds", type=float, default=STEP_S, help="super-step window (virtual seconds)")
    parser.add_argument("--skip-growth", action="store_true")
    parser.add_argument("--network", action="store_true", help="through a network with faults and an RPM limit")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="megaactors-bench-") as tmp:
        directory = Path(tmp)
        report: dict[str, Any] = {
            "overhead": overhead(args.agents, args.group_size, args.repeat, directory, args.step_seconds, args.network)
        }
        o = report["overhead"]
        if not args.json:
            print(
                f"N={o['agents']:,} two-tier G={o['group_size']}{' through a network' if o['network'] else ''}: "
                f"{o['super_steps']} super-steps of {o['step_s']} s, "
                f"{o['checkpoints']} checkpoints ({o['full_snapshots']} full) on SQLite: "
                f"bare {o['bare_s']:.3f} s, checkpointed {o['checkpointed_s']:.3f} s, "
                f"ratio {o['ratio']:.2f} (target <= 1.15); {o['checkpoint_bytes'] / 1e6:.2f} MB written; "
                f"describing and packing the state took {o['capture_s']:.3f} s of the simulation's thread",
                flush=True,
            )
            print(f"  bytes per step: {o['bytes_per_step']}", flush=True)
        if not args.skip_growth:
            report["growth"] = g = growth(directory)
            if not args.json:
                print(
                    f"growth: {g['super_steps']} super-steps (1,000 agents, 60 rounds) in {g['seconds']} s; "
                    f"delta bytes first/middle/last tenth {g['delta_bytes_first_tenth']:,} / "
                    f"{g['delta_bytes_middle_tenth']:,} / {g['delta_bytes_last_tenth']:,}, "
                    f"slope {g['delta_slope_bytes_per_step']} bytes/step, max {g['delta_bytes_max']:,}; "
                    f"{g['full_snapshots']} full snapshots (bytes first/last/mean "
                    f"{g['full_snapshot_bytes_first_last_mean']}); "
                    f"mean {g['mean_bytes_per_step']:,} bytes/step, database {g['database_bytes'] / 1e6:.1f} MB"
                )
    if args.json:
        print(json.dumps(report))
    return None


if __name__ == "__main__":
    sys.exit(main())
