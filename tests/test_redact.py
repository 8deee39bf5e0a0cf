"""Secrets never shown: passwords of DSNs and URLs are masked in every error, hint,
table and log line (a real PostgreSQL server, real commands)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from megaactors.durable import UnknownRunError, open_store
from megaactors.redact import MASK, redact

SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://postgres:secretpw@127.0.0.1:54329/megaactors", "postgresql://postgres:***@127.0.0.1:54329/megaactors"),
        ("no run 'x' in postgres://u:p%40ss@db.example/runs?sslmode=require",
         "no run 'x' in postgres://u:***@db.example/runs?sslmode=require"),
        ("postgresql://u:raw@at@host/db and more", "postgresql://u:***@host/db and more"),
        ("http://alice:hunter2@127.0.0.1:8080/charge", "http://alice:***@127.0.0.1:8080/charge"),
        ("host=db user=u password=hunter2 dbname=x", "host=db user=u password=*** dbname=x"),
        ("postgresql://h/db?user=u&password=hunter2&sslmode=x", "postgresql://h/db?user=u&password=***&sslmode=x"),
        ("password='two words' port=5", "password=*** port=5"),
        ("api_key=abc token=xyz", "api_key=*** token=xyz".replace("xyz", MASK)),
    ],
)  # fmt: skip
def test_passwords_are_masked(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://postgres@127.0.0.1:5432/megaactors",
        "http://127.0.0.1:8080/charge/a@b",
        "run 'exp1' failed: agents must be an integer >= 1, got 0",
        "user@example.com wrote 3 rows",
    ],
)
def test_text_without_secrets_is_unchanged(text: str) -> None:
    assert redact(text) == text


def megaactors(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=120)


def _with_password(dsn: str) -> str:
    return dsn.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")


def test_no_command_shows_a_database_password(postgres_dsn: str) -> None:
    dsn = _with_password(postgres_dsn)  # the test server trusts local connections and ignores the password
    assert SECRET in dsn
    first = megaactors("run", "-n", "20", "--checkpoint", dsn, "--run-id", "r1", "--json")
    assert first.returncode == 0, first.stderr
    outputs = [
        megaactors("resume", "--checkpoint", dsn, "--run-id", "nope"),
        megaactors("run", "-n", "20", "--checkpoint", dsn, "--run-id", "r1"),
        megaactors("history", "--db", dsn, "--run-id", "nope"),
        megaactors("fork", "--db", dsn, "--run-id", "nope", "--step", "0", "--new-run-id", "x"),
        megaactors("runs", "--db", dsn, "--status", "queued"),
        megaactors("runs", "--db", f"postgresql://postgres:{SECRET}@127.0.0.1:1/megaactors"),
    ]
    for out in outputs:
        assert SECRET not in out.stdout + out.stderr, out.stderr
    assert "no run 'nope'" in outputs[0].stderr and f"postgres:{MASK}@" in outputs[0].stderr
    assert "already exists" in outputs[1].stderr
    assert f"megaactors resume --checkpoint postgresql://postgres:{MASK}@" in outputs[1].stderr
    assert outputs[5].returncode == 2 and "cannot connect to PostgreSQL" in outputs[5].stderr
    with open_store(dsn) as store, pytest.raises(UnknownRunError) as info:  # the library's own errors too
        store.get_run("nope")
    assert SECRET not in str(info.value) and f"postgres:{MASK}@" in str(info.value)


def test_billing_urls_are_masked_in_tables_json_and_errors(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    url = f"http://alice:{SECRET}@127.0.0.1:1/"
    out = megaactors("submit", "--db", db, "--agents", "10", "--bill", url, "--run-id", "paid", "--max-attempts", "1")
    assert out.returncode == 0, out.stderr
    worker = megaactors("worker", "--db", db, "--exit-when-idle", "--poll", "0.05")
    listed = megaactors("runs", "--db", db, "--json")
    table = megaactors("runs", "--db", db)
    for shown in (worker, listed, table):
        assert SECRET not in shown.stdout + shown.stderr
    (run,) = json.loads(listed.stdout)
    assert run["status"] == "dead" and run["options"]["billing_url"] == f"http://alice:{MASK}@127.0.0.1:1/"
    assert f"alice:{MASK}@" in run["error"]
