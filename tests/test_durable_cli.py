"""Bad input to the durable commands: a one-line error, exit code 2, and the
database file exactly as it was (its bytes, and those of its WAL)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megaactors.durable import open_store


def megaactors(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=timeout)


def files(db: Path) -> dict[str, bytes]:
    """Bytes of the database and of its write-ahead log (an empty log is no log)."""
    found = {}
    for suffix in ("", "-wal"):
        p = Path(f"{db}{suffix}")
        if p.exists() and (suffix == "" or p.stat().st_size):
            found[suffix or "db"] = p.read_bytes()
    return found


def refused(out: subprocess.CompletedProcess[str], *words: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("megaactors"), lines
    for w in words:
        assert w in lines[0], (w, lines[0])


def every_command(db: Path) -> list[tuple[str, ...]]:
    d = str(db)
    return [
        ("resume", "--checkpoint", d, "--run-id", "r1"),
        ("runs", "--db", d),
        ("history", "--db", d, "--run-id", "r1"),
        ("run", "--agents", "10", "--checkpoint", d, "--run-id", "new"),
        ("submit", "--db", d, "--agents", "10"),
        ("worker", "--db", d, "--exit-when-idle"),
        ("fork", "--db", d, "--run-id", "r1", "--step", "0", "--new-run-id", "f"),
    ]


@pytest.fixture
def made(tmp_path: Path) -> Path:
    """A store with one finished run ``r1``."""
    db = tmp_path / "runs.db"
    out = megaactors("run", "--agents", "30", "--group-size", "5", "--checkpoint", str(db), "--run-id", "r1", "--json")
    assert out.returncode == 0, out.stderr
    return db


def test_a_corrupt_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "corrupt.db"
    db.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 20)
    before = files(db)
    for cmd in every_command(db):
        refused(megaactors(*cmd), str(db), "not a megaactors")
        assert files(db) == before, cmd


def test_a_foreign_sqlite_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO users (name) VALUES ('ada')")
    con.commit()
    con.close()
    before = files(db)
    for cmd in every_command(db):
        refused(megaactors(*cmd), "another application", "users")
        assert files(db) == before, cmd


def test_an_incompatible_store_version_is_refused(made: Path) -> None:
    con = sqlite3.connect(made)
    con.execute("UPDATE megaactors_meta SET value = '99' WHERE key = 'version'")
    con.commit()
    con.close()
    before = files(made)
    for cmd in every_command(made):
        refused(megaactors(*cmd), "format version 99")
        assert files(made) == before, cmd


def test_a_checkpoint_of_another_format_version_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    out = megaactors("submit", "--db", str(db), "--agents", "30", "--run-id", "r1")
    assert out.returncode == 0, out.stderr
    with open_store(db) as store:
        lease = store.claim("r1", "w", "0.1.0", 30)
        from megaactors.durable.store import encode_state

        future = bytearray(encode_state({"x": 1}))
        future[5] = 7  # format version 7
        store.write(lease, 0, None, 0, "full", {}, bytes(future))
        store.cancel("r1")  # free it, then queue it again by hand
    con = sqlite3.connect(db)
    con.execute("UPDATE megaactors_runs SET status = 'queued', error = NULL WHERE run_id = 'r1'")
    con.commit()
    con.close()
    before = files(db)
    refused(megaactors("resume", "--checkpoint", str(db), "--run-id", "r1"), "checkpoint format version 7")
    assert files(db) == before


def test_unknown_run_ids_and_missing_files(made: Path, tmp_path: Path) -> None:
    before = files(made)
    refused(megaactors("resume", "--checkpoint", str(made), "--run-id", "nope"), "no run 'nope'")
    refused(megaactors("history", "--db", str(made), "--run-id", "nope"), "no run 'nope'")
    refused(megaactors("fork", "--db", str(made), "--run-id", "nope", "--step", "0", "--new-run-id", "x"), "nope")
    refused(megaactors("fork", "--db", str(made), "--run-id", "r1", "--step", "9999", "--new-run-id", "x"), "9999")
    assert files(made) == before
    missing = tmp_path / "missing.db"
    for cmd in (("resume", "--checkpoint", str(missing), "--run-id", "r1"), ("runs", "--db", str(missing)),
                ("history", "--db", str(missing), "--run-id", "r1"), ("worker", "--db", str(missing))):  # fmt: skip
        refused(megaactors(*cmd), "no checkpoint database")
        assert not missing.exists()


def test_a_run_id_is_used_once(made: Path) -> None:
    before = files(made)
    refused(
        megaactors("run", "--agents", "30", "--checkpoint", str(made), "--run-id", "r1"),
        "already exists",
        "megaactors resume",
    )
    assert files(made) == before


def test_bad_options(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    refused(megaactors("run", "--agents", "10", "--checkpoint", db), "--run-id")
    refused(megaactors("run", "--agents", "10", "--run-id", "a"), "--checkpoint")
    refused(megaactors("run", "--agents", "10", "--checkpoint", db, "--run-id", "a", "--checkpoint-every", "0"),
            "checkpoint_every")  # fmt: skip
    refused(megaactors("run", "--agents", "10", "--checkpoint", db, "--run-id", "a", "--step-seconds", "-1"),
            "step_seconds")  # fmt: skip
    refused(megaactors("run", "--agents", "10", "--checkpoint", db, "--run-id", "a", "--lease", "0"), "lease")
    refused(megaactors("submit", "--db", db, "--grid", "colour=red"), "unknown parameter 'colour'")
    refused(megaactors("submit", "--db", db, "--grid", "agents=1,x"), "agents: 'x' is not an integer")
    refused(megaactors("submit", "--db", db, "--grid", "agents=0"), "agents must be")
    refused(megaactors("submit", "--db", db, "--bill", "ftp://x"), "billing url")
    refused(megaactors("worker", "--db", db, "--jobs", "0"), "jobs")
    assert not Path(db).exists()


def test_a_second_resume_of_a_held_run_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "held.db"
    holder = subprocess.Popen(
        [sys.executable, "-m", "megaactors", "run", "--agents", "3000", "--group-size", "12", "--rounds", "6",
         "--checkpoint", str(db), "--run-id", "busy", "--step-seconds", "0.1", "--lease", "60"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if db.exists():
                try:
                    with open_store(db, readonly=True) as store:
                        if (store.get_run("busy").step or 0) >= 2:
                            break
                except Exception:
                    pass
            time.sleep(0.05)
        else:
            pytest.fail("the holder never checkpointed")
        for _ in range(10):
            holder.send_signal(signal.SIGSTOP)
            time.sleep(0.2)
            before = files(db)
            out = megaactors("resume", "--checkpoint", str(db), "--run-id", "busy")
            if "database is locked" not in out.stderr:
                break
            # frozen inside a write transaction: SQLite waits for it; thaw it and freeze it elsewhere
            assert files(db) == before
            holder.send_signal(signal.SIGCONT)
            time.sleep(0.1)
        refused(out, "held by", "--wait")
        out = megaactors("resume", "--checkpoint", str(db), "--run-id", "busy", "--wait", "0.5")
        refused(out, "held by")
        assert files(db) == before
        runs = json.loads(megaactors("runs", "--db", str(db), "--json").stdout)
        # the refusals left the lease alone (the file is unchanged); it has not run out since the holder froze,
        # however slowly the commands above ran on a loaded machine
        assert runs[0]["status"] == "running" and 0 < runs[0]["lease_left_s"] <= 60
        assert files(db) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_fork_a_what_if_from_a_checkpoint(made: Path) -> None:
    db = str(made)
    original = json.loads(megaactors("resume", "--checkpoint", db, "--run-id", "r1", "--json").stdout)
    assert megaactors("fork", "--db", db, "--run-id", "r1", "--step", "3", "--new-run-id", "same").returncode == 0
    out = megaactors("fork", "--db", db, "--run-id", "r1", "--step", "3", "--new-run-id", "slow",
                     "--set", "latency_median_s=3.0")  # fmt: skip
    assert out.returncode == 0, out.stderr
    refused(megaactors("fork", "--db", db, "--run-id", "r1", "--step", "3", "--new-run-id", "x", "--set", "agents=5"),
            "a fork keeps")  # fmt: skip
    same = json.loads(megaactors("resume", "--checkpoint", db, "--run-id", "same", "--json").stdout)
    slow = json.loads(megaactors("resume", "--checkpoint", db, "--run-id", "slow", "--json").stdout)
    for s in (original, same, slow):
        s.pop("wall_s")
    assert same == original
    assert slow["messages"] == original["messages"] and slow["llm_calls"] == original["llm_calls"]
    assert slow["virtual_time_s"] > original["virtual_time_s"]
    history = {r: json.loads(megaactors("history", "--db", db, "--run-id", r, "--json").stdout) for r in ("r1", "slow")}
    at3 = next(h for h in history["r1"] if h["step"] == 3)
    fork3 = history["slow"][0]
    assert fork3["step"] == 3 and fork3["kind"] == "full" and fork3["messages"] == at3["messages"]
    runs = {r["run"]: r for r in json.loads(megaactors("runs", "--db", db, "--json").stdout)}
    assert runs["slow"]["parent_run"] == "r1" and runs["slow"]["parent_step"] == 3
    assert runs["slow"]["params"]["latency_median_s"] == 3.0
    table = megaactors("history", "--db", db, "--run-id", "r1").stdout.splitlines()
    assert table[0].split()[:4] == ["step", "parent", "kind", "base"] and table[1].split()[2] == "start"
