#!/usr/bin/env python3
"""Durability demo: kill a worker mid-run with SIGKILL and watch another resume it.

1. A billing service starts on 127.0.0.1 (it charges once per idempotency key).
2. A run with paid LLM calls is queued in an SQLite store.
3. Worker A claims it under a short lease and checkpoints every super-step; once it
   is well under way it is killed with SIGKILL.
4. Worker B waits for A's lease to expire on the database clock, claims the run
   (fencing token 2) and resumes it from A's last checkpoint.
5. The resumed result is compared with an uninterrupted run, and the billing
   service's books with the LLM calls the run made: every call charged once.

    python experiments/durability.py [--agents 300] [--rounds 3] [--out results/durability]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from megaactors import RunSpec
from megaactors.durable import RunQueue, open_store
from megaactors.durable.billing import BillingService


def worker(db: Path, name: str, lease_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "megaactors", "worker", "--db", str(db), "--lease", str(lease_s), "--poll", "0.1",
         "--exit-when-idle"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lease", type=float, default=2.0, help="lease length in seconds")
    parser.add_argument("--out", default="results/durability")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    db = out / "runs.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    spec = RunSpec(topology="two-tier", agents=args.agents, group_size=10, rounds=args.rounds, seed=7)
    t0 = time.perf_counter()

    def say(text: str) -> None:
        print(f"[{time.perf_counter() - t0:6.2f} s] {text}", flush=True)

    with BillingService() as billing:
        say(f"billing service on {billing.url}")
        with open_store(db, create=True) as store:
            run_id = RunQueue(store).submit(spec, {"billing_url": billing.url, "step_s": 0.5}, run_id="demo")
        say(f"queued run {run_id!r}: {spec.agents} agents, {spec.rounds} rounds, paid LLM calls")
        a = worker(db, "A", args.lease)
        killed_at = None
        while killed_at is None:
            with open_store(db, readonly=True) as store:
                run = store.get_run(run_id)
            if (run.step or 0) >= 8:
                a.send_signal(signal.SIGKILL)
                a.wait()
                killed_at = run.step
            elif a.poll() is not None:
                sys.exit("worker A finished before it could be killed: use more agents or rounds")
            time.sleep(0.02)
        charged = len(billing.charges)
        say(f"worker A killed with SIGKILL after super-step {killed_at} ({charged} charges made so far)")
        b = worker(db, "B", args.lease)
        say("worker B started: it waits for A's lease to expire, then resumes")
        _, log = b.communicate(timeout=600)
        for line in log.strip().splitlines():
            say(f"  B: {line}")
        with open_store(db, readonly=True) as store:
            run = store.get_run(run_id)
            history = store.list(run_id)
        book = billing.snapshot()
    resumed = dict(run.result)
    reference = spec.execute().summary()
    for s in (resumed, reference):
        s.pop("wall_s")
    kinds = {k: sum(1 for c in history if c.kind == k) for k in ("start", "full", "delta")}
    report = {
        "run": run_id,
        "status": run.status,
        "attempts": run.attempts,
        "fence": run.fence,
        "killed_after_step": killed_at,
        "super_steps": history[-1].step,
        "checkpoints": kinds,
        "checkpoint_bytes": sum(c.nbytes for c in history),
        "identical_to_uninterrupted_run": resumed == reference,
        "llm_calls": reference["llm_calls"],
        "charges": len(book["charges"]),
        "charge_requests": sum(book["requests"].values()),
        "charged_usd": round(book["total_usd"], 9),
        "ledger_cost_usd": reference["cost_usd"],
    }
    say(
        f"run {run.status} after {run.attempts} attempts (fence {run.fence}); "
        f"{report['super_steps']} super-steps, checkpoints {kinds}, {report['checkpoint_bytes']:,} bytes"
    )
    say(f"identical to an uninterrupted run (apart from wall time): {report['identical_to_uninterrupted_run']}")
    say(
        f"billing: {report['charges']} charges for {report['llm_calls']} LLM calls "
        f"({report['charge_requests']} requests: repeats were deduplicated by key), "
        f"${report['charged_usd']:.6f} charged vs ${report['ledger_cost_usd']:.6f} in the ledger"
    )
    (out / "summary.json").write_text(json.dumps(report, indent=2, sort_keys=True))
    say(f"wrote {(out / 'summary.json').resolve()} and the store {db.resolve()}")
    if not report["identical_to_uninterrupted_run"] or report["charges"] != report["llm_calls"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
