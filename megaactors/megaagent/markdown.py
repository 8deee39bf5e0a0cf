"""Markdown pieces of the §3 report: numbers, intervals and tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["interval_text", "number", "table", "value_text"]


def number(x: float | None, digits: int = 0) -> str:
    """``x`` with thousands separators: ``digits`` decimals, or none for whole and large numbers."""
    if x is None:
        return "—"
    if digits:
        return f"{x:,.{digits}f}"
    return f"{x:,.0f}" if abs(x) >= 10 or float(x).is_integer() else f"{x:,.2f}"


def value_text(v: Any) -> str:
    """A parameter's value as the report shows it (``None``: "none")."""
    return "none" if v is None else str(v)


def interval_text(iv: dict[str, Any], digits: int = 0) -> str:
    """``mean [lo, hi]`` (just the mean when the interval is a point)."""
    if iv["lo"] == iv["hi"]:
        return number(iv["mean"], digits)
    return f"{number(iv['mean'], digits)} [{number(iv['lo'], digits)}, {number(iv['hi'], digits)}]"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A Markdown table and the blank line after it."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]
