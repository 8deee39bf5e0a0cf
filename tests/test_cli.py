"""The command line, run as a user runs it: a real subprocess."""

import json
import subprocess
import sys

import pytest

KEYS = {
    "agents",
    "groups",
    "messages",
    "messages_by_channel",
    "bytes",
    "llm_calls",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "virtual_time_s",
    "wall_s",
    "peak_queue_depth",
}


def megaactors(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=120)


def test_run_json_has_every_figure_and_is_deterministic() -> None:
    args = (
        "run",
        "--topology",
        "two-tier",
        "--agents",
        "500",
        "--group-size",
        "20",
        "--rounds",
        "2",
        "--seed",
        "4",
        "--runtime",
        "sim",
        "--json",
    )
    first, second = megaactors(*args), megaactors(*args)
    assert first.returncode == 0, first.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert set(a) >= KEYS
    assert a["agents"] == 500 and a["groups"] == 25
    assert a["messages"] == 2 * (25 * 20 * 19 + 25 * 24)
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b


def test_run_prints_a_readable_summary() -> None:
    out = megaactors("run", "--topology", "star", "--agents", "11")
    assert out.returncode == 0
    assert "star organisation: 11 agents" in out.stdout and "messages      20" in out.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--agents", "0"], "agents must be an integer >= 1"),
        (["--agents", "-5"], "agents must be an integer >= 1"),
        (["--group-size", "0"], "group_size must be an integer >= 1"),
        (["--topology", "ring"], "unknown topology 'ring'"),
        (["--topology", "hierarchy", "--fanout", "1"], "fanout must be an integer >= 2"),
        (["--runtime", "quantum"], "unknown runtime 'quantum'"),
        (["--model", "gpt-9"], "unknown model 'gpt-9'"),
        (["--agents", "many"], "agents: 'many' is not an integer"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_code_2(args: list[str], needle: str) -> None:
    out = megaactors("run", *args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


def test_no_command_is_an_error() -> None:
    out = megaactors()
    assert out.returncode == 2 and "error" in out.stderr
