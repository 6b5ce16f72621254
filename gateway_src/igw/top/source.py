"""Fetches one gateway's ``/metrics`` and ``/readyz`` over HTTP for ``igw top``.

Works against ``igw serve`` on this machine and against a gateway in a cluster through
``kubectl port-forward``. The operator's token (read from an environment variable, never from the
command line) is sent as a bearer token: the gateway's debug token opens ``/debug/decisions`` (the
last scheduling decisions, when asked for), and pages behind an authenticating proxy need one too.
It is never printed; error messages name the URL and the status only.

Each page is read up to :data:`MAX_PAGE_BYTES`: a broken or hostile endpoint behind the URL could
send without end, and until session s39 every byte was kept until the 5 s timeout (a loopback
server streaming 600 MiB took ``igw top``'s process to 1.9 GB).
"""

from __future__ import annotations

import asyncio
import codecs
import time
from collections.abc import Callable
from typing import Any, Final

import aiohttp
import orjson

from igw.gateway.debug_api import DEBUG_DECISIONS_PATH
from igw.redaction import redact
from igw.top.view import GatewayFailing, GatewayUnreachable, Scrape, ScrapeError, parse_scrape

DEFAULT_TIMEOUT_S: Final = 5.0
MAX_PAGE_BYTES: Final = 64 * 1024 * 1024
"""The most ``igw top`` reads of one page, chosen to stay well above a 1,000-pod gateway's
``/metrics`` (a few KB of series per pod, estimated); a longer page is refused and named in the
status line."""

STATUS_HINTS: Final[dict[tuple[str, int], str]] = {
    ("/metrics", 404): (
        " (a gateway run with --management-port serves /metrics only there: pass that port's URL)"
    ),
    (DEBUG_DECISIONS_PATH, 404): (
        " (the gateway keeps no decision log: start it with igw serve --debug-decisions N, "
        "the debug token in $IGW_DEBUG_TOKEN)"
    ),
    (DEBUG_DECISIONS_PATH, 401): " (--token-env must name a variable holding the gateway's IGW_DEBUG_TOKEN)",
}
"""What an error status of a page most likely means, by path and status: the message names the cause."""
RETRIED_STATUSES: Final = frozenset({408, 425, 429})
"""Client-error statuses that mean "later", not "never": retried like a 5xx (:class:`GatewayFailing`)."""


class GatewaySource:
    """Takes :class:`Scrape` snapshots of the gateway at ``base_url``; close it when done."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        decisions: int = 0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = base_url.rstrip("/")
        self.base_url = redact(self._url)
        """The gateway's URL as the screen and every message show it: a user-info password masked
        (``igw top http://user:password@host`` printed it in the status line and in errors)."""
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._decisions = decisions
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never print the token
        return f"GatewaySource({self.base_url!r})"

    async def scrape(self) -> Scrape:
        """``/metrics`` and ``/readyz`` now; :class:`ScrapeError` names what failed."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        at = self._clock()
        metrics = await self._get("/metrics", accept=(200,))
        readiness_text = await self._get("/readyz", accept=(200, 503))  # 503: not ready, detail still there
        try:
            readiness: Any = orjson.loads(readiness_text)
        except orjson.JSONDecodeError as exc:
            raise ScrapeError(f"{self.base_url}/readyz: not JSON ({exc})") from exc
        if not isinstance(readiness, dict):
            raise ScrapeError(f"{self.base_url}/readyz: expected a JSON object")
        decisions: list[Any] = []
        decisions_error: str | None = None
        if self._decisions:
            # A gateway without a decision log (404) or a refused token (401) still has pools and
            # pods to show: until session s40 either failed the whole refresh, every refresh.
            path = f"{DEBUG_DECISIONS_PATH}?limit={self._decisions}"
            try:
                page = await self._get(path, accept=(200,))
                decisions = (await asyncio.to_thread(orjson.loads, page))["decisions"]
            except GatewayUnreachable:
                raise
            except ScrapeError as exc:
                decisions_error = str(exc)
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                decisions_error = f"{self.base_url}{path}: not a decision log ({exc})"
        # Parsed off the event loop: a page of many series the screen reads (up to MAX_PAGE_BYTES)
        # takes the pure-Python parser seconds, and on the loop the screen (keys, Ctrl-C, q) froze
        # for as long (until session s50).
        return await asyncio.to_thread(
            parse_scrape, metrics, readiness, at=at, decisions=decisions, decisions_error=decisions_error
        )

    async def _get(self, path: str, *, accept: tuple[int, ...]) -> str:
        assert self._session is not None
        url = self._url + path
        shown = self.base_url + path
        try:
            async with self._session.get(url) as response:
                if response.status not in accept:
                    hint = STATUS_HINTS.get((path.partition("?")[0], response.status), "")
                    transient = response.status >= 500 or response.status in RETRIED_STATUSES
                    failure = GatewayFailing if transient else ScrapeError
                    raise failure(f"{shown}: HTTP {response.status}{hint}")
                body = await _read_capped(response, shown)
                try:
                    return body.decode(_charset(response))
                except UnicodeDecodeError as exc:  # was a traceback ending igw top (before session s39)
                    raise ScrapeError(
                        f"{shown}: not text in its charset ({exc.reason} at byte {exc.start})"
                    ) from exc
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError) and not str(exc):
                # the whole-request timeout says nothing: the status line read "TimeoutError: "
                # for a gateway that accepts and then does not answer (until session s49)
                raise GatewayUnreachable(f"{shown}: no answer within {self._timeout.total:g} s") from exc
            # aiohttp's own text may quote the URL it was given, user-info and all
            raise GatewayUnreachable(redact(f"{shown}: {type(exc).__name__}: {exc}")) from exc
        except aiohttp.ClientPayloadError as exc:  # the body was cut off: the next answer may be whole
            raise GatewayFailing(redact(f"{shown}: {type(exc).__name__}: {exc}")) from exc
        except aiohttp.ClientError as exc:
            raise ScrapeError(redact(f"{shown}: {type(exc).__name__}: {exc}")) from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _too_large(shown: str) -> ScrapeError:
    return ScrapeError(f"{shown}: page larger than {MAX_PAGE_BYTES // (1024 * 1024)} MiB, not read")


async def _read_capped(response: aiohttp.ClientResponse, shown: str) -> bytes:
    """The body, refused once it passes :data:`MAX_PAGE_BYTES` (before reading, when its declared
    length says so); the connection of a refused page is closed, not reused."""
    if response.content_length is not None and response.content_length > MAX_PAGE_BYTES:
        response.close()
        raise _too_large(shown)
    body = bytearray()
    async for chunk in response.content.iter_any():
        body += chunk
        if len(body) > MAX_PAGE_BYTES:
            response.close()
            raise _too_large(shown)
    return bytes(body)


def _charset(response: aiohttp.ClientResponse) -> str:
    """The page's declared charset when Python knows it, else UTF-8 (what aiohttp's ``text()`` did)."""
    if response.charset:
        try:
            return codecs.lookup(response.charset).name
        except LookupError:
            pass
    return "utf-8"
