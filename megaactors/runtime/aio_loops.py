"""Which event loop the asyncio runtime runs on: uvloop's when installed, else asyncio's."""

from __future__ import annotations

import asyncio

from megaactors.errors import ParameterError

__all__ = ["EVENT_LOOPS", "new_event_loop"]

EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """A fresh event loop: uvloop's if installed (``auto``) or asked for, else asyncio's."""
    if kind not in EVENT_LOOPS:
        raise ParameterError(f"unknown event loop {kind!r}; expected one of {', '.join(EVENT_LOOPS)}")
    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ParameterError("event loop 'uvloop' needs the uvloop package (pip install uvloop)") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()
