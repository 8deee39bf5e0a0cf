"""The serializable state of one MegaAgent agent (what a checkpoint holds of it)."""

from __future__ import annotations

from typing import Any

__all__ = ["TODO_CLEAR", "TODO_OWED", "TODO_RUNNING", "new_state"]

TODO_CLEAR, TODO_OWED, TODO_RUNNING = 0, 1, 2
"""The outer loop's reminder (the ``todo`` field): none owed, owed (its batch is being
taken), running."""


def new_state() -> dict[str, Any]:
    """The serializable state of an agent that has no task yet."""
    return {
        "size": 0,  # agents in its subtree, itself included (0: no task yet)
        "level": 0,
        "phase": 0,  # what the next LLM reply or tool result is for
        "left": 0,  # LLM calls left in the current function-call loop
        "step": 0,  # loop iterations done (odd ones run code, even ones write files)
        "part": 0,  # parts of its task delivered and accepted so far
        "retries": 0,
        "draws": 0,  # monitoring draws made (the counter of its random stream)
        "children": [],
        "accepted": 0,
        "review": [],  # [child, final] for each delivery the current review covers
        "next": -1,  # the sibling it shares its note with
        "noted": False,
        "windows": {},  # stage -> [first call start, last call end]
        "mdraws": 0,  # draws of the optional mechanisms
        "conflicts": 0,  # git writes redone after a conflict
        "stash": None,  # the LLM request a polling delay holds back
        "round": 0,  # the outer loop's round this agent joined last
        "reported": 0,  # the last round it reported done
        "waiting": 0,  # children yet to report the current round
        "todo": TODO_CLEAR,
    }
