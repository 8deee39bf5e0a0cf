"""``run --trace-out``: a Trace Event file (Perfetto, chrome://tracing) with one track
per agent grouped by group, state slices, LLM calls inside Processing, and one flow
arrow per message; sampled for large runs; deterministic; the run's results unchanged."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from megaactors.cli import main


def traced(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    out = tmp_path / "trace.json"
    assert main(["run", *args, "--trace-out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    return summary, json.loads(out.read_text())


def test_every_message_call_and_state_is_on_its_agent_s_track(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("--topology", "two-tier", "--agents", "60", "--group-size", "10", "--rounds", "2", "--seed", "3")
    summary, doc = traced(tmp_path, capsys, *args)
    assert main(["run", *args, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in summary.items() if k != "wall_s"} == {k: v for k, v in plain.items() if k != "wall_s"}
    events = doc["traceEvents"]
    threads = {e["tid"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(threads) == list(range(60))
    assert len({pid for pid in threads.values()}) == 6  # one process per group
    starts = [e for e in events if e["ph"] == "s"]
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == len(ends) == summary["messages"]
    assert all(threads[e["tid"]] == e["pid"] for e in events if "tid" in e)
    llm = [e for e in events if e.get("cat") == "llm"]
    assert len(llm) == summary["llm_calls"]
    assert sum(e["args"]["cost_usd"] for e in llm) == pytest.approx(summary["cost_usd"])
    processing: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e.get("name") == "Processing":
            processing[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for call in llm:  # every LLM call lies inside one of its agent's Processing slices
        assert any(a <= call["ts"] and call["ts"] + call["dur"] <= b + 1e-6 for a, b in processing[call["tid"]]), call
    assert doc["otherData"]["agents_left_out"] == 0 and doc["otherData"]["messages_left_out"] == 0
    _, again = traced(tmp_path, capsys, *args)
    assert again == doc  # the same seed, the same file


def test_large_runs_are_sampled_by_whole_groups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary, doc = traced(tmp_path, capsys, "--agents", "2000", "--group-size", "25", "--trace-agents", "100")
    threads = [e for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert len(threads) == 100 and doc["otherData"]["agents_left_out"] == 1900
    flows = doc["otherData"]["flows"]
    assert flows + doc["otherData"]["messages_left_out"] == summary["messages"]
    assert flows == 4 * 25 * 24 + 4 * 3  # four whole groups' chat, and their admins' on the admin channel


def test_bad_trace_settings_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args, words in (
        (["--runtime", "asyncio", "--trace-out", str(tmp_path / "t.json")], "got --runtime asyncio"),
        (["--trace-out", str(tmp_path / "missing" / "t.json")], "no directory"),
    ):
        assert main(["run", "--agents", "20", *args]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--agents", "20", "--trace-out", str(tmp_path / "t.json"), "--trace-agents", "0"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "trace" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "t.json").exists()
