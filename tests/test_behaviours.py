"""Behaviours by name or import path: the registry, its refusals, behaviour parameters
through every entry point, prices, and a user's behaviour in a temporary module run
through run, sweep, submit + worker and run --checkpoint + SIGKILL + resume."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from megaactors import ChatRound, Organisation, RunSpec
from megaactors.behaviours import registry
from megaactors.cli import main
from megaactors.core.llm import PRICES
from megaactors.durable import open_store
from megaactors.errors import BehaviourLoadError, ParameterError, UncheckpointableError
from megaactors.experiments.sweep import run_sweep

RELAY = '''
"""A token relayed hop by hop around the organisation, with a tool call per hop."""
from megaactors import Effects, LLMRequest, Send, ToolCall


class Relay:
    """Agent 0 starts a token; each agent passes it on once per hop, after thinking and writing."""

    def __init__(self, hops: int = 3, pause_s: float = 0.5):
        self.hops, self.pause_s = hops, pause_s

    def init(self, agent, org):
        return {"level": -1, "heard": 0, "tools": 0, "next": -1}

    def on_start(self, ctx, state):
        if ctx.agent != 0:
            return None
        state["level"] = 0
        return Effects(sends=[Send(p, ch, "relay", 0) for ch, p in ctx.org.contacts(0)])

    def on_batch(self, ctx, state, batch):
        state["heard"] += len(batch)
        hop = max(m.payload for m in batch) + 1
        if hop > state["level"] and hop <= self.hops:
            state["next"] = hop
        return Effects(llm=LLMRequest(stage="think"))

    def on_reply(self, ctx, state, reply):
        return Effects(tool=ToolCall("write", self.pause_s, stage="act"))

    def on_tool(self, ctx, state, result):
        state["tools"] += 1
        hop, state["next"] = state["next"], -1
        if hop < 0:
            return Effects()
        state["level"] = hop
        return Effects(sends=[Send(p, ch, "relay", hop) for ch, p in ctx.org.contacts(ctx.agent)])
'''

SETS = """
from megaactors import Effects, LLMRequest

class Sets:
    def __init__(self, late: bool = False):
        self.late = late
    def init(self, agent, org):
        return {"seen": [] if self.late else {agent}}
    def on_start(self, ctx, state):
        if self.late:
            state["seen"] = {ctx.agent}
        return Effects(llm=LLMRequest())
    def on_batch(self, ctx, state, batch):
        return Effects()
    def on_reply(self, ctx, state, reply):
        return Effects()

class NotOne:
    def init(self, agent, org):
        return None

class Crashes(Sets):
    def on_batch(self, ctx, state, batch):
        raise ValueError("my own bug")
    def on_start(self, ctx, state):
        from megaactors import Send
        return Effects(sends=[Send(ctx.org.contacts(ctx.agent)[0][1], "intra", "hi", 1)])
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the user's behaviours, on this process's path and on PYTHONPATH."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "relay_agents.py").write_text(RELAY)
    (folder / "set_agents.py").write_text(SETS)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    return folder


def megaactors(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def one_line(out: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


# ---------------------------------------------------------------------- the registry


def test_installed_behaviours_come_from_entry_points_and_the_built_ins() -> None:
    names = registry.installed()
    assert names["chat-round"] == "megaactors.behaviours.chat_round:ChatRound"
    info = registry.resolve("chat-round")
    assert info.cls is ChatRound and info.parameter_names == ["rounds", "message_bytes", "output_tokens"]
    assert info.version == ChatRound.version == "1"  # declared: megaactors' upgrades keep it
    out = megaactors("behaviours", "--json")
    assert out.returncode == 0, out.stderr
    listed = {d["name"]: d for d in json.loads(out.stdout)}
    assert listed["chat-round"]["parameters"]["rounds"] == {"default": 1, "run_parameter": True}
    text = megaactors("behaviours").stdout
    assert "chat-round" in text and "rounds=1*" in text


def test_a_user_behaviour_by_import_path(user_module: Path) -> None:
    info = registry.resolve("relay_agents:Relay")
    assert info.parameter_names == ["hops", "pause_s"] and info.version.startswith("sha256:")
    spec = RunSpec.from_dict({"behaviour": "relay_agents:Relay", "behaviour.hops": 2, "agents": 30, "group_size": 5})
    assert spec.behaviour_params == {"hops": 2} and spec.behaviour_version == info.version
    result = spec.execute()
    assert result.summary()["behaviour"] == "relay_agents:Relay" and result.ledger.tool_calls > 0
    assert all(s["level"] <= 2 for s in result.states)


@pytest.mark.parametrize(
    ("name", "params", "needle"),
    [
        ("no_such_module:Thing", {}, "no module named 'no_such_module'"),
        ("relay_agents:Missing", {}, "module 'relay_agents' has no attribute 'Missing'"),
        ("set_agents:NotOne", {}, "lacks on_start, on_batch, on_reply"),
        ("relay_agents:Relay", {"colour": "red"}, "takes no parameter 'colour'; it accepts: hops, pause_s"),
        ("relay_agents:Relay", {"hops": [1, {2}]}, "not plain JSON data"),
        ("nosuchname", {}, "unknown behaviour 'nosuchname'"),
        ("json:dumps", {}, "is a function, not a class"),
    ],
)
def test_behaviours_that_cannot_be_built_are_refused_with_the_reason(
    user_module: Path, name: str, params: dict[str, Any], needle: str
) -> None:
    with pytest.raises(BehaviourLoadError, match=needle.replace("(", r"\(").replace("{", r"\{")):
        RunSpec.from_dict({"behaviour": name, **{f"behaviour.{k}": v for k, v in params.items()}})


def test_the_command_line_refuses_bad_behaviours_in_one_line_writing_nothing(user_module: Path) -> None:
    db = user_module / "runs.db"
    cases = [
        (["--behaviour", "no_such_module:Thing"], "no module named"),
        (["--behaviour", "set_agents:NotOne"], "lacks on_start, on_batch, on_reply"),
        (["--behaviour", "relay_agents:Relay", "--behaviour-param", "colour=red"], "it accepts: hops, pause_s"),
        (["--behaviour", "relay_agents:Relay", "--behaviour-param", "hops"], "expects KEY=VALUE"),
        (["--behaviour", "set_agents:Sets"], "agent 0's state cannot be checkpointed: state['seen'] is a set"),
        (["--behaviour", "set_agents:Sets", "--behaviour-param", "late=true"], "state['seen'] is a set"),
    ]
    for args, needle in cases:
        for command in (["run", "--checkpoint", str(db), "--run-id", "x"], ["submit", "--db", str(db)]):
            line = one_line(megaactors(*command, "--agents", "12", *args))
            assert needle in line, (command, args, line)
    assert not list(user_module.glob("runs.db*"))
    # without a checkpoint, a set in a state is no problem
    assert megaactors("run", "--behaviour", "set_agents:Sets", "--agents", "12").returncode == 0


def test_a_behaviour_that_raises_ends_the_run_with_one_line_naming_the_agent(user_module: Path) -> None:
    line = one_line(megaactors("run", "--behaviour", "set_agents:Crashes", "--agents", "6"), code=1)
    assert "agent" in line and "'set_agents:Crashes' failed on a batch" in line and "my own bug" in line
    assert "internal error" not in line and "--debug shows the traceback" in line
    debug = megaactors("run", "--behaviour", "set_agents:Crashes", "--agents", "6", "--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_behaviour_values_are_json_where_they_parse(user_module: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--behaviour", "relay_agents:Relay", "--behaviour-param", "hops=2",
                 "--behaviour-param", "pause_s=0.25", "--agents", "20", "--json"])  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["behaviour_params"] == {"hops": 2, "pause_s": 0.25}
    from megaactors.cli.common import parse_assignment

    assert parse_assignment('behaviour.x=1,[2,3],"a,b",text', "--param") == ("behaviour.x", [1, [2, 3], "a,b", "text"])


def test_a_behaviour_parameter_named_like_a_run_parameter_is_that_run_parameter() -> None:
    spec = RunSpec.from_dict({"behaviour.rounds": 3, "agents": 20})
    assert spec.rounds == 3 and spec.behaviour_params == {}
    with pytest.raises(ParameterError, match="message_bytes"):  # and is checked as one
        RunSpec.from_dict({"behaviour.message_bytes": -1})
    assert spec.execute().ledger.messages == 3 * RunSpec.from_dict({"agents": 20}).execute().ledger.messages


def test_a_fork_changes_a_behaviour_parameter_but_keeps_the_behaviour(user_module: Path) -> None:
    db = str(user_module / "f.db")
    base = ("--behaviour", "relay_agents:Relay", "--behaviour-param", "hops=4", "--agents", "60", "--group-size", "6")
    assert megaactors("run", *base, "--checkpoint", db, "--run-id", "a").returncode == 0
    forked = megaactors("fork", "--db", db, "--run-id", "a", "--step", "2", "--new-run-id", "b",
                        "--set", "behaviour.pause_s=2.5", "--run", "--json")  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    summary = json.loads(forked.stdout)
    assert summary["behaviour"] == "relay_agents:Relay" and summary["behaviour_params"] == {"hops": 4, "pause_s": 2.5}
    line = one_line(megaactors("fork", "--db", db, "--run-id", "a", "--step", "2", "--new-run-id", "c",
                               "--set", "behaviour=chat-round"))  # fmt: skip
    assert "a fork keeps" in line and "behaviour" in line


def test_a_changed_behaviour_is_refused_on_resume(user_module: Path) -> None:
    db = user_module / "q.db"
    out = megaactors("submit", "--db", str(db), "--run-id", "r", "--behaviour", "relay_agents:Relay", "--agents", "20")
    assert out.returncode == 0, out.stderr
    with open(user_module / "relay_agents.py", "a") as f:
        f.write("\n# edited after the run was queued\n")
    line = one_line(megaactors("resume", "--checkpoint", str(db), "--run-id", "r"))
    assert "behaviour 'relay_agents:Relay' is version sha256:" in line and "the run was made with version" in line
    worker = megaactors("worker", "--db", str(db), "--exit-when-idle")
    assert worker.returncode == 0, worker.stderr
    with open_store(db, readonly=True) as store:
        run = store.get_run("r")
    assert run.status == "dead" and run.attempts == 1 and "version" in (run.error or "")


def test_a_state_that_becomes_unstorable_mid_run_dead_letters_it_at_once(user_module: Path) -> None:
    from megaactors.durable import DurableOptions, run_durable
    from megaactors.durable.checkpointing import preflight

    spec = RunSpec.from_dict({"behaviour": "set_agents:Sets", "behaviour.late": True, "agents": 6})
    with pytest.raises(UncheckpointableError, match="agent 0's state cannot be checkpointed"):
        preflight(spec)
    with open_store(user_module / "s.db", create=True) as store:
        lease = store.create_run("s", spec.as_dict(), {}, version="t", owner="me", lease_s=60)
        with pytest.raises(UncheckpointableError, match=r"state\['seen'\] is a set"):
            run_durable(store, lease, spec, DurableOptions())


def test_prices_override_the_list_price_and_are_reported() -> None:
    base = RunSpec.from_dict({"agents": 30, "model": "gpt-4o"}).execute().summary()
    assert (base["price_in"], base["price_out"]) == (PRICES["gpt-4o"].input_per_m, PRICES["gpt-4o"].output_per_m)
    cheap = RunSpec.from_dict({"agents": 30, "model": "gpt-4o", "price_in": 1.0, "price_out": 0.0}).execute().summary()
    assert cheap["model"] == "gpt-4o" and (cheap["price_in"], cheap["price_out"]) == (1.0, 0.0)
    assert cheap["cost_usd"] == pytest.approx(cheap["tokens_in"] / 1e6)
    out = megaactors("models", "--json")
    assert {r["model"]: r["price_in"] for r in json.loads(out.stdout)}["gpt-4o"] == PRICES["gpt-4o"].input_per_m
    text = megaactors("run", "--agents", "10", "--price-in", "3", "--price-out", "4").stdout
    assert "gpt-4o-mini at $3.00 in / $4.00 out per M tokens" in text


def test_behaviours_that_need_admins_refuse_a_graph_without_them(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[1] / "examples"  # the module is found in the current directory
    args = ("--behaviour", "task_queue:TaskQueue", "--topology", "random", "--agents", "30", "--degree", "3")
    for command in (("run",), ("run", "--checkpoint", str(tmp_path / "r.db"), "--run-id", "x")):
        assert "task-queue needs admins" in one_line(megaactors(*command, *args, cwd=examples))
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------------- through every path


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    keep = ("messages", "bytes", "llm_calls", "tokens_in", "tokens_out", "cost_usd", "virtual_time_s", "tool_calls")
    return {k: summary[k] for k in keep}


@pytest.mark.slow
def test_a_user_behaviour_runs_identically_through_every_path(user_module: Path, tmp_path: Path) -> None:
    spec = ["--behaviour", "relay_agents:Relay", "--behaviour-param", "hops=6", "--topology", "two-tier",
            "--agents", "800", "--group-size", "10", "--seed", "4"]  # fmt: skip
    direct = megaactors("run", *spec, "--json")
    assert direct.returncode == 0, direct.stderr
    reference = json.loads(direct.stdout)
    reference.pop("wall_s")
    assert reference["behaviour_params"] == {"hops": 6} and reference["tool_calls"] > 800

    # a sweep, in worker processes (the module is found through PYTHONPATH)
    out = tmp_path / "sweep"
    swept = megaactors("sweep", "--behaviour", "relay_agents:Relay", "--param", "behaviour.hops=6,2",
                       "--topology", "two-tier", "--agents", "800", "--group-size", "10", "--seed", "4",
                       "--out", str(out), "--no-plots", "-q", "-j", "2")  # fmt: skip
    assert swept.returncode == 0, swept.stderr
    with open(out / "results.csv") as f:
        rows = {json.loads(r["behaviour_params"])["hops"]: r for r in csv.DictReader(f)}
    row = rows[6]
    assert row["behaviour"] == "relay_agents:Relay" and row["expected_messages"] == ""
    for k, v in _figures(reference).items():
        assert float(row[k]) == pytest.approx(v, rel=1e-12), k
    assert int(rows[2]["messages"]) < int(row["messages"])

    # submitted and run by a worker
    db = tmp_path / "q.db"
    assert megaactors("submit", "--db", str(db), *spec, "--run-id", "w").returncode == 0
    worker = megaactors("worker", "--db", str(db), "--exit-when-idle")
    assert worker.returncode == 0, worker.stderr
    with open_store(db, readonly=True) as store:
        result = store.get_run("w").result
    result.pop("wall_s")
    stored = {k: v for k, v in reference.items() if k not in ("status", "faults", "stalled")}  # run --json's own keys
    assert result == stored

    # checkpointed, killed with SIGKILL mid-run, resumed
    ck = str(tmp_path / "ck.db")
    victim = subprocess.Popen([sys.executable, "-m", "megaactors", "run", *spec, "--checkpoint", ck, "--run-id", "k",
                               "--step-seconds", "0.25", "--lease", "0.5", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    step = None
    while time.monotonic() < deadline and victim.poll() is None:
        time.sleep(0.05)
        try:
            with open_store(ck, readonly=True) as store:
                latest = store.latest("k")
        except Exception:
            continue
        if latest is not None and latest.step >= 3:
            step = latest.step
            break
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    assert step is not None, "the run ended (or never checkpointed) before it could be killed"
    with open_store(ck, readonly=True) as store:
        assert store.get_run("k").status != "done"
    resumed = megaactors("resume", "--checkpoint", ck, "--run-id", "k", "--wait", "5", "--json")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    summary.pop("wall_s")
    assert summary == reference


def test_python_sweeps_take_behaviour_parameters(user_module: Path, tmp_path: Path) -> None:
    df = run_sweep(
        {"behaviour": "relay_agents:Relay", "behaviour.hops": [1, 3], "topology": "scale-free", "agents": [40, 80],
         "degree": 2, "seed": 1},
        tmp_path / "s", workers=0, progress=False,
    )  # fmt: skip
    assert len(df) == 4 and set(df["status"]) == {"ok"}
    hops = [json.loads(p)["hops"] for p in df["behaviour_params"]]  # canonical JSON text in a frame
    assert sorted(hops) == [1, 1, 3, 3]
    wider = {"behaviour": "relay_agents:Relay", "behaviour.hops": [3], "topology": "scale-free",
             "agents": [40, 80, 160], "degree": 2, "seed": 1}  # fmt: skip
    again = run_sweep(wider, tmp_path / "s", workers=0, progress=False)  # extends: runs only N = 160
    with open(tmp_path / "s" / "results.csv") as f:
        assert len(again) == 3 and len(list(csv.DictReader(f))) == 5


def test_a_spec_builds_the_chat_round_from_its_run_parameters() -> None:
    spec = RunSpec(topology="hierarchy", agents=40, fanout=3, rounds=2)
    behaviour = spec.build_behaviour()
    assert isinstance(behaviour, ChatRound) and behaviour.rounds == 2
    assert isinstance(spec.organisation(), Organisation)
