"""The MegaAgent mechanism on an organisation that already exists: the ``megaagent``
behaviour of the command line, sweeps and the run queue.

Instead of a lone boss recruiting its tree at run time, the organisation says who
works for whom: an agent reports to its ``parent``, or, without one, to the admin of
the group it is a member of. Every agent nobody reports to but somebody reports to
(the boss; without a boss, each admin at the top) starts the run: it plans, then
hands each of its team a subtask; an agent with a team of its own plans and hands on
in turn, one without does the work. Deliveries, reviews, merges and notes follow
:class:`~megaactors.behaviours.megaagent.agent.MegaAgent`, each on a channel the
organisation allows between the two agents (on a graph organisation: along its
edges). Agents outside every team stay idle.

An organisation without admins (flat with nobody's group, a star, a generated graph)
or whose graph lacks an edge between an agent and the one it reports to (either way)
is refused before the run starts, with the agent named.

Its constructor takes plain values (the command line's ``--behaviour-param``):
token counts per stage as ``[prompt, reply]``, the function-call loop and the
monitoring probabilities; ``seed`` is the run's.
"""

from __future__ import annotations

from typing import Any

from megaactors.behaviours.megaagent.agent import MegaAgent
from megaactors.behaviours.megaagent.plan import Monitoring, StageTokens, TokenPlan, TreePlan, Work
from megaactors.core.behaviour import AgentContext
from megaactors.core.messages import ADMIN, HIERARCHY, INTRA
from megaactors.core.organisation import Organisation
from megaactors.errors import OrganisationError

__all__ = ["OrganisedMegaAgent", "Structure"]

_PREFERENCE = (HIERARCHY, INTRA, ADMIN)
"""Channels tried, in order, for tasks and deliveries between two agents."""


class Structure:
    """Who reports to whom in an organisation, and over which channel."""

    def __init__(self, org: Organisation) -> None:
        n = org.n
        if not any(g >= 0 for g in org.admin_group):
            raise OrganisationError(
                f"behaviour 'megaagent' needs an organisation with admins; this {org.kind} organisation has none "
                "(give graph nodes a 'group' attribute, or use two-tier, hierarchy or flat)"
            )
        self.org = org
        admin_of = {g: a for a, g in enumerate(org.admin_group) if g >= 0}
        self.manager = [self._manager(org, a, admin_of) for a in range(n)]
        self.team: list[list[int]] = [[] for _ in range(n)]
        for a, m in enumerate(self.manager):
            if m >= 0:
                self.team[m].append(a)
        self.up = [self._channel(a, m) if m >= 0 else "" for a, m in enumerate(self.manager)]
        self.down = {(m, a): self._channel(m, a) for a, m in enumerate(self.manager) if m >= 0}
        self.level = [0] * n
        self.size = [1] * n
        self.roots = [a for a in range(n) if self.manager[a] < 0 and self.team[a]]
        order = self._top_down()
        for a in order:
            m = self.manager[a]
            if m >= 0:
                self.level[a] = self.level[m] + 1
        for a in reversed(order):
            m = self.manager[a]
            if m >= 0:
                self.size[m] += self.size[a]

    @staticmethod
    def _manager(org: Organisation, a: int, admin_of: dict[int, int]) -> int:
        if org.parent[a] >= 0:
            return org.parent[a]
        group = org.member_group[a]
        return admin_of.get(group, -1) if group >= 0 and org.admin_group[a] != group else -1

    def _channel(self, a: int, b: int) -> str:
        for channel in _PREFERENCE:
            if self.org.route_error(a, b, channel) is None:
                return channel
        raise OrganisationError(
            f"behaviour 'megaagent': agent {a} cannot message agent {b} on any channel, but one reports to the "
            "other (add the edge both ways)"
        )

    def _top_down(self) -> list[int]:
        order = list(self.roots)
        for a in order:
            order.extend(self.team[a])
        placed = len(order) + sum(1 for a, m in enumerate(self.manager) if m < 0 and not self.team[a])
        if placed != self.org.n:
            stuck = next(a for a in range(self.org.n) if self.manager[a] >= 0 and a not in set(order))
            raise OrganisationError(f"behaviour 'megaagent': agent {stuck}'s chain of managers is a cycle")
        return order


class OrganisedMegaAgent(MegaAgent):
    """MegaAgent's plan, work, review and merge on the run's organisation (needs admins).

    The boss (or each top admin) plans and hands out subtasks along the organisation's
    reporting lines; see the module docstring."""

    name = "megaagent"
    recruits = False

    def __init__(
        self,
        *,
        seed: int = 0,
        planning: tuple[int, int] | list[int] = (2000, 2000),
        task_solving: tuple[int, int] | list[int] = (500, 150),
        merging: tuple[int, int] | list[int] = (1000, 500),
        task_calls: int = 3,
        deliveries: int = 1,
        plan_calls: int = 3,
        retry_calls: int = 1,
        git_s: float = 0.5,
        tool_s: float = 0.5,
        notes: bool = True,
        monitoring: bool = True,
        checklist_failure: float = 0.2,
        review_failure: float = 0.2,
        boss_failure: float = 0.1,
        retry_cap: int = 30,
    ) -> None:
        tokens = TokenPlan(*(StageTokens(*_pair(k, v)) for k, v in (("planning", planning),
                           ("task_solving", task_solving), ("merging", merging))))  # fmt: skip
        work = Work(task_calls, deliveries, plan_calls, retry_calls, git_s, tool_s, notes=notes)
        checks = Monitoring(monitoring, checklist_failure, review_failure, boss_failure, retry_cap)
        super().__init__(TreePlan(1, ()), tokens, work, checks, seed=seed)
        self._structure: Structure | None = None

    def structure(self, org: Organisation) -> Structure:
        """The organisation's reporting lines (computed once per organisation)."""
        if self._structure is None or self._structure.org is not org:
            self._structure = Structure(org)
        return self._structure

    def check_organisation(self, org: Organisation) -> None:
        self.structure(org)

    def on_start(self, ctx: AgentContext, state: dict[str, Any]) -> Any:
        s = self.structure(ctx.org)
        a = ctx.agent
        if s.manager[a] >= 0 or not s.team[a]:
            return None  # waits for a task, or is in nobody's team
        state["size"] = s.size[a]
        return self._begin(state, 0)

    def team(self, ctx: AgentContext, state: dict[str, Any]) -> tuple[list[int], list[int]]:
        s = self.structure(ctx.org)
        members = s.team[ctx.agent]
        return list(members), [s.size[b] for b in members]

    def manager(self, org: Organisation, a: int) -> int:
        return self.structure(org).manager[a]

    def channel(self, org: Organisation, a: int, b: int) -> str:
        s = self.structure(org)
        return s.up[a] if s.manager[a] == b else s.down[(a, b)]

    def sibling(self, org: Organisation, team: list[int], i: int) -> int:
        """The next teammate ``team[i]`` may message, if any."""
        k = len(team)
        for step in range(1, k):
            b = team[(i + step) % k]
            if self._note_channel(org, team[i], b) is not None:
                return b
        return -1

    def note_channel(self, org: Organisation, a: int, b: int) -> str:
        channel = self._note_channel(org, a, b)
        assert channel is not None  # sibling() chose b so that one exists
        return channel

    @staticmethod
    def _note_channel(org: Organisation, a: int, b: int) -> str | None:
        for channel in (ADMIN, INTRA, HIERARCHY):
            if org.route_error(a, b, channel) is None:
                return channel
        return None


def _pair(name: str, value: Any) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"{name} must be [prompt tokens, reply tokens], got {value!r}")
    return value[0], value[1]
