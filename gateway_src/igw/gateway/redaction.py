"""Keep credentials out of every log line.

:func:`redact` masks bearer tokens, JWT-looking strings and the values of credential headers
(``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie``, API-key headers) in a text;
:class:`RedactingFormatter` applies it to whole formatted records - message, arguments and any
traceback - so no log path (ours, aiohttp's, a library's exception text) can print a secret.
The request path additionally never puts header values into messages; this is the safety net.
"""

from __future__ import annotations

import logging
import re
from typing import Final

MASK: Final = "[REDACTED]"

_JWT: Final = re.compile(r"eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*")
"""Three base64url segments, the first a JSON object (``eyJ`` is ``{"``): a JWS/JWT."""
_BEARER: Final = re.compile(r"(?i)\b(bearer|basic)\s+[^\s,;\"']+")
_CREDENTIAL_HEADER: Final = re.compile(
    r"(?i)\b((?:proxy-)?authorization|set-cookie|cookie|x-api-key|api-key|apikey|x-auth-token)"
    r"([\"']?\s*[:=]\s*[\"']?)([^\r\n\"']*)"
)
_TRIGGERS: Final = ("authorization", "cookie", "api-key", "apikey", "x-auth-token", "bearer", "basic", "eyj")
"""Lower-case substrings at least one of which every pattern above needs in order to match. Most
lines (the access log's, one per request) contain none, and the scan for them is several times
cheaper than running the case-insensitive patterns over the line."""


def redact(text: str) -> str:
    """``text`` with every credential-looking substring replaced by :data:`MASK`."""
    if not text:
        return text
    lowered = text.lower()
    if not any(trigger in lowered for trigger in _TRIGGERS):
        return text
    text = _CREDENTIAL_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    return _JWT.sub(MASK, text)


class RedactingFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose output has passed through :func:`redact`."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def install(handlers: list[logging.Handler], fmt: str | None = None) -> None:
    """Give each of ``handlers`` a redacting formatter with format string ``fmt``."""
    for handler in handlers:
        handler.setFormatter(RedactingFormatter(fmt))
