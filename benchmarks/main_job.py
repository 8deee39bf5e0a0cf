#!/usr/bin/env python3
"""The main job (``python3 tasks.py run``) against its promise: its wall time, and how
right its progress bar's ETA was once 10 % of the runs had finished.

Runs ``experiments/coordination_cost.py``'s whole job (sweep and figures) into a scratch
directory, recording the bar's history: after each finished run, the elapsed time and
the share of estimated work done. The ETA the bar showed then is ``elapsed × (1 − f) / f``;
it is compared with when the sweep really ended (the bar's own horizon) and with when
the whole job did (the figures follow the sweep). The machine is shared, so the CPU
seconds of the job (this process and its workers) and the load average are printed
beside the wall time: ``cpu / cores`` is what the job would take alone.

    python benchmarks/main_job.py [--agents 10,...,100000] [--seeds 1,2,3] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import sys
import tempfile
from pathlib import Path

from megaactors.experiments.progress import SweepProgress

ROOT = Path(__file__).resolve().parents[1]


def load_experiment():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("coordination_cost", ROOT / "experiments" / "coordination_cost.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["coordination_cost"] = module  # its figure jobs are pickled by module name
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def eta_errors(history: list[tuple[float, float, int]], runs: int, end: float) -> dict[str, float]:
    """Predicted end over real end, minus one, at the first update with ≥ 10 % of the
    runs done, and the worst such error from then on."""
    errors = []
    for elapsed, fraction, done in history:
        if done < 0.1 * runs or fraction <= 0 or fraction >= 1:
            continue
        predicted = elapsed + elapsed * (1 - fraction) / fraction
        errors.append(predicted / end - 1)
    return {"at_10pct": errors[0] if errors else 0.0, "worst_after": max(errors, key=abs) if errors else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", default=None, help="comma-separated N values (default: the job's)")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default: the job's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    experiment = load_experiment()
    agents = [int(v) for v in args.agents.split(",")] if args.agents else list(experiment.AGENTS)
    seeds = [int(v) for v in args.seeds.split(",")] if args.seeds else list(experiment.SEEDS)
    bar = SweepProgress(enabled=False)
    load0, cpu0 = os.getloadavg()[0], cpu_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        df, paths, times = experiment.run_experiment(Path(tmp), agents, seeds, None, bar)
    cpu, load1 = cpu_seconds() - cpu0, os.getloadavg()[0]
    cores = len(os.sched_getaffinity(0))
    result = {
        "runs": len(df),
        "figures": len(paths) // 2,
        "sweep_s": round(times["sweep_s"], 1),
        "total_s": round(times["total_s"], 1),
        "cpu_s": round(cpu, 1),
        "cpu_per_core_s": round(cpu / cores, 1),
        "load_before": round(load0, 2),
        "load_after": round(load1, 2),
        "eta_vs_sweep": {k: round(v, 3) for k, v in eta_errors(bar.history, len(df), times["sweep_s"]).items()},
        "eta_vs_job": {k: round(v, 3) for k, v in eta_errors(bar.history, len(df), times["total_s"]).items()},
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"main job: {result['runs']} runs, {result['figures']} figures")
    r = result
    print(f"  wall {r['total_s']} s (sweep {r['sweep_s']} s); CPU {r['cpu_s']} s = {r['cpu_per_core_s']} s per core")
    print(f"  load average {result['load_before']} before, {result['load_after']} after ({cores} cores)")
    for horizon in ("sweep", "job"):
        e = result[f"eta_vs_{horizon}"]
        at, worst = e["at_10pct"], e["worst_after"]
        print(f"  ETA at 10 % of the runs vs the {horizon}'s end: {at:+.0%} (worst after: {worst:+.0%})")


if __name__ == "__main__":
    main()
