"""MegaAgent (arXiv:2408.09955 §2) as a behaviour: :mod:`.plan` holds what a run is
made of (tree, tokens, loop, monitoring, outer loop), :mod:`.state` an agent's
serializable state, :mod:`.agent` the mechanism."""

from megaactors.behaviours.megaagent.agent import (
    GIT_LOCK,
    MECHANISM_STREAM,
    MONITOR_STREAM,
    MegaAgent,
    RetryLimitError,
)
from megaactors.behaviours.megaagent.measures import stage_windows, total_retries
from megaactors.behaviours.megaagent.plan import (
    MERGING,
    PLANNING,
    STAGES,
    TASK_SOLVING,
    Monitoring,
    OuterLoop,
    StageTokens,
    TokenPlan,
    TreePlan,
    Work,
)
from megaactors.behaviours.megaagent.state import new_state

__all__ = [
    "GIT_LOCK",
    "MECHANISM_STREAM",
    "MERGING",
    "MONITOR_STREAM",
    "PLANNING",
    "STAGES",
    "TASK_SOLVING",
    "MegaAgent",
    "Monitoring",
    "OuterLoop",
    "RetryLimitError",
    "StageTokens",
    "TokenPlan",
    "TreePlan",
    "Work",
    "new_state",
    "stage_windows",
    "total_retries",
]
