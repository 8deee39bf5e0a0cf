"""The chaos suite: real processes, real faults, and after each trial the same three
checks — nothing lost (every run done), nothing doubled (one line of super-steps per
run, each run once in a sweep's results), results identical to an undisturbed run.

Scenarios (each a function returning a :class:`Tally`):

* ``workers``: runs on a queue worked by two workers that are SIGKILLed (and
  replaced) or SIGSTOPped and woken at random moments (SQLite and PostgreSQL);
* ``postgres-restart``: the PostgreSQL server is stopped and started again while
  workers run, as DBOS's tests do; the workers must live through it;
* ``disk-full``: the store lives on a small tmpfs (needs the right to mount one;
  skipped with the reason otherwise); the worker stops with one line naming the full
  disk, the store stays readable, and once moved to a larger disk the run is taken
  over at once (its holder is dead) and finishes with the undisturbed result;
* ``sweeps``: a second sweep of the same directory while one writes, and a sweep
  SIGKILLed mid-way and resumed.

``tests/test_chaos.py`` runs a few trials of each in the suite;
``python tests/chaos.py --long --write RELIABILITY.md`` runs many more and writes the
figures to RELIABILITY.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from pg_server import PostgresServer, ServerBinariesMissing

from megaactors import RunSpec, __version__
from megaactors.durable import RunQueue, open_store

SPECS = [RunSpec(topology="two-tier", agents=900, group_size=10, rounds=3, seed=s) for s in range(1, 5)]
OPTIONS = {"step_s": 0.25}


@dataclass
class Tally:
    """What a scenario did: trials, faults injected, failed checks (with what failed)."""

    scenario: str
    backend: str
    trials: int = 0
    faults: int = 0
    failures: list[str] = field(default_factory=list)
    skipped: str | None = None
    seconds: float = 0.0


class Failed(AssertionError):
    """A check of a trial failed."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise Failed(what)


@functools.cache
def _reference(spec: RunSpec) -> str:
    summary = spec.execute().summary()
    summary.pop("wall_s")
    return json.dumps(summary, sort_keys=True)


def reference(spec: RunSpec) -> dict[str, Any]:
    """An undisturbed run's summary without its wall time, as a store gives it back (JSON)."""
    return dict(json.loads(_reference(spec)))


def same_result(result: dict[str, Any] | None, spec: RunSpec) -> bool:
    if not isinstance(result, dict):
        return False
    return {k: v for k, v in result.items() if k != "wall_s"} == reference(spec)


def differences(result: Any, spec: RunSpec) -> str:
    """The fields where ``result`` differs from an undisturbed run's."""
    if not isinstance(result, dict):
        return f"no result: {result!r}"
    expected = reference(spec)
    got = {k: v for k, v in result.items() if k != "wall_s"}
    names = sorted(k for k in set(expected) | set(got) if expected.get(k) != got.get(k))
    return ", ".join(f"{k}: {str(got.get(k, '-'))[:60]} instead of {str(expected.get(k, '-'))[:60]}" for k in names)


def worker(db: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "megaactors", "worker", "--db", db, "--poll", "0.05", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def stop(procs: list[subprocess.Popen[str]]) -> str:
    """End every process (waking the paused ones); return their logs."""
    logs = []
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            logs.append(p.communicate(timeout=30)[1] or "")
        except subprocess.TimeoutExpired:
            p.kill()
            logs.append(p.communicate()[1] or "")
    return "".join(logs)


def submit(db: str, specs: list[RunSpec], **kwargs: Any) -> dict[str, RunSpec]:
    with open_store(db, create=True) as store:
        queue = RunQueue(store)
        return {queue.submit(s, OPTIONS, **kwargs): s for s in specs}


def check_queue(db: str, runs: dict[str, RunSpec]) -> None:
    """Every run done with the undisturbed result, and one line of super-steps each."""
    with open_store(db, readonly=True) as store:
        for run_id, spec in runs.items():
            run = store.get_run(run_id)
            check(run.status == "done", f"run {run_id} is {run.status}: {run.error}")
            check(same_result(run.result, spec), f"run {run_id}: result differs from an undisturbed run "
                  f"({differences(run.result, spec)})")  # fmt: skip
            steps = [c.step for c in store.list(run_id)]
            check(steps == list(range(len(steps))), f"run {run_id}: super-steps {steps} are not one line")


def all_done(db: str, runs: dict[str, RunSpec]) -> bool:
    try:
        with open_store(db, readonly=True) as store:
            return all(store.get_run(r).status in ("done", "dead") for r in runs)
    except Exception:  # the server is restarting
        return False


def checkpointed(db: str, runs: dict[str, RunSpec]) -> bool:
    """True once some run has checkpointed a super-step after the start."""
    with open_store(db, readonly=True) as store:
        return any((store.get_run(r).step or 0) >= 1 for r in runs)


def wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise Failed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


# ---------------------------------------------------------------------- scenarios


def workers_trial(db: str, rng: random.Random, faults: int) -> int:
    """Two workers, SIGKILLed (and replaced) or paused at random; returns faults injected."""
    runs = submit(db, SPECS)
    procs = [worker(db, "--lease", "1") for _ in range(2)]
    injected = 0
    try:
        while injected < faults and not all_done(db, runs):
            time.sleep(rng.uniform(0.2, 0.8))
            live = [p for p in procs if p.poll() is None]
            victim = rng.choice(live)
            if rng.random() < 0.5:
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                procs.append(worker(db, "--lease", "1"))
            else:
                victim.send_signal(signal.SIGSTOP)
                time.sleep(rng.uniform(0.3, 1.5))
                victim.send_signal(signal.SIGCONT)
            injected += 1
        wait(lambda: all_done(db, runs), 240, "every run to finish")
    finally:
        stop(procs)
    check_queue(db, runs)
    return injected


def postgres_restart_trial(server: PostgresServer, rng: random.Random) -> int:
    """Workers on PostgreSQL while the server stops and starts again; returns faults."""
    db = server.dsn
    with open_store(db, create=True) as store:
        for run in store.list_runs():
            store.cancel(run.run_id, "an earlier trial's")
    runs = submit(db, SPECS[:3])
    procs = [worker(db, "--lease", "5") for _ in range(2)]
    try:
        wait(lambda: checkpointed(db, runs), 120, "a first checkpoint")
        time.sleep(rng.uniform(0.0, 1.0))
        server.halt(rng.choice(["fast", "immediate"]))
        time.sleep(rng.uniform(0.5, 3.0))
        server.resume()
        wait(lambda: all_done(db, runs), 240, "every run to finish after the restart")
        check(all(p.poll() is None for p in procs), "a worker exited during the restart")
    finally:
        log = stop(procs)
    check("database busy" in log, f"the workers never noticed the restart: {log[-1500:]}")
    at = log.find("Traceback")
    check(at < 0, f"a worker's log holds a traceback: {log[at : at + 2000]}")
    check_queue(db, runs)
    return 1


def mount_tmpfs(where: Path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` at ``where``; the reason it cannot be done, or None."""
    where.mkdir(parents=True, exist_ok=True)
    try:
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot mount a tmpfs: {exc}"
    return None if out.returncode == 0 else f"cannot mount a tmpfs: {out.stderr.strip() or out.returncode}"


def disk_full_trial(base: Path, rng: random.Random) -> int:
    """A store on a full disk: the worker stops with one line naming the full disk
    (or hands the run back), the store stays readable, and on a larger disk another
    worker takes the run over at once (its holder is dead; the lease of 600 s is not
    waited for) and finishes it identically."""
    small = base / "small"
    reason = mount_tmpfs(small, "400k")
    if reason:
        raise SkipScenario(reason)
    try:
        db = str(small / "q.db")
        spec = RunSpec(topology="two-tier", agents=3000 + rng.randrange(500), group_size=12, rounds=4, seed=9)
        runs = submit(db, [spec], max_attempts=5)
        command = [sys.executable, "-m", "megaactors", "worker", "--db", db, "--exit-when-idle", "--lease", "600"]
        out = subprocess.run(command, capture_output=True, text=True, timeout=300)
        last = (out.stderr.strip().splitlines() or [""])[-1]
        check(out.returncode in (0, 2), f"the worker exited with {out.returncode}: {out.stderr[-800:]}")
        check("internal error" not in out.stderr, f"internal error: {out.stderr[-800:]}")
        check(out.returncode == 0 or ("full" in last and last.startswith("megaactors: error:")),
              f"the worker's last word does not say the disk is full: {last}")  # fmt: skip
        (run_id,) = runs
        with open_store(db, readonly=True) as store:
            run = store.get_run(run_id)
            check(run.status in ("running", "queued", "dead"), f"the run is {run.status} on a full disk")
            steps = [c.step for c in store.list(run_id)]
        big = base / "big"
        big.mkdir()
        for name in os.listdir(small):
            shutil.copy2(small / name, big / name)
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True, timeout=30)
    db = str(big / "q.db")
    with open_store(db) as store:
        check([c.step for c in store.list(run_id)] == steps, "checkpoints written before the disk filled were lost")
        if store.get_run(run_id).status == "dead":
            store.requeue(run_id)
    out = subprocess.run([sys.executable, "-m", "megaactors", "worker", "--db", db, "--exit-when-idle",
                          "--poll", "0.05"], capture_output=True, text=True, timeout=300)  # fmt: skip
    check(out.returncode == 0, f"the worker on the larger disk exited with {out.returncode}: {out.stderr[-800:]}")
    check_queue(db, runs)
    return 1


class SkipScenario(Exception):
    """The machine does not allow this scenario (the reason is the text)."""


def sweep(out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "megaactors", "sweep", "--topology", "star,two-tier", "--agents", "50,400,1500",
         "--seed", "1,2", "--out", str(out), "--no-plots", "--quiet", "--workers", "2", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


KEY = ("topology", "agents", "seed", "group_size", "fanout")
RESULT = ("status", "messages", "bytes", "llm_calls", "cost_usd", "virtual_time_s")


def rows(path: Path) -> list[tuple[str, ...]]:
    with path.open(newline="") as f:
        return [tuple(r.get(c, "") for c in (*KEY, *RESULT)) for r in csv.DictReader(f)]


def sweeps_trial(base: Path, rng: random.Random, clean: list[tuple[str, ...]]) -> int:
    """Two sweeps of one directory at once, then a SIGKILLed sweep resumed."""
    out = base / f"sweep-{rng.randrange(10**9)}"
    first = sweep(out)
    time.sleep(rng.uniform(0.0, 1.5))
    second = sweep(out)
    _, second_log = second.communicate(timeout=300)
    check(second.returncode in (0, 2), f"the second sweep exited with {second.returncode}: {second_log[-500:]}")
    if second.returncode == 2:
        check("another sweep is writing" in second_log, f"the refusal does not say why: {second_log}")
    time.sleep(rng.uniform(0.0, 1.0))
    first.send_signal(signal.SIGKILL)
    first.wait()
    resumed = sweep(out)
    _, log = resumed.communicate(timeout=300)
    check(resumed.returncode == 0, f"the resumed sweep exited with {resumed.returncode}: {log[-500:]}")
    got = rows(out / "results.csv")
    check(len(got) == len(set(r[: len(KEY)] for r in got)), "a run is recorded twice in results.csv")
    check(sorted(got) == clean, "the sweep's rows differ from an undisturbed sweep's")
    return 2


# ---------------------------------------------------------------------- running them


def run_scenario(tally: Tally, trials: int, trial: Callable[[random.Random], int], seed: int) -> Tally:
    started = time.monotonic()
    for i in range(trials):
        rng = random.Random(seed * 1000 + i)
        try:
            tally.faults += trial(rng)
        except SkipScenario as exc:
            tally.skipped = str(exc)
            break
        except Failed as exc:
            tally.failures.append(str(exc))
            tally.faults += 1
        tally.trials += 1
    tally.seconds = time.monotonic() - started
    return tally


def run_all(long: bool, seed: int = 1, scenarios: tuple[str, ...] | None = None) -> list[Tally]:
    """Every scenario (``long``: many more trials); the tallies."""
    n = 10 if long else 1
    chosen = scenarios or ("workers", "postgres-restart", "disk-full", "sweeps")
    tallies = []
    base = Path(tempfile.mkdtemp(prefix="megaactors-chaos-"))
    server: PostgresServer | None = None
    try:
        if "workers" in chosen:
            counter = iter(range(10**6))
            tallies.append(run_scenario(Tally("workers", "sqlite"), n, lambda rng: workers_trial(
                str(base / f"w{next(counter)}.db"), rng, faults=4), seed))  # fmt: skip
        if {"workers", "postgres-restart"} & set(chosen):
            try:
                server = PostgresServer().start()
            except ServerBinariesMissing as exc:
                tallies.append(Tally("workers / postgres-restart", "postgres", skipped=str(exc)))
        if server is not None and "workers" in chosen:

            def pg_workers(rng: random.Random) -> int:
                with open_store(server.dsn, create=True) as store:
                    for run in store.list_runs():
                        store.cancel(run.run_id, "an earlier trial's")
                return workers_trial(server.dsn, rng, faults=4)

            tallies.append(run_scenario(Tally("workers", "postgres"), n, pg_workers, seed))
        if server is not None and "postgres-restart" in chosen:
            tallies.append(run_scenario(Tally("postgres-restart", "postgres"), max(1, n // 2),
                                        lambda rng: postgres_restart_trial(server, rng), seed))  # fmt: skip
        if "disk-full" in chosen:
            counter2 = iter(range(10**6))

            def disk(rng: random.Random) -> int:
                place = base / f"disk{next(counter2)}"
                place.mkdir()
                return disk_full_trial(place, rng)

            tallies.append(run_scenario(Tally("disk-full", "sqlite"), max(1, n // 3), disk, seed))
        if "sweeps" in chosen:
            clean_dir = base / "clean"
            p = sweep(clean_dir)
            p.communicate(timeout=300)
            clean = sorted(rows(clean_dir / "results.csv"))
            tallies.append(run_scenario(Tally("sweeps", "files"), max(1, n // 2),
                                        lambda rng: sweeps_trial(base, rng, clean), seed))  # fmt: skip
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(base, ignore_errors=True)
    return tallies


def report(tallies: list[Tally], command: str) -> str:
    """RELIABILITY.md's text."""
    lines = [
        "# Reliability",
        "",
        "What the chaos suite (`tests/chaos.py`) did to megaactors' durable layer, and what broke.",
        "Every trial checks that nothing was lost (every run done), nothing doubled (one line of",
        "super-steps per run; each run once in a sweep's results) and the results are identical to an",
        "undisturbed run's. `tests/test_chaos.py` runs one trial of each scenario in the test suite.",
        "",
        f"Refreshed on {datetime.date.today().isoformat()} with megaactors {__version__}, on {os.cpu_count()} cores "
        f"(load average {os.getloadavg()[0]:.1f} when it ended: other jobs shared the machine), by:",
        "",
        "```bash",
        command,
        "```",
        "",
        "| scenario | backend | trials | faults injected | failures | time (s) | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in tallies:
        note = f"skipped: {t.skipped}" if t.skipped else "; ".join(t.failures)[:200]
        lines.append(f"| {t.scenario} | {t.backend} | {t.trials} | {t.faults} | {len(t.failures)} | "
                     f"{t.seconds:.0f} | {note} |")  # fmt: skip
    lines += [
        "",
        "Faults: *workers* — SIGKILL (the worker is replaced) or SIGSTOP for 0.3–1.5 s of one of two",
        "workers at random moments, on leases of 1 s; *postgres-restart* — the server stopped (`fast` or",
        "`immediate`) for 0.5–3 s while two workers run; *disk-full* — the store on a 400 kB tmpfs (the",
        "worker stops with one line naming the full disk, the store stays readable, and on a larger disk",
        "the run is taken over at once from its dead holder and finishes); *sweeps* — a second sweep of a",
        "directory while one writes (refused, or finding nothing to do), then the first SIGKILLed and the",
        "sweep resumed.",
        "",
        "Found by the suite as it was written, and fixed: a worker that could not hand a run back on a",
        "full disk waited out its own lease (it now stops, and its dead-process lease ends at once); a",
        "worker started while PostgreSQL restarted exited instead of waiting for the server.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", action="store_true", help="many trials per scenario (tens of minutes)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scenario", action="append", help="only these scenarios (repeatable)")
    parser.add_argument("--write", metavar="FILE", help="write the figures to FILE (RELIABILITY.md)")
    args = parser.parse_args(argv)
    tallies = run_all(args.long, args.seed, tuple(args.scenario) if args.scenario else None)
    command = "python tests/chaos.py" + (" --long" if args.long else "") + " --write RELIABILITY.md"
    text = report(tallies, command)
    if args.write:
        Path(args.write).write_text(text)
    print(text)
    return 1 if any(t.failures for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
