"""A sweep's progress bar in units of estimated work, so that its ETA holds early on.

Runs differ in cost by five orders of magnitude (a star of 10 agents against a two-tier
organisation of 100,000), so a bar counting runs is wrong by far while the largest go
first. :class:`SweepProgress` counts each run's estimated cost (see
:meth:`megaactors.experiments.sweep.PlannedRun.estimated_cost`) instead, shows the
share of work done with the count of runs beside it, and estimates the time left from
the average rate since the start (no smoothing: updates arrive in bursts). It keeps a
history of ``(elapsed seconds, share of work done, runs done)`` for checking the ETA.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["SweepProgress"]


class SweepProgress:
    """What :func:`~megaactors.experiments.sweep.run_sweep` reports progress to.

    ``enabled=False`` draws nothing but still keeps the history; ``clock`` gives
    seconds (``time.perf_counter`` by default)."""

    def __init__(
        self, *, enabled: bool = True, desc: str = "sweep", clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.enabled = enabled
        self.desc = desc
        self.clock = clock
        self.history: list[tuple[float, float, int]] = []
        self.total_cost = 0.0
        self.done_cost = 0.0
        self.total_runs = 0
        self.done_runs = 0
        self.errors = 0
        self._start = 0.0
        self._bar: Any = None

    def begin(self, costs: Sequence[float], total_runs: int) -> None:
        """Start: ``costs`` are the estimated costs of the runs still to do, out of
        ``total_runs`` runs in the sweep (the others were done before)."""
        from tqdm.auto import tqdm

        self.total_cost = float(sum(costs))
        self.total_runs = total_runs
        self.done_runs = total_runs - len(costs)
        self._start = self.clock()
        self._bar = tqdm(
            total=self.total_cost or 1.0,
            desc=self.desc,
            disable=not self.enabled,
            smoothing=0,
            dynamic_ncols=True,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]",
        )
        self._bar.set_postfix_str(self._runs_text(), refresh=False)

    def advance(self, cost: float, *, error: bool = False) -> None:
        """One run finished (``error``: it failed); ``cost`` is its estimated cost."""
        self.done_cost += cost
        self.done_runs += 1
        self.errors += error
        self.history.append((self.clock() - self._start, self.fraction, self.done_runs))
        if self._bar is not None:
            self._bar.set_postfix_str(self._runs_text(), refresh=False)
            self._bar.update(cost)

    @property
    def fraction(self) -> float:
        """Share of the estimated work done (1 when there was none to do)."""
        return self.done_cost / self.total_cost if self.total_cost else 1.0

    def eta_s(self) -> float | None:
        """Seconds left at the average rate so far (None before any work is done)."""
        elapsed = self.clock() - self._start
        if not self.done_cost:
            return None
        return elapsed * (self.total_cost - self.done_cost) / self.done_cost

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _runs_text(self) -> str:
        text = f"{self.done_runs}/{self.total_runs} runs"
        return text + (f", {self.errors} failed" if self.errors else "")
