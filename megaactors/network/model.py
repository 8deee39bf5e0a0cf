"""Delivery latency: a fixed minimum per channel plus seeded jitter, and groups
placed on machines, where any message between two machines takes ``cross``.

``--net-latency intra=0.005,admin=0.05,cross=0.05`` (seconds; a bare number sets
every channel) and ``--net-jitter 0.002`` (a uniform extra in ``[0, jitter)``, drawn
per copy from the counter-based stream keyed by message id and recipient) describe
it; ``--machines K`` places group ``g`` on machine ``g mod K`` and ``--machines
0,0,1,1`` names each group's machine. An agent lives on the machine of its group (a
boss or an agent in no group on machine 0). Zero latency everywhere, the default, is
no network at all: deliveries are instantaneous as before.

:attr:`NetworkModel.lookahead_s` is the least time any message between two machines
takes: a sharded simulation may run each machine that far ahead of the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from megaactors.core.messages import CHANNELS
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError

__all__ = ["CROSS", "NetworkModel", "check_seconds", "parse_latency", "parse_machines"]

CROSS = "cross"
"""The name of the latency between two machines in ``--net-latency``."""


@dataclass(frozen=True)
class NetworkModel:
    """Per-channel minimum latency, jitter and placement of groups on machines."""

    latency_s: Mapping[str, float] = field(default_factory=dict)
    """Minimum latency by channel (``intra``, ``admin``, ``hierarchy``); missing: 0."""
    cross_s: float = 0.0
    """Minimum latency of any message between two machines."""
    jitter_s: float = 0.0
    """Upper bound of the uniform extra latency of each copy."""
    machines: tuple[int, ...] | None = None
    """Machine of each group (None: round-robin on :attr:`machine_count` machines, or
    every group on one machine)."""
    machine_count: int | None = None
    """Groups placed round-robin on this many machines (``--machines K``)."""

    def __post_init__(self) -> None:
        for channel, value in self.latency_s.items():
            if channel not in CHANNELS:
                raise ParameterError(f"net_latency: unknown channel {channel!r}; expected {', '.join(CHANNELS)}, cross")
            check_seconds(f"net_latency {channel}", value)
        check_seconds(f"net_latency {CROSS}", self.cross_s)
        check_seconds("net_jitter", self.jitter_s)

    @property
    def least_latency_s(self) -> float:
        """The least minimum latency above 0 of a copy on any channel or between two
        machines (0 when every copy arrives at once or after its jitter alone)."""
        cross = (self.cross_s,) if self.placed else ()
        return min((s for s in (*self.latency_s.values(), *cross) if s > 0), default=0.0)

    @property
    def lookahead_s(self) -> float:
        """The least latency of a message between two machines (the lookahead of a
        simulation sharded by machine); the least latency of any message when every
        group is on one machine."""
        if self.placed:
            return self.cross_s
        return min((self.latency_s.get(c, 0.0) for c in CHANNELS), default=0.0)

    @property
    def instant(self) -> bool:
        """True when every message arrives at once (no latency, no jitter)."""
        return not self.jitter_s and not any(self.latency_s.values()) and (not self.placed or not self.cross_s)

    @property
    def placed(self) -> bool:
        """Whether groups are placed on machines."""
        return self.machines is not None or self.machine_count is not None

    def group_machines(self, org: Organisation) -> list[int]:
        """The machine of every group of ``org`` (empty without machines), checked
        against its groups."""
        count = len(org.groups)
        if self.machine_count is not None:
            return [g % self.machine_count for g in range(count)]
        if self.machines is None:
            return []
        if len(self.machines) != count:
            raise ParameterError(f"machines: {len(self.machines)} group(s) placed but the organisation has {count}")
        return list(self.machines)

    def base_latency(self, channel: str, cross: bool) -> float:
        """Minimum latency of a copy on ``channel`` (``cross``: between two machines)."""
        return self.cross_s if cross else self.latency_s.get(channel, 0.0)


def check_seconds(name: str, value: Any) -> None:
    """Refuse ``value`` unless it is a number of seconds from 0 to a day (``name`` says what)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86_400:
        raise ParameterError(f"{name} must be a number of seconds >= 0 and <= 86400, got {value!r}")


def parse_latency(text: str) -> tuple[dict[str, float], float]:
    """``intra=0.005,admin=0.05,cross=0.05`` (or one number for every channel and
    ``cross``) as (latency by channel, cross latency)."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        check_seconds("net_latency", value)
        return dict.fromkeys(CHANNELS, value), value
    latency: dict[str, float] = {}
    cross = 0.0
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, number = item.partition("=")
        name = name.strip()
        if not eq:
            raise ParameterError(f"net_latency: {item!r} is not CHANNEL=SECONDS")
        if name != CROSS and name not in CHANNELS:
            raise ParameterError(f"net_latency: unknown channel {name!r}; expected {', '.join(CHANNELS)}, cross")
        try:
            seconds = float(number)
        except ValueError:
            raise ParameterError(f"net_latency: {number.strip()!r} for {name} is not a number of seconds") from None
        check_seconds(f"net_latency {name}", seconds)
        if name == CROSS:
            cross = seconds
        else:
            latency[name] = seconds
    return latency, cross


def parse_machines(text: str) -> tuple[tuple[int, ...] | None, int | None]:
    """``K`` (groups round-robin on K machines) or ``0,0,1,1`` (each group's machine)
    as (explicit map or None, machine count or None)."""
    text = text.strip()
    try:
        items = [int(part) for part in text.split(",")]
    except ValueError:
        raise ParameterError(f"machines: {text!r} is not a machine count K or a list of machines per group") from None
    if any(m < 0 for m in items):
        raise ParameterError(f"machines: machine numbers must be >= 0, got {text!r}")
    if len(items) == 1 and "," not in text:
        if items[0] < 1:
            raise ParameterError(f"machines: the machine count must be >= 1, got {items[0]}")
        return None, items[0]
    return tuple(items), None
