"""Built-in behaviours."""

from megaactors.behaviours.chat_round import ChatRound, expected_messages

__all__ = ["ChatRound", "expected_messages"]
