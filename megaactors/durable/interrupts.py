"""Human-in-the-loop interrupts of checkpointed runs.

A run stops between two super-steps, with a checkpoint of that point, when it reaches
``interrupt_at`` virtual seconds (its next event would be at or after it) or when its
ledger meets ``interrupt_when`` (``cost_usd>0.5``, ``messages>=10000``: a ledger total,
a comparison, a number). The store marks it ``interrupted``; ``megaactors inspect``
shows it and ``megaactors resume`` continues it exactly as if it had never stopped (the
trigger that fired is dropped from the run's options, so it fires once). A behaviour
stops it too, by yielding an :class:`~megaactors.core.behaviour.Interrupt` (trigger
``effect``): the run stops at the end of that super-step, and since the effect was
consumed when it was applied, the resumed run goes on past it.

A human's :class:`HumanEdits`, given as the run resumes, replace agents' behaviour
states (``--set-state``) and put messages into their in-queues (``--send``, channel
:data:`~megaactors.core.messages.HUMAN`); they are applied before the next super-step
and written as a checkpoint of their own, whose metadata says who and when, so a
later resume from that checkpoint or any after it has them exactly once.
"""

from __future__ import annotations

import json
import math
import operator
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from megaactors.core.messages import check_human_text
from megaactors.errors import MessageError, ParameterError

__all__ = ["EFFECT", "LEDGER_TOTALS", "EditRefused", "HumanEdits", "RunInterrupted", "asked", "check_condition", "due"]

LEDGER_TOTALS = ("messages", "bytes", "llm_calls", "tokens_in", "tokens_out", "cost_usd")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq,
}  # fmt: skip
EFFECT = "effect"
"""The trigger of a stop a behaviour asked for (an :class:`~megaactors.core.behaviour.Interrupt`)."""
_CONDITION = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|==|>|<)\s*([-+0-9.eE]+)\s*$")


class RunInterrupted(Exception):
    """A run stopped at a point for a human (not an error): where, and why."""

    def __init__(self, step: int, virtual_time_s: float, trigger: str, reason: str) -> None:
        super().__init__(reason)
        self.step, self.virtual_time_s, self.reason = step, virtual_time_s, reason
        self.trigger = trigger
        """What fired: the option ``interrupt_at`` or ``interrupt_when`` (it fires once),
        or :data:`EFFECT` (the behaviour's ``Interrupt``, consumed as it was applied)."""

    def going_on(self, options: dict[str, Any]) -> dict[str, Any]:
        """The run's ``options`` to continue with: without the trigger that fired, so it fires once."""
        return options if self.trigger == EFFECT else {**options, self.trigger: None}


class EditRefused(ParameterError):
    """A human's edit the run cannot take; nothing was written."""


@dataclass
class HumanEdits:
    """A human's edits, made when an interrupted run resumes: agents' behaviour states
    replaced, then messages put into agents' in-queues."""

    who: str
    states: dict[int, Any] = field(default_factory=dict)
    """The new state of each edited agent (JSON data)."""
    sends: list[tuple[int, str]] = field(default_factory=list)
    """(agent, text) of each message, in the order given."""

    def __bool__(self) -> bool:
        return bool(self.states or self.sends)

    def apply(self, rt: Any) -> None:
        """Apply the edits to ``rt`` (a restored :class:`~megaactors.durable.state.DurableSim`),
        all or none: :class:`EditRefused` for an agent that does not exist, a state that
        does not have the shape of the one it replaces (what the behaviour could not
        read) or a message the channel refuses."""
        n = len(rt.agents)
        for agent, state in self.states.items():
            if not 0 <= agent < n:
                raise EditRefused(f"--set-state: there is no agent {agent} (the run has {n})")
            old = json.loads(json.dumps(rt.agents[agent].data))
            problem = _shape_problem(old, state)
            if problem:
                raise EditRefused(f"--set-state: agent {agent}'s behaviour cannot read {json.dumps(state)}: {problem}")
        for agent, text in self.sends:
            if not 0 <= agent < n:
                raise EditRefused(f"--send: there is no agent {agent} (the run has {n})")
            try:
                check_human_text(text)
            except MessageError as exc:
                raise EditRefused(f"--send: agent {agent}: {exc}") from None
        for agent, state in self.states.items():
            rt.agents[agent].data = json.loads(json.dumps(state))  # the agent's own copy
            rt.tracker.touched(agent)
        for agent, text in self.sends:
            rt.send_human(agent, text)

    def note(self) -> dict[str, Any]:
        """What a checkpoint's metadata records of the edits: who, when, what."""
        states = json.loads(json.dumps({str(a): s for a, s in self.states.items()}))  # the agents change theirs
        note: dict[str, Any] = {"who": self.who, "when": time.time()}
        if states:
            note["set_state"] = states
        if self.sends:
            note["send"] = [[agent, text] for agent, text in self.sends]
        return note


def _shape_problem(old: Any, new: Any, where: str = "the state", top: bool = True) -> str | None:
    """Why ``new`` cannot stand in for ``old``, or None. Numbers stand for numbers; a
    record (the top-level list, or a dict) keeps its length or keys and its items'
    types; a list inside it (a memory, a queue) may have any length."""
    number = (int, float)
    if isinstance(old, number) and isinstance(new, number) and not isinstance(old, bool) and not isinstance(new, bool):
        return None
    if type(old) is not type(new):
        return f"{where} is {type(old).__name__}, not {type(new).__name__}"
    if isinstance(old, list) and top:
        if len(old) != len(new):
            return f"{where} has {len(old)} items, not {len(new)}"
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            problem = _shape_problem(a, b, f"item {i}", top=False)
            if problem:
                return problem
    if isinstance(old, dict):
        if set(old) != set(new):
            return f"{where} has keys {sorted(old)}, not {sorted(new)}"
        for key in old:
            problem = _shape_problem(old[key], new[key], f"key {key!r}", top=False)
            if problem:
                return problem
    return None


def check_condition(text: str) -> tuple[str, str, float]:
    """``NAME OP NUMBER`` over a ledger total, or :class:`ParameterError` naming what is wrong."""
    m = _CONDITION.match(text)
    if not m:
        raise ParameterError(
            f"interrupt when: expected NAME OP NUMBER (e.g. cost_usd>0.5; OP one of {', '.join(_OPS)}), got {text!r}"
        )
    name, op, number = m.groups()
    if name not in LEDGER_TOTALS:
        raise ParameterError(f"interrupt when: {name!r} is not a ledger total; one of {', '.join(LEDGER_TOTALS)}")
    try:
        value = float(number)
    except ValueError:
        raise ParameterError(f"interrupt when: {number!r} is not a number") from None
    if not math.isfinite(value):
        raise ParameterError(f"interrupt when: {number!r} is not a finite number")
    return name, op, value


def due(
    next_event: float | None, ledger: Any, at: float | None, when: tuple[str, str, float] | None
) -> tuple[str, str] | None:
    """Which trigger stops the run before its next super-step, and why (None: it goes on);
    ``when`` as :func:`check_condition` reads it."""
    if at is not None and next_event is not None and next_event >= at:
        return "interrupt_at", f"interrupted at {at:g} s of virtual time (--interrupt-at)"
    if when is not None:
        name, op, value = when
        if _OPS[op](getattr(ledger, name), value):
            why = f"interrupted when {name} {op} {value:g} ({name} = {getattr(ledger, name):g}; --interrupt-when)"
            return "interrupt_when", why
    return None


def asked(requests: list[tuple[int, str]]) -> tuple[str, str] | None:
    """The stop a behaviour asked for in the last super-step, as :func:`due` gives one
    (trigger :data:`EFFECT`): the first of its ``requests`` (``(agent, reason)`` of each
    :class:`~megaactors.core.behaviour.Interrupt`), which are all taken (they fire once)."""
    if not requests:
        return None
    (agent, reason), more = requests[0], len(requests) - 1
    requests.clear()
    also = f" (and {more} more)" if more else ""
    return EFFECT, f"interrupted by agent {agent}: {reason}{also} (Interrupt effect)"
