"""Secrets taken out of text before it is shown: every error, warning and log line
that may hold a database DSN or a service URL goes through :func:`redact`.

Hidden: the password of a URL's user information (``postgresql://user:pw@host`` →
``postgresql://user:***@host``) and the value of password-like keys
(``password=pw`` in a libpq connection string or a URL query). The user name, host,
port and database stay: they are what a reader needs to tell stores apart.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "redact"]

MASK = "***"

# scheme://user:password@host — the authority ends at the first "/", "?" or "#"; the
# password runs to its last "@", so an unescaped "@" inside it is hidden too
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/?#@]*:)(?P<secret>[^\s/?#]*)@")
_KEYS = re.compile(
    r"(?P<head>\b(?:password|passwd|pwd|passfile|sslpassword|secret|token|api_key|apikey|access_key)\s*=\s*)"
    r"(?P<secret>'(?:[^'\\]|\\.)*'|[^\s&;,'\"]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with every URL password and password-like ``key=value`` masked."""
    if "@" in text:
        text = _USERINFO.sub(lambda m: m["head"] + MASK + "@", text)
    if "=" in text:
        text = _KEYS.sub(lambda m: m["head"] + MASK, text)
    return text
