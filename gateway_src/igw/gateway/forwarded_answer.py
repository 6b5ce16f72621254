"""A model server's complete (non-streamed) answer as the gateway forwards it, kept as bytes.

The upstream client hands over the response's header fields as llhttp parsed them (raw bytes; llhttp
refuses CR, LF and NUL inside a field, so every kept field is safe to write back as it came). The
fields the client must not see are dropped here - the hop-by-hop set, every field the upstream's
``Connection`` header names (RFC 9110 7.6.1) and any field the gateway sets itself - and the
gateway's own fields are added. The lean server writes :meth:`ForwardedAnswer.head` and the body in
one call without building aiohttp's response object or header map; a request aiohttp serves gets
:meth:`ForwardedAnswer.to_response`, the same answer as an ``aiohttp.web.Response``.

The head is byte for byte what aiohttp's serialiser writes for that response (status line with the
standard reason phrase, the kept fields in the upstream's order, the gateway's fields, then
``Content-Type`` when missing, ``Content-Length``, ``Date`` unless the upstream sent it, the gateway's
``Server``, ``Connection: close`` when the connection ends): ``tests/gateway/test_forwarded_answer.py``
compares the two. The model server's own ``Server`` is never forwarded
(:mod:`igw.gateway.server_identity`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Final

from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from multidict import CIMultiDict

from igw.gateway.server_identity import SERVER_FIELD, UPSTREAM_SERVER_FIELD

HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
"""Lower-case names of the fields a proxy never forwards (RFC 9110 7.6.1, plus ``Host`` and
``Content-Length``, which each hop sets for itself)."""
HOP_BY_HOP_FIELDS: Final = frozenset(name.encode() for name in HOP_BY_HOP)
ORIGIN_FIELDS: Final = frozenset({b"set-cookie", b"set-cookie2", b"strict-transport-security", b"alt-svc"})
"""An upstream's answer fields that set state on the origin the client talks to - the proxy's, which
fronts every upstream (a tier-1 gateway every pod, the global router every cluster) - never relayed
(the upstream pools' ``dropped_fields``, :func:`~igw.gateway.upstream.proxy_session`): a cookie one
upstream sets would be sent back (``Cookie`` is forwarded) to whichever upstream serves the client
next, a ``Strict-Transport-Security`` with ``includeSubDomains`` would pin every host under the
proxy's domain to HTTPS, and an ``Alt-Svc`` would send the client's later connections to a host the
upstream names. Dropped by the global router since session s49 and by tier 1 since session s49 too
(until then a pod's answer relayed all three to the client as the gateway's own)."""
_NOT_FORWARDED: Final = HOP_BY_HOP_FIELDS | {UPSTREAM_SERVER_FIELD}
"""The hop-by-hop fields and the model server's ``Server``, which the gateway replaces with its own."""
_NONE: Final[frozenset[bytes]] = frozenset()
_CHARSET: Final = "utf-8"
_UNDECODABLE: Final = "surrogateescape"
_OCTET_STREAM: Final = b"Content-Type: application/octet-stream\r\n"
_CLOSE_FIELD: Final = b"Connection: close\r\n"
_STATUS_LINES: Final = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode() for s in HTTPStatus}
"""Pre-encoded status lines, with the reason phrase aiohttp gives a status it is not told one for."""


class ForwardedAnswer:
    """Status, the header fields forwarded to the client (serialised), and the body."""

    __slots__ = ("body", "fields", "has_date", "has_type", "status")

    def __init__(
        self,
        status: int,
        fields: Sequence[tuple[bytes, bytes]],
        body: bytes,
        *,
        has_type: bool,
        has_date: bool,
    ) -> None:
        self.status = status
        self.fields = fields
        """The kept upstream fields then the gateway's, in the order they are written."""
        self.body = body
        self.has_type = has_type
        self.has_date = has_date

    def head(self, *, keep_alive: bool) -> bytes:
        """The status line and header block (with the blank line) of this answer on HTTP/1.1."""
        status = self.status
        line = _STATUS_LINES.get(status) or f"HTTP/1.1 {status} \r\n".encode()
        parts = [line, *[b"%b: %b\r\n" % field for field in self.fields]]
        body_length = len(self.body)
        if body_length and not self.has_type:
            parts.append(_OCTET_STREAM)
        parts.append(b"Content-Length: %d\r\n" % body_length)
        if not self.has_date:
            parts.append(b"Date: %b\r\n" % rfc822_formatted_time().encode())
        parts.append(SERVER_FIELD)
        if not keep_alive:
            parts.append(_CLOSE_FIELD)
        parts.append(b"\r\n")
        return b"".join(parts)

    def to_response(self) -> web.Response:
        """The same answer as an aiohttp response (for a request aiohttp serves)."""
        headers: CIMultiDict[str] = CIMultiDict(
            (name.decode(_CHARSET, _UNDECODABLE), value.decode(_CHARSET, _UNDECODABLE))
            for name, value in self.fields
        )
        return web.Response(status=self.status, body=self.body, headers=headers)


def forwarded_answer(
    status: int,
    upstream_fields: Sequence[tuple[bytes, bytes]],
    body: bytes,
    *,
    noted: Mapping[bytes, bytes],
    add: Mapping[str, str],
) -> ForwardedAnswer:
    """The answer to forward: ``upstream_fields`` less the hop-by-hop ones, those named in the
    upstream's ``Connection`` fields and those ``add`` sets; then ``add``'s fields. ``noted``: the
    upstream's ``connection``, ``content-type``, ``date`` and ``server`` values where present
    (lower-case names, as :class:`~igw.gateway.upstream_client.UpstreamResponse` keeps them). Raises
    ValueError for a name or value in ``add`` with CR or LF (as aiohttp's serialiser does)."""
    added: list[tuple[bytes, bytes]] = []
    for name, value in add.items():
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r}: a name or value cannot contain CR or LF")
        added.append((name.encode(_CHARSET), value.encode(_CHARSET)))
    replaced = {name.lower() for name, _ in added}
    connection = noted.get(b"connection")
    named = {token.strip().lower() for token in connection.split(b",")} if connection else _NONE
    drop = _NOT_FORWARDED
    fields = [
        field
        for field in upstream_fields
        if (low := field[0].lower()) not in drop and low not in replaced and low not in named
    ]
    fields += added
    return ForwardedAnswer(
        status,
        fields,
        body,
        has_type=b"content-type" in replaced or (b"content-type" in noted and b"content-type" not in named),
        has_date=b"date" in replaced or (b"date" in noted and b"date" not in named),
    )


def as_response(answer: web.StreamResponse | ForwardedAnswer) -> web.StreamResponse:
    """``answer`` as an aiohttp response (for aiohttp's side of the server)."""
    return answer.to_response() if isinstance(answer, ForwardedAnswer) else answer
