"""A human in the loop, beyond stopping: ``resume --send AGENT=TEXT`` puts a human's
message into an agent's in-queue (read, counted, replayed exactly once after a crash,
and the same as the message sent by code at that point), and a behaviour's
``Interrupt`` effect stops a checkpointed run that ``resume`` continues past it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from megaactors import __version__
from megaactors.cli import main
from megaactors.cli.run import with_status
from megaactors.core.messages import HUMAN, HUMAN_SENDER, INTRA, Message, MessageError, decode, encode
from megaactors.durable import DurableOptions, FencingError, open_store, run_durable
from megaactors.durable.interrupts import HumanEdits
from megaactors.experiments.spec import RunSpec

RUN = ["--topology", "two-tier", "--agents", "120", "--group-size", "10", "--rounds", "3", "--seed", "2"]
SPEC = RunSpec(topology="two-tier", agents=120, group_size=10, rounds=3, seed=2)
SPENDER = ["--topology", "flat", "--agents", "6", "--seed", "1", "--behaviour", "sample_behaviours:Spender"]


def call(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def plain(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary as JSON gives it, without wall time or the interrupts a run without checkpoints records."""
    return {k: v for k, v in json.loads(json.dumps(with_status(summary))).items() if k not in ("wall_s", "interrupts")}


def interrupted_at_4(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = call(capsys, "run", *RUN, "--checkpoint", str(db), "--run-id", "h", "--interrupt-at", "4",
                          "--step-seconds", "0.5")  # fmt: skip
    assert code == 0 and "interrupted" in out, err


def test_a_human_message_is_encoded_like_any_other() -> None:
    msg = Message.of(7, HUMAN_SENDER, 3, HUMAN, HUMAN, "please hurry", None, 4.5)
    assert decode(encode(msg)) == msg and msg.size == len(encode(msg))
    with pytest.raises(MessageError, match="'sender' must be non-negative"):
        decode(encode(Message.of(7, HUMAN_SENDER, 3, INTRA, "chat", "x")))  # only a human's message has no sender


def test_a_message_sent_on_resume_is_read_counted_and_the_same_as_one_sent_by_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, twin = tmp_path / "h.db", tmp_path / "twin.db"
    interrupted_at_4(capsys, db)
    shutil.copy(db, twin)
    code, out, err = call(capsys, "resume", "--checkpoint", str(db), "--run-id", "h", "--json", "--who", "ada",
                          "--send", "3=please hurry", "--send", "7=and you")  # fmt: skip
    assert code == 0, err
    resumed = plain(json.loads(out))
    # the same messages sent by code at the same point of a run without checkpoints
    rt = SPEC.build()
    rt.start()
    rt.advance(4.0)
    sent = [rt.send_human(3, "please hurry"), rt.send_human(7, "and you")]
    by_code = rt.run()
    by_code.params = SPEC.result_params()
    assert resumed == plain(by_code.summary())
    untouched = SPEC.execute()
    assert resumed["messages"] == untouched.ledger.messages + 2
    assert resumed["messages_by_channel"] == {**untouched.ledger.messages_by_channel, HUMAN: 2}
    sizes = [len(encode(p.message(p.recipients[0]))) for p in sent]
    assert [p.first_id for p in sent] == [sent[0].first_id, sent[0].first_id + 1] and sent[0].sent_at < 4
    assert resumed["bytes_by_channel"][HUMAN] == sum(sizes)
    assert resumed["bytes"] == untouched.ledger.bytes + sum(sizes)
    received = by_code.ledger.per_agent["received"]
    assert received[3] == untouched.ledger.per_agent["received"][3] + 1  # agent 3 took it in a batch
    assert by_code.ledger.llm_calls >= untouched.ledger.llm_calls
    assert by_code.states == untouched.states  # the chat round reads it and counts it in no round
    code, out, _ = call(capsys, "history", "--db", str(db), "--run-id", "h", "--json")
    rows = [r for r in json.loads(out) if r["meta"].get("edit")]
    assert len(rows) == 1 and rows[0]["meta"]["edit"]["who"] == "ada" and rows[0]["meta"]["edit"]["when"] > 0
    assert rows[0]["meta"]["edit"]["send"] == [[3, "please hurry"], [7, "and you"]]
    assert "ada" in rows[0]["edit"] and "sent 2 message(s) to agent(s) 3,7" in rows[0]["edit"]
    # on the twin: the same edits, the run lost a few super-steps later, resumed without edits: sent once
    with open_store(twin) as store:
        options = DurableOptions.from_dict(store.get_run("h").options)
        lease = store.claim("h", "w1", __version__, 30)
        polls = iter(range(10**6))
        edits = HumanEdits("ada", sends=[(3, "please hurry"), (7, "and you")])
        with pytest.raises(FencingError):
            run_durable(store, lease, SPEC, options, edits=edits, lost=lambda: next(polls) > 3)
        assert store.end_lease("h", "w1", lease.fence)
        again = run_durable(store, store.claim("h", "w2", __version__, 30), SPEC, options)
    assert plain(again.summary()) == resumed


def test_the_receiving_agent_takes_the_text_and_edits_combine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "s.db")
    code, out, err = call(capsys, "run", *SPENDER, "--behaviour-param", "budget=1", "--checkpoint", db, "--run-id",
                          "s", "--interrupt-at", "3")  # fmt: skip
    assert code == 0 and "interrupted" in out, err
    state = json.loads(call(capsys, "inspect", "--db", db, "--run-id", "s", "--json")[1])["agents"][4]["state"]
    code, out, err = call(capsys, "resume", "--checkpoint", db, "--run-id", "s", "--json", "--who", "bo",
                          "--set-state", f"4={json.dumps({**state, 'notes': 40})}", "--send", "5=stop spending",
                          "--send", "4=you too")  # fmt: skip
    assert code == 0, err
    agents = json.loads(call(capsys, "inspect", "--db", db, "--run-id", "s", "--json")[1])["agents"]
    assert (
        agents[5]["state"]["heard"] == ["stop spending"] and agents[5]["state"]["notes"] == 6
    )  # its neighbour's six notes, and the text apart
    assert agents[4]["state"]["heard"] == ["you too"] and agents[4]["state"]["notes"] == 46
    assert [a["state"]["heard"] for a in agents[:4]] == [[]] * 4
    edit = [r for r in json.loads(call(capsys, "history", "--db", db, "--run-id", "s", "--json")[1]) if r["edit"]]
    assert len(edit) == 1 and edit[0]["edit"].startswith("bo ")
    assert "set state of agent(s) 4; sent 2 message(s) to agent(s) 5,4" in edit[0]["edit"]


def test_a_bad_send_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "h.db"
    interrupted_at_4(capsys, db)
    with open_store(db, readonly=True) as store:
        before = [c.step for c in store.list("h")]
    for bad, words in (("300=hi", "--send: there is no agent 300 (the run has 120)"),
                       ("3=", "--send: agent 3: a message needs some text"),
                       ("3=   ", "a message needs some text"),
                       ("x=hi", "expected AGENT=TEXT with AGENT an agent number"),
                       ("hi", "expected AGENT=TEXT"),
                       ("3=\ud800", "not serializable"),
                       ("3=" + "x" * (1 << 20), "exceeds the cap of 1,048,576 bytes")):  # fmt: skip
        code, _, err = call(capsys, "resume", "--checkpoint", str(db), "--run-id", "h", "--send", bad)
        assert code == 2 and words in err and len(err.splitlines()) == 1, (bad, err)
    code, _, err = call(capsys, "resume", "--checkpoint", str(db), "--run-id", "h", "--send", "3=hi",
                        "--set-state", "300=[0]")  # fmt: skip
    assert code == 2 and "no agent 300" in err  # one bad edit refuses them all
    with open_store(db, readonly=True) as store:
        assert store.get_run("h").status == "interrupted"
        assert [c.step for c in store.list("h")] == before


def test_an_interrupt_effect_stops_the_run_each_time_once_and_resume_ends_as_if_never_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "s.db")
    code, out, err = call(capsys, "run", *SPENDER, "--checkpoint", db, "--run-id", "s", "--json")
    assert code == 0, err
    stops = [json.loads(out)]
    while stops[-1]["status"] == "interrupted":
        stop = stops[-1]
        assert stop["trigger"] == "effect" and stop["reason"].endswith("(Interrupt effect)")
        shown = json.loads(call(capsys, "inspect", "--db", db, "--run-id", "s", "--json")[1])
        assert (shown["status"], shown["step"], shown["reason"]) == ("interrupted", stop["step"], stop["reason"])
        agent = int(stop["reason"].split("agent ")[1].split(":")[0])
        assert shown["agents"][agent]["state"]["asked"] and shown["agents"][agent]["cost_usd"] > 0.0005
        code, out, err = call(capsys, "resume", "--checkpoint", db, "--run-id", "s", "--json")
        assert code == 0, err
        stops.append(json.loads(out))
        assert stops[-1].get("step", 10**9) > stop["step"]  # never the same stop twice
    with open_store(db, readonly=True) as store:
        reference = RunSpec.from_dict(store.get_run("s").params).execute()
    asked = sorted(agent for agent, _ in reference.interrupts)
    assert asked == list(range(6)) and 2 <= len(stops) - 1 <= 6  # every agent asked; some in one super-step
    assert plain(stops[-1]) == plain(reference.summary())


def test_megaagent_reads_a_human_message_as_a_note_and_finishes() -> None:
    spec = RunSpec(topology="two-tier", agents=40, group_size=6, behaviour="megaagent", seed=1)
    untouched = spec.execute()
    rt = spec.build()
    rt.start()
    rt.advance(30.0)
    for agent in range(0, 40, 3):
        rt.send_human(agent, "status, please")
    result = rt.run()
    assert result.status == "ok" and result.ledger.messages_by_channel[HUMAN] == 14
    assert result.ledger.messages == untouched.ledger.messages + 14
    assert result.ledger.llm_calls > untouched.ledger.llm_calls  # read, each with a call of its own or in a batch


def test_a_run_without_checkpoints_reports_the_interrupts_and_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = call(capsys, "run", *SPENDER, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["status"] == "ok" and sorted(agent for agent, _ in summary["interrupts"]) == list(range(6))
    assert all("over the budget of $0.0005" in reason for _, reason in summary["interrupts"])
    code, out, err = call(capsys, "run", *SPENDER)
    assert code == 0 and "interrupts    agent " in out and "(and 5 more); not stopped" in out, err


def test_a_worker_stops_a_run_whose_behaviour_asks_and_leaves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from megaactors.durable import RunQueue
    from megaactors.durable.worker import work

    db = str(tmp_path / "q.db")
    code, _, err = call(capsys, "submit", "--db", db, *SPENDER, "--run-id", "q")
    assert code == 0, err
    lines: list[str] = []
    with open_store(db) as store:
        assert work(store, exit_when_idle=True, poll_s=0.01, log=lines.append) == 0
        run = store.get_run("q")
        assert run.status == "interrupted" and run.error.endswith("(Interrupt effect)")
        assert RunQueue(store).claim_next("w") is None  # only a resume continues it
    assert any("Interrupt effect" in line for line in lines), lines
