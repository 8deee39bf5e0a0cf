"""Errors shared across layers. A leaf module: it imports nothing from megaactors."""

from __future__ import annotations

__all__ = ["ParameterError"]


class ParameterError(ValueError):
    """Impossible run parameters; the text names the parameter."""
