"""Traces: every state transition and every batch taken, in compact arrays."""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

from megaactors.core.agent import Phase

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Trace"]


class Trace:
    """Transitions ``(agent, from, to, time)`` and batches ``(agent, time, size)``."""

    def __init__(self) -> None:
        self.t_agent: array[int] = array("q")
        self.t_from: array[int] = array("b")
        self.t_to: array[int] = array("b")
        self.t_time: array[float] = array("d")
        self.b_agent: array[int] = array("q")
        self.b_time: array[float] = array("d")
        self.b_size: array[int] = array("q")

    def transition(self, agent: int, frm: int, to: int, now: float) -> None:
        self.t_agent.append(agent)
        self.t_from.append(frm)
        self.t_to.append(to)
        self.t_time.append(now)

    def batch(self, agent: int, now: float, size: int) -> None:
        self.b_agent.append(agent)
        self.b_time.append(now)
        self.b_size.append(size)

    def __len__(self) -> int:
        return len(self.t_agent)

    def clear(self) -> None:
        """Forget every row."""
        for column in (self.t_agent, self.t_from, self.t_to, self.t_time, self.b_agent, self.b_time, self.b_size):
            del column[:]

    def transitions(self) -> list[tuple[int, str, str, float]]:
        """Every transition as ``(agent, from, to, time)`` with state names."""
        names = [s.name for s in Phase]
        return [
            (a, names[f], names[t], tm)
            for a, f, t, tm in zip(self.t_agent, self.t_from, self.t_to, self.t_time, strict=True)
        ]

    def max_concurrent(self, phase: Phase) -> int:
        """Most agents in ``phase`` at once (transitions at equal times applied in order)."""
        current = best = 0
        for f, t in zip(self.t_from, self.t_to, strict=True):
            if t == phase:
                current += 1
                best = max(best, current)
            if f == phase:
                current -= 1
        return best

    def as_dict(self) -> dict[str, Any]:
        return {
            "transitions": {
                "agent": list(self.t_agent),
                "from": list(self.t_from),
                "to": list(self.t_to),
                "time": list(self.t_time),
            },
            "batches": {"agent": list(self.b_agent), "time": list(self.b_time), "size": list(self.b_size)},
        }

    def transitions_frame(self) -> pd.DataFrame:
        """Transitions as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        names = {int(s): s.name for s in Phase}
        return pd.DataFrame(
            {
                "agent": list(self.t_agent),
                "from": [names[x] for x in self.t_from],
                "to": [names[x] for x in self.t_to],
                "time": list(self.t_time),
            }
        )

    def batches_frame(self) -> pd.DataFrame:
        """Batches taken as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame({"agent": list(self.b_agent), "time": list(self.b_time), "size": list(self.b_size)})
