"""Parameters declared once: name, type, range, unit, help text and flag spelling.

A :class:`Param` is the single declaration of one parameter. It parses command-line
text (:meth:`Param.parse`) and checks values from anywhere — a dataclass, a stored
dict, a grid — (:meth:`Param.check`), so every entry point refuses the same values
with the same words. Numbers must be finite and inside a documented range; integers
may be written as ``1e6`` when the value is whole.

A dataclass declares its parameters with :func:`param` fields, and
:func:`declared` lists them with their names and types filled in from the fields:
``RunSpec`` does this, and the command line builds its options, ``--param``,
``--grid`` and ``--set`` from the same list.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from megaactors.errors import ParameterError

__all__ = ["Param", "ParameterError", "declared", "param", "parse_bool"]

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
_NONE = ("none", "null")
_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


@dataclass(frozen=True)
class Param:
    """One parameter: how it is spelled, typed, bounded and explained."""

    name: str
    """Its name in code, dicts and ``NAME=VALUE`` options (``latency_median_s``); the
    flag is the same with dashes (``--latency-median-s``)."""
    kind: type = str
    """``int``, ``float``, ``bool`` or ``str``."""
    help: str = ""
    unit: str = ""
    """Unit of a number (``s``, ``bytes``, ``tokens``), shown in help texts."""
    minimum: float | None = None
    maximum: float | None = None
    above_minimum: bool = False
    """The minimum itself is excluded (``> 0`` rather than ``>= 0``)."""
    choices: Callable[[], Iterable[str]] | None = None
    """For a ``str``: the accepted values (a callable: registries may grow at run time)."""
    noun: str = ""
    """What a choice is called in errors and help (``topology``, ``priced model``)."""
    prefixes: tuple[str, ...] = ()
    """For a ``str`` with choices: values that start with one of these (and go on) are
    accepted too, their rest checked elsewhere (``graph:PATH``)."""
    optional: bool = False
    """``None`` (written ``none``) is accepted and means "not set"."""
    words: tuple[str, ...] = ()
    """Words accepted besides values, resolved elsewhere (``optimal`` group size)."""
    short: str | None = None
    """A one-letter flag (``-n``)."""
    old_flags: tuple[str, ...] = ()
    """Earlier flag spellings, still accepted with a deprecation notice."""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def label(self) -> str:
        """How errors name it: as ``NAME=VALUE`` options spell it."""
        return self.name

    # ------------------------------------------------------------------ describing

    def range_text(self) -> str:
        """The accepted values in a few words: ``an integer >= 1 and <= 1000000000``."""
        if self.kind is str and self.choices is not None:
            text = "one of " + ", ".join([*self.choices(), *(f"{p}…" for p in self.prefixes)])
        elif self.kind in (int, float):
            text = "an integer" if self.kind is int else "a finite number"
            bounds = []
            if self.minimum is not None:
                bounds.append(f"{'>' if self.above_minimum else '>='} {_number(self.minimum)}")
            if self.maximum is not None:
                bounds.append(f"<= {_number(self.maximum)}")
            if bounds:
                text += " " + " and ".join(bounds)
        else:
            text = _KIND_NAMES[self.kind]
        for word in self.words:
            text += f" or {word!r}"
        if self.optional:
            text += " or none"
        return text

    def describe(self) -> str:
        """Help text: what it is, in which unit, and which values are accepted."""
        unit = f" [{self.unit}]" if self.unit else ""
        return f"{self.help}{unit}; {self.range_text()}"

    # ------------------------------------------------------------------ checking

    def check(self, value: Any) -> Any:
        """``value`` if it is acceptable (ints given for floats become floats); else
        :class:`ParameterError` naming the parameter and what it accepts."""
        if value is None and self.optional:
            return None
        if isinstance(value, str) and value in self.words:
            return value
        kind = self.kind
        if kind is bool:
            if not isinstance(value, bool):
                raise ParameterError(f"{self.label} must be true or false, got {value!r}")
            return value
        if kind is str:
            if not isinstance(value, str):
                raise ParameterError(f"{self.label} must be a string, got {value!r}")
            if self.choices is not None:
                known = tuple(self.choices())
                if any(value.startswith(p) and len(value) > len(p) for p in self.prefixes):
                    return value
                if value not in known:
                    noun = self.noun or self.label
                    shown = ", ".join([*known, *(f"{p}…" for p in self.prefixes)])
                    raise ParameterError(f"unknown {noun} {value!r}; expected one of {shown}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParameterError(f"{self.label} must be {self.range_text()}, got {value!r}")
        if kind is int and not isinstance(value, int):
            raise ParameterError(f"{self.label} must be {self.range_text()}, got {value!r}")
        if kind is float:
            if not math.isfinite(value):
                raise ParameterError(f"{self.label} must be {self.range_text()}, got {value!r}")
            value = float(value)
        low, high = self.minimum, self.maximum
        if (low is not None and (value <= low if self.above_minimum else value < low)) or (
            high is not None and value > high
        ):
            raise ParameterError(f"{self.label} must be {self.range_text()}, got {_number(value)}")
        return value

    def parse(self, text: str) -> Any:
        """Command-line text as a checked value."""
        item = text.strip()
        if self.optional and item.lower() in _NONE:
            return None
        if item in self.words:
            return item
        try:
            if self.kind is bool:
                value: Any = parse_bool(item)
            elif self.kind is int:
                value = _parse_int(item)
            elif self.kind is float:
                value = float(item)
            else:
                value = item
        except ValueError:
            expected = _KIND_NAMES[self.kind] + "".join(f" or {w!r}" for w in self.words)
            raise ParameterError(f"{self.label}: {item!r} is not {expected}") from None
        return self.check(value)


def parse_bool(text: str) -> bool:
    """``true``/``yes``/``on``/``1`` or ``false``/``no``/``off``/``0``, any case."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(text)


def _parse_int(text: str) -> int:
    """An integer, also written like ``1e6`` or ``2.0`` when the value is whole."""
    try:
        return int(text.replace("_", ""))
    except ValueError:
        number = float(text)
        if not math.isfinite(number) or number != int(number):
            raise ValueError(text) from None
        return int(number)


def _number(value: float) -> str:
    """A bound or value as a reader types it: ``1e9`` rather than ``1000000000``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        value = int(value)
    if isinstance(value, int) and abs(value) >= 10**6:
        mantissa, exponent = f"{value:e}".split("e")
        digits = mantissa.rstrip("0").rstrip(".")
        short = f"{digits}e{int(exponent)}"
        return short if len(digits) <= 4 and int(float(short)) == value else str(value)
    return repr(value) if isinstance(value, float) else str(value)


# ---------------------------------------------------------------------- dataclass fields


def param(default: Any, help: str, **declaration: Any) -> Any:
    """A dataclass field with a default, declared as a :class:`Param` (its name and
    type come from the field: see :func:`declared`)."""
    return dataclasses.field(default=default, metadata={"param": (help, declaration)})


def declared(cls: type) -> dict[str, Param]:
    """The :class:`Param` of every :func:`param` field of a dataclass, by name, in
    field order; the type comes from the annotation (``int | None`` is optional)."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Param] = {}
    for f in dataclasses.fields(cls):
        if "param" not in f.metadata:
            continue
        help_text, declaration = f.metadata["param"]
        kind, optional = _kind(hints[f.name])
        out[f.name] = Param(f.name, kind, help_text, optional=optional, **declaration)
    return out


def _kind(hint: Any) -> tuple[type, bool]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and args[0] in _KIND_NAMES:
            return args[0], True
    elif hint in _KIND_NAMES:
        return hint, False
    raise TypeError(f"a declared parameter is int, float, bool or str (optionally | None), not {hint!r}")
