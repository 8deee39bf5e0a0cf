"""Injected LLM faults (``--faults llm=P``): drawn per (agent, call, attempt), they go
through the provider model's retry path (backoff, max retries, a failed reply) and are
counted in ``faults`` and in the ledger's retries."""

from __future__ import annotations

import json
import math

import pytest

from megaactors import ChatRound, Organisation
from megaactors.cli import main
from megaactors.errors import ParameterError
from megaactors.network import FaultSpec, parse_faults
from megaactors.providers.limits import ProviderModel
from megaactors.runtime.conformance import Thinker
from megaactors.runtime.sim import SimRuntime


def run(org, behaviour=None, seed=0, **options):
    return SimRuntime(org, behaviour or ChatRound(2), seed=seed, trace=False, **options).run()


def test_failed_calls_follow_the_binomial_law_without_retries():
    # no retries: every injected fault fails its call, and the chat round asks again
    p, attempts, failed = 0.15, 0, 0
    for seed in range(12):
        r = run(Organisation.two_tier(30, 6), seed=seed, provider=ProviderModel(max_retries=0, seed=seed),
                faults=FaultSpec(llm=p))  # fmt: skip
        s = r.ledger.provider_summary()
        assert s["failed_llm_calls"] == r.faults["llm"] and s["retries"] == 0 and s["llm_errors"] == 0
        assert r.status == "ok" and r.ledger.messages == run(Organisation.two_tier(30, 6), seed=seed).ledger.messages
        attempts += r.ledger.llm_calls + s["failed_llm_calls"]
        failed += s["failed_llm_calls"]
    assert abs(failed - p * attempts) < 4 * math.sqrt(attempts * p * (1 - p))


def test_faults_are_retried_with_backoff_and_counted_in_the_ledger():
    r = run(Organisation.flat(10), Thinker(5), seed=3, faults=FaultSpec(llm=0.3))
    s = r.ledger.provider_summary()
    assert r.faults["llm"] > 0 and s["llm_wait_s"] > 0
    assert s["retries"] == r.faults["llm"] - s["failed_llm_calls"]  # the default max_retries (3) applies
    assert r.ledger.llm_calls == 10 * 5 and sum(st[1] for st in r.states) == s["failed_llm_calls"]
    again = run(Organisation.flat(10), Thinker(5), seed=3, faults=FaultSpec(llm=0.3))
    assert again.summary() | {"wall_s": 0} == r.summary() | {"wall_s": 0}


def test_provider_errors_and_injected_faults_are_independent_draws():
    # one draw per attempt: below the failure rate an error, then the fault's share of the rest
    r, p, attempts, errors, faults = 0.2, 0.25, 0, 0, 0
    for seed in range(6):
        res = run(Organisation.flat(10), Thinker(6), seed=seed, provider=ProviderModel(failure_rate=r, seed=seed),
                  faults=FaultSpec(llm=p))  # fmt: skip
        s = res.ledger.provider_summary()
        attempts += res.ledger.llm_calls + s["failed_llm_calls"] + s["retries"]
        errors += s["llm_errors"]
        faults += res.faults["llm"]
    assert abs(errors - r * attempts) < 4 * math.sqrt(attempts * r * (1 - r))
    q = p * (1 - r)
    assert abs(faults - q * attempts) < 4 * math.sqrt(attempts * q * (1 - q))


def test_a_window_sets_the_llm_fault_for_its_interval(tmp_path):
    spec = tmp_path / "f.toml"
    spec.write_text("[[window]]\nstart = 0\nend = 3\nllm = 1.0\n")
    faults = parse_faults(str(spec))
    assert faults.probability("llm", "", 2.9) == 1.0 and faults.probability("llm", "", 3.0) == 0.0
    assert not faults.on_messages and faults.active
    r = run(Organisation.flat(6), Thinker(3), faults=faults)
    assert r.faults["llm"] >= 6 and r.status == "ok"  # every first attempt (at 0) failed, the run went on
    late = tmp_path / "late.toml"
    late.write_text("[[window]]\nstart = 1000\nend = 2000\nllm = 1.0\n")
    assert run(Organisation.flat(6), Thinker(3), faults=parse_faults(str(late))).faults["llm"] == 0


def test_no_injected_fault_leaves_the_run_as_it_was():
    plain = run(Organisation.two_tier(20, 5), provider=ProviderModel(failure_rate=0.2))
    zero = run(Organisation.two_tier(20, 5), provider=ProviderModel(failure_rate=0.2), faults=FaultSpec(llm=0.0))
    assert zero.summary() | {"wall_s": 0} == plain.summary() | {"wall_s": 0}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("llm=1", "llm must be below 1"),
        ("llm=-0.5", "llm must be a probability in [0, 1]"),
        ("llm.admin=0.1", "llm has no channel"),
    ],
)
def test_bad_llm_faults(text, words):
    with pytest.raises(ParameterError) as info:
        parse_faults(text)
    assert words in str(info.value)


def test_a_window_cannot_give_llm_a_channel(tmp_path):
    path = tmp_path / "f.toml"
    path.write_text('[[window]]\nstart = 0\nend = 3\nchannel = "intra"\nllm = 0.5\n')
    with pytest.raises(ParameterError, match="an LLM call has no channel"):
        parse_faults(str(path))


def test_cli_reports_llm_faults_and_refuses_bad_ones(capsys):
    argv = ["run", "-n", "20", "-g", "5", "--faults", "llm=0.3", "--max-retries", "1", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok" and out["faults"]["llm"] > 0
    assert out["retries"] + out["failed_llm_calls"] == out["faults"]["llm"]
    assert main(["run", "-n", "20", "--faults", "llm=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "llm must be a probability" in err and "\n" not in err


def test_a_checkpointed_run_counts_llm_faults_as_a_plain_one_does(tmp_path, capsys):
    argv = ["run", "-n", "20", "-g", "5", "-r", "2", "--faults", "llm=0.2", "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*argv, "--checkpoint", str(tmp_path / "runs.db"), "--run-id", "r1"]) == 0
    durable = json.loads(capsys.readouterr().out)
    assert plain["faults"]["llm"] > 0 and durable["faults"] == plain["faults"]
    assert all(durable[k] == plain[k] for k in ("retries", "failed_llm_calls", "messages", "llm_calls"))


def test_a_snapshot_mid_run_keeps_the_llm_fault_count():
    def runtime():
        return SimRuntime(Organisation.flat(8), Thinker(4), seed=2, trace=False, faults=FaultSpec(llm=0.3))

    whole = runtime().run()
    first = runtime()
    first.start()
    for _ in range(12):
        first.step()
    assert 0 < first.core.limits.faults < whole.faults["llm"]  # some counted before the snapshot, some after
    second = runtime()
    second.restore(first.snapshot())
    resumed = second.run()
    assert resumed.faults == whole.faults and whole.faults["llm"] > 0
    assert resumed.ledger.provider_summary() == whole.ledger.provider_summary()


def test_a_checkpoint_carries_the_llm_fault_count():
    from megaactors.durable.net_rows import encode_limits, load_limits
    from megaactors.providers.limits import LimitState

    assert "faults" not in encode_limits(LimitState())  # runs without injected faults: checkpoints as before
    loaded = LimitState()
    load_limits(loaded, encode_limits(LimitState(faults=5)))
    assert loaded.faults == 5
