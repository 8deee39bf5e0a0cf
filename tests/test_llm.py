"""The simulated LLM: counter-based randomness, latency, tokens and prices."""

import math
import statistics

import pytest

from megaactors.core.behaviour import LLMRequest
from megaactors.core.llm import PRICES, LatencyModel, SimulatedLLM, TokenModel, stream_normal, stream_uniform


def test_streams_depend_only_on_their_key() -> None:
    a = [stream_uniform(7, agent, i) for agent in range(20) for i in range(20)]
    b = [stream_uniform(7, agent, i) for agent in reversed(range(20)) for i in range(20)]
    assert sorted(a) == sorted(b) and len(set(a)) == len(a)
    assert all(0 < u < 1 for u in a)
    assert stream_uniform(7, 1, 1) != stream_uniform(8, 1, 1) != stream_uniform(7, 1, 1, stream=1)


def test_normal_stream_has_unit_moments() -> None:
    z = [stream_normal(3, agent, i) for agent in range(200) for i in range(100)]
    assert abs(statistics.fmean(z)) < 0.03
    assert abs(statistics.pstdev(z) - 1) < 0.03


def test_inlined_latency_matches_the_model() -> None:
    latency = LatencyModel(median_s=2.0, sigma=0.7, per_output_token_s=0.01)
    llm = SimulatedLLM(seed=5, latency=latency)
    for agent, call in [(0, 0), (3, 9), (123456, 77)]:
        reply = llm.complete(agent, call, LLMRequest(new_tokens=10, output_tokens=50), 0, 10)
        assert reply.latency_s == pytest.approx(latency.sample(stream_normal(5, agent, call), 50))


def test_latency_median_and_token_model() -> None:
    llm = SimulatedLLM(seed=1, latency=LatencyModel(median_s=3.0, sigma=0.5, per_output_token_s=0.0))
    replies = [llm.complete(a, 0, LLMRequest(output_tokens=40), 100, 25) for a in range(4000)]
    assert statistics.median(r.latency_s for r in replies) == pytest.approx(3.0, rel=0.05)
    r = replies[0]
    assert (r.tokens_in, r.tokens_out) == (TokenModel().system_tokens + 100 + 25, 40)
    assert r.cost_usd == pytest.approx(PRICES["gpt-4o-mini"].cost(r.tokens_in, 40))


def test_constant_latency_and_unknown_model() -> None:
    llm = SimulatedLLM(latency=LatencyModel(median_s=1.5, sigma=0, per_output_token_s=0.01))
    assert llm.complete(0, 0, LLMRequest(output_tokens=100), 0, 0).latency_s == pytest.approx(2.5)
    with pytest.raises(ValueError, match="no price for model 'nope'"):
        SimulatedLLM(model="nope")
    with pytest.raises(ValueError, match="finite and non-negative"):
        LatencyModel(median_s=-1)
    assert math.isclose(TokenModel().message_tokens(9), 3)


def test_prefill_latency_grows_with_the_prompt() -> None:
    plain = LatencyModel(median_s=2.0, sigma=0.7, per_output_token_s=0.01)
    prefill = LatencyModel(median_s=2.0, sigma=0.7, per_output_token_s=0.01, prefill_s_per_token=0.001)
    a, b = SimulatedLLM(seed=5, latency=plain), SimulatedLLM(seed=5, latency=prefill)
    for agent, call, memory, new in [(0, 0, 0, 10), (3, 9, 500, 4000), (123456, 77, 90, 30000)]:
        request = LLMRequest(output_tokens=50)
        ra, rb = a.complete(agent, call, request, memory, new), b.complete(agent, call, request, memory, new)
        assert rb.tokens_in == ra.tokens_in
        assert rb.latency_s - ra.latency_s == pytest.approx(0.001 * rb.tokens_in)
        assert rb.latency_s == pytest.approx(prefill.sample(stream_normal(5, agent, call), 50, rb.tokens_in))
    with pytest.raises(ValueError, match="finite and non-negative"):
        LatencyModel(prefill_s_per_token=float("inf"))


@pytest.mark.parametrize(
    "llm",
    [
        SimulatedLLM(seed=3),
        SimulatedLLM(seed=4, latency=LatencyModel(median_s=2.0, sigma=0.0, prefill_s_per_token=0.001)),
        SimulatedLLM(seed=5, model="gpt-4o", tokens=TokenModel(system_tokens=40_000, output_tokens=90)),
    ],
)
def test_draw_and_reply_of_give_what_complete_gives(llm: SimulatedLLM) -> None:
    """The simulation's plain path draws a call's figures without a reply and makes the
    reply when the call ends: the same numbers, float for float, as one complete()."""
    for agent, index, request, memory, new in [
        (0, 0, LLMRequest(), 0, 0),
        (7, 3, LLMRequest(None, 25, "chat"), 480, 61),
        (99_999, 12, LLMRequest(5, None, "plan"), 33_000, 5),
    ]:
        whole = llm.complete(agent, index, request, memory, new)
        drawn = llm.draw(agent, index, request, memory, new)
        assert drawn == (whole.tokens_in, whole.tokens_out, whole.latency_s, whole.cost_usd)
        assert llm.reply_of(index, request, drawn[0], drawn[2]) == whole
