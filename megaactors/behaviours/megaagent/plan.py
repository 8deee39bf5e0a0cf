"""What a MegaAgent run is made of: the recruitment tree, tokens per LLM call, the
function-call loop, monitoring and the reference code's outer loop.

Every type here is a frozen dataclass that checks its values and names the one that
is wrong; :class:`~megaactors.behaviours.megaagent.agent.MegaAgent` reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MERGING",
    "PLANNING",
    "STAGES",
    "TASK_SOLVING",
    "Monitoring",
    "OuterLoop",
    "StageTokens",
    "TokenPlan",
    "TreePlan",
    "Work",
]

PLANNING, TASK_SOLVING, MERGING = "planning", "task_solving", "merging"
STAGES = (PLANNING, TASK_SOLVING, MERGING)


def check_int(name: str, value: int, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_probability(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")


def check_seconds(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")


@dataclass(frozen=True)
class TreePlan:
    """How many agents the run recruits and how: ``fanouts[level]`` caps the children
    of an admin at that level. An admin whose subtree must hold ``size`` agents
    recruits as few children as can hold the ``size - 1`` others within the fan-outs
    below (an admin recruits only the help it needs) and splits those others among
    them as evenly as possible, larger shares first."""

    agents: int
    fanouts: tuple[int, ...]

    def __post_init__(self) -> None:
        check_int("agents", self.agents, 1)
        object.__setattr__(self, "fanouts", tuple(self.fanouts))
        for i, f in enumerate(self.fanouts):
            check_int(f"fanout of level {i}", f, 1)
        if self.capacity < self.agents:
            raise ValueError(
                f"{self.agents} agents do not fit in a tree with fan-outs {self.fanouts} "
                f"(at most {self.capacity}); add a level or raise a fan-out"
            )

    @property
    def capacity(self) -> int:
        """Most agents a tree with these fan-outs holds."""
        return self._capacity(self.fanouts)

    def split(self, size: int, level: int) -> list[int]:
        """Subtree sizes of the children of an admin at ``level`` whose subtree holds ``size``."""
        rest = size - 1
        if rest <= 0:
            return []
        below = self._capacity(self.fanouts[level + 1 :])
        k = min(self.fanouts[level], -(-rest // below))
        q, r = divmod(rest, k)
        return [q + 1] * r + [q] * (k - r)

    def per_level(self) -> list[int]:
        """Agents at each level of the tree the plan builds."""
        counts: list[int] = []
        frontier = [self.agents]
        level = 0
        while frontier:
            counts.append(len(frontier))
            frontier = [c for s in frontier for c in self.split(s, level)]
            level += 1
        return counts

    @property
    def levels(self) -> int:
        """Levels of the tree, the boss's included."""
        return len(self.per_level())

    @property
    def max_fanout(self) -> int:
        return max(self.fanouts, default=1)

    @classmethod
    def balanced(cls, agents: int, fanout: int) -> TreePlan:
        """The shallowest tree of ``agents`` with at most ``fanout`` children per admin."""
        check_int("fanout", fanout, 2)
        fanouts: tuple[int, ...] = ()
        while cls._capacity(fanouts) < agents:
            fanouts += (fanout,)
        return cls(agents, fanouts)

    @classmethod
    def flat(cls, agents: int) -> TreePlan:
        """No hierarchy: the boss recruits every other agent into its one group."""
        return cls(agents, (max(1, agents - 1),))

    @classmethod
    def three_levels(cls, fanout: int) -> TreePlan:
        """Boss → ``fanout`` admins → ``fanout`` workers each: the paper's fixed three
        levels, ``1 + fanout + fanout²`` agents."""
        check_int("fanout", fanout, 1)
        return cls(1 + fanout + fanout * fanout, (fanout, fanout))

    @staticmethod
    def _capacity(fanouts: tuple[int, ...]) -> int:
        cap = 1
        for f in reversed(fanouts):
            cap = 1 + f * cap
        return cap


@dataclass(frozen=True)
class StageTokens:
    """Tokens of one LLM call of a stage: the prompt beyond the system prompt, the
    memory window and the batch just taken (``new_tokens``, at least 1 so that every
    call leaves the same items in the memory window), and the reply."""

    new_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        check_int("new tokens", self.new_tokens, 1)
        check_int("output tokens", self.output_tokens, 1)


@dataclass(frozen=True)
class TokenPlan:
    """Per-stage token counts of every LLM call."""

    planning: StageTokens
    task_solving: StageTokens
    merging: StageTokens

    def stage(self, name: str) -> StageTokens:
        return getattr(self, name)


@dataclass(frozen=True)
class Monitoring:
    """Three-level monitoring: each validation fails with its probability and
    triggers a retry of the agent whose work failed; one agent may be retried
    ``retry_cap`` times (the paper: 30 per agent per round)."""

    enabled: bool = True
    checklist_failure: float = 0.2
    """An agent's own checklist rejects its work (level 1)."""
    review_failure: float = 0.2
    """An admin rejects a child's delivery (level 2)."""
    boss_failure: float = 0.1
    """The boss rejects an admin's merged result (level 3)."""
    retry_cap: int = 30

    def __post_init__(self) -> None:
        check_probability("checklist failure probability", self.checklist_failure)
        check_probability("review failure probability", self.review_failure)
        check_probability("boss failure probability", self.boss_failure)
        check_int("retry cap", self.retry_cap, 0)


@dataclass(frozen=True)
class Work:
    """The function-call loop: LLM calls per task and per retry, tool durations, and
    the optional costs of waking up, reviewing and writing to shared storage."""

    task_calls: int = 4
    """LLM calls (each followed by a tool call) a worker makes for its task."""
    deliveries: int = 1
    """Parts a worker delivers its task in; its admin reviews each before it goes on."""
    plan_calls: int = 3
    """LLM calls of an admin's planning loop (each followed by a git operation: writing
    the plan, then recruiting)."""
    retry_calls: int = 1
    """LLM calls (each followed by a tool call) to fix rejected work."""
    git_s: float = 0.5
    """Seconds one git operation holds the global mutex."""
    tool_s: float = 1.0
    """Seconds of any other tool call (running code, reading files)."""
    git_lock: bool = True
    """Serialise git operations behind one global mutex (False: no mutex)."""
    notes: bool = True
    """Share a note with the next sibling on finishing (intra-group and admin chat)."""
    review_tokens: int = 0
    """Prompt tokens a reviewer reads for each delivery its review covers (the
    delivered part itself), so a review's prompt, and with prefill its latency,
    grows with the number of deliveries it covers. (A merge's prompt is a stage
    prompt like any other: the paper's merging tokens are fewer than its admins'
    deliveries would fill.)"""
    poll_s: float = 0.0
    """An idle agent looks at its in-queue every ``poll_s`` seconds (§2.2.3: Idle
    sleeps Δt_poll): a batch waits a uniform part of it before its first LLM call,
    spent inside Processing. 0: an agent is woken at once (the reference code starts
    a thread on every enqueue)."""
    conflict_probability: float = 0.0
    """A git write that had to wait for the mutex (someone committed just before it)
    was based on a stale commit and conflicts with this probability: the writer reads
    the file again (one LLM call) and writes again; each redo counts as a retry."""

    def __post_init__(self) -> None:
        check_int("task calls", self.task_calls, 1)
        check_int("plan calls", self.plan_calls, 1)
        check_int("deliveries", self.deliveries, 1)
        if self.deliveries > self.task_calls:
            raise ValueError(f"{self.deliveries} deliveries need at least as many task calls, got {self.task_calls}")
        check_int("retry calls", self.retry_calls, 1)
        check_int("review tokens", self.review_tokens, 0)
        for name in ("git_s", "tool_s", "poll_s"):
            check_seconds(name.replace("_", " "), getattr(self, name))
        check_probability("conflict probability", self.conflict_probability)


@dataclass(frozen=True)
class OuterLoop:
    """The reference code's main loop after the tree's work is merged (``main.py``):
    in each round every agent whose TODO list is still non-empty is re-prompted, and
    the round ends only when every agent is idle again (all threads joined); then the
    boss proofreads every output file.

    An agent's TODO list is still non-empty in round ``r`` with probability
    ``stale_todo[r]``; a re-prompted agent makes ``reminder_calls`` LLM calls (the
    first followed by a git write, the TODO update; the others by a tool call).
    Proofreading is one LLM call and one file read per child of the boss, then one
    code run and a closing call. ``poll_s`` is how often the loop looks whether every
    agent is idle (it notices after a uniform part of it). The loop's reminders and
    the agents' "done" replies travel along the hierarchy (the loop is not an agent)
    and cost no LLM call."""

    enabled: bool = False
    stale_todo: tuple[float, ...] = (0.5, 1 / 3)
    reminder_calls: int = 6
    poll_s: float = 1.0
    proofread: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "stale_todo", tuple(self.stale_todo))
        for i, p in enumerate(self.stale_todo):
            check_probability(f"stale TODO probability of round {i + 1}", p)
        check_int("reminder calls", self.reminder_calls, 1)
        check_seconds("outer loop poll", self.poll_s)

    @property
    def rounds(self) -> int:
        return len(self.stale_todo) if self.enabled else 0
