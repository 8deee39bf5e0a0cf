"""Built-in behaviours."""

from megaactors.behaviours.chat_round import ChatRound, expected_messages
from megaactors.behaviours.megaagent import (
    MegaAgent,
    Monitoring,
    RetryLimitError,
    StageTokens,
    TokenPlan,
    TreePlan,
    Work,
)

__all__ = [
    "ChatRound",
    "MegaAgent",
    "Monitoring",
    "RetryLimitError",
    "StageTokens",
    "TokenPlan",
    "TreePlan",
    "Work",
    "expected_messages",
]
