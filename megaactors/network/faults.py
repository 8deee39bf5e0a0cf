"""Fault specifications: what may go wrong, how often, and how agents recover.

Inline (``--faults drop=0.01,duplicate=0.01,crash=0.001``) or a TOML/JSON file
(``--faults faults.toml``) with the same keys at the top level plus per-channel
tables, timed windows and partitions::

    drop = 0.01            # probability that a copy of a message is lost
    duplicate = 0.01       # ... that it arrives twice
    delay = 0.05           # ... that it arrives delay_s late
    delay_s = 1.0
    llm = 0.01             # probability that an LLM attempt fails (retried like a
                           # provider error: backoff, max_retries, then a failed reply)
    crash = 0.001          # probability that an agent crashes as it takes a batch
    restart_s = 5.0        # it restarts this long after,
    restarts = 8           # at most this many times (then it stays down)
    keep = "state"         # what survives a crash: "state" (the behaviour state;
                           # the in-queue is lost), "inbox" (both) or "nothing"
    recover = true         # a lost copy is sent again timeout_s after it was sent,
    timeout_s = 5.0        # at most `retries` times
    retries = 8
    dedup = true           # a copy whose message id already arrived is ignored

    [channel.admin]        # per channel (intra, admin, hierarchy): drop, duplicate, delay
    drop = 0.1

    [[window]]             # timed faults: these probabilities from start to end
    start = 10.0
    end = 20.0
    channel = "intra"      # optional: one channel (not with llm)
    drop = 0.5             # drop, duplicate, delay and llm

    [[partition]]          # the listed groups (or machines) cannot reach the rest
    groups = [0, 1]        # or: machines = [0]
    start = 10.0
    end = 30.0

Inline, a per-channel probability is ``drop.admin=0.1``. Every value is checked
(probabilities in [0, 1], known channels and keys); a file's error names the file
and the line.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from megaactors.core.messages import CHANNELS
from megaactors.core.organisation import Organisation
from megaactors.errors import ParameterError
from megaactors.network.model import check_seconds
from megaactors.validation import parse_bool

__all__ = ["KEEP", "LLM_FAULT", "MESSAGE_FAULTS", "FaultSpec", "Partition", "Window", "parse_faults"]

MESSAGE_FAULTS = ("drop", "duplicate", "delay")
"""Faults decided per copy of a message."""
LLM_FAULT = "llm"
"""The fault decided per attempt of an LLM call (by the provider model's retry path)."""
_TIMED = (*MESSAGE_FAULTS, LLM_FAULT)
"""Faults a window may set."""
KEEP = ("state", "inbox", "nothing")
"""What survives a crash: the behaviour state; it and the in-queue; nothing."""


@dataclass(frozen=True)
class Window:
    """Message- and LLM-fault probabilities that hold from ``start`` to ``end`` (virtual s)."""

    start: float
    end: float
    probabilities: Mapping[str, float]
    channel: str | None = None

    @property
    def on_messages(self) -> bool:
        """True when the window names a message fault (not only ``llm``)."""
        return bool(set(self.probabilities) - {LLM_FAULT})


@dataclass(frozen=True)
class Partition:
    """From ``start`` to ``end``, no message crosses between the listed groups (or
    machines) and the rest."""

    start: float
    end: float
    groups: tuple[int, ...] = ()
    machines: tuple[int, ...] = ()


@dataclass(frozen=True)
class FaultSpec:
    """Every fault of a run and how agents recover from them (see the module)."""

    drop: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0
    delay_s: float = 1.0
    llm: float = 0.0
    crash: float = 0.0
    restart_s: float = 5.0
    restarts: int = 8
    keep: str = "state"
    recover: bool = True
    timeout_s: float = 5.0
    retries: int = 8
    dedup: bool = True
    channels: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    windows: tuple[Window, ...] = ()
    partitions: tuple[Partition, ...] = ()

    def __post_init__(self) -> None:
        for name in (*_TIMED, "crash"):
            _probability(name, getattr(self, name))
        if self.llm == 1:
            raise ParameterError("faults: llm must be below 1 (every LLM call would fail for ever); a window may set 1")
        for name in ("delay_s", "restart_s", "timeout_s"):
            _seconds(name, getattr(self, name))
        if self.timeout_s <= 0:
            raise ParameterError(f"faults: timeout_s must be > 0, got {self.timeout_s!r}")
        if self.keep not in KEEP:
            raise ParameterError(f"faults: keep must be one of {', '.join(KEEP)}, got {self.keep!r}")
        for name in ("retries", "restarts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1000:
                raise ParameterError(f"faults: {name} must be an integer >= 0 and <= 1000, got {value!r}")
        for name in ("recover", "dedup"):
            if not isinstance(getattr(self, name), bool):
                raise ParameterError(f"faults: {name} must be true or false, got {getattr(self, name)!r}")
        for channel, rule in self.channels.items():
            _channel(channel)
            for kind, p in rule.items():
                _fault_name(kind)
                _probability(f"{kind}.{channel}", p)

    @property
    def active(self) -> bool:
        """True when any fault can happen (to a message, an agent or an LLM call)."""
        return self.on_messages or self.may(LLM_FAULT)

    @property
    def on_messages(self) -> bool:
        """True when a message or an agent can fail (what the network delivery applies)."""
        windows = any(w.on_messages for w in self.windows)
        return bool(self.drop or self.duplicate or self.delay or self.crash or windows or self.partitions) or any(
            any(rule.values()) for rule in self.channels.values()
        )

    def may(self, kind: str) -> bool:
        """Whether fault ``kind`` (a message fault or ``llm``) has a non-zero probability anywhere."""
        return bool(
            getattr(self, kind)
            or any(w.probabilities.get(kind) for w in self.windows)
            or any(rule.get(kind) for rule in self.channels.values())
        )

    def probability(self, kind: str, channel: str, now: float) -> float:
        """Probability of fault ``kind`` for a copy sent on ``channel`` at ``now`` (for
        ``llm``: an attempt started at ``now``, channel ``""``): an open window's, else
        the channel's, else the spec's."""
        for w in self.windows:
            if w.start <= now < w.end and (w.channel is None or w.channel == channel) and kind in w.probabilities:
                return w.probabilities[kind]
        rule = self.channels.get(channel)
        if rule is not None and kind in rule:
            return rule[kind]
        return float(getattr(self, kind))

    def check(self, org: Organisation, machine_count: int) -> None:
        """Refuse partitions naming groups ``org`` lacks or machines beyond
        ``machine_count``."""
        for p in self.partitions:
            missing = [g for g in p.groups if not 0 <= g < len(org.groups)]
            if missing:
                raise ParameterError(
                    f"faults: partition names group(s) {missing} but the organisation has {len(org.groups)} group(s)"
                )
            far = [m for m in p.machines if not 0 <= m < machine_count]
            if far:
                raise ParameterError(
                    f"faults: partition names machine(s) {far} but the run has {machine_count} machine(s)"
                )


def _fault_name(kind: str) -> None:
    if kind == LLM_FAULT:
        raise ParameterError("faults: llm has no channel: it applies to every LLM call (llm=P, or in a window)")
    if kind not in MESSAGE_FAULTS:
        raise ParameterError(f"faults: unknown message fault {kind!r}; expected one of {', '.join(MESSAGE_FAULTS)}")


def _channel(channel: Any) -> None:
    if channel not in CHANNELS:
        raise ParameterError(f"faults: unknown channel {channel!r}; expected one of {', '.join(CHANNELS)}")


def _probability(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ParameterError(f"faults: {name} must be a probability in [0, 1], got {value!r}")
    return float(value)


def _seconds(name: str, value: Any) -> float:
    check_seconds(f"faults: {name}", value)
    return float(value)


_SCALARS = {f.name: f.type for f in fields(FaultSpec) if f.name not in ("channels", "windows", "partitions")}


def _scalar(name: str, text: str) -> Any:
    kind = _SCALARS[name]
    if kind == "bool":
        try:
            return parse_bool(text)
        except ValueError:
            raise ParameterError(f"faults: {name} must be true or false, got {text.strip()!r}") from None
    if kind == "str":
        return text.strip()
    try:
        number = float(text)
    except ValueError:
        raise ParameterError(f"faults: {name}={text.strip()!r} is not a number") from None
    if kind == "int":
        if not math.isfinite(number) or number != int(number):
            raise ParameterError(f"faults: {name} must be an integer, got {text.strip()!r}")
        return int(number)
    return number


def parse_inline(text: str) -> FaultSpec:
    """``drop=0.01,crash=0.001,drop.admin=0.1,...`` as a spec."""
    values: dict[str, Any] = {}
    channels: dict[str, dict[str, float]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq:
            raise ParameterError(f"faults: {item!r} is not NAME=VALUE")
        kind, dot, channel = name.partition(".")
        if dot:
            _fault_name(kind)
            _channel(channel)
            channels.setdefault(channel, {})[kind] = _probability(name, _scalar("drop", value))
        elif name in _SCALARS:
            values[name] = _scalar(name, value)
        else:
            raise ParameterError(f"faults: unknown key {name!r}; expected one of {', '.join(_SCALARS)}")
    return FaultSpec(**values, channels=channels)


def _interval(name: str, table: Mapping[str, Any]) -> tuple[float, float]:
    start = _seconds(f"{name} start", table.get("start", 0.0))
    end = table.get("end", math.inf)
    if end != math.inf:
        end = _seconds(f"{name} end", end)
    if end <= start:
        raise ParameterError(f"faults: {name} ends at {end} before it starts at {start}")
    return start, end


def _ints(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ParameterError(f"faults: {name} must be a list of integers, got {value!r}")
    return tuple(value)


def from_mapping(data: Mapping[str, Any]) -> FaultSpec:
    """A spec from a parsed TOML/JSON document (see the module)."""
    if not isinstance(data, Mapping):
        raise ParameterError("faults: the document must be a table of keys")
    values: dict[str, Any] = {}
    known = (*_SCALARS, "channel", "window", "partition")
    for key, value in data.items():
        if key not in known:
            raise ParameterError(f"faults: unknown key {key!r}; expected one of {', '.join(known)}")
        if key in _SCALARS:
            values[key] = float(value) if _SCALARS[key] == "float" and type(value) is int else value
    channels: dict[str, dict[str, float]] = {}
    for channel, rule in dict(data.get("channel", {})).items():
        _channel(channel)
        for kind, p in dict(rule).items():
            _fault_name(kind)
            channels.setdefault(channel, {})[kind] = _probability(f"{kind}.{channel}", p)
    windows = []
    for i, w in enumerate(data.get("window", [])):
        start, end = _interval(f"window {i}", w)
        channel = w.get("channel")
        if channel is not None:
            _channel(channel)
        extra = sorted(set(w) - {"start", "end", "channel", *_TIMED})
        if extra:
            raise ParameterError(f"faults: window {i} has unknown key(s) {', '.join(extra)}")
        if channel is not None and LLM_FAULT in w:
            raise ParameterError(f"faults: window {i} sets llm for channel {channel!r}: an LLM call has no channel")
        probs = {k: _probability(f"window {i} {k}", w[k]) for k in _TIMED if k in w}
        windows.append(Window(start, end, probs, channel))
    partitions = []
    for i, p in enumerate(data.get("partition", [])):
        start, end = _interval(f"partition {i}", p)
        extra = sorted(set(p) - {"start", "end", "groups", "machines"})
        if extra:
            raise ParameterError(f"faults: partition {i} has unknown key(s) {', '.join(extra)}")
        groups = _ints(f"partition {i} groups", p.get("groups", []))
        machines = _ints(f"partition {i} machines", p.get("machines", []))
        if bool(groups) == bool(machines):
            raise ParameterError(f"faults: partition {i} lists either groups or machines (one of them)")
        partitions.append(Partition(start, end, groups, machines))
    return FaultSpec(**values, channels=channels, windows=tuple(windows), partitions=tuple(partitions))


def _line_of(text: str, message: str) -> int | None:
    """The first line of ``text`` naming a key the error ``message`` quotes (or,
    failing that, the key its detail starts with)."""
    detail = message.removeprefix("faults: ").split(" ")
    for word in [*message.replace("'", '"').split('"')[1::2], detail[0]]:
        for number, line in enumerate(text.splitlines(), 1):
            if word and word in line:
                return number
    return None


def parse_file(path: Path) -> FaultSpec:
    """A spec from a ``.toml`` or ``.json`` file; errors name the file and line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ParameterError(f"faults: cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise ParameterError(f"faults file {path} line {exc.lineno}: {exc.msg}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ParameterError(f"faults file {path}: {exc}") from None
    try:
        return from_mapping(data)
    except (ParameterError, TypeError, ValueError, AttributeError) as exc:
        detail = str(exc).removeprefix("faults: ")
        line = _line_of(text, str(exc))
        where = f" line {line}" if line is not None else ""
        raise ParameterError(f"faults file {path}{where}: {detail}") from None


def parse_faults(text: str) -> FaultSpec:
    """``--faults``: a file name ending in ``.toml`` or ``.json``, or inline keys."""
    text = text.strip()
    if text.endswith((".toml", ".json")):
        return parse_file(Path(text))
    return parse_inline(text)
