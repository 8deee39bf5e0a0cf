"""Workers' Prometheus metrics, scraped over HTTP on 127.0.0.1 during a real worker
run; JSON log lines; a metrics port in use is one line and exit code 2."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from megaactors import RunSpec
from megaactors.durable import RunQueue, open_store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_worker_s_metrics_are_scraped_while_it_runs(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    # runs long enough (seconds) that the worker renews its 0.9 s lease during each
    specs = [RunSpec(topology="two-tier", agents=4000, group_size=10, rounds=2, seed=s) for s in (1, 2)]
    with open_store(db, create=True) as store:
        queue = RunQueue(store)
        for s in specs:
            queue.submit(s, {"step_s": 0.5})
    port = free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "megaactors", "worker", "--db", db, "--poll", "0.05", "--lease", "0.9",
         "--metrics-port", str(port), "--log-format", "json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        seen: list[dict] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                m = scrape(port)
            except OSError:  # not listening yet
                time.sleep(0.05)
                continue
            seen.append(m)
            if m.get(("megaactors_runs_finished_total", ()), 0) == 2:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the worker never finished both runs")
        assert any(s.get(("megaactors_runs", (("status", "running"),))) == 1 for s in seen)  # scraped mid-run
    finally:
        worker.send_signal(signal.SIGTERM)
        _, log = worker.communicate(timeout=30)
    assert m[("megaactors_runs_claimed_total", ())] == 2
    assert m[("megaactors_runs", (("status", "done"),))] == 2
    assert m[("megaactors_runs", (("status", "queued"),))] == 0
    assert m[("megaactors_checkpoint_write_seconds_count", ())] >= 4
    assert m[("megaactors_checkpoint_bytes_total", ())] > 0
    assert m[("megaactors_lease_renewals_total", ())] >= 1
    with open_store(db, readonly=True) as store:
        results = [r.result for r in store.list_runs()]
    assert m[("megaactors_llm_calls_total", (("stage", "chat"),))] == sum(r["llm_calls"] for r in results)
    assert m[("megaactors_llm_dollars_total", (("stage", "chat"),))] == pytest.approx(
        sum(r["cost_usd"] for r in results)
    )
    assert m[("megaactors_llm_tokens_total", (("direction", "out"), ("stage", "chat")))] == sum(
        r["tokens_out"] for r in results
    )
    records = [json.loads(line) for line in log.splitlines() if line.strip()]
    assert records and all({"ts", "pid", "message"} <= set(r) for r in records)
    assert any("claimed run" in r["message"] for r in records)


def test_a_metrics_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    with open_store(db, create=True):
        pass
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for jobs in ("1", "2"):
            out = subprocess.run(
                [sys.executable, "-m", "megaactors", "worker", "--db", db, "--exit-when-idle", "--jobs", jobs,
                 "--metrics-port", str(port)],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert out.returncode == 2, out.stderr
            assert out.stderr.strip() == f"megaactors: error: metrics port {port} is in use on 127.0.0.1"
