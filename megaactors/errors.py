"""Errors shared across layers. A leaf module: it imports nothing from megaactors."""

from __future__ import annotations

__all__ = [
    "BehaviourLoadError",
    "OrganisationError",
    "ParameterError",
    "RecruitError",
    "RouteError",
    "UncheckpointableError",
]


class ParameterError(ValueError):
    """Impossible run parameters; the text names the parameter."""


class BehaviourLoadError(ParameterError):
    """A behaviour named by a run cannot be loaded or built (an import path that does
    not import, a class that is not a behaviour, unknown constructor parameters); the
    text says which and why."""


class OrganisationError(ValueError):
    """An organisation cannot be built from the given parameters or graph."""


class RouteError(PermissionError):
    """A send the routing rules do not allow."""


class RecruitError(RuntimeError):
    """A recruitment the organisation does not allow (fan-out cap reached)."""


class UncheckpointableError(ValueError):
    """A behaviour's state or a message payload holds a value a checkpoint cannot
    store; the text names the agent, where in its state, and the value's type."""
