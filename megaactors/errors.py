"""Every error the library raises across layers, in one leaf module.

It imports nothing from megaactors, so any module may import it without creating a
cycle. Each error's text names what is wrong (the agent, the message, the parameter,
the file); the modules that raise them also re-export them under their old names.
"""

from __future__ import annotations

__all__ = [
    "BehaviourError",
    "BehaviourLoadError",
    "ClusterError",
    "CorruptStoreError",
    "FencingError",
    "FormatVersionError",
    "LeaseHeldError",
    "MessageError",
    "OrganisationError",
    "ParameterError",
    "RecruitError",
    "RouteError",
    "RunExistsError",
    "StateError",
    "StoreBusyError",
    "StoreError",
    "TransitionError",
    "UncheckpointableError",
    "UnknownRunError",
    "VersionMismatchError",
]


class ParameterError(ValueError):
    """Impossible run parameters; the text names the parameter."""


class ClusterError(RuntimeError):
    """A Ray cluster cannot be used (not installed, unreachable, other versions)."""


class BehaviourLoadError(ParameterError):
    """A behaviour named by a run cannot be loaded or built (an import path that does
    not import, a class that is not a behaviour, unknown constructor parameters); the
    text says which and why."""


# ---------------------------------------------------------------------- agents and messages


class TransitionError(RuntimeError):
    """An agent was asked to make a move its state machine does not allow."""


class BehaviourError(RuntimeError):
    """A behaviour raised; the text names the agent and the message it was handling."""


class MessageError(ValueError):
    """A message could not be encoded or decoded; the text names the problem."""


class OrganisationError(ValueError):
    """An organisation cannot be built from the given parameters or graph."""


class RouteError(PermissionError):
    """A send the routing rules do not allow."""


class RecruitError(RuntimeError):
    """A recruitment the organisation does not allow (fan-out cap reached)."""


class UncheckpointableError(ValueError):
    """A behaviour's state or a message payload holds a value a checkpoint cannot
    store; the text names the agent, where in its state, and the value's type."""


# ---------------------------------------------------------------------- durable runs


class StateError(ValueError):
    """A snapshot does not describe a run of these parameters."""


class StoreError(Exception):
    """A durable-store problem, described in one line."""


class StoreBusyError(StoreError):
    """The database is busy or out of reach for now (locked, restarting): worth trying again."""


class CorruptStoreError(StoreError):
    """The file or database is not a megaactors store (corrupt or another application's)."""


class FormatVersionError(StoreError):
    """The store or a checkpoint was written in a format version this code does not read."""


class UnknownRunError(StoreError):
    """No run has this id."""


class RunExistsError(StoreError):
    """A run with this id already exists."""


class LeaseHeldError(StoreError):
    """Another worker holds the run's lease."""


class FencingError(StoreError):
    """This worker no longer holds the run: its claim was superseded, cancelled or expired."""


class VersionMismatchError(StoreError):
    """The run belongs to another runtime version."""
