"""A real LLM endpoint: an OpenAI-compatible chat-completions client on async HTTP.

:class:`ChatCompletionsClient` posts to ``{base_url}/chat/completions`` with
aiohttp and can stand in for :class:`~megaactors.core.llm.SimulatedLLM` as the
asyncio runtime's LLM (it has ``async acomplete(...)`` with the same arguments as
``complete``, and a :class:`~megaactors.core.llm.TokenModel` for the agents' memory
window). Token counts come from the response's ``usage`` field, so the ledger
shows what the server billed; dollars come from the price table (zero for a model
it does not list, e.g. a local one).

* **Timeouts**: each attempt must finish within ``timeout_s``.
* **Retries**: connection errors, timeouts and HTTP 408, 409, 429 and 5xx are
  retried up to ``max_retries`` times after a backoff with full jitter (uniform in
  ``[0, min(backoff_max_s, backoff_s * 2**attempt)]``, from a generator seeded with
  ``jitter_seed``), or longer if the server says so: a ``Retry-After`` header (in
  seconds or as an HTTP date) or, on a 429, the ``x-ratelimit-reset-requests`` /
  ``x-ratelimit-reset-tokens`` headers (``1s``, ``6m0s``, ``20ms``) are waited for,
  up to ``backoff_max_s``. Every attempt of one call carries the same
  ``Idempotency-Key`` header, so a server that deduplicates never runs a retried
  call twice. Other HTTP errors and malformed answers fail at once with
  :class:`LLMClientError`.
* **Call log**: with ``call_log=PATH`` every attempt appends one JSON object per
  line to PATH: ``ts`` (unix seconds at its start), ``latency_s``, ``input_tokens``
  and ``output_tokens`` (null unless answered), ``status`` (HTTP status, 0 for a
  timeout or a connection error), ``model``, ``attempt`` (and ``ttft_s`` when
  streaming) — what ``megaactors calibrate`` reads.
* **Streaming**: with ``stream=True`` the request asks for server-sent events
  (``"stream": true`` and ``stream_options.include_usage``); the answer is put
  together from its chunks (the usage from the last one), and the call log gains
  ``ttft_s``, the seconds from the attempt's start to the first chunk of content.
* **Concurrency cap**: at most ``max_concurrency`` requests in flight per event
  loop; a call waiting to retry does not hold a slot.

Run the asyncio runtime with ``time_scale=1`` against a real endpoint, so that
virtual times are wall times. The HTTP session belongs to the event loop that
first used it; :meth:`aclose` closes it (the asyncio runtime does so at the end
of a run) and the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import uuid
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import aiohttp

from megaactors.core.behaviour import LLMRequest
from megaactors.core.llm import PRICES, LLMReply, Price, TokenModel
from megaactors.errors import ParameterError

__all__ = ["RETRYABLE_STATUS", "ChatCompletionsClient", "LLMClientError", "duration_s", "retry_after_s"]

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
DEFAULT_SYSTEM_PROMPT = "You are one agent of a large multi-agent organisation. Answer briefly."


class LLMClientError(RuntimeError):
    """A chat completion failed for good; the text says why (status, body, attempts)."""


class ChatCompletionsClient:
    """Chat completions from an OpenAI-compatible server, with retries and a cap."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
        max_concurrency: int = 16,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        tokens: TokenModel | None = None,
        price: Price | None = None,
        idempotency_header: str = "Idempotency-Key",
        extra_body: dict[str, Any] | None = None,
        call_log: str | Path | None = None,
        jitter_seed: int | None = None,
        stream: bool = False,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ParameterError(f"base url must start with http:// or https://, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ParameterError(f"model must be a non-empty string, got {model!r}")
        _number("timeout_s", timeout_s, positive=True)
        _number("backoff_s", backoff_s)
        _number("backoff_max_s", backoff_max_s)
        for name, value, minimum in (("max_retries", max_retries, 0), ("max_concurrency", max_concurrency, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ParameterError(f"{name.replace('_', ' ')} must be an integer >= {minimum}, got {value!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self.max_concurrency = max_concurrency
        self.system_prompt = system_prompt
        self.tokens = tokens if tokens is not None else TokenModel()
        self.price = price if price is not None else PRICES.get(model, Price(0.0, 0.0))
        self.idempotency_header = idempotency_header
        self.extra_body = dict(extra_body or {})
        self.call_log = Path(call_log) if call_log is not None else None
        """Where every attempt is logged (JSON lines), or None."""
        self.stream = bool(stream)
        """Whether answers come as server-sent events (the call log then has ``ttft_s``)."""
        self._jitter = random.Random(jitter_seed)
        self.requests = 0
        """HTTP requests sent (attempts, retries included)."""
        self.retries = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._semaphore: asyncio.Semaphore | None = None

    # ------------------------------------------------------------------ the LLM protocol

    async def acomplete(
        self, agent: int, call_index: int, request: LLMRequest, memory_tokens: int, new_tokens: int
    ) -> LLMReply:
        """Call ``call_index`` of ``agent``: one chat completion, accounted from its usage."""
        prompt = request.prompt
        if prompt is None:
            prompt = (
                f"Agent {agent}, step {call_index} ({request.stage or 'chat'}): "
                f"{new_tokens} new tokens of messages, {memory_tokens} tokens of memory. Reply in a few words."
            )
        max_tokens = request.output_tokens if request.output_tokens is not None else self.tokens.output_tokens
        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": prompt}]
        t0 = time.monotonic()
        data = await self.chat(messages, max_tokens=max_tokens)
        latency = time.monotonic() - t0
        tokens_in, tokens_out, text = _usage_and_text(data, self.url)
        return LLMReply(
            tokens_in, tokens_out, latency, self.price.cost(tokens_in, tokens_out), request.stage, call_index, text
        )

    async def chat(
        self, messages: list[dict[str, Any]], *, max_tokens: int | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """POST one chat completion (retrying as configured); return the response JSON."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, **self.extra_body}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if self.stream:
            body["stream"], body["stream_options"] = True, {"include_usage": True}
        headers = {self.idempotency_header: idempotency_key or uuid.uuid4().hex}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        session, semaphore = self._session_for_loop()
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        for attempt in range(self.max_retries + 1):
            retry_after, status, ts, t0 = 0.0, 0, time.time(), time.monotonic()
            data: dict[str, Any] | None = None
            ttft: list[float] = []
            try:
                async with semaphore:
                    self.requests += 1
                    ts, t0 = time.time(), time.monotonic()
                    async with session.post(self.url, json=body, headers=headers, timeout=timeout) as resp:
                        status = resp.status
                        if resp.status == 200 and self.stream and resp.content_type == "text/event-stream":
                            data = await self._streamed(resp, t0, ttft)
                        elif resp.status == 200:  # a server that ignores stream=true answers in one piece
                            data = await self._json_object(resp)
                        else:
                            text = (await resp.text())[:300]
                            problem = f"HTTP {resp.status}: {text}"
                            if resp.status not in RETRYABLE_STATUS:
                                self._log(ts, time.monotonic() - t0, status, attempt, None, ttft)
                                raise LLMClientError(f"{self.url} answered {problem}")
                            retry_after = retry_after_s(resp.headers, resp.status)
            except TimeoutError:
                problem = f"no complete answer within {self.timeout_s:g} s"
            except aiohttp.ClientError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            self._log(ts, time.monotonic() - t0, status, attempt, data, ttft)
            if data is not None:
                return data
            if attempt == self.max_retries:
                raise LLMClientError(f"chat completion at {self.url} failed after {attempt + 1} attempt(s): {problem}")
            self.retries += 1
            jitter = self._jitter.random() * min(self.backoff_max_s, self.backoff_s * 2**attempt)
            await asyncio.sleep(min(self.backoff_max_s, max(jitter, retry_after)))
        raise AssertionError("unreachable")  # pragma: no cover

    def _log(
        self, ts: float, latency_s: float, status: int, attempt: int, data: dict[str, Any] | None, ttft: list[float]
    ) -> None:
        """Append one attempt to the call log (if any); ``ttft`` holds its time to
        first token when it streamed one."""
        if self.call_log is None:
            return
        usage = data.get("usage") if data is not None else None
        usage = usage if isinstance(usage, dict) else {}
        line = {
            "ts": round(ts, 6),
            "latency_s": round(latency_s, 6),
            "input_tokens": usage.get("prompt_tokens"),
            "output_tokens": usage.get("completion_tokens"),
            "status": status,
            "model": self.model,
            "attempt": attempt,
        }
        if self.stream:
            line["ttft_s"] = round(ttft[0], 6) if ttft else None
        with self.call_log.open("a") as f:
            f.write(json.dumps(line) + "\n")

    async def _json_object(self, resp: aiohttp.ClientResponse) -> dict[str, Any]:
        try:
            data = await resp.json(content_type=None)
        except ValueError as exc:
            raise LLMClientError(f"{self.url} answered HTTP 200 with a body that is not JSON") from exc
        if not isinstance(data, dict):
            raise LLMClientError(f"{self.url} answered a JSON {type(data).__name__}, not an object")
        return data

    async def _streamed(self, resp: aiohttp.ClientResponse, t0: float, ttft: list[float]) -> dict[str, Any]:
        """An answer sent as server-sent events, put together as a non-streamed one
        would be; the monotonic seconds from ``t0`` to the first content go into ``ttft``."""
        text: list[str] = []
        usage: Any = None
        async for raw in resp.content:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue  # blank lines between events, comments, other fields
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            try:
                chunk = json.loads(payload)
            except ValueError as exc:
                raise LLMClientError(f"{self.url} streamed an event that is not JSON: {payload[:100]!r}") from exc
            if not isinstance(chunk, dict):
                raise LLMClientError(f"{self.url} streamed a JSON {type(chunk).__name__}, not an object")
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") if isinstance(choice, dict) else None
                content = delta.get("content") if isinstance(delta, dict) else None
                if isinstance(content, str) and content:
                    if not ttft:
                        ttft.append(time.monotonic() - t0)
                    text.append(content)
        return {"choices": [{"message": {"role": "assistant", "content": "".join(text)}}], "usage": usage}

    # ------------------------------------------------------------------ session

    def _session_for_loop(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            self._loop = loop
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self.max_concurrency))
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
        return self._session, self._semaphore  # type: ignore[return-value]

    @property
    def session_open(self) -> bool:
        """True while an HTTP session is open."""
        return self._session is not None and not self._session.closed

    async def aclose(self) -> None:
        """Close the HTTP session (the next call opens a new one)."""
        session, self._session, self._loop, self._semaphore = self._session, None, None, None
        if session is not None and not session.closed:
            await session.close()

    async def __aenter__(self) -> ChatCompletionsClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"ChatCompletionsClient({self.url!r}, model={self.model!r}, max_concurrency={self.max_concurrency})"


def _number(name: str, value: Any, *, positive: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf")
    if not ok or (positive and value == 0):
        raise ParameterError(f"{name} must be a finite number {'>' if positive else '>='} 0, got {value!r}")


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def retry_after_s(headers: Any, status: int, now: float | None = None) -> float:
    """How long the server asks a client to wait: ``Retry-After`` (seconds or an HTTP
    date) or, on a 429, the larger of the ``x-ratelimit-reset-*`` durations; 0 if none."""
    value = headers.get("Retry-After")
    if value is not None:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                when = parsedate_to_datetime(value).timestamp()
            except (TypeError, ValueError):
                return 0.0
            return max(0.0, when - (time.time() if now is None else now))
    if status != 429:
        return 0.0
    waits = [duration_s(headers.get(h)) for h in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")]
    return max(waits)


def duration_s(value: str | None) -> float:
    """A rate-limit reset like ``1s``, ``6m0s``, ``20ms`` or ``0.5`` in seconds (0 if unreadable)."""
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        parts = _DURATION.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value.strip():
            return 0.0
        return sum(float(n) * _UNIT_S[u] for n, u in parts)


def _usage_and_text(data: dict[str, Any], url: str) -> tuple[int, int, str | None]:
    usage = data.get("usage")
    if not isinstance(usage, dict):
        raise LLMClientError(f"{url} answered without a 'usage' object: token counts are unknown")
    counts = []
    for field in ("prompt_tokens", "completion_tokens"):
        value = usage.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise LLMClientError(f"{url} answered usage.{field} = {value!r}, expected a non-negative integer")
        counts.append(value)
    text = None
    choices = data.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            text = message["content"]
    return counts[0], counts[1], text
