"""The command line as an adversarial user meets it: every bad value, unreachable
service, unwritable place or closed pipe is one line and exit code 2 (or a quiet
end), never a traceback or a hang, and nothing is left half-written or running."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from megaactors.cli import main
from megaactors.durable import open_store
from megaactors.runtime import RUNTIMES, SimRuntime


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the command line in this process: (exit code, stdout, stderr)."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse refusals
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code: int, err: str, *needles: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("megaactors"), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def megaactors(*args: str, user: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    prefix = ["runuser", "-u", user, "--"] if user else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=timeout, cwd="/"
    )


def unprivileged() -> str | None:
    """A user for whom chmod a-w means read-only (root ignores it): ``nobody`` when root."""
    return "nobody" if os.geteuid() == 0 else None


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["run", "--agents", "100000000000"], ["agents must be an integer >= 1 and <= 1e9, got 1e11"]),
        (["run", "--rounds", "1e30"], ["rounds must be an integer >= 0 and <= 1e6"]),
        (["run", "--message-bytes", "1e30"], ["message_bytes must be an integer >= 0 and <= 10048"]),
        (["run", "--output-tokens", "1e30"], ["output_tokens must be"]),
        (["run", "--latency-median-s", "inf"], ["latency_median_s must be a finite number"]),
        (["run", "--latency-sigma", "inf"], ["latency_sigma must be a finite number"]),
        (["run", "--per-output-token-s", "nan"], ["per_output_token_s must be a finite number"]),
        (["run", "--time-scale", "inf"], ["time_scale must be a finite number > 0"]),
        (["run", "--checkpoint", "x.db", "--run-id", "a", "--lease", "inf"], ["lease must be a finite number"]),
        (["run", "--checkpoint", "x.db", "--run-id", "a", "--step-seconds", "nan"], ["step_seconds must be"]),
        (["run", "--checkpoint", "x.db", "--run-id", ""], ["a run id is 1 to 200 printable characters"]),
        (["submit", "--db", "x.db", "--agents", "1e30"], ["agents must be an integer"]),
        (["submit", "--db", "x.db", "--latency-median-s", "inf"], ["latency_median_s must be a finite number"]),
        (["submit", "--db", "x.db", "--grid", "latency_median_s=1,inf"], ["latency_median_s must be a finite number"]),
        (["submit", "--db", "x.db", "--max-attempts", "1e30"], ["max_attempts must be an integer >= 1 and <= 1000"]),
        (["submit", "--db", "x.db", "--grid", "runtime=asyncio,pykka"], ["queued runs use the sim runtime"]),
        (["submit", "--db", "x.db", "--grid", "seed=" + ",".join(map(str, range(400))), "--grid",
          "rounds=" + ",".join(map(str, range(300)))], ["the grid makes 120,000 runs; at most 100,000"]),
        (["worker", "--db", "x.db", "--poll", "nan"], ["poll must be a finite number > 0"]),
        (["worker", "--db", "x.db", "--lease", "inf"], ["lease must be a finite number"]),
        (["worker", "--db", "x.db", "--jobs", "1e9"], ["jobs must be an integer >= 1 and <= 1024"]),
        (["resume", "--checkpoint", "x.db", "--run-id", "a", "--wait", "inf"], ["wait must be a finite number"]),
        (["fork", "--db", "x.db", "--run-id", "a", "--step", "1e30", "--new-run-id", "b"], ["step must be an integer"]),
        (["fork", "--db", "x.db", "--run-id", "a", "--step", "0", "--new-run-id", ""], ["a run id is 1 to 200"]),
        (["fork", "--db", "x.db", "--run-id", "a", "--step", "0", "--new-run-id", "b", "--set", "seed=1,2"],
         ["--set seed: one value, got 2"]),
        (["fork", "--db", "x.db", "--run-id", "a", "--step", "0", "--new-run-id", "b", "--set", "agents=5"],
         ["a fork keeps"]),
        (["sweep", "--out", "o", "--latency-median-s", "inf"], ["latency_median_s must be a finite number"]),
        (["sweep", "--out", "o", "--max-messages", "inf"], ["max_messages: 'inf' is not an integer"]),
        (["sweep", "--out", "o", "--max-agents", "0"], ["max_agents must be an integer >= 1"]),
        (["bench", "async-vs-threads", "--calls", "0"], ["calls must be an integer >= 1"]),
    ],
)  # fmt: skip
def test_bad_values_are_one_line_and_exit_code_2_before_anything_is_written(
    args: list[str], needles: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, *args)
    one_line(code, err, *needles)
    assert out == "" and list(tmp_path.iterdir()) == []


def test_runs_over_the_budget_are_refused_with_the_estimate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    code, _, err = cli(capsys, "run", "--topology", "flat", "--agents", "200000")
    one_line(code, err, "run refused: an estimated 39,999,800,000 messages exceed the budget of 1,000,000,000",
             "(--max-messages)", "estimate for flat N=200,000")  # fmt: skip
    code, _, err = cli(capsys, "run", "--topology", "flat", "--agents", "200000", "--max-messages", "1e12")
    one_line(code, err, "of memory exceeds the", "this machine can give a run", "640.4 GB of memory")
    code, _, err = cli(capsys, "run", "--agents", "5000", "--max-agents", "1000")
    one_line(code, err, "5,000 agents exceed the budget of 1,000 (--max-agents)")
    code, _, err = cli(capsys, "submit", "--db", db, "--agents", "100", "--grid", "rounds=1,1000000", "--grid",
                       "topology=star,flat")  # fmt: skip
    one_line(code, err, "run refused", "9,900,000,000 messages", "flat N=100, 1,000,000 round(s)")
    assert not Path(db).exists()  # nothing queued
    code, out, err = cli(capsys, "run", "--topology", "flat", "--agents", "200", "--max-messages", "39800", "--json")
    assert code == 0 and json.loads(out)["messages"] == 39800


def test_an_unexpected_error_is_one_line_exit_1_and_a_traceback_only_with_debug(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Exploding(SimRuntime):
        def run(self):
            raise KeyError("lost key")

    monkeypatch.setitem(RUNTIMES, "exploding", Exploding)
    code, out, err = cli(capsys, "run", "--runtime", "exploding", "-n", "5")
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [
        "megaactors: internal error: KeyError: 'lost key'; please report it (--debug shows the traceback)"
    ]
    code, _, err = cli(capsys, "--debug", "run", "--runtime", "exploding", "-n", "5")
    assert code == 1 and "Traceback (most recent call last)" in err and "in run" in err
    assert err.strip().splitlines()[-1] == "megaactors: internal error: KeyError: 'lost key'; please report it"
    code, _, err = cli(capsys, "run", "--runtime", "exploding", "-n", "5", "--debug")
    assert code == 1 and "Traceback" in err


def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    db = tmp_path / "long.db"
    made = megaactors("run", "-n", "200", "--rounds", "10", "--step-seconds", "0.02", "--checkpoint", str(db),
                      "--run-id", "r", "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    piped = subprocess.run(
        f"{sys.executable} -m megaactors history --db {db} --run-id r | head -1; echo status=${{PIPESTATUS[0]}}",
        shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert piped.stdout.splitlines()[0].split()[:3] == ["step", "parent", "kind"]
    assert piped.stdout.splitlines()[-1] == "status=141"
    assert piped.stderr == ""


def test_an_unreachable_billing_service_fails_the_run_back_to_the_queue(tmp_path: Path) -> None:
    db = tmp_path / "bill.db"
    out = megaactors("run", "-n", "10", "--checkpoint", str(db), "--run-id", "paid", "--bill", "http://127.0.0.1:1/")
    line = one_line(out.returncode, out.stderr, "run 'paid' failed and is queued again", "BillingError")
    assert "Connection refused" in line
    with open_store(db, readonly=True) as store:
        run = store.get_run("paid")
    assert run.status == "queued" and not run.held and "BillingError" in run.error


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_special_files_are_refused_without_blocking(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "special"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    for args in (("runs", "--db", str(path)), ("plot", str(path)), ("history", "--db", str(path), "--run-id", "r")):
        out = megaactors(*args, timeout=60)
        one_line(out.returncode, out.stderr, str(path), "not a regular file")


def test_read_only_places() -> None:
    """A store on read-only media is read; nothing can be created where nothing may be written."""
    tmp_path = Path(tempfile.mkdtemp(prefix="megaactors-ro-"))  # a place another user can reach
    made = megaactors("run", "-n", "20", "--checkpoint", str(tmp_path / "ro" / "runs.db"), "--run-id", "r1")
    assert made.returncode == 0, made.stderr
    os.chmod(tmp_path, 0o755)
    (tmp_path / "ro").chmod(0o555)
    (tmp_path / "ro" / "runs.db").chmod(0o444)
    try:
        user = unprivileged()
        listed = megaactors("runs", "--db", str(tmp_path / "ro" / "runs.db"), "--json", user=user)
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)[0]["status"] == "done"
        history = megaactors("history", "--db", str(tmp_path / "ro" / "runs.db"), "--run-id", "r1", user=user)
        assert history.returncode == 0 and "start" in history.stdout
        out = megaactors("run", "-n", "10", "--checkpoint", str(tmp_path / "ro" / "new.db"), "--run-id", "a", user=user)
        one_line(out.returncode, out.stderr, "new.db: cannot create it for writing", "is not writable")
        db = str(tmp_path / "ro" / "runs.db")
        out = megaactors("run", "-n", "10", "--checkpoint", db, "--run-id", "b", user=user)
        one_line(out.returncode, out.stderr, "runs.db: cannot open it for writing")
        out = megaactors("sweep", "--agents", "5", "--out", str(tmp_path / "ro" / "sweep"), "-q", user=user)
        one_line(out.returncode, out.stderr, "cannot use", "as the output directory", "Permission denied")
        assert sorted(p.name for p in (tmp_path / "ro").iterdir()) == ["runs.db"]
    finally:
        (tmp_path / "ro").chmod(0o755)
        shutil.rmtree(tmp_path)


def test_fork_says_what_became_of_the_new_run_and_can_run_it(tmp_path: Path) -> None:
    db = str(tmp_path / "f.db")
    assert megaactors("run", "-n", "30", "--checkpoint", db, "--run-id", "r1").returncode == 0
    queued = megaactors("fork", "--db", db, "--run-id", "r1", "--step", "2", "--new-run-id", "later")
    assert queued.returncode == 0 and queued.stdout == "later\n"
    assert "is queued from super-step 2 of 'r1'" in queued.stderr and "--run" in queued.stderr
    ran = megaactors("fork", "--db", db, "--run-id", "r1", "--step", "2", "--new-run-id", "now", "--run", "--json",
                     "--set", "latency_sigma=0.1")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["agents"] == 30
    runs = {r["run"]: r for r in json.loads(megaactors("runs", "--db", db, "--json").stdout)}
    assert runs["later"]["status"] == "queued" and runs["now"]["status"] == "done"
    assert runs["now"]["params"]["latency_sigma"] == 0.1


def test_runs_shows_status_and_headline_results(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    assert megaactors("run", "-n", "30", "--checkpoint", db, "--run-id", "r1").returncode == 0
    assert megaactors("submit", "--db", db, "--topology", "star", "-n", "12", "--run-id", "q1").returncode == 0
    header, *rows = megaactors("runs", "--db", db).stdout.splitlines()
    assert header.split()[:9] == ["run", "status", "topology", "agents", "rounds", "steps", "messages", "cost_usd",
                                  "virtual_time_s"]  # fmt: skip
    done = rows[0].split()
    assert done[:5] == ["r1", "done", "two-tier", "30", "1"] and done[6] == "276"
    assert rows[1].split()[:4] == ["q1", "queued", "star", "12"]


def test_the_old_flag_spelling_still_works_with_a_deprecation_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "run", "-n", "10", "--latency-median", "3", "--json")
    assert code == 0 and json.loads(out)["agents"] == 10
    assert err.strip() == "megaactors: warning: --latency-median is deprecated; use --latency-median-s"
    code, out, _ = cli(capsys, "run", "-n", "10", "--latency-median-s", "3", "--json")
    assert json.loads(out)["virtual_time_s"] > 0


def test_run_accepts_the_optimal_group_size(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "run", "-n", "1000", "-g", "optimal", "--json")
    assert code == 0 and json.loads(out)["groups"] == 77  # G = 13: 76 full groups and one of 12
