#!/usr/bin/env python3
"""Instructions a run executes, counted by valgrind (deterministic, unlike wall time
on a shared machine), on two source trees side by side.

For each tree, the workload runs twice under ``valgrind --tool=cachegrind``: with
``--agents N`` and with none (imports only); the difference is what the run itself
costs. ``PYTHONHASHSEED=0`` keeps dictionary order, hence the count, the same from
run to run; ``OPENBLAS_NUM_THREADS=1`` keeps numpy's BLAS threads (idle, but polling
for work while the run lasts) from adding tens of millions of instructions of their
own. Workloads: ``sim`` (a two-tier chat round of 2 rounds on the simulation),
``asyncio`` and ``pykka`` (3 rounds, zero-latency calls, as in ``live_runtimes.py``),
``durable`` (1 round checkpointed every super-step into SQLite, as in
``checkpoint_overhead.py``), ``bare`` (that run without checkpoints: the ratio of
the two is the checkpoints' overhead in instructions), ``net`` (1 round on the
simulation placed on 2 machines, 0.01 s within a group, 0.02 s between admins, 0.05 s
between machines, 0.002 s jitter, as in ``sim_shards.py``: every copy is an event).
Group size G = round((2N)^(1/3)). The imports-only run of ``durable`` also imports
what a checkpointed run imports on first use, once per process: OpenTelemetry's API,
for its tracer (about 55 million instructions), and the SQL store modules that
``open_store`` loads (about 50 million where bytecode is not cached, e.g. under
``PYTHONDONTWRITEBYTECODE=1``, when they are compiled from source each time).

    python benchmarks/instruction_counts.py --trees /tmp/old,. --workload sim --agents 2000

(a worktree of an older commit, e.g. ``git worktree add /tmp/old main``, is the
other tree). Needs valgrind; the pykka count varies a little with thread scheduling.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOADS = ("sim", "net", "asyncio", "pykka", "durable", "bare")


def workload(kind: str, n: int) -> int:
    """Run one workload in this process (``n`` 0: only import what it needs); return
    its message count."""
    from megaactors import ChatRound, LatencyModel, Organisation, RunSpec, SimRuntime, SimulatedLLM
    from megaactors.durable import DurableOptions, open_store, run_durable
    from megaactors.runtime import AsyncioRuntime, PykkaRuntime

    if not n:
        if kind == "durable":  # imported by a checkpointed run's first calls (its tracer, its store), once per process
            from megaactors.durable import postgres, spans, sqlite  # noqa: F401 (open_store loads both)

            spans.tracer()
        return 0
    g = max(2, round((2 * n) ** (1 / 3)))
    zero = SimulatedLLM(latency=LatencyModel(median_s=0.0, sigma=0.0, per_output_token_s=0.0))
    if kind == "sim":
        return SimRuntime(Organisation.two_tier(n, g), ChatRound(2), trace=False).run().ledger.messages
    if kind == "net":
        from megaactors.network import NetworkModel  # loaded with the simulation (absent from older trees)

        net = NetworkModel({"intra": 0.01, "admin": 0.02}, 0.05, 0.002, machine_count=2)
        return SimRuntime(Organisation.two_tier(n, g), ChatRound(), trace=False, network=net).run().ledger.messages
    if kind == "asyncio":
        rt = AsyncioRuntime(Organisation.two_tier(n, g), ChatRound(3), zero, trace=False, event_loop="uvloop")
        return rt.run().ledger.messages
    if kind == "pykka":
        return PykkaRuntime(Organisation.two_tier(n, g), ChatRound(3), zero, trace=False).run().ledger.messages
    spec = RunSpec(topology="two-tier", agents=n, group_size=g, rounds=1, seed=1)
    if kind == "bare":
        return spec.execute().ledger.messages
    with tempfile.TemporaryDirectory() as d, open_store(Path(d) / "s.db", create=True) as store:
        lease = store.create_run("r", spec.as_dict(), {}, version="bench", owner="bench", lease_s=3600)
        return run_durable(store, lease, spec, DurableOptions(checkpoint_every=1, step_s=1.0)).ledger.messages


def count(tree: Path, kind: str, n: int) -> int:
    """Instructions of this script run on ``tree`` with ``n`` agents (0: imports only)."""
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(tree), OPENBLAS_NUM_THREADS="1")
    # a small run without valgrind first: a fresh tree's first import compiles each module
    # it loads to bytecode, which the counted run would pay and the imports-only run not
    subprocess.run([sys.executable, __file__, "--run", kind, "50"], env=env, capture_output=True, check=True)
    out = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", sys.executable,
         __file__, "--run", kind, str(n)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {out.stderr[-500:]}")
    return int(found[1].replace(",", ""))


def main() -> None:
    if sys.argv[1:2] == ["--run"]:
        workload(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", required=True, help="two source trees, comma-separated (first: the reference)")
    parser.add_argument("--workload", choices=WORKLOADS, default="sim")
    parser.add_argument("--agents", type=int, default=2000)
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    if len(trees) != 2 or not all((t / "megaactors").is_dir() for t in trees):
        parser.error(f"--trees needs two source trees holding megaactors/, got {args.trees!r}")
    runs = [count(t, args.workload, args.agents) - count(t, args.workload, 0) for t in trees]
    report = {"workload": args.workload, "agents": args.agents, "instructions": runs, "change": runs[1] / runs[0] - 1}
    print(f"{args.workload} N={args.agents:,}: {runs[0]:,} -> {runs[1]:,} instructions ({report['change']:+.2%})")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
