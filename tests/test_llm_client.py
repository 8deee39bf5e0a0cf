"""The chat-completions client against a real HTTP server on 127.0.0.1.

The server below is an aiohttp application the tests start on a free port in a
thread of its own: it answers like an OpenAI-compatible endpoint, can fail the
first k requests, answer slowly, or leave out the usage, and records every request
(idempotency key, body, arrival and departure times, requests in flight).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from megaactors import ChatRound, LLMRequest, Organisation, ParameterError, expected_messages
from megaactors.core.llm import PRICES
from megaactors.providers.chat_completions import ChatCompletionsClient, LLMClientError
from megaactors.runtime import AsyncioRuntime, PykkaRuntime


class ChatServer:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint with faults on demand."""

    def __init__(
        self,
        *,
        fail_first: int = 0,
        fail_status: int = 503,
        retry_after: str | None = None,
        delay_s: float = 0.0,
        slow_first: int = 0,
        usage: bool = True,
        rpm: float | None = None,
        tpm: float | None = None,
        fail_every: int = 0,
        burst_s: float = 60.0,
        first_token_s: float = 0.0,
        streams: bool = True,
    ) -> None:
        self.first_token_s = first_token_s
        self.streams = streams
        """False: answer in one JSON object even when asked to stream (as some servers do)."""
        self.burst = burst_s / 60  # a bucket holds this fraction of a minute's limit
        self.limits = {"requests": (rpm, rpm and rpm * self.burst), "tokens": (tpm, tpm and tpm * self.burst)}
        self.refilled = time.monotonic()
        self.fail_every = fail_every
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.retry_after = retry_after
        self.delay_s = delay_s
        self.slow_first = slow_first
        self.usage = usage
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._serve, name="chat-server", daemon=True)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        record = {"key": request.headers.get("Idempotency-Key"), "body": body, "arrived": time.monotonic()}
        self.requests.append(record)
        index = len(self.requests)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if index <= self.slow_first:
                await asyncio.sleep(5.0)
            elif self.delay_s:
                await asyncio.sleep(self.delay_s)
            if index <= self.fail_first:
                headers = {"Retry-After": self.retry_after} if self.retry_after else {}
                return web.Response(status=self.fail_status, text="try again later", headers=headers)
            if self.fail_every and index % self.fail_every == 0:
                return web.Response(status=500, text="internal error")
            over = self._over_limit(body)
            if over is not None:
                record["limited"] = True
                return web.Response(status=429, text="rate limit reached", headers=over)
            if body.get("model") == "reject-me":
                return web.Response(status=400, text='{"error": "unknown model"}')
            prompt = sum(len(m["content"].split()) + 3 for m in body["messages"])
            completion = body.get("max_tokens", 16)
            answer: dict[str, Any] = {
                "id": f"chatcmpl-{index}",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "noted"}}],
            }
            if self.usage:
                answer["usage"] = {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                }
            record["usage"] = (prompt, completion)
            if body.get("stream") and self.streams:
                return await self._stream(request, answer)
            return web.json_response(answer)
        finally:
            self.in_flight -= 1
            record["left"] = time.monotonic()

    async def _stream(self, request: web.Request, answer: dict[str, Any]) -> web.StreamResponse:
        """``answer`` as server-sent events: a role chunk, the content in two chunks
        ``first_token_s`` apart from the start, the usage, then ``[DONE]``."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        words = ["no", "ted"]
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        chunks += [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in words]
        chunks.append({"choices": [], "usage": answer.get("usage")})
        for i, chunk in enumerate(chunks):
            if i == 1:
                await asyncio.sleep(self.first_token_s)
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def _over_limit(self, body: dict[str, Any]) -> dict[str, str] | None:
        """Token buckets (per minute, refilled continuously) as large providers run
        them: None if the request fits (and is taken), else the 429's headers."""
        if all(limit is None for limit, _ in self.limits.values()):
            return None
        now = time.monotonic()
        elapsed, self.refilled = now - self.refilled, now
        cost = {"requests": 1, "tokens": sum(len(m["content"].split()) + 3 for m in body["messages"])}
        cost["tokens"] += body.get("max_tokens", 16)
        resets = {}
        for kind, (limit, level) in self.limits.items():
            if limit is None:
                continue
            level = min(limit * self.burst, level + elapsed * limit / 60)
            self.limits[kind] = (limit, level)
            resets[kind] = max(0.0, (cost[kind] - level) * 60 / limit)
        if any(resets.values()):
            return {f"x-ratelimit-reset-{kind}": f"{wait * 1000:.0f}ms" for kind, wait in resets.items()}
        for kind, (limit, level) in self.limits.items():
            if limit is not None:
                self.limits[kind] = (limit, level - cost[kind])
        return None

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app)
        loop.run_until_complete(self._runner.setup())
        loop.run_until_complete(web.SockSite(self._runner, self._sock).start())
        self._ready.set()
        loop.run_forever()
        for task in asyncio.all_tasks(loop):  # requests still being answered slowly
            task.cancel()
        loop.run_until_complete(self._runner.cleanup())
        loop.close()

    def __enter__(self) -> ChatServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def keys(self) -> list[str | None]:
        return [r["key"] for r in self.requests]


@contextlib.contextmanager
def serving(**kw: Any) -> Iterator[ChatServer]:
    with ChatServer(**kw) as server:
        yield server


def chat_once(client: ChatCompletionsClient) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        async with client:
            return await client.chat([{"role": "user", "content": "hello"}], max_tokens=5)

    return asyncio.run(main())


def test_usage_from_the_server_goes_into_the_ledger_of_an_asyncio_run() -> None:
    org = Organisation.two_tier(12, 4)
    with serving(delay_s=0.01) as server:
        client = ChatCompletionsClient(server.base_url, "gpt-4o-mini", max_concurrency=4)
        runtime = AsyncioRuntime(org, ChatRound(rounds=2), llm=client)
        result = runtime.run()
    led = result.ledger
    assert led.messages == expected_messages(org, 2)
    assert led.llm_calls == len(server.requests)
    assert led.tokens_in == sum(r["usage"][0] for r in server.requests)
    assert led.tokens_out == sum(r["usage"][1] for r in server.requests) == 60 * led.llm_calls
    assert led.cost_usd == pytest.approx(PRICES["gpt-4o-mini"].cost(led.tokens_in, led.tokens_out))
    assert len(set(server.keys)) == len(server.keys)  # one idempotency key per call
    assert server.max_in_flight <= 4
    body = server.requests[0]["body"]
    assert body["model"] == "gpt-4o-mini" and body["messages"][0]["role"] == "system"
    assert not client.session_open  # the run closed the session it opened


def test_failed_attempts_are_retried_with_backoff_under_the_same_idempotency_key() -> None:
    with serving(fail_first=2, fail_status=503) as server:
        client = ChatCompletionsClient(server.base_url, "m", backoff_s=0.05, max_retries=3)
        data = chat_once(client)
    assert data["usage"]["completion_tokens"] == 5
    assert len(server.requests) == 3 and client.retries == 2
    assert len(set(server.keys)) == 1 and server.keys[0]
    t = [r["arrived"] for r in server.requests]
    assert t[1] - t[0] <= 0.05 + 0.05 and t[2] - t[1] <= 0.1 + 0.05  # full jitter below an exponential cap


def test_a_retry_after_header_is_honoured() -> None:
    with serving(fail_first=1, fail_status=429, retry_after="0.3") as server:
        chat_once(ChatCompletionsClient(server.base_url, "m", backoff_s=0.01))
    t = [r["arrived"] for r in server.requests]
    assert len(t) == 2 and t[1] - t[0] >= 0.3


def test_a_slow_answer_times_out_and_the_retry_reuses_the_key() -> None:
    with serving(slow_first=1) as server:
        client = ChatCompletionsClient(server.base_url, "m", timeout_s=0.2, backoff_s=0.01)
        t0 = time.monotonic()
        chat_once(client)
        elapsed = time.monotonic() - t0
    assert len(server.requests) == 2 and len(set(server.keys)) == 1
    assert 0.2 <= elapsed < 4.0  # did not wait for the 5 s answer


@pytest.mark.parametrize(
    ("server_kw", "client_kw", "needle", "attempts"),
    [
        ({"fail_first": 99}, {"max_retries": 2}, r"failed after 3 attempt\(s\): HTTP 503: try again later", 3),
        ({"slow_first": 99}, {"max_retries": 1, "timeout_s": 0.1}, r"after 2 attempt\(s\): no complete answer", 2),
        ({}, {"model": "reject-me"}, r"answered HTTP 400: \{\"error\": \"unknown model\"\}", 1),
        ({"usage": False}, {}, r"without a 'usage' object", 1),
    ],
)
def test_failures_name_their_cause(server_kw: dict, client_kw: dict, needle: str, attempts: int) -> None:
    with serving(**server_kw) as server:
        kw = {"model": "m", "backoff_s": 0.01, **client_kw}
        client = ChatCompletionsClient(server.base_url, **kw)

        async def main() -> None:
            async with client:
                await client.acomplete(0, 0, LLMRequest(new_tokens=3), 0, 3)

        with pytest.raises(LLMClientError, match=needle):
            asyncio.run(main())
    assert len(server.requests) == attempts


def test_connection_refused_is_retried_then_reported() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens once this socket is closed
    client = ChatCompletionsClient(f"http://127.0.0.1:{port}/v1", "m", max_retries=2, backoff_s=0.01)
    with pytest.raises(LLMClientError, match=r"failed after 3 attempt\(s\): ClientConnectorError"):
        chat_once(client)
    assert client.requests == 3


def test_the_concurrency_cap_bounds_requests_in_flight() -> None:
    with serving(delay_s=0.05) as server:
        client = ChatCompletionsClient(server.base_url, "m", max_concurrency=3)

        async def main() -> None:
            async with client:
                await asyncio.gather(*(client.acomplete(a, 0, LLMRequest(), 0, 10) for a in range(20)))

        asyncio.run(main())
    assert len(server.requests) == 20
    assert server.max_in_flight == 3


def test_an_endpoint_failure_ends_an_asyncio_run() -> None:
    with serving(usage=False) as server:
        client = ChatCompletionsClient(server.base_url, "m")
        with pytest.raises(LLMClientError, match="without a 'usage' object"):
            AsyncioRuntime(Organisation.two_tier(8, 4), ChatRound(), llm=client).run()


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"base_url": "ftp://example"}, "base url must start with http"),
        ({"max_concurrency": 0}, "max concurrency must be an integer >= 1"),
        ({"timeout_s": 0}, "timeout_s must be a finite number > 0"),
        ({"max_retries": -1}, "max retries must be an integer >= 0"),
        ({"model": ""}, "model must be a non-empty string"),
    ],
)
def test_bad_settings_are_refused(kw: dict, needle: str) -> None:
    args = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kw}
    with pytest.raises(ParameterError, match=needle):
        ChatCompletionsClient(args.pop("base_url"), args.pop("model"), **args)


def test_the_pykka_runtime_refuses_an_async_endpoint() -> None:
    client = ChatCompletionsClient("http://127.0.0.1:1/v1", "m")
    with pytest.raises(ParameterError, match="pykka runtime needs an LLM with a blocking complete"):
        PykkaRuntime(Organisation.flat(2), ChatRound(), llm=client)


def test_a_retry_after_date_and_rate_limit_reset_headers_are_read() -> None:
    from email.utils import formatdate

    from megaactors.providers.chat_completions import duration_s, retry_after_s

    assert retry_after_s({"Retry-After": "2.5"}, 429) == 2.5
    assert retry_after_s({"Retry-After": formatdate(1_000_030, usegmt=True)}, 503, now=1_000_000) == 30
    assert retry_after_s({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, 429) == 360
    assert retry_after_s({"x-ratelimit-reset-requests": "1s"}, 503) == 0  # reset headers speak of 429s only
    assert duration_s("20ms") == pytest.approx(0.02) and duration_s("1h2m3.5s") == 3723.5
    assert duration_s("soon") == 0 and duration_s(None) == 0


def test_an_http_date_retry_after_is_waited_for() -> None:
    from email.utils import formatdate

    with serving(fail_first=1, fail_status=503, retry_after=formatdate(time.time() + 2, usegmt=True)) as server:
        chat_once(ChatCompletionsClient(server.base_url, "m", backoff_s=0.01))
    t = [r["arrived"] for r in server.requests]
    assert len(t) == 2 and t[1] - t[0] >= 0.9  # the date has whole seconds


def test_the_client_keeps_to_a_servers_rpm_and_tpm_and_logs_every_attempt(tmp_path) -> None:
    log = tmp_path / "calls.jsonl"
    # 10 requests/s, 500 tokens/s, buckets of one second's worth, a 500 now and then
    with serving(rpm=600, tpm=30_000, burst_s=1.0, fail_every=7) as server:
        client = ChatCompletionsClient(
            server.base_url, "m", max_concurrency=8, max_retries=30, backoff_s=0.05, call_log=log, jitter_seed=1
        )

        async def main() -> None:
            async with client:
                await asyncio.gather(*(client.acomplete(a, 0, LLMRequest(output_tokens=20), 0, 10) for a in range(24)))

        t0 = time.monotonic()
        asyncio.run(main())
        elapsed = time.monotonic() - t0
    answered = [r for r in server.requests if "usage" in r]
    limited = [r for r in server.requests if r.get("limited")]
    assert len(answered) == 24 and limited  # every call got through, some only after a 429
    tokens = sum(sum(r["usage"]) for r in answered)
    assert tokens <= 500 + 500 * elapsed + 1  # never more than the bucket and its refill
    assert len(answered) <= 10 + 10 * elapsed + 1
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == len(server.requests)
    by_status = collections.Counter(line["status"] for line in lines)
    assert by_status[200] == 24 and by_status[429] == len(limited) and by_status[500] >= 1
    ok = [line for line in lines if line["status"] == 200]
    assert all(line["input_tokens"] > 0 and line["output_tokens"] == 20 and line["model"] == "m" for line in ok)
    assert all(line["latency_s"] >= 0 and abs(line["ts"] - time.time()) < 120 for line in lines)
    keys = collections.Counter(server.keys)
    assert len(keys) == 24  # retries reuse their call's idempotency key


def test_the_run_command_runs_against_an_endpoint_and_writes_its_call_log(tmp_path, capsys) -> None:
    from megaactors.cli import main

    log = tmp_path / "calls.jsonl"
    argv = ["run", "--runtime", "asyncio", "-n", "6", "-g", "3", "--endpoint-model", "local", "--json"]
    with serving(fail_first=1) as server:
        argv += ["--endpoint", server.base_url, "--call-log", str(log), "--max-retries", "2", "--endpoint-stream"]
        assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["messages"] == expected_messages(Organisation.two_tier(6, 3)) and out["runtime"] == "asyncio"
    assert out["llm_calls"] == len(server.requests) - 1 and out["tokens_out"] == 60 * out["llm_calls"]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == len(server.requests) and collections.Counter(x["status"] for x in lines)[503] == 1
    assert all(x["model"] == "local" and {"ts", "latency_s", "input_tokens", "output_tokens"} <= set(x) for x in lines)
    assert {r["body"]["model"] for r in server.requests} == {"local"}
    assert [x["ttft_s"] is None for x in lines].count(True) == 1  # streamed, but for the 503


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--call-log", "{log}"], "--call-log need(s) --endpoint URL"),
        (["--endpoint", "http://127.0.0.1:9/v1", "--runtime", "sim", "--call-log", "{log}"], "needs --runtime asyncio"),
        (["--endpoint", "http://127.0.0.1:9/v1", "--runtime", "asyncio", "--rpm", "60"], "a real endpoint has its own"),
        (["--endpoint", "ftp://x", "--runtime", "asyncio"], "base url must start with http"),
        (
            ["--endpoint", "http://127.0.0.1:9/v1", "--runtime", "asyncio", "--endpoint-key-env", "NO_SUCH_KEY_VAR"],
            "NO_SUCH_KEY_VAR: that environment variable is not set",
        ),
    ],
)
def test_the_run_command_refuses_what_does_not_fit_an_endpoint(tmp_path, capsys, extra, needle) -> None:
    from megaactors.cli import main

    log = tmp_path / "calls.jsonl"
    assert main(["run", "-n", "4", *(x.replace("{log}", str(log)) for x in extra)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and not log.exists()


def test_a_streamed_answer_is_put_together_and_its_time_to_first_token_logged(tmp_path) -> None:
    log = tmp_path / "calls.jsonl"
    with serving(first_token_s=0.2) as server:
        client = ChatCompletionsClient(server.base_url, "m", stream=True, call_log=log)

        async def main() -> Any:
            async with client:
                return await client.acomplete(3, 0, LLMRequest(output_tokens=7), 0, 10)

        reply = asyncio.run(main())
    body = server.requests[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert reply.text == "noted" and reply.tokens_out == 7 and reply.tokens_in == server.requests[0]["usage"][0]
    (line,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert line["status"] == 200 and line["output_tokens"] == 7
    assert 0.2 <= line["ttft_s"] <= line["latency_s"]


def test_a_server_that_ignores_streaming_is_read_as_one_answer(tmp_path) -> None:
    log = tmp_path / "calls.jsonl"
    with serving(streams=False) as server:
        client = ChatCompletionsClient(server.base_url, "m", stream=True, call_log=log)

        async def main() -> Any:
            async with client:
                return await client.acomplete(3, 0, LLMRequest(output_tokens=7), 0, 10)

        reply = asyncio.run(main())
    assert server.requests[0]["body"]["stream"] is True
    assert reply.text == "noted" and reply.tokens_out == 7 and len(server.requests) == 1
    assert json.loads(log.read_text())["ttft_s"] is None  # no first token was seen apart


def test_a_call_log_without_streaming_has_no_time_to_first_token(tmp_path) -> None:
    log = tmp_path / "calls.jsonl"
    with serving() as server:
        chat_once(ChatCompletionsClient(server.base_url, "m", call_log=log))
    assert "ttft_s" not in json.loads(log.read_text())
