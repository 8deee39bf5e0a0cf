"""A provider's rate limits, retries and failures, as a seeded model.

Real LLM providers cap requests per minute (RPM) and tokens per minute (TPM) with
token buckets refilled continuously; a call over a limit gets HTTP 429 and a
``Retry-After``; calls also fail (5xx) or time out. :class:`ProviderModel` decides,
for one *attempt* of a call at a given time, what happens to it — an
:class:`Answered` call, a :class:`Retrying` one (after how long, and why), or a
:class:`CallFailed` one (retries exhausted) — and keeps the buckets
(:class:`LimitState`). Runtimes share this one retry path: the simulation turns a
``Retrying`` into a timer event in virtual time, a live runtime into a sleep of
``after_s × time_scale`` wall seconds.

Injected LLM faults (``--faults llm=P``, :class:`~megaactors.network.FaultSpec`'s
``llm``, per timed window too) take the same path: an attempt fails with kind
``fault`` after its time to first token, and is retried like a server error. One
uniform draw per attempt decides both: below ``failure_rate`` a server error, then
with probability ``llm`` (of the rest) an injected fault — the two are independent,
and a run with no injected fault draws exactly as before.

Every random draw (backoff jitter, failures, a retried attempt's latency) comes from
the counter-based streams of :mod:`megaactors.core.llm`, keyed by (seed, agent, call
index, attempt), so results do not depend on scheduling order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from megaactors.core.llm import LatencyModel, LLMReply, stream_normal, stream_uniform
from megaactors.errors import ParameterError
from megaactors.network.faults import LLM_FAULT, FaultSpec

__all__ = [
    "FAILURE_KINDS",
    "LIMIT_SCOPES",
    "Answered",
    "CallFailed",
    "LimitState",
    "ProviderModel",
    "Retrying",
    "TokenBucket",
    "full_jitter",
]

LIMIT_SCOPES = ("run", "group")
"""Who shares one pair of buckets: every agent of the run, or the agents of one group."""
FAILURE_KINDS = ("rate_limited", "error", "timeout", "too_large", "fault")
"""Why an attempt did not answer: HTTP 429, a server error (5xx), no answer within the
timeout, a call larger than the token bucket (it can never run), an injected fault
(a fault spec's ``llm``)."""

_JITTER_STREAM = 21
_FAILURE_STREAM = 22
_RETRY_LATENCY_STREAM = 23
_ATTEMPTS = 1 << 16
"""Attempt numbers are folded into a stream index as ``call_index * _ATTEMPTS + attempt``."""


@dataclass(slots=True)
class TokenBucket:
    """``capacity`` units refilled continuously at ``rate`` per second (full at start)."""

    capacity: float
    rate: float
    level: float = math.nan
    updated: float = 0.0

    def __post_init__(self) -> None:
        if math.isnan(self.level):
            self.level = self.capacity

    def wait_for(self, now: float, amount: float) -> float:
        """Seconds until ``amount`` units are there (0: they are, now)."""
        level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.level, self.updated = level, now
        return 0.0 if level >= amount else (amount - level) / self.rate

    def take(self, amount: float) -> None:
        """Remove ``amount`` units (after :meth:`wait_for` said 0)."""
        self.level -= amount


@dataclass(slots=True)
class LimitState:
    """The buckets of a run, by scope key (``-1`` for the run, a group id per group),
    and the attempts injected faults failed so far: part of a simulation's state."""

    requests: dict[int, TokenBucket] = field(default_factory=dict)
    tokens: dict[int, TokenBucket] = field(default_factory=dict)
    faults: int = 0
    """Attempts failed by an injected LLM fault (the result's ``faults["llm"]``)."""


@dataclass(slots=True)
class Answered:
    """The attempt is answered: ``reply`` arrives after its latency."""

    reply: LLMReply


@dataclass(slots=True)
class Retrying:
    """The attempt failed for ``kind``; the next one starts ``after_s`` from now (the
    failed attempt's time plus the backoff); ``backoff_s`` is the part spent waiting."""

    kind: str
    after_s: float
    backoff_s: float


@dataclass(slots=True)
class CallFailed:
    """The call failed for good (``kind`` of its last attempt), ``after_s`` from now;
    the behaviour receives ``reply`` (``reply.failed`` names the kind)."""

    kind: str
    after_s: float
    reply: LLMReply


Outcome = Answered | Retrying | CallFailed


def full_jitter(seed: int, agent: int, call_index: int, attempt: int, base_s: float, cap_s: float) -> float:
    """Exponential backoff with full jitter: uniform in ``[0, min(cap, base·2^attempt)]``."""
    u = stream_uniform(seed, agent, call_index * _ATTEMPTS + attempt, _JITTER_STREAM)
    return u * min(cap_s, base_s * 2.0**attempt)


@dataclass(frozen=True)
class ProviderModel:
    """Rate limits, retry policy and failures of one provider endpoint."""

    rpm: float | None = None
    """Requests per minute (None: no limit)."""
    tpm: float | None = None
    """Tokens (prompt + reply) per minute (None: no limit)."""
    scope: str = "run"
    """``run``: one pair of buckets for all agents; ``group``: one per group."""
    max_retries: int = 3
    base_s: float = 1.0
    """Backoff of the first retry (at most; full jitter draws below it)."""
    cap_s: float = 60.0
    """Largest backoff."""
    failure_rate: float = 0.0
    """Probability that an attempt fails with a server error (after its time to first token)."""
    timeout_s: float | None = None
    """An attempt slower than this fails at this time (None: no timeout)."""
    seed: int = 0
    faults: FaultSpec | None = None
    """Injected LLM faults: the spec's ``llm`` probability (and its windows'), per attempt."""

    def __post_init__(self) -> None:
        for name in ("rpm", "tpm", "timeout_s"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise ParameterError(f"{name} must be a finite number > 0, got {value!r}")
        if self.scope not in LIMIT_SCOPES:
            raise ParameterError(f"unknown limit scope {self.scope!r}; expected one of {', '.join(LIMIT_SCOPES)}")
        if not isinstance(self.max_retries, int) or isinstance(self.max_retries, bool) or self.max_retries < 0:
            raise ParameterError(f"max retries must be an integer >= 0, got {self.max_retries!r}")
        if self.max_retries >= _ATTEMPTS:
            raise ParameterError(f"max retries must be < {_ATTEMPTS}, got {self.max_retries}")
        if not 0.0 <= self.failure_rate < 1.0:
            raise ParameterError(f"llm failure rate must be >= 0 and < 1, got {self.failure_rate!r}")
        for name in ("base_s", "cap_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value < math.inf):
                raise ParameterError(f"{name} must be a finite number >= 0, got {value!r}")

    @property
    def active(self) -> bool:
        """Whether any limit, failure or timeout is set (else every call is answered)."""
        return bool(self.rpm or self.tpm or self.failure_rate or self.timeout_s) or self.injects_faults

    @property
    def injects_faults(self) -> bool:
        """Whether injected LLM faults can fail an attempt."""
        return self.faults is not None and self.faults.may(LLM_FAULT)

    def check_call_size(self, tokens: int) -> None:
        """Refuse, before a run, a TPM limit that even the smallest call exceeds."""
        if self.tpm is not None and tokens > self.tpm:
            raise ParameterError(f"tpm {self.tpm:g} is lower than one call's tokens ({tokens}): no call could ever run")

    def check_timeout(self, latency: LatencyModel | None, output_tokens: int) -> None:
        """Refuse, before a run, a timeout that every call of a constant latency exceeds."""
        if self.timeout_s is None or latency is None or latency.sigma:
            return
        least = latency.sample(0.0, output_tokens)
        if least > self.timeout_s:
            raise ParameterError(
                f"llm timeout {self.timeout_s:g} s is below every call's latency ({least:g} s): no call could answer"
            )

    def attempt(
        self,
        state: LimitState,
        now: float,
        agent: int,
        group: int,
        attempt: int,
        reply: LLMReply,
        latency: LatencyModel | None,
        elapsed_s: float,
    ) -> Outcome:
        """What happens to attempt ``attempt`` (0 first) of the call ``reply`` (drawn as
        if unlimited) of ``agent`` (in ``group``) started at ``now``; ``elapsed_s``
        since the call's first attempt. A retried attempt redraws the random part of
        its latency from ``latency`` (when known)."""
        index = reply.call_index
        kind, retry_after = self._admit(state, now, group, reply.tokens_in + reply.tokens_out)
        spent = 0.0
        if kind is None:
            if attempt and latency is not None and latency.sigma:  # a retry redraws its latency
                z = stream_normal(self.seed, agent, index * _ATTEMPTS + attempt, _RETRY_LATENCY_STREAM)
                reply = replace(reply, latency_s=latency.sample(z, reply.tokens_out, reply.tokens_in))
            kind, spent = self._answer(agent, attempt, reply, latency, now)
            if kind is None:
                return Answered(reply)
        if kind == "too_large" or attempt >= self.max_retries:
            return CallFailed(kind, spent, reply.failed_as(kind, elapsed_s + spent))
        backoff = max(retry_after, full_jitter(self.seed, agent, index, attempt, self.base_s, self.cap_s))
        return Retrying(kind, spent + backoff, backoff)

    def _admit(self, state: LimitState, now: float, group: int, tokens: int) -> tuple[str | None, float]:
        """Take one request and ``tokens`` from the buckets at ``now``: ``(None, 0)``;
        or ``("rate_limited", retry-after)`` (nothing taken); or ``("too_large", 0)``."""
        key = group if self.scope == "group" else -1
        wait_req = wait_tok = 0.0
        req_bucket = tok_bucket = None
        if self.rpm is not None:
            req_bucket = state.requests.get(key)
            if req_bucket is None:
                req_bucket = state.requests[key] = TokenBucket(self.rpm, self.rpm / 60.0, updated=now)
            wait_req = req_bucket.wait_for(now, 1)
        if self.tpm is not None:
            if tokens > self.tpm:
                return "too_large", 0.0
            tok_bucket = state.tokens.get(key)
            if tok_bucket is None:
                tok_bucket = state.tokens[key] = TokenBucket(self.tpm, self.tpm / 60.0, updated=now)
            wait_tok = tok_bucket.wait_for(now, tokens)
        if wait_req or wait_tok:
            return "rate_limited", max(wait_req, wait_tok)
        if req_bucket is not None:
            req_bucket.take(1)
        if tok_bucket is not None:
            tok_bucket.take(tokens)
        return None, 0.0

    def _answer(
        self, agent: int, attempt: int, reply: LLMReply, latency: LatencyModel | None, now: float
    ) -> tuple[str | None, float]:
        """An attempt the limits let through: ``(None, latency)`` answered, or
        ``("error" | "fault", time to first token)`` or ``("timeout", timeout)``."""
        rate = self.failure_rate
        injected = self.faults.probability(LLM_FAULT, "", now) if self.faults is not None else 0.0
        if rate or injected:
            u = stream_uniform(self.seed, agent, reply.call_index * _ATTEMPTS + attempt, _FAILURE_STREAM)
            kind = "error" if u < rate else "fault" if u < rate + injected * (1.0 - rate) else None
            if kind is not None:
                decode = latency.per_output_token_s * reply.tokens_out if latency is not None else 0.0
                return kind, max(0.0, reply.latency_s - decode)
        if self.timeout_s is not None and reply.latency_s > self.timeout_s:
            return "timeout", self.timeout_s
        return None, reply.latency_s
