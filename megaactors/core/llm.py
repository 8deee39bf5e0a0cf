"""Simulated LLM: seeded latency, a token model and a price table. No network.

Randomness is counter-based: the latency of call ``k`` of agent ``a`` is a pure
function of ``(seed, a, k)``, so results never depend on the order in which a
runtime happens to schedule agents, and an agent carries no generator object (a
million agents cost nothing extra).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from megaactors.core.shared_ints import SHARED_BELOW, SHARED_COUNTS

if TYPE_CHECKING:
    from megaactors.core.behaviour import LLMRequest

__all__ = [
    "DEFAULT_MODEL",
    "PRICES",
    "LLMReply",
    "LatencyModel",
    "Price",
    "SimulatedLLM",
    "TokenModel",
    "stream_bits",
    "stream_normal",
    "stream_uniform",
]

_MASK = (1 << 64) - 1
_TWO_PI = 2.0 * math.pi
_sqrt, _log, _cos, _exp = math.sqrt, math.log, math.cos, math.exp
_new = object.__new__


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def stream_bits(seed: int, agent: int, index: int, stream: int = 0) -> int:
    """64 random bits determined by (seed, stream, agent, index) alone.

    CPython's tuple hash of integers (xxHash-based, independent of PYTHONHASHSEED)
    combines the key; a splitmix64 finaliser spreads it over all 64 bits."""
    x = hash((seed, stream, agent, index)) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK  # splitmix64 finaliser, inlined
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def stream_uniform(seed: int, agent: int, index: int, stream: int = 0) -> float:
    """A uniform number in (0, 1) determined by (seed, stream, agent, index) alone."""
    return ((stream_bits(seed, agent, index, stream) >> 11) + 0.5) / 9007199254740992.0


def stream_normal(seed: int, agent: int, index: int, stream: int = 0) -> float:
    """A standard normal number determined by (seed, stream, agent, index) alone
    (Box–Muller on two 32-bit halves of one draw)."""
    x = stream_bits(seed, agent, index, stream)
    u1 = ((x >> 32) + 0.5) / 4294967296.0
    u2 = ((x & 0xFFFFFFFF) + 0.5) / 4294967296.0
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)


@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million tokens."""

    input_per_m: float
    output_per_m: float

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.input_per_m + tokens_out * self.output_per_m) / 1e6


PRICES: dict[str, Price] = {
    # OpenAI list prices (standard tier, USD per 1M tokens) as published in 2024–2025.
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "free": Price(0.0, 0.0),
}
DEFAULT_MODEL = "gpt-4o-mini"


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Per-call latency: ``median_s·exp(sigma·z) + prefill_s_per_token·input_tokens +
    per_output_token_s·output_tokens`` for a standard normal ``z``.

    ``sigma = 0`` makes the first part constant (``median_s``); ``prefill_s_per_token = 0``
    (the default) makes latency independent of the prompt's length.
    """

    median_s: float = 1.0
    sigma: float = 0.5
    per_output_token_s: float = 0.02
    prefill_s_per_token: float = 0.0

    def __post_init__(self) -> None:
        values = (self.median_s, self.sigma, self.per_output_token_s, self.prefill_s_per_token)
        if not all(v >= 0 and math.isfinite(v) for v in values):
            raise ValueError(f"latency parameters must be finite and non-negative: {self}")

    def sample(self, z: float, output_tokens: int, input_tokens: int = 0) -> float:
        """Latency for a standard normal draw ``z``, a prompt of ``input_tokens`` and a
        reply of ``output_tokens``."""
        base = self.median_s * math.exp(self.sigma * z) if self.sigma else self.median_s
        if self.prefill_s_per_token:
            base += input_tokens * self.prefill_s_per_token
        return base + output_tokens * self.per_output_token_s


@dataclass(frozen=True, slots=True)
class TokenModel:
    """How many tokens a call reads and writes.

    Input = system prompt + the memory window (the last ``memory_window`` items the
    agent read or wrote) + the new tokens of the request (a batch costs
    ``ceil(bytes / bytes_per_token)`` per message). Output = the request's
    ``output_tokens`` or ``output_tokens`` here.
    """

    system_tokens: int = 300
    bytes_per_token: int = 4
    memory_window: int = 10
    output_tokens: int = 60

    def message_tokens(self, size_bytes: int) -> int:
        return -(-size_bytes // self.bytes_per_token)


@dataclass(slots=True)
class LLMReply:
    """What an LLM call cost and returned."""

    tokens_in: int
    tokens_out: int
    latency_s: float
    cost_usd: float
    stage: str = ""
    call_index: int = 0
    text: str | None = None
    failed: str | None = None
    """Why the call failed for good (``rate_limited``, ``error``, ``timeout``,
    ``too_large``: see :mod:`megaactors.providers.limits`), or None: it answered."""

    def failed_as(self, kind: str, latency_s: float) -> LLMReply:
        """This call failed for good with ``kind`` after ``latency_s``: its prompt was
        sent, nothing came back, nothing is billed."""
        return replace(self, tokens_out=0, latency_s=latency_s, cost_usd=0.0, text=None, failed=kind)


@dataclass(frozen=True, slots=True)
class SimulatedLLM:
    """A seeded stand-in for an LLM endpoint: latency, tokens and dollars.

    Immutable: the model's parameters are read once, when it is made."""

    seed: int = 0
    model: str = DEFAULT_MODEL
    latency: LatencyModel = field(default_factory=LatencyModel)
    tokens: TokenModel = field(default_factory=TokenModel)
    prices: dict[str, Price] = field(default_factory=lambda: dict(PRICES))
    _constants: tuple[Any, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.model not in self.prices:
            raise ValueError(f"no price for model {self.model!r}; known: {sorted(self.prices)}")
        tokens, latency, price = self.tokens, self.latency, self.prices[self.model]
        constants = (
            tokens.system_tokens,
            tokens.output_tokens,
            latency.median_s,
            latency.sigma,
            latency.per_output_token_s,
            latency.prefill_s_per_token,
            price.input_per_m,
            price.output_per_m,
        )
        object.__setattr__(self, "_constants", constants)

    @property
    def price(self) -> Price:
        return self.prices[self.model]

    def complete(
        self, agent: int, call_index: int, request: LLMRequest, memory_tokens: int, new_tokens: int
    ) -> LLMReply:
        """Cost and latency of call ``call_index`` of ``agent``, whose prompt holds
        ``memory_tokens`` of memory and ``new_tokens`` new tokens."""
        system, default_out, median, sigma, per_token, prefill, per_m_in, per_m_out = self._constants
        tokens_in = system + memory_tokens + new_tokens
        if tokens_in < SHARED_BELOW:  # a shared int: the reply dies long after it is made, cold
            tokens_in = SHARED_COUNTS[tokens_in]
        tokens_out = request.output_tokens
        if tokens_out is None:
            tokens_out = default_out
        if sigma:
            # stream_normal(seed, agent, call_index), inlined: this runs once per call
            x = hash((self.seed, 0, agent, call_index)) & _MASK
            x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
            x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
            x ^= x >> 31
            z = _sqrt(-2.0 * _log(((x >> 32) + 0.5) / 4294967296.0)) * _cos(
                _TWO_PI * ((x & 0xFFFFFFFF) + 0.5) / 4294967296.0
            )
            base = median * _exp(sigma * z)
        else:
            base = median
        if prefill:
            base += tokens_in * prefill
        # LLMReply(tokens_in, tokens_out, latency, cost, stage, call_index), made
        # without calling the class (see new_context): this runs once per call
        reply = _new(LLMReply)
        reply.tokens_in, reply.tokens_out = tokens_in, tokens_out
        reply.stage, reply.call_index = request.stage, call_index
        reply.latency_s = base + tokens_out * per_token
        reply.cost_usd = (tokens_in * per_m_in + tokens_out * per_m_out) / 1e6
        reply.text = reply.failed = None
        return reply

    def draw(
        self, agent: int, call_index: int, request: LLMRequest, memory_tokens: int, new_tokens: int
    ) -> tuple[int, int, float, float]:
        """:meth:`complete`'s prompt tokens, output tokens, latency and dollars, without
        the reply (see :meth:`reply_of`): the same computation, written out again as
        this runs once per call of the simulation."""
        system, default_out, median, sigma, per_token, prefill, per_m_in, per_m_out = self._constants
        tokens_in = system + memory_tokens + new_tokens
        if tokens_in < SHARED_BELOW:
            tokens_in = SHARED_COUNTS[tokens_in]
        tokens_out = request.output_tokens
        if tokens_out is None:
            tokens_out = default_out
        if sigma:  # stream_normal(seed, agent, call_index), inlined
            x = hash((self.seed, 0, agent, call_index)) & _MASK
            x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
            x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
            x ^= x >> 31
            z = _sqrt(-2.0 * _log(((x >> 32) + 0.5) / 4294967296.0)) * _cos(
                _TWO_PI * ((x & 0xFFFFFFFF) + 0.5) / 4294967296.0
            )
            base = median * _exp(sigma * z)
        else:
            base = median
        if prefill:
            base += tokens_in * prefill
        return (
            tokens_in,
            tokens_out,
            base + tokens_out * per_token,
            (tokens_in * per_m_in + tokens_out * per_m_out) / 1e6,
        )

    def reply_of(self, call_index: int, request: LLMRequest, tokens_in: int, latency_s: float) -> LLMReply:
        """The reply :meth:`complete` gives call ``call_index`` of ``request``, from the prompt
        tokens and latency :meth:`draw` gave it: nothing drawn again."""
        constants = self._constants
        tokens_out = request.output_tokens
        if tokens_out is None:
            tokens_out = constants[1]
        reply = _new(LLMReply)
        reply.tokens_in, reply.tokens_out = tokens_in, tokens_out
        reply.stage, reply.call_index = request.stage, call_index
        reply.latency_s = latency_s
        reply.cost_usd = (tokens_in * constants[6] + tokens_out * constants[7]) / 1e6
        reply.text = reply.failed = None
        return reply
