"""The provider model: token buckets, backoff with full jitter, seeded failures and
timeouts, and what they do to a simulated run."""

from __future__ import annotations

import math

import pytest

from megaactors import ChatRound, LatencyModel, Organisation, SimulatedLLM
from megaactors.behaviours.chat_round import expected_messages
from megaactors.core.ledger import PROVIDER_COUNTERS
from megaactors.errors import ParameterError
from megaactors.megaagent.scenarios import SCENARIOS, ApiLimits
from megaactors.providers.limits import ProviderModel, TokenBucket, full_jitter
from megaactors.runtime.sim import SimRuntime


def sim(org: Organisation, provider: ProviderModel | None, seed: int = 1, rounds: int = 1, llm=None, **kw):
    return SimRuntime(org, ChatRound(rounds), llm or SimulatedLLM(seed=seed), seed=seed, provider=provider, **kw).run()


def test_a_bucket_refills_continuously_up_to_its_capacity() -> None:
    bucket = TokenBucket(capacity=10, rate=2.0)  # full at start
    assert bucket.wait_for(0.0, 10) == 0.0
    bucket.take(10)
    assert bucket.wait_for(0.0, 1) == pytest.approx(0.5)
    assert bucket.wait_for(1.0, 3) == pytest.approx(0.5)  # 2 there after 1 s, one more in 0.5 s
    assert bucket.wait_for(100.0, 10) == 0.0 and bucket.level == 10  # never above capacity


def test_backoff_has_full_jitter_below_an_exponential_cap() -> None:
    draws = [full_jitter(3, 7, call, 2, base_s=1.0, cap_s=60.0) for call in range(2000)]
    assert all(0 <= d <= 4.0 for d in draws)
    assert sum(draws) / len(draws) == pytest.approx(2.0, rel=0.05)  # uniform on [0, 4]
    assert max(full_jitter(3, 7, c, 20, 1.0, 60.0) for c in range(200)) <= 60.0
    assert full_jitter(3, 7, 5, 2, 1.0, 60.0) == full_jitter(3, 7, 5, 2, 1.0, 60.0)
    assert full_jitter(3, 7, 5, 2, 1.0, 60.0) != full_jitter(4, 7, 5, 2, 1.0, 60.0)


def test_an_inactive_provider_changes_nothing() -> None:
    plain = sim(Organisation.two_tier(120, 9), None).summary()
    inactive = sim(Organisation.two_tier(120, 9), ProviderModel(max_retries=7)).summary()
    plain.pop("wall_s"), inactive.pop("wall_s")
    assert plain == inactive and not set(PROVIDER_COUNTERS) & set(inactive)
    active = sim(Organisation.two_tier(120, 9), ProviderModel(rpm=1e6)).summary()
    assert {k: 0 for k in PROVIDER_COUNTERS} == {k: active.pop(k) for k in PROVIDER_COUNTERS}
    active.pop("wall_s")
    assert active == plain  # a limit that never binds changes nothing else


@pytest.mark.parametrize(("scope", "rpm"), [("run", 60), ("group", 10)])
def test_an_rpm_limit_bounds_answered_calls_by_what_the_bucket_refilled(scope: str, rpm: int) -> None:
    org = Organisation.two_tier(120, 12)
    free = sim(Organisation.two_tier(120, 12), None)
    limited = sim(org, ProviderModel(rpm=rpm, scope=scope, seed=1))
    led, buckets = limited.ledger, (1 if scope == "run" else len(org.groups))
    assert led.messages == free.ledger.messages == expected_messages(org)  # the chat round stays whole
    assert led.rate_limited > 0 and led.retries > 0 and led.llm_wait_s > 0
    assert led.llm_calls <= buckets * (rpm + rpm / 60 * led.virtual_time_s) + 1
    assert led.virtual_time_s > free.ledger.virtual_time_s


def test_a_tpm_limit_bounds_tokens_by_what_the_bucket_refilled() -> None:
    tpm = 20_000
    result = sim(Organisation.two_tier(60, 6), ProviderModel(tpm=tpm, seed=2), seed=2)
    led = result.ledger
    assert led.rate_limited > 0
    assert led.tokens_in + led.tokens_out <= tpm + tpm / 60 * led.virtual_time_s
    assert led.messages == expected_messages(result.org)


def test_a_group_scope_limits_less_than_one_shared_limit() -> None:
    shared = sim(Organisation.two_tier(120, 12), ProviderModel(rpm=60)).ledger
    per_group = sim(Organisation.two_tier(120, 12), ProviderModel(rpm=60, scope="group")).ledger
    assert per_group.rate_limited < shared.rate_limited
    assert per_group.virtual_time_s < shared.virtual_time_s


def test_errors_come_at_the_set_rate_and_are_retried() -> None:
    led = sim(Organisation.two_tier(300, 10), ProviderModel(failure_rate=0.2, max_retries=5, seed=4), seed=4).ledger
    attempts = led.llm_calls + led.llm_errors
    assert led.llm_errors / attempts == pytest.approx(0.2, abs=0.03)
    assert led.retries == led.llm_errors - led.failed_llm_calls
    assert led.rate_limited == led.llm_timeouts == 0


def test_timeouts_come_at_the_rate_the_latency_model_gives() -> None:
    latency = LatencyModel(median_s=1.0, sigma=0.5, per_output_token_s=0.0)
    llm = SimulatedLLM(seed=5, latency=latency)
    led = sim(Organisation.two_tier(300, 10), ProviderModel(timeout_s=1.5, max_retries=3, seed=5), llm=llm).ledger
    expected = 0.5 * math.erfc(math.log(1.5) / 0.5 / math.sqrt(2))  # P(exp(0.5 z) > 1.5)
    assert led.llm_timeouts / (led.llm_calls + led.llm_timeouts) == pytest.approx(expected, abs=0.03)
    assert led.llm_time_s <= 1.5 * led.llm_calls  # no answered call took longer than the timeout


def test_without_retries_every_failure_reaches_the_behaviour_which_asks_again() -> None:
    org = Organisation.two_tier(120, 9)
    led = sim(org, ProviderModel(failure_rate=0.3, max_retries=0, seed=3), seed=3).ledger
    assert led.retries == 0 and led.failed_llm_calls == led.llm_errors > 0
    assert led.messages == expected_messages(org)


def test_runs_under_a_provider_model_are_deterministic() -> None:
    provider = ProviderModel(rpm=120, tpm=100_000, failure_rate=0.1, timeout_s=3.0, seed=9)
    a = sim(Organisation.two_tier(120, 9), provider, seed=9, rounds=2).summary()
    b = sim(Organisation.two_tier(120, 9), provider, seed=9, rounds=2).summary()
    c = sim(Organisation.two_tier(120, 9), ProviderModel(rpm=120, tpm=100_000, failure_rate=0.1, timeout_s=3.0,
                                                         seed=10), seed=9, rounds=2).summary()  # fmt: skip
    for s in (a, b, c):
        s.pop("wall_s")
    assert a == b and a != c


def test_a_run_resumed_from_a_snapshot_mid_retry_ends_as_the_uninterrupted_one() -> None:
    provider = ProviderModel(rpm=60, failure_rate=0.1, seed=2)
    whole = sim(Organisation.two_tier(60, 6), provider, seed=2, rounds=2, trace=False).summary()
    first = SimRuntime(Organisation.two_tier(60, 6), ChatRound(2), SimulatedLLM(seed=2), seed=2, provider=provider,
                       trace=False)  # fmt: skip
    first.start()
    first.advance(whole["virtual_time_s"] / 2)
    state = first.snapshot()
    assert state.limits is not None and (state.limits.requests or state.limits.tokens)
    second = SimRuntime(first.org, ChatRound(2), SimulatedLLM(seed=2), seed=2, provider=provider, trace=False)
    second.restore(state)
    resumed = second.run().summary()
    for s in (whole, resumed):
        s.pop("wall_s")
    assert resumed == whole


def test_an_llm_cap_holds_its_slot_through_the_retries() -> None:
    led = sim(Organisation.two_tier(60, 6), ProviderModel(failure_rate=0.3, seed=1), max_concurrent_llm=3).ledger
    assert led.peak_llm_in_flight == 3 and led.llm_errors > 0


def test_megaagent_asks_again_for_a_call_the_provider_gave_up_on() -> None:
    gobang = SCENARIOS["gobang"]
    plain = gobang.run(seed=1)
    limited = gobang.but(limits=ApiLimits(provider=ProviderModel(failure_rate=0.2, max_retries=0, seed=1))).run(seed=1)
    assert limited.ledger.failed_llm_calls > 0
    assert limited.ledger.llm_calls >= plain.ledger.llm_calls  # every failed call was made again
    assert limited.org.n == plain.org.n  # and the run recruited and finished as before


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        (lambda: ProviderModel(rpm=-1), "rpm must be a finite number > 0"),
        (lambda: ProviderModel(tpm=math.inf), "tpm must be a finite number > 0"),
        (lambda: ProviderModel(scope="planet"), "unknown limit scope 'planet'"),
        (lambda: ProviderModel(max_retries=-1), "max retries must be an integer >= 0"),
        (lambda: ProviderModel(failure_rate=1.0), "llm failure rate must be >= 0 and < 1"),
    ],
)
def test_bad_provider_settings_are_refused_in_one_line(provider, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        provider()


def test_a_tpm_below_one_call_or_a_timeout_below_every_latency_is_refused_at_start() -> None:
    with pytest.raises(ParameterError, match=r"tpm 100 is lower than one call's tokens \(360\)"):
        sim(Organisation.flat(3), ProviderModel(tpm=100))
    constant = SimulatedLLM(latency=LatencyModel(median_s=2.0, sigma=0.0, per_output_token_s=0.0))
    with pytest.raises(ParameterError, match="llm timeout 1 s is below every call's latency"):
        sim(Organisation.flat(3), ProviderModel(timeout_s=1.0), llm=constant)


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """The command line in this process: exit code, stdout, stderr."""
    from megaactors.cli import main

    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse refuses a value
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_line_takes_limits_and_reports_their_counters(capsys) -> None:
    import json

    code, out, err = cli(capsys, "run", "-n", "60", "--rpm", "30", "--llm-failure-rate", "0.1", "--max-retries", "2",
                         "--json")  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert summary["rate_limited"] > 0 and summary["retries"] > 0 and summary["llm_wait_s"] > 0
    assert {"failed_llm_calls", "llm_errors", "llm_timeouts"} <= set(summary)
    plain = json.loads(cli(capsys, "run", "-n", "60", "--json")[1])
    assert "rate_limited" not in plain  # no limit, failure rate or timeout: the summary of earlier versions
    for args, needle in [
        (("--rpm", "abc"), "rpm: 'abc' is not a number"),
        (("--rpm", "-5"), "rpm must be a finite number > 0"),
        (("--tpm", "100"), "tpm 100 is lower than one call's tokens (360): no call could ever run"),
        (("--limit-scope", "planet"), "unknown limit scope 'planet'"),
        (("--prefill-s-per-token", "-1"), "prefill_s_per_token must be a finite number >= 0"),
    ]:
        code, out, err = cli(capsys, "run", "-n", "10", *args)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, args
        assert needle in err, (args, err)


def test_a_results_file_written_before_the_provider_parameters_still_reads(tmp_path) -> None:
    import csv

    from megaactors.experiments.result_rows import load_results
    from megaactors.experiments.sweep import run_sweep

    run_sweep({"agents": [12], "group_size": [4]}, tmp_path, workers=0, progress=False)
    path = tmp_path / "results.csv"
    new = ("prefill_s_per_token", "llm_model", "rpm", "tpm", "limit_scope", "max_retries", "llm_failure_rate",
           "llm_timeout_s")  # fmt: skip
    with path.open() as f:
        rows = list(csv.DictReader(f))
    with path.open("w", newline="") as f:  # as an earlier version wrote it
        writer = csv.DictWriter(f, fieldnames=[k for k in rows[0] if k not in new])
        writer.writeheader()
        writer.writerows({k: v for k, v in r.items() if k not in new} for r in rows)
    (row,) = load_results(path).to_dict("records")
    assert row["agents"] == 12 and row["max_retries"] == 3 and row["limit_scope"] == "run"
    assert row["prefill_s_per_token"] == 0.0 and math.isnan(row["rpm"])
