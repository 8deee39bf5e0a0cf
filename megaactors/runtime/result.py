"""The result of a run, whatever runtime produced it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from megaactors.core.ledger import Ledger
    from megaactors.core.organisation import Organisation
    from megaactors.core.trace import Trace

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """Ledger, trace and final agent states of one run."""

    runtime: str
    org: Organisation
    ledger: Ledger
    trace: Trace | None
    states: list[Any]
    params: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    """``ok``, or ``stalled`` when some agent's work can no longer finish."""
    faults: dict[str, int] | None = None
    """Faults injected and recovery actions by kind (None: a run without a network)."""
    stalled: dict[int, str] = field(default_factory=dict)
    """Stalled agents -> what each waits for."""
    interrupts: list[tuple[int, str]] = field(default_factory=list)
    """(agent, reason) of each :class:`~megaactors.core.behaviour.Interrupt` the behaviour
    yielded. A run without checkpoints has no point to stop at and come back to: it
    goes on, and these say who asked for a human and why."""

    def summary(self) -> dict[str, Any]:
        """Every ledger figure plus the run's parameters (JSON-ready); a run through a
        network adds ``status``, ``faults`` and ``stalled``; one whose behaviour asked
        for a human, ``interrupts``."""
        out = {**self.params, "runtime": self.runtime, **self.ledger.summary(self.org)}
        if self.faults is not None:
            out["status"], out["faults"] = self.status, dict(self.faults)
            out["stalled"] = {str(agent): waits for agent, waits in self.stalled.items()}
        if self.interrupts:
            out["interrupts"] = [[agent, reason] for agent, reason in self.interrupts]
        return out

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.summary(), sort_keys=True, **kwargs)

    def agents_frame(self) -> pd.DataFrame:
        """Per-agent ledger rows as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.ledger.agent_rows(self.org))
