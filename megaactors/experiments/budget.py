"""Bounded runs: what a run will cost, estimated before it starts, and the budget
that refuses runs that would not fit.

The estimate needs no organisation: messages come from the closed forms, memory from
bytes per agent and per message of one round measured on this project's reference
machine (``python benchmarks/run_memory.py`` measures peak memory of fresh processes
and prints it beside these estimates; the constants below are rounded up from it).
The budget's defaults come from the machine: the memory a run may use is 90 % of the
physical memory (or of the cgroup's limit, when lower), and the default agent cap is
what fits in it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from megaactors.experiments.closed_forms import closed_form_messages
from megaactors.validation import Param

if TYPE_CHECKING:
    from megaactors.experiments.spec import RunSpec

__all__ = [
    "DEFAULT_MAX_MESSAGES",
    "MAX_AGENTS",
    "MAX_MESSAGES",
    "Budget",
    "Estimate",
    "estimate",
    "format_bytes",
    "machine_memory",
]

BASE_BYTES = 64 << 20
"""The interpreter with megaactors, numpy and msgpack imported (measured 56 MB)."""
BYTES_PER_AGENT = {"sim": 1_600, "asyncio": 6_000, "pykka": 40_000}
"""An agent's records, queues and (live runtimes) its task or thread: 1,221 bytes
fitted over the sim runs; 2.6–4.6 KB measured on asyncio and 25 KB on pykka."""
BYTES_PER_ROUND_MESSAGE = {"flat": 16, "two-tier": 24, "star": 24, "hierarchy": 24, "graph": 48}
"""Per message of one round (in-queue references and batches): 12.2 bytes fitted,
up to 19 in two-tier; rounds do not add up, so more rounds cost no more memory. On a
graph organisation (every topology but the built-ins) each message is also an edge
held in the adjacency arrays and listed once per send: a million-node scale-free run
peaked at 1,780 bytes per agent with 6 messages per agent (benchmarks/graph_million.py)."""
BYTES_PER_TRACED_CALL = 100
"""Trace rows (state transitions) per LLM call, with ``trace`` on (85 measured)."""
MEMORY_SHARE = 0.9
"""Share of the machine's memory one run may use."""
DEFAULT_MAX_MESSAGES = 10**9
"""Default message cap: about 15 minutes of simulation at the measured 1.1–2 M messages/s."""

MAX_AGENTS = Param(
    "max_agents", int, "refuse runs of more agents (default: what this machine's memory holds)", minimum=1,
    maximum=10**12,
)  # fmt: skip
MAX_MESSAGES = Param(
    "max_messages", int, "refuse runs whose closed-form message count exceeds this (default 1e9)", minimum=0,
    maximum=10**18,
)  # fmt: skip


@dataclass(frozen=True)
class Estimate:
    """What a run will cost, before it starts."""

    messages: int | None
    """Closed-form messages of every round (``None``: the behaviour has no closed form)."""
    round_messages: int
    """Messages of one chat round (what in-queues may hold at once; for other
    behaviours a guess that sizes memory)."""
    memory_bytes: int
    """Peak resident memory, rounded up."""

    def describe(self) -> str:
        messages = "messages unknown" if self.messages is None else f"{self.messages:,} messages"
        return f"{messages}, {format_bytes(self.memory_bytes)} of memory"


def estimate(spec: RunSpec) -> Estimate:
    """The messages and peak memory of ``spec``'s run, from closed forms and the
    measured constants above. Messages are known for the chat round only; for any
    other behaviour memory is sized as if it were one chat round."""
    per_round = closed_form_messages(spec.topology, spec.agents, spec.group_size, 1, spec.degree)
    memory = BASE_BYTES + BYTES_PER_AGENT.get(spec.runtime, max(BYTES_PER_AGENT.values())) * spec.agents
    memory += BYTES_PER_ROUND_MESSAGE.get(spec.topology, BYTES_PER_ROUND_MESSAGE["graph"]) * per_round
    if spec.trace:
        calls = spec.agents * (spec.rounds + 1) + per_round * spec.rounds  # at most one call per message read
        memory += BYTES_PER_TRACED_CALL * calls
    messages = per_round * spec.rounds if spec.behaviour == "chat-round" else None
    return Estimate(messages, per_round, memory)


@dataclass(frozen=True)
class Budget:
    """Caps a run must fit under; :meth:`machine` fills the ones not given."""

    max_agents: int
    max_messages: int
    memory_bytes: int
    """The memory one run may use."""

    @classmethod
    def machine(cls, max_agents: int | None = None, max_messages: int | None = None) -> Budget:
        """This machine's budget; ``max_agents`` and ``max_messages`` override the defaults."""
        memory = int(machine_memory() * MEMORY_SHARE)
        if max_agents is None:
            max_agents = max(1, (memory - BASE_BYTES) // (BYTES_PER_AGENT["sim"] + 2 * BYTES_PER_ROUND_MESSAGE["star"]))
        if max_messages is None:
            max_messages = DEFAULT_MAX_MESSAGES
        return cls(MAX_AGENTS.check(max_agents), MAX_MESSAGES.check(max_messages), memory)

    def refusal(self, spec: RunSpec) -> str | None:
        """Why ``spec`` does not fit (with the estimate), or None when it does."""
        cost = estimate(spec)
        if spec.agents > self.max_agents:
            why = f"{spec.agents:,} agents exceed the budget of {self.max_agents:,} (--max-agents)"
        elif cost.messages is not None and cost.messages > self.max_messages:
            why = f"an estimated {cost.messages:,} messages exceed the budget of {self.max_messages:,} (--max-messages)"
        elif cost.memory_bytes > self.memory_bytes:
            why = (
                f"an estimated {format_bytes(cost.memory_bytes)} of memory exceeds the "
                f"{format_bytes(self.memory_bytes)} this machine can give a run"
            )
        else:
            return None
        return f"{why}; estimate for {_shape(spec)}: {cost.describe()}"


def _shape(spec: RunSpec) -> str:
    size = {
        "two-tier": f", G={spec.group_size:,}",
        "hierarchy": f", fan-out {spec.fanout}",
        "small-world": f", degree {spec.degree:g}",
        "scale-free": f", degree {spec.degree:g}",
        "random": f", mean degree {spec.degree:g}",
    }.get(spec.topology, "")
    what = "" if spec.behaviour == "chat-round" else f" of {spec.behaviour}"
    return f"{spec.topology} N={spec.agents:,}{size}, {spec.rounds:,} round(s){what} on {spec.runtime}"


def machine_memory() -> int:
    """Bytes of physical memory, or the cgroup's memory limit when it is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def format_bytes(n: float) -> str:
    """``1.5 GB`` (decimal units)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{int(n)} bytes"
