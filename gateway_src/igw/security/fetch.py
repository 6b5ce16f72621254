"""A bounded HTTPS GET for issuer documents (JWKS, OIDC discovery).

The JWKS endpoint is outside our control, so every way it can misbehave is bounded (attack case
J28): HTTPS only (certificate verified), one total timeout, a body size cap enforced while reading
(never trusting ``Content-Length``), no redirects except to the same HTTPS host and port, and a
JSON body. Every failure becomes :class:`FetchError` with a short reason for logs and metrics; a URL
in it is quoted through :func:`igw.redaction.redact_url` (the reason reaches ``/readyz`` and ``igw
preflight``, which no log formatter redacts).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any, Final

import aiohttp
from yarl import URL

from igw.errors import IgwSecurityError
from igw.redaction import redact_url

MAX_REDIRECTS: Final = 3
_READ_CHUNK: Final = 65_536


class FetchError(IgwSecurityError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def require_https(url: str) -> URL:
    """``url`` parsed, or :class:`FetchError` when it is not a well-formed HTTPS URL with a host."""
    try:
        parsed = URL(url)
        https_with_host = parsed.scheme == "https" and bool(parsed.host) and parsed.port is not None
    except (ValueError, TypeError):
        # yarl refuses a malformed URL (an unclosed IPv6 bracket, a port out of range) with a bare
        # ValueError; callers expect FetchError (a JWKS fetch must fail with backoff, not crash)
        raise FetchError(f"not a well-formed URL: {redact_url(url)!r}") from None
    if not https_with_host:
        raise FetchError(f"not an https URL: {redact_url(url)!r}")
    return parsed


async def fetch_json(
    session: aiohttp.ClientSession,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
    ssl_context: ssl.SSLContext | None = None,
) -> Any:
    """GET ``url`` and return its JSON body, or raise :class:`FetchError`."""
    target = require_https(url)
    origin = (target.host, target.port)
    try:
        async with asyncio.timeout(timeout_s):
            for _ in range(MAX_REDIRECTS + 1):
                async with session.get(
                    target,
                    allow_redirects=False,
                    ssl=ssl_context if ssl_context is not None else True,
                    headers={"Accept": "application/json"},
                ) as resp:
                    if resp.status in (301, 302, 303, 307, 308):
                        location = resp.headers.get("Location", "")
                        target = _same_origin_redirect(target, location, origin)
                        continue
                    if resp.status != 200:
                        raise FetchError(f"HTTP {resp.status}")
                    body = await _read_capped(resp, max_bytes)
                    break
            else:
                raise FetchError("too many redirects")
    except FetchError:
        raise
    except TimeoutError:
        raise FetchError("timeout") from None
    except aiohttp.ClientConnectorCertificateError:
        raise FetchError("TLS certificate verification failed") from None
    except ssl.SSLError as exc:
        raise FetchError(f"TLS error: {getattr(exc, 'reason', None) or type(exc).__name__}") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise FetchError(f"connection failed: {type(exc).__name__}") from None
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise FetchError("body is not JSON") from None


def _same_origin_redirect(current: URL, location: str, origin: tuple[str | None, int | None]) -> URL:
    if not location:
        raise FetchError("redirect without Location")
    try:
        nxt = current.join(URL(location))
        target = (nxt.host, nxt.port)
    except (ValueError, TypeError):
        raise FetchError("redirect to a malformed Location refused") from None
    if nxt.scheme != "https" or target != origin:
        raise FetchError("redirect to another scheme or host refused")
    return nxt


async def _read_capped(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    declared = resp.content_length
    if declared is not None and declared > max_bytes:
        raise FetchError(f"body larger than {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await resp.content.read(_READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise FetchError(f"body larger than {max_bytes} bytes")
        chunks.append(chunk)
