"""OpenAI-shaped error responses (``{"error": {"message", "type", "param", "code"}}``).

OpenAI SDKs parse this body and raise typed exceptions from the status code, so every error the
gateway itself produces uses this shape, with a message that names the field or header at fault.

:data:`ERRORS` is the one table of the gateway's own error codes: each ``code`` (always a string)
fixes its HTTP status and OpenAI ``type``. Handlers name a code and a message; they never choose a
status or a type themselves. Refusals from the request guard (:class:`GuardDenied`) carry their own
status, type and code (request security owns those) and become a response in :func:`denial_response`.

The Anthropic Messages API's routes answer in Anthropic's shape instead
(``{"type": "error", "error": {"type", "message"}, "request_id"}``, as vLLM's ``/v1/messages``
answers): :func:`anthropic_shaped` re-renders any error this module made, by status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

import orjson
from aiohttp import web

from igw.gateway.guards import GuardDenied
from igw.gateway.server_identity import SERVER_NAME

JSON: Final = "application/json"
REQUEST_ID_HEADER: Final = "X-Request-Id"
ANTHROPIC_REQUEST_ID_HEADER: Final = "request-id"
"""The request id's header on the Anthropic routes, beside :data:`REQUEST_ID_HEADER`: the field
Anthropic's API sends and the only one the Anthropic SDK reads (``APIStatusError.request_id``, a
message's ``_request_id``). Without it (before session s48) both were ``None`` through the gateway."""


@dataclass(frozen=True, slots=True)
class ErrorKind:
    """The HTTP status and OpenAI error ``type`` of one gateway error code."""

    status: int
    type: str


_INVALID: Final = "invalid_request_error"
ERRORS: Final[Mapping[str, ErrorKind]] = MappingProxyType(
    {
        # The client's request is wrong.
        "invalid_request": ErrorKind(400, _INVALID),
        "bad_http_request": ErrorKind(400, _INVALID),
        "context_length_exceeded": ErrorKind(400, _INVALID),
        "not_found": ErrorKind(404, _INVALID),
        "model_not_found": ErrorKind(404, _INVALID),
        "response_not_found": ErrorKind(404, _INVALID),  # a stored response no known pod holds
        "method_not_allowed": ErrorKind(405, _INVALID),
        "request_timeout": ErrorKind(408, _INVALID),
        "request_too_large": ErrorKind(413, _INVALID),
        "request_line_too_long": ErrorKind(414, _INVALID),
        "expectation_failed": ErrorKind(417, _INVALID),  # an Expect other than 100-continue
        "request_header_too_large": ErrorKind(431, _INVALID),
        "unsupported_content_encoding": ErrorKind(415, _INVALID),  # a body coding not decoded
        "unsupported_transfer_coding": ErrorKind(501, _INVALID),  # RFC 9112 6.1: only chunked
        "http_version_not_supported": ErrorKind(505, _INVALID),  # a request line's HTTP/2.0, 1.2...
        "debug_token_invalid": ErrorKind(401, "authentication_error"),  # /debug/decisions
        # The fleet cannot take the request now.
        "pool_saturated": ErrorKind(429, "rate_limit_error"),
        "request_shed": ErrorKind(429, "rate_limit_error"),  # flow control shed it from its band's queue
        # the tier-2 router's: its searches of the clusters for stored responses all in flight
        "response_searches_busy": ErrorKind(429, "rate_limit_error"),
        "no_endpoints": ErrorKind(503, "service_unavailable"),
        "shutting_down": ErrorKind(503, "service_unavailable"),
        "response_search_busy": ErrorKind(503, "service_unavailable"),  # igw.gateway.response_search
        "server_busy": ErrorKind(503, "service_unavailable"),  # igw.gateway.body_budget
        "no_healthy_cluster": ErrorKind(503, "service_unavailable"),  # the tier-2 router's
        # Something failed between the gateway and the model server, or in the gateway.
        "internal_error": ErrorKind(500, "server_error"),
        "upstream_connect_failed": ErrorKind(502, "upstream_error"),
        "upstream_error": ErrorKind(502, "upstream_error"),
        # the tier-2 router's: a cluster refused (401/407) a caller the router verified and whose
        # token it did not forward - the deployment's fault, not the caller's
        "upstream_auth_misconfigured": ErrorKind(502, "upstream_error"),
        "route_timeout": ErrorKind(504, "timeout"),
        "upstream_timeout": ErrorKind(504, "timeout"),  # no response head within responseTimeout
        "upstream_unresponsive": ErrorKind(504, "timeout"),  # its endpoint declared unresponsive
    }
)


def error_body(*, message: str, error_type: str, code: str | None = None, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": error_type, "param": param, "code": code}})


ERROR_MESSAGE: Final = web.ResponseKey("igw_error_message", str)
"""The key, in an error response's own mapping, of the message of an error this module made: what
:func:`anthropic_shaped` recognises (a model server's answer never carries it)."""


def _response(
    status: int, body: bytes, *, request_id: str | None, headers: Mapping[str, str] | None, message: str
) -> web.Response:
    # Named here too: answers to malformed HTTP are written without the application's response signal.
    out = {"Server": SERVER_NAME, **(headers or {})}
    if request_id is not None:
        out[REQUEST_ID_HEADER] = request_id
    response = web.Response(status=status, body=body, content_type=JSON, headers=out)
    response[ERROR_MESSAGE] = message
    return response


ERROR_CODE_HEADER: Final = "X-Igw-Error-Code"
"""Set, to the error's code, on every answer :func:`gateway_error` makes: which of the gateway's own
errors an answer is, for a tier-2 router in front (:data:`STOPPED_WAITING_CODES`,
:data:`BUSY_CODES`) and for a client of the Anthropic routes, whose error shape has no code. An
error a model server made carries none."""

STOPPED_WAITING_CODES: Final = frozenset({"route_timeout", "upstream_timeout", "upstream_unresponsive"})
"""The gateway's 504s for a request it stopped waiting for: the model server had it that long, so
neither this gateway nor a tier-2 router in front tries it again elsewhere (the router read only the
status before session s34 and sent such a request to its next cluster, the work and the wait
repeated)."""

SHOULD_RETRY_HEADER: Final = "X-Should-Retry"
"""The OpenAI and Anthropic SDKs' retry hint, which they obey before the status: ``false`` on the
answers of :data:`STOPPED_WAITING_CODES` (since session s48). Without it the SDKs retried those 504s
as any 5xx (twice by default): the model server's work and the caller's wait up to
``responseTimeout`` or ``routeTimeout`` three times over, a retry neither tier makes. An answer
whose maker sets the header itself keeps it (a search's deadline, which asks for a retry)."""

CLOSING_CODES: Final = frozenset({"shutting_down"})
"""The codes whose answer closes the client's connection (``Connection: close``, since session s48):
a replica ending its requests at shutdown. Without it the answer said keep-alive and the SDKs'
retry went out on the pooled connection to the same draining replica (its close a moment later
spent the retry on a connection error); closed, the retry opens a new connection, which the
Service sends to a replica still serving."""

BUSY_CODES: Final = frozenset({"response_search_busy", "server_busy"})
"""The gateway's 503s that say it is busy, not broken: a tier-2 router tries the next cluster without
counting a failure, as for a 429 (before session s34 a flood of made-up continuation ids, each
search-busy answer a failure, drained clusters)."""


def gateway_error(
    code: str,
    message: str,
    *,
    param: str | None = None,
    request_id: str | None = None,
    headers: Mapping[str, str] | None = None,
    status: int | None = None,
) -> web.Response:
    """The response for gateway error ``code`` (a key of :data:`ERRORS`).

    ``status`` overrides the table's status only where the status is not the gateway's to choose:
    an upstream error wrapped in the OpenAI shape keeps the model server's status. A code of
    :data:`STOPPED_WAITING_CODES` tells the SDKs not to retry (:data:`SHOULD_RETRY_HEADER`); one of
    :data:`CLOSING_CODES` closes the connection once answered.
    """
    kind = ERRORS[code]
    body = error_body(message=message, error_type=kind.type, code=code, param=param)
    headers = {**headers, ERROR_CODE_HEADER: code} if headers else {ERROR_CODE_HEADER: code}
    if code in STOPPED_WAITING_CODES:
        headers.setdefault(SHOULD_RETRY_HEADER, "false")
    response = _response(status or kind.status, body, request_id=request_id, headers=headers, message=message)
    if code in CLOSING_CODES:
        response.force_close()
    return response


def denial_response(denied: GuardDenied, *, request_id: str | None = None) -> web.Response:
    """The response for a request the guard refused (401/403/429, as the guard decided)."""
    body = error_body(message=denied.message, error_type=denied.error_type, code=denied.code)
    return _response(
        denied.status, body, request_id=request_id, headers=denied.headers, message=denied.message
    )


ANTHROPIC_ERROR_TYPES: Final[Mapping[int, str]] = MappingProxyType(
    {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        503: "overloaded_error",
        529: "overloaded_error",
    }
)
"""Anthropic's error ``type`` per HTTP status (its API's error table); any other 4xx is an
``invalid_request_error`` (as that table says), any other 5xx an ``api_error``. A 503 (no endpoint,
the gateway shutting down, its searches all busy) is ``overloaded_error``: "temporarily unable,
retry", which agents retry, as the table's 529 says of Anthropic's own API."""


def anthropic_error_type(status: int) -> str:
    """The Anthropic error ``type`` of an answer with ``status``."""
    return ANTHROPIC_ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def anthropic_shaped(response: web.StreamResponse, *, request_id: str | None = None) -> web.StreamResponse:
    """``response`` in the Anthropic Messages API's error shape when it is an error this module made
    and has not been sent: same status and headers (``Retry-After`` and the request id kept), the
    message unchanged, the ``type`` Anthropic's for the status, ``request_id`` the response's
    ``X-Request-Id`` (else the one given; set on the response too), also sent as
    :data:`ANTHROPIC_REQUEST_ID_HEADER`. Anything else - a model server's
    answer (vLLM's ``/v1/messages`` errors are Anthropic-shaped already), a stream - as it is.

    Why: the Anthropic SDK (and agents on it, such as Claude Code) read ``error.type`` to tell a
    rate limit from an overload or a bad request; an OpenAI-shaped body gave them none."""
    message = response.get(ERROR_MESSAGE)
    if message is None or response.prepared or not isinstance(response, web.Response):
        return response
    request_id = (
        response.headers.setdefault(REQUEST_ID_HEADER, request_id)
        if request_id
        else (response.headers.get(REQUEST_ID_HEADER))
    )
    if request_id:
        response.headers[ANTHROPIC_REQUEST_ID_HEADER] = request_id
    response.body = orjson.dumps(
        {
            "type": "error",
            "error": {"type": anthropic_error_type(response.status), "message": message},
            "request_id": request_id,
        }
    )
    return response


def sse_error_event(code: str, message: str, *, anthropic: bool = False) -> bytes:
    """The terminal event of a stream that cannot complete, then ``[DONE]``: an event named
    ``error`` whose data is ``{"type": "error", "error": {...}}`` with the OpenAI error inside. The
    OpenAI SDK raises on any event whose data has an ``error``; the Anthropic SDK only on an event
    named ``error`` (it skipped the unnamed one sent before session s32, and a broken stream then
    ended as if complete). ``anthropic``: a Messages API stream, whose error is Anthropic's
    (``type`` by the code's status: an ``api_error`` for a pod that broke the stream or a timeout, an
    ``overloaded_error`` for a gateway shutting down, which agents retry; since session s33)."""
    kind = ERRORS[code]
    error: dict[str, object] = (
        {"type": anthropic_error_type(kind.status), "message": message}
        if anthropic
        else {"message": message, "type": kind.type, "param": None, "code": code}
    )
    body = orjson.dumps({"type": "error", "error": error})
    return b"event: error\ndata: " + body + b"\n\ndata: [DONE]\n\n"
