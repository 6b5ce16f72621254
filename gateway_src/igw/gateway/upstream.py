"""One exchange with a model server: send the request, relay the response, learn what happened.

* The request body is forwarded byte for byte; headers are the client's minus hop-by-hop headers and
  every header the gateway owns (its routing headers, the guard's stripped and forwarded identity
  headers), in either spelling (``_`` for ``-``: :func:`upstream_headers`), plus ours.
* A *connect* failure (refused, unreachable, connect timeout) raises :class:`ConnectFailed`; every
  other outcome is an :class:`ExchangeResult`, whose refusals (an error answer with nothing relayed)
  the request path may retry on the next-best endpoint (:mod:`igw.gateway.retries`); a stream that
  started is never retried (the client has its first bytes).
* Server-sent events are relayed as they arrive (the complete events the socket delivered, written
  immediately; TCP_NODELAY on both sockets), never re-chunked; only the end of an event split
  across reads waits for the rest of it (:class:`StreamEvents`).
* The upstream side is :mod:`igw.gateway.upstream_client` (pooled keep-alive connections, httptools
  parsing); the client side is the aiohttp server's response.
* Upstream death or silence (``streamIdleTimeout``) mid-stream -> a final SSE error event and a clean
  close; a request the pool's stall sweep ended
  (:class:`~igw.gateway.upstream_client.UpstreamStalled`: its endpoint declared unresponsive, or no
  response head within ``responseTimeout``) -> a 504 ``upstream_unresponsive`` / ``upstream_timeout``
  before anything was relayed, else that event; ``routeTimeout`` bounds the whole exchange; a client
  disconnect cancels the handler (the app runs with handler cancellation), which closes the upstream
  connection at once, so the model server aborts the request and frees its KV cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final, Protocol, cast

import aiohttp
import aiohttp.web_response  # mypyc: the compiled module needs _RelayedStream's base module
import orjson
from aiohttp import HttpVersion11, web
from aiohttp.abc import AbstractStreamWriter
from multidict import CIMultiDict
from mypy_extensions import mypyc_attr

from igw.errors import IgwGatewayError
from igw.gateway.answer_coding import PIECE_BYTES, SCAN_RATIO, CodedScan, accepts_coding, compressed
from igw.gateway.answer_scan import AnswerScan
from igw.gateway.errors import gateway_error, sse_error_event
from igw.gateway.forwarded_answer import HOP_BY_HOP, HOP_BY_HOP_FIELDS, ForwardedAnswer, forwarded_answer
from igw.gateway.inference_apis import INFERENCE_PATHS, InferenceApi, anthropic_path
from igw.gateway.log_throttle import RepeatThrottle
from igw.gateway.response_ids import logged_url
from igw.gateway.server_identity import UPSTREAM_SERVER_FIELD
from igw.gateway.upstream_client import (
    ConnectFailed,
    ConnectHooks,
    UpstreamBroken,
    UpstreamPool,
    UpstreamResponse,
    UpstreamStalled,
    safe_field_value,
)
from igw.redaction import redact_url

log = logging.getLogger("igw.gateway")
large_error_log = logging.getLogger("igw.gateway.large_error_answers")
"""The warning for an error answer past :data:`ERROR_ANSWER_BUFFER_BYTES`, one line a minute at most
(:class:`~igw.gateway.log_throttle.RepeatThrottle`, the held ones counted on the next): a pod that
answers every request so wrote one WARNING per request until session s42. Keyed by the pod (the
first argument) since session s44: grouped by text alone, one pod's flood held back every other
pod's first line."""
large_error_log.addFilter(RepeatThrottle(keyed_args=1))
usage_unread_log = logging.getLogger("igw.gateway.usage_unread")
"""The warning for a compressed answer relayed with its usage unread (:func:`_warn_usage_unread`):
the first per pod and reason, then one a minute at most with the count held
(:class:`~igw.gateway.log_throttle.RepeatThrottle` keyed by both), each answer still counted in
``igw_answer_usage_unread_total`` (``igw_global_answer_usage_unread_total`` at tier 2). Until
session s44 a pod answering every request so wrote one WARNING per answer."""
usage_unread_log.addFilter(RepeatThrottle(keyed_args=2))
redirect_log = logging.getLogger("igw.gateway.upstream_redirects")
"""The WARNING for a model server's (or a cluster's) redirect refused (:func:`_refused_redirect`),
throttled per upstream (:class:`~igw.gateway.log_throttle.RepeatThrottle`): a pod that redirects
every request is one line a minute, each still counted."""
redirect_log.addFilter(RepeatThrottle(keyed_args=1))
non_answer_log = logging.getLogger("igw.gateway.upstream_non_answers")
"""The WARNING for a model server's (or a cluster's) answer refused as no answer to an inference API
(:func:`_not_an_answer`), throttled per upstream and reason: a pod answering every completion 204 is
one line a minute, each still counted (``igw_upstream_non_answers_total``; tier 2:
``igw_global_upstream_non_answers_total``). It names the status or the body's kind, never the body's
bytes (a prompt's echo, whatever the pod sent). Since session s50."""
non_answer_log.addFilter(RepeatThrottle(keyed_args=2))

__all__ = [
    "HOP_BY_HOP",
    "UNPROVABLE_REQUEST_HEADERS",
    "ClientGone",
    "ConnectFailed",
    "ExchangeResult",
    "exchange",
    "proxy_session",
    "upstream_header_block",
    "upstream_headers",
]

WHOLE_ANSWER_BUFFER_BYTES: Final = 1024 * 1024
"""A model server's whole (non-streamed) answer below status 400 - never retried: nothing of it
differs by pod once it is a success - is relayed as it arrives once it is larger than this
(``relay_whole_above`` of :func:`exchange`, :func:`_relay_whole`), so each costs the gateway at most
this much and the reads in flight, whatever its size. Until session s41 tier 1 collected every whole
answer (up to :data:`~igw.gateway.upstream_client.MAX_WHOLE_BODY_BYTES`, 256 MiB) and joined its
parts before forwarding it: eight concurrent 40 MB answers took an ``igw serve`` process from 76 MiB
to a 477 MiB peak, and pods answering 256 MiB each could take N x 320 MiB, past any pod's memory
limit (``igw.gateway.memory.memory_plan`` splits it between a process's parts)."""

ERROR_ANSWER_BUFFER_BYTES: Final = 1024 * 1024
"""Most of a model server's error answer (400 and above, which the request path may retry on
another pod: it must not have reached the client) the gateway holds. A real error is an OpenAI-shaped
JSON of a few KB (vLLM's, SGLang's), a proxy's HTML page a few more; Envoy's default buffer limit per
connection is 1 MiB. Past it a JSON error is relayed as it arrives (:func:`_relay_whole`; so it is
not retried) and any other error, whose body the client never gets (:func:`_wrapped_error`), is
answered with its status without reading the rest (the upstream connection closed). Until session
s41 every error answer was collected whole, up to
:data:`~igw.gateway.upstream_client.MAX_WHOLE_BODY_BYTES` (256 MiB): eight concurrent 40 MB error
answers took an ``igw serve`` process from 78 MiB to a 431 MiB peak (to 477 MiB when they were 503s
retried on a second pod)."""

UPSTREAM_POOL_LIMIT: Final = 1024
"""Concurrent upstream connections per process (keep-alive pooled); Envoy's default circuit-breaker limit."""


def proxy_session(
    limit: int = UPSTREAM_POOL_LIMIT,
    *,
    hooks: ConnectHooks | None = None,
    peer: str = "the model server",
    dropped_fields: frozenset[bytes] = frozenset(),
) -> UpstreamPool:
    """The client a proxy forwards with: pooled keep-alive connections, bodies relayed as they come
    (no decompression), no headers of its own added beyond ``Host`` and ``Content-Length``. Call it
    with the event loop running. ``hooks``: the OpenTelemetry connect span (only when tracing is on);
    ``peer``: how its failures' messages name the upstream (the global router's: ``"the cluster"``);
    ``dropped_fields``: lower-case names of response fields never relayed (both tiers pass the
    origin-scoped ones, :data:`~igw.gateway.forwarded_answer.ORIGIN_FIELDS`)."""
    return UpstreamPool(limit=limit, keepalive_s=30.0, hooks=hooks, peer=peer, dropped_fields=dropped_fields)


_NO_FIELDS: Final[frozenset[bytes]] = frozenset()
_CHARSET: Final = "utf-8"
_UNDECODABLE: Final = "surrogateescape"
"""Response header bytes decoded as :attr:`UpstreamResponse.headers` (and aiohttp's parser) decode them."""

DECODED_REQUEST_HEADERS: Final = frozenset({"content-encoding"})
"""The gateway's server side decodes a compressed request body (gzip, deflate, br) and forwards the
decoded bytes, so the client's ``Content-Encoding`` no longer describes them."""


class ClientGone(IgwGatewayError):
    """The client closed its connection while we were writing to it."""


class EventlessStream(UpstreamBroken):
    """The model server ended a stream it answered (its connection closed cleanly) without a single
    ``data:`` event: no output, no ``[DONE]``. Relayed as it came, the client read an empty success
    (the OpenAI SDK's stream iterator ends silently: an empty completion, no error) until session
    s42; it is a broken stream, as a connection closed before the first event is."""


@dataclass(slots=True, init=False)
class ExchangeResult:
    """One exchange with a model server, as the request path records it. The ``__init__`` is written
    out so that the mypyc build compiles it (as
    :class:`~igw.scheduling.values.RoutingRequest`'s); ``gaps`` defaults to a fresh list."""

    answer: web.StreamResponse | ForwardedAnswer
    """What goes back to the client: a complete answer as forwarded bytes, or a response object
    (a relayed stream, a gateway error)."""
    status: int
    ok: bool
    """The model server produced a complete response (status < 500 and no mid-stream failure)."""
    streamed: bool
    ttft_s: float | None
    """Seconds from the start of the gateway's handling to the first generated token relayed."""
    gaps: list[float]
    events: int
    usage: Mapping[str, int] | None
    error: str | None
    gave_up: bool
    """The gateway stopped waiting for the model server (a response or idle timeout, an endpoint
    declared unresponsive): the model server had the request that long, so it is never retried."""
    response_id: str | None
    """The id of the Responses API answer the model server stored (a later request continuing it can
    only be answered there: :mod:`igw.scheduling.response_affinity`)."""
    relayed_bytes: int
    """The body bytes of a whole answer relayed as they arrived (:func:`_relay_whole`,
    :func:`_relay_decoded`) written to the client so far: what a client that leaves before its end
    is charged output tokens by, as a stream's events are (:func:`igw.gateway.inference._charge_relayed`)."""
    large_error: bool
    """An error answer past :data:`ERROR_ANSWER_BUFFER_BYTES` relayed as it arrived (so not retried):
    counted in ``igw_upstream_large_error_answers_total``, its WARNING throttled."""
    usage_unread: str | None
    """Why the usage of an answer a pod compressed though asked for none went unread, one of
    :data:`~igw.gateway.answer_coding.UNREAD_REASONS` or ``coded_stream`` (an event stream, refused):
    counted in ``igw_answer_usage_unread_total``, whether the answer was refused (a 502) or relayed
    uncharged."""
    coded: bool
    """A compressed answer relayed while its usage is read from its decoded bytes: one cut short by
    its client before the usage was read counts as ``client_gone`` in
    ``igw_answer_usage_unread_total`` (:func:`igw.gateway.inference._coded_usage_lost`)."""
    redirect: bool
    """The upstream answered a redirect (3xx), refused as a 502 (:func:`_refused_redirect`): counted in
    ``igw_upstream_redirects_total`` (tier 2: ``igw_global_upstream_redirects_total``)."""
    unheld: bool
    """An exchange asked to hold its answer (``hold_bytes`` of :func:`exchange`) got one it could not
    hold - an event stream, one past ``hold_bytes``, one to decode for the client - and closed it
    unread: the pod answered (it is not frozen), nothing reached the client, :attr:`answer` is a
    placeholder 502 the request path does not relay."""
    not_an_answer: str | None
    """Why the upstream's answer was refused as no answer to the request's API (a 502:
    :func:`_not_an_answer`), one of :data:`NON_ANSWER_REASONS`: counted in
    ``igw_upstream_non_answers_total`` (tier 2: ``igw_global_upstream_non_answers_total``)."""

    def __init__(
        self,
        answer: web.StreamResponse | ForwardedAnswer,
        status: int,
        ok: bool,
        streamed: bool = False,
        ttft_s: float | None = None,
        gaps: list[float] | None = None,
        events: int = 0,
        usage: Mapping[str, int] | None = None,
        error: str | None = None,
        gave_up: bool = False,
        response_id: str | None = None,
        relayed_bytes: int = 0,
        large_error: bool = False,
        usage_unread: str | None = None,
        coded: bool = False,
        redirect: bool = False,
        unheld: bool = False,
        not_an_answer: str | None = None,
    ) -> None:
        self.answer = answer
        self.status = status
        self.ok = ok
        self.streamed = streamed
        self.ttft_s = ttft_s
        self.gaps = [] if gaps is None else gaps
        self.events = events
        self.usage = usage
        self.error = error
        self.gave_up = gave_up
        self.response_id = response_id
        self.relayed_bytes = relayed_bytes
        self.large_error = large_error
        self.usage_unread = usage_unread
        self.coded = coded
        self.redirect = redirect
        self.unheld = unheld
        self.not_an_answer = not_an_answer

    @property
    def response(self) -> web.StreamResponse:
        """:attr:`answer` as an aiohttp response (a forwarded answer converted, once)."""
        answer = self.answer
        if isinstance(answer, ForwardedAnswer):
            answer = self.answer = answer.to_response()
        return answer


def _hop_by_hop(headers: Mapping[str, str]) -> frozenset[str]:
    """:data:`HOP_BY_HOP` plus every header the message's ``Connection`` header names (RFC 9110 7.6.1)."""
    getall = getattr(headers, "getall", None)  # a multidict: a case-insensitive lookup, no scan
    if getall is not None:
        values: list[str] = getall("Connection", [])
    else:
        values = [value for name, value in headers.items() if name.lower() == "connection"]
    if not values:
        return HOP_BY_HOP
    return HOP_BY_HOP | {token.strip().lower() for value in values for token in value.split(",")}


def upstream_headers(
    client: Mapping[str, str],
    *,
    strip: frozenset[str],
    add: Mapping[str, str],
) -> CIMultiDict[str]:
    """The client's headers forwarded to a model server: less the hop-by-hop ones, ``strip`` (the
    guard's identity headers, lower-case) and the names ``add`` sets, each of which ``add`` then
    writes.

    A name spelt with ``_`` for ``-`` (``X_IGW_Tenant``) is dropped too where the dashed name is one
    of those: a server that maps both spellings to one variable (CGI and WSGI's ``HTTP_X_IGW_TENANT``;
    gunicorn, nginx and Envoy's ``headers_with_underscores_action`` guard against it) read the
    client's copy beside the gateway's. Before session s46 such a copy of the tenant, subject or
    ``X-Gateway-Model-Name`` reached the model server."""
    out: CIMultiDict[str] = CIMultiDict()
    drop = _hop_by_hop(client)
    added: frozenset[str] | None = None
    for name, value in client.items():
        low = name.lower()
        if low in drop or low in strip or low in DECODED_REQUEST_HEADERS:
            continue
        if "_" in low:  # rare: the owned names' other spelling is looked for only then
            dashed = low.replace("_", "-")
            if added is None:
                added = frozenset(n.lower() for n in add)
            if dashed in drop or dashed in strip or dashed in DECODED_REQUEST_HEADERS or dashed in added:
                continue
        out.add(name, value)
    for name, value in add.items():
        out[name] = value
    return out


_NEVER_FORWARDED: Final = HOP_BY_HOP_FIELDS | frozenset(name.encode() for name in DECODED_REQUEST_HEADERS)


_ADDED_NAMES: Final[dict[str, tuple[bytes, bytes]]] = {}
"""An added field's name -> its lower-case bytes and its line's opening (``Name: ``), encoded once per
name (:func:`upstream_header_block`: the same few names, the forwarded identity's, the model's, the
request id's, on every request; until session s50 both were encoded again for each)."""
_ADDED_NAMES_HELD: Final = 256
"""At most this many names are kept (the names come from configuration: a handful)."""


def _added_name(name: str) -> tuple[bytes, bytes]:
    """``name``'s entry of :data:`_ADDED_NAMES`, made and kept."""
    known = (name.lower().encode(_CHARSET, _UNDECODABLE), f"{name}: ".encode(_CHARSET, _UNDECODABLE))
    if len(_ADDED_NAMES) >= _ADDED_NAMES_HELD:
        _ADDED_NAMES.clear()
    _ADDED_NAMES[name] = known
    return known


def upstream_header_block(
    fields: Sequence[tuple[bytes, bytes]], *, strip: frozenset[bytes], add: Mapping[str, str]
) -> bytes:
    """The client's header fields as received (raw name and value bytes, values without surrounding
    whitespace) forwarded as :func:`upstream_headers` forwards their decoded form, already serialised
    as the upstream request head's field lines - byte for byte what
    :func:`~igw.gateway.upstream_client.header_lines` writes for ``upstream_headers``' result, without
    decoding every field, building two header maps and encoding them again.

    ``strip``: lower-case names never forwarded besides the hop-by-hop set. Each of ``add``'s fields
    takes the place of the first kept field of its name (the others dropped), or comes last, as
    ``CIMultiDict.__setitem__`` does; ``tests/gateway/test_upstream_header_block.py`` compares the two."""
    drop = _NEVER_FORWARDED
    owned: set[bytes] | None = None
    named: set[bytes] | None = None
    names: list[bytes] = []
    lines: list[bytes] = []
    for name, value in fields:
        low = name.lower()
        if low in drop:
            if low == b"connection":  # every Connection field names more hop-by-hop fields
                # (read as text, exactly as _hop_by_hop reads the decoded value)
                text = value.decode(_CHARSET, _UNDECODABLE)
                tokens = {t.strip().lower().encode(_CHARSET, _UNDECODABLE) for t in text.split(",")}
                named = tokens if named is None else named | tokens
            continue
        if low in strip:
            continue
        if b"_" in low:  # rare: the owned names' other spelling is looked for only then
            dashed = low.replace(b"_", b"-")
            if owned is None:
                owned = {n.lower().encode(_CHARSET, _UNDECODABLE) for n in add}
            if dashed in drop or dashed in strip or dashed in owned:
                continue
        names.append(low)
        lines.append(b"%b: %b\r\n" % (name, value))
    if named:
        kept = [
            i
            for i, low in enumerate(names)
            if low not in named and (b"_" not in low or low.replace(b"_", b"-") not in named)
        ]
        if len(kept) < len(names):
            names = [names[i] for i in kept]
            lines = [lines[i] for i in kept]
    for added, text in add.items():
        if not text.isprintable():  # an ordinary value is checked by this one scan, without a call
            safe_field_value(added, text)
        known = _ADDED_NAMES.get(added)
        if known is None:
            known = _added_name(added)
        low, opening = known
        line = b"%b%b\r\n" % (opening, text.encode(_CHARSET, _UNDECODABLE))
        if low not in names:
            names.append(low)
            lines.append(line)
            continue
        first = names.index(low)
        lines[first] = line
        for i in range(len(names) - 1, first, -1):
            if names[i] == low:
                del names[i], lines[i]
    return b"".join(lines)


MAX_REPORTED_TOKENS: Final = 1 << 30
"""The largest token count of a model server's ``usage`` the gateway believes (about a billion: a
hundred times the longest context window served today). A count outside 0 to this is no count (the
answer is then counted as one that reported none, by the prompt's estimate and its events): a model
server is not trusted with what every tenant is charged. Before session s40 a negative count failed
the request with a 500 after the answer had arrived (the token counter refused it), and one near
``2**64`` made the Redis rate-limit script fail (an expiry it cannot represent), which declared the
backend down for every tenant of the replica (``onRedisUnavailable`` applied to all of them)."""

RESPONSES_USAGE: Final = (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens"))
"""The Responses API's and the Anthropic Messages API's usage names -> the completion APIs' (which
the metrics, the token rate limits and the scheduler's feedback read)."""


def _usage_from(obj: object) -> Mapping[str, int] | None:
    """The integer counts of an answer's ``usage``: a completion's or an embedding's top-level one, a
    Responses API answer's (``input_tokens``/``output_tokens``, also given under the completion APIs'
    names; an Anthropic Messages answer's, named alike), the ``response`` a stream's
    ``response.completed`` event carries (the ``message`` of an Anthropic ``message_start``), or a
    rerank answer's (vLLM reports only ``total_tokens`` there, every one a prompt token)."""
    if not isinstance(obj, dict):
        return None
    usage = obj.get("usage")
    if usage is None:
        # a Responses API stream's event carries its ``response``, an Anthropic ``message_start``
        # its ``message``
        response = obj.get("response") or obj.get("message")
        if isinstance(response, dict):
            usage = response.get("usage")
    if not isinstance(usage, dict):
        return None
    counts = {
        k: v
        for k, v in usage.items()
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_REPORTED_TOKENS
    }
    if "prompt_tokens" not in counts:  # not a completion API's answer (one test for those)
        for name, alias in RESPONSES_USAGE:  # a Responses API or Anthropic answer, or a part of one
            if name in counts and alias not in counts:
                counts[alias] = counts[name]
        if "prompt_tokens" not in counts and "completion_tokens" not in counts and "total_tokens" in counts:
            counts["prompt_tokens"] = counts["total_tokens"]  # a rerank answer: its prompt tokens alone
    return counts


def _response_object(obj: object) -> dict[str, object] | None:
    """The Responses API object ``obj`` is (a whole answer, ``object: response``) or carries (a
    stream event's ``response``); ``None`` for any other answer."""
    if not isinstance(obj, dict):
        return None
    if obj.get("object") != "response":
        obj = obj.get("response")
        if not isinstance(obj, dict) or obj.get("object") != "response":
            return None
    return obj


def _response_id(response: dict[str, object] | None) -> str | None:
    response_id = None if response is None else response.get("id")
    return response_id if isinstance(response_id, str) and response_id else None


def _stored_response_id(obj: object) -> str | None:
    """The id of a Responses API answer the model server stored (:func:`_response_object`); ``None``
    for any other answer and for one made with ``store: false``."""
    if isinstance(obj, dict) and obj.get("object") != "response" and "response" not in obj:
        return None  # the usual answer (a completion's): what _response_object answers, without the calls
    response = _response_object(obj)
    return None if response is not None and response.get("store") is False else _response_id(response)


def _named_response(obj: object) -> str | None:
    """The id of the response object ``obj`` is or carries (:func:`_response_object`), stored or not:
    what an answer to a stored response's retrieval names."""
    return _response_id(_response_object(obj))


_FIRST_ID: Final = re.compile(rb'"id"\s*:\s*"((?:[^"\\]|\\.){1,512})"')
"""An ``"id"`` key and its string value (inside a JSON string every ``"`` is escaped: no text matches)."""


def _another_in_events(events: bytes, expected: str) -> tuple[str | None, bool]:
    """The first response id other than ``expected`` that an event of ``events`` names, if any, and
    whether one named ``expected`` before it (a replay's id, read by the parse its check does anyway:
    a ``response.completed`` without ``usage`` names it too, since session s48); of an event's data
    that does not parse (unfinished: a first event past :data:`MAX_PARTIAL_EVENT_BYTES`), its first
    ``id``, as of a large whole answer."""
    shown = False
    for line in events.splitlines():
        if line.startswith(b"data:") and b'"id"' in line:
            try:
                named = _named_response(orjson.loads(line[5:]))
            except orjson.JSONDecodeError:
                found = _FIRST_ID.search(line)
                named = None if found is None else found.group(1).decode(errors="replace")
            if named is not None and named != expected:
                return named, shown
            shown = shown or named == expected
    return None, shown


def _first_event_in(held: bytes) -> bool:
    """Whether ``held`` (a replay's events, held for the check) has the first event with data whole,
    or is past :data:`MAX_PARTIAL_EVENT_BYTES` (an event that long is checked as it stands)."""
    data = held.find(b"data:")
    return data >= 0 and (_events_end(held) > data or len(held) > MAX_PARTIAL_EVENT_BYTES)


def _shows(document: Mapping[str, object], expected: str) -> bool:
    """Whether the fields read from the held start of a large answer (:class:`AnswerScan`'s
    document) show the response ``expected`` itself: its first ``id`` is ``expected``, and its
    ``object``, when read, is ``response``. The id alone suffices: OpenAI's and vLLM's response
    objects both serialize ``id`` first, while vLLM puts ``object`` after ``instructions`` and
    ``metadata``, which may be long."""
    return document.get("id") == expected and document.get("object", "response") == "response"


def names_itself(request: web.Request) -> bool:
    """Whether an answer below 400 to ``request`` (about a stored response) is a whole response
    object, whose ``id`` names the response: a retrieval's (``GET /v1/responses/{id}``, not a
    replay's event stream) or a cancel's. A deletion's (a ``response.deleted`` object) and input
    items (a list) are taken as they come. Both tiers' searches (``require_id`` of :func:`exchange`):
    such an answer that does not carry the response asked for is a miss."""
    if request.path.endswith("/input_items") or request.method == "DELETE":
        return False
    return request.query.get("stream") != "true"


UNPROVABLE_REQUEST_HEADERS: Final = frozenset({"if-none-match", "if-modified-since", "if-range", "range"})
"""The client's request fields never forwarded with a request whose answer must name the stored
response asked for (:func:`names_itself`, both tiers): each can draw an answer below 400 with no
whole response object - a 304 Not Modified (``If-None-Match``, ``If-Modified-Since``) or a 206
Partial Content (``Range``; ``If-Range`` only qualifies it) - that no check can take, so the client
got 404 ``response_not_found`` for a response that was there, the holder forgotten. Without them the
pod answers 200 with the whole object, checked and relayed with its validators (``ETag``,
``Last-Modified``): a server may ignore these fields (RFC 9110 13.2.1, 14.2), so a 200 is a correct
answer to them. ``If-Match`` and ``If-Unmodified-Since`` are forwarded: they draw a 200 or a 412,
both handled as any answer. Until session s50 all were forwarded."""


def _misnamed(status: int, named: str | None, extra: Mapping[str, str]) -> ExchangeResult:
    """An answer to the retrieval of one stored response that names another (``named``; ``None``: a
    search's large answer that does not show the one asked for, :func:`_shows`), withheld before
    anything of it was relayed: its caller answers as for a response not stored there
    (:func:`igw.gateway.inference._forward`, :func:`igw.global_router.server._forward_stored`). The
    answer it carries is an error naming neither id, never the answer itself."""
    message = "the model server answered with another response than the one asked for"
    answer = gateway_error("response_not_found", message, headers=extra)
    return ExchangeResult(answer=answer, status=status, ok=True, response_id=named)


def _usage_in_events(chunk: bytes, *, ids: bool = False) -> tuple[Mapping[str, int] | None, str | None]:
    """The usage the SSE events of ``chunk`` report (later counts over earlier ones: an Anthropic
    stream reports its input tokens in ``message_start`` and its output in ``message_delta``), and
    the id of the stored response the first event carrying one names (a Responses API stream's
    ``response.created`` and ``response.completed`` carry it). Events with ``usage`` are read; with
    ``ids`` those carrying a ``response`` too, usage or not (:attr:`StreamEvents.seeking`)."""
    found: Mapping[str, int] | None = None
    response_id: str | None = None
    for line in chunk.split(b"\n"):
        if line.startswith(b"data:") and (b'"usage"' in line or (ids and b'"response"' in line)):
            with contextlib.suppress(orjson.JSONDecodeError):
                event = orjson.loads(line[5:])
                found = _merged_usage(found, _usage_from(event))
                if response_id is None:
                    response_id = _stored_response_id(event)
    return found, response_id


def _merged_usage(
    earlier: Mapping[str, int] | None, later: Mapping[str, int] | None
) -> Mapping[str, int] | None:
    """``later``'s counts over ``earlier``'s (a stream's usage may come in parts)."""
    if earlier is None or later is None:
        return later if later is not None else earlier
    return {**earlier, **later}


MAX_PARTIAL_EVENT_BYTES: Final = 1 << 20
"""The longest unfinished event the relay holds back; a longer one is passed through as it comes (an
upstream that does not end its events as SSE does must not be buffered without bound)."""


def _events_end(data: bytes) -> int:
    """The offset just after the last blank line of ``data`` (the end of its last complete SSE event,
    whichever of the three line endings the stream uses), 0 when it has none."""
    end = data.rfind(b"\n\n")
    if end >= 0:
        return end + 2
    if b"\r" not in data:
        return 0
    crlf, cr = data.rfind(b"\r\n\r\n"), data.rfind(b"\r\r")
    return max(crlf + 4 if crlf >= 0 else 0, cr + 2 if cr >= 0 else 0)


def _usage_only(event: bytes) -> Mapping[str, int] | None:
    """The usage of ``event`` when it is a completion stream's usage chunk (``choices`` empty, a
    ``usage`` object: what ``stream_options.include_usage`` adds before ``[DONE]``), else None."""
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            try:
                doc = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                return None
            if isinstance(doc, dict) and doc.get("choices") == [] and isinstance(doc.get("usage"), dict):
                return _usage_from(doc)
            return None
    return None


class StreamEvents:
    """The relay's reading of an SSE stream: what to write, and what the events said.

    * Only complete events are written: the bytes after the last blank line of what arrived (an
      event split across reads) are held until their event ends. A client's SSE parser could not
      act on them sooner, and whatever the relay itself writes next - a keep-alive comment, the
      terminal error event of an upstream that died or went silent - then starts an event of its
      own instead of landing inside the unfinished one (before session s36 both did, and the
      client's parser joined them into one event whose JSON did not parse).
    * The usage the events report and the id of a stored response they name are recorded
      (:attr:`usage`, :attr:`response_id`): what the token limits, the metrics and the scheduler
      read, and what a client that leaves early is charged. With ``seeks_id`` (a Responses API
      generation) the id is read from the first event carrying the response (``response.created``),
      usage or not (:attr:`seeking`); until session s48 only from an event with ``usage`` (a
      replay's is read by its check, :func:`_relay_stream`).
    * With ``strip_usage`` (the gateway asked the engine for ``stream_options.include_usage``, the
      client did not: :mod:`igw.gateway.stream_usage`) the usage chunk is recorded and not written,
      so the client receives the stream it asked for.
    """

    __slots__ = ("partial", "response_id", "seeking", "strip_usage", "usage")

    def __init__(self, *, strip_usage: bool = False, seeks_id: bool = False) -> None:
        self.partial = b""
        self.strip_usage = strip_usage
        self.usage: Mapping[str, int] | None = None
        self.response_id: str | None = None
        self.seeking = seeks_id
        """Events carrying a ``response`` are read for its id, usage or not, until one names it: a
        substring test per read while seeking, none after (the deltas carry no ``response``)."""

    def feed(self, data: bytes) -> bytes:
        """The complete events of the held bytes and ``data``, to be written (may be empty)."""
        partial = self.partial
        if partial:
            data = partial + data
            self.partial = b""
        end = _events_end(data)
        if end != len(data) and len(data) - end <= MAX_PARTIAL_EVENT_BYTES:
            self.partial = data[end:]
            data = data[:end]
        # SGLang writes ``"usage":null`` into every completion chunk: those are not parsed (a
        # Responses API event naming its ``response`` is, for the stored response's id, whether it
        # says ``usage`` or not while the id is sought)
        usage = b'"usage"' in data
        if (usage or self.seeking) and (
            b'"response"' in data or (usage and data.count(b'"usage"') != data.count(b'"usage":null'))
        ):
            data = self._read_usage(data)
        return data

    def rest(self) -> bytes:
        """The unfinished event held back at the stream's end (written as it came: transparent)."""
        rest, self.partial = self.partial, b""
        return rest

    def _read_usage(self, data: bytes) -> bytes:
        if not (self.strip_usage and b'"choices":[]' in data and b"\r" not in data):  # LF-framed only
            self._note(data)
            return data
        kept: list[bytes] = []
        for event in data.split(b"\n\n"):
            if b'"usage"' in event:
                found = _usage_only(event) if b'"choices":[]' in event else None
                if found is not None:
                    self.usage = _merged_usage(self.usage, found)
                    continue
                self._note(event)
            elif self.seeking and b'"response"' in event:
                self._note(event)
            kept.append(event)
        return b"\n\n".join(kept)

    def _note(self, events: bytes) -> None:
        found, stored = _usage_in_events(events, ids=True) if self.seeking else _usage_in_events(events)
        self.usage = _merged_usage(self.usage, found)
        if stored is not None and self.response_id is None:  # the first named (one id per stream)
            self.response_id = stored
            self.seeking = False


RESPONSE_ENDS: Final = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error", "message_delta", "message_stop"}
)
"""Events that end a stream (the Responses API's, an Anthropic stream's ``message_delta`` with its
stop reason and ``message_stop``): the first token, if none came before (as ``[DONE]`` is)."""


def _carries_token(chunk: bytes) -> bool:
    """Whether SSE bytes carry generated output, not only the role chunk a chat stream opens with.

    TTFT is the time to the first *token*: vLLM sends the role chunk with the first token, other
    servers before prefill, and counting that would make slow-prefill pods look fast. Bytes that do
    not parse as complete events (an event split across reads) count as output, as does an event
    whose ``choices`` is not a list: the model server's bytes are relayed, never assumed to have
    the shape of a completion chunk (before session s40 ``{"choices": 5}`` raised TypeError here,
    which cut the client's stream without its terminal event and skipped the request's accounting).
    """
    for line in chunk.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return True
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return True
        if not isinstance(event, dict):
            return True
        kind = event.get("type")
        if isinstance(kind, str):
            # A Responses API event: output is a ``*.delta`` (text, reasoning, a tool call's
            # arguments); ``response.created`` / ``in_progress`` / ``*.added`` come before prefill.
            # An Anthropic one: output is a ``content_block_delta``; ``message_start``,
            # ``content_block_start`` and ``ping`` come before it.
            if kind.endswith(".delta") or kind == "content_block_delta" or kind in RESPONSE_ENDS:
                return True
            continue
        choices = event.get("choices")
        if choices is not None and not isinstance(choices, list):
            return True
        for choice in choices or ():
            if not isinstance(choice, dict):
                return True
            delta = choice.get("delta")
            source = delta if isinstance(delta, dict) else choice
            if source.get("text") or source.get("content") or source.get("reasoning_content"):
                return True
            if source.get("tool_calls") or choice.get("finish_reason"):
                return True
        if "error" in event:
            return True
    return False


def _response_headers(
    upstream: UpstreamResponse,
    extra: Mapping[str, str],
    out: CIMultiDict[str] | None = None,
    *,
    drop: frozenset[bytes] = _NO_FIELDS,
) -> CIMultiDict[str]:
    """A relayed stream's headers: the upstream's raw fields less the hop-by-hop ones, its ``Server``
    (the gateway names itself, :mod:`igw.gateway.server_identity`) and those its ``Connection``
    fields name, decoded once (not into the response's decoded header map first,
    whose copy and ``Connection`` lookup were the larger part of this on the first event's path),
    then ``extra``. Added to ``out`` when given (the relayed response's own, empty, map: a map
    passed to the response's constructor would be copied there, on the first event's path), else to
    a new map. ``drop``: more lower-case field names not relayed (those of a coding removed)."""
    connection = upstream.noted.get(b"connection")
    named = {token.strip().lower() for token in connection.split(b",")} if connection else _NO_FIELDS
    if out is None:
        out = CIMultiDict()
    for raw_name, raw_value in upstream.fields:
        low = raw_name.lower()
        if low in HOP_BY_HOP_FIELDS or low in named or low == UPSTREAM_SERVER_FIELD or low in drop:
            continue
        out.add(raw_name.decode(_CHARSET, _UNDECODABLE), raw_value.decode(_CHARSET, _UNDECODABLE))
    for name, value in extra.items():
        out[name] = value
    return out


_CODED_FIELDS: Final = frozenset({b"content-encoding", b"content-md5", b"etag"})
"""Fields that describe the coded bytes, dropped when the gateway decodes them (:func:`_relay_decoded`)."""

STALLED_CODES: Final = {"unresponsive": "upstream_unresponsive", "response_timeout": "upstream_timeout"}
""":attr:`UpstreamStalled.reason` -> the error code the client gets (both 504)."""


def _stalled(exc: UpstreamStalled, extra: Mapping[str, str]) -> ExchangeResult:
    """A 504 for a request the gateway stopped waiting for before anything of it was relayed: the
    client's message names the cause, never the endpoint's address (``exc.public``); the access
    log's ``error`` keeps it. ``extra``: the response headers the answer would have had, the request
    id among them)."""
    return ExchangeResult(
        answer=gateway_error(STALLED_CODES[exc.reason], exc.public, headers=extra),
        status=504,
        ok=False,
        error=f"{exc.reason}: {exc}",
        gave_up=True,
    )


def _timed_out(endpoint: str, upstream_name: str, what: str, timeout_s: float | None) -> UpstreamStalled:
    """The stall of an upstream that ``what`` (``sent no response within``, ...) ``timeout_s``: the
    client is told ``upstream_name`` (:data:`UPSTREAM_NAME`, a cluster's configured name), the log
    the upstream as :func:`_logged_upstream` names it (a pod's ``endpoint``, a cluster's name: until
    session s48 a cluster's internal URL)."""
    bound = f"{what} {timeout_s or 0:g}s"
    logged = _logged_upstream(endpoint, upstream_name)
    return UpstreamStalled(
        f"upstream {logged} {bound}", reason="response_timeout", public=f"{upstream_name} {bound}"
    )


UPSTREAM_NAME: Final = "the model server"
"""How a client-facing message names the upstream it failed at, unless the caller names it (the
global router: its cluster's configured name): never by address. Before session s45 the messages
named a pod's ``host:port`` or a cluster's internal URL (``upstream http://10.0.3.17:8000 failed
before responding``) to any caller; the access log, the WARNING lines and the decision-debug header
keep the address for the operator."""


NOT_MODIFIED_FIELDS: Final = frozenset(
    {b"cache-control", b"date", b"etag", b"expires", b"last-modified", b"vary"}
)
"""The upstream fields a relayed 304 keeps (lower-case): the validators and cache metadata RFC 9110
15.4.5 names for it. Every other field is dropped - ``Location``, ``Refresh``, ``Link``,
``Content-Location``, ``Content-Type``, ``Set-Cookie`` and the like: a 304 is a conditional request's
answer with no content, and such fields on it only point a client (one that follows ``Location`` on
any 3xx, a browser that honours ``Refresh``) at an address the upstream chose, or name internal ones.
Until session s47 a 304 was relayed with every field it came with, ``Location`` included."""


def _not_modified(upstream: UpstreamResponse, extra: Mapping[str, str]) -> ExchangeResult:
    """A model server's or a cluster's 304 as the client gets it: no body, and of its fields only
    :data:`NOT_MODIFIED_FIELDS` (then the gateway's own). Whatever the upstream framed as a body is
    not read (llhttp reads a 304 as bodiless); its content type does not make it a stream."""
    kept = [field for field in upstream.fields if field[0].lower() in NOT_MODIFIED_FIELDS]
    noted = {name: value for name, value in upstream.noted.items() if name == b"date"}
    return ExchangeResult(
        answer=forwarded_answer(304, kept, b"", noted=noted, add=extra), status=304, ok=True
    )


BODILESS_STATUSES: Final = frozenset({204, 205, 304})
"""Final statuses that carry no answer body (a ``1xx`` is interim, waited past; ``101`` ends the
connection as broken): what a request whose API answers JSON or an event stream cannot be answered
with (``json_answer`` of :func:`exchange`). Until session s50 a pod's 204, 205 or 304 to ``POST
/v1/completions`` reached the client as it came, an empty success the OpenAI SDK fails to parse."""


ARRAY_ANSWER_PATHS: Final = frozenset(
    path for path, api in INFERENCE_PATHS.items() if api is InferenceApi.RERANK
)
"""The inference paths whose answer may be a JSON array as well as an object (``json_answer`` of
:func:`exchange`): SGLang's ``/v1/rerank`` answers a list of ``{"score", "document", "index"}``,
as Text Embeddings Inference's ``/rerank`` (a generic engine) does. Until review 51 of session s50
such an answer was refused as ``not_json_object``, so every SGLang reranker behind the gateway failed."""


def _json_answer_doc(payload: bytes, *, arrays: bool) -> dict[str, object] | list[object] | None:
    """``payload`` as a JSON object, or as a JSON array when ``arrays`` (:data:`ARRAY_ANSWER_PATHS`);
    ``None`` when it is neither (empty, not JSON, another JSON value)."""
    try:  # not contextlib.suppress: an object and two calls per answer
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) or (arrays and isinstance(doc, list)) else None


NON_ANSWER_REASONS: Final = ("bodiless_status", "empty_body", "not_json_object")
"""The ``reason`` label of ``igw_upstream_non_answers_total`` (tier 2's too): a status that carries no
body (:data:`BODILESS_STATUSES`), a whole success with an empty body, one whose body is no JSON
object (for one past ``relay_whole_above``: whose first byte past whitespace is not ``{``)."""


def _json_start(parts: Sequence[bytes]) -> bytes:
    """The first byte of ``parts`` (an answer's held bytes, in order) past JSON's whitespace, or
    ``b""`` when they hold none."""
    for part in parts:
        rest = part.lstrip(b" \t\r\n")
        if rest:
            return rest[:1]
    return b""


def _not_an_answer(
    reason: str, what: str, endpoint: str, upstream_name: str, extra: Mapping[str, str]
) -> ExchangeResult:
    """A 502 ``upstream_error`` for an answer that cannot be one to the request's API (``reason``, one
    of :data:`NON_ANSWER_REASONS`; ``what``: the bodiless status, or the kind of body), nothing of it
    relayed: the upstream's fault, not ``ok``, retried elsewhere as a broken connection is
    (``retryOn``'s ``5xx``). Until session s50 an empty or non-JSON 200 to a completion was relayed as
    a success. A WARNING (:data:`non_answer_log`, throttled per upstream and reason) names the
    upstream as :func:`_logged_upstream` does, never the body's content: until session s50 the access
    log's ``error`` alone said so."""
    non_answer_log.warning(
        "upstream %s answered an inference request with %s (%s): refused with a 502, not relayed",
        _logged_upstream(endpoint, upstream_name),
        reason,
        what,
    )
    return ExchangeResult(
        answer=gateway_error(
            "upstream_error",
            f"{upstream_name} answered with {what}, which is no answer to this API: not relayed",
            headers=extra,
        ),
        status=502,
        ok=False,
        error=f"not an answer: {what}",
        not_an_answer=reason,
    )


def _refused_redirect(
    upstream: UpstreamResponse, endpoint: str, upstream_name: str, extra: Mapping[str, str], asked_path: str
) -> ExchangeResult:
    """A 502 ``upstream_error`` for a redirect (any 3xx) from a model server or a cluster, nothing of
    it relayed (304 Not Modified, a conditional request's answer, is no redirect: :func:`_not_modified`): no
    OpenAI-compatible API redirects, so a 3xx is a misconfigured upstream (an ingress's
    HTTP-to-HTTPS redirect) or a hostile one pointing clients that follow redirects at an address of
    their own network or the gateway's (``Location: http://169.254.169.254/...``), and its
    ``Location`` names internal addresses. Before session s46 it was relayed as it came, ``Location``
    and all, at both tiers. The client is told the status alone; the access log's ``error`` and a
    WARNING (throttled per upstream, named as :func:`_logged_upstream` names it: a cluster by its
    name, not its endpoint URL, since session s48) keep the ``Location``, credentials and query
    values masked (:func:`~igw.redaction.redact_url`) and a stored response's id named by its
    reference (:func:`~igw.gateway.response_ids.logged_url`; ``asked_path``: the request's path).
    Not ``ok``: a 502 either tier may retry elsewhere."""
    location = next((value for name, value in upstream.fields if name.lower() == b"location"), None)
    if location is None:
        shown = "none"
    else:
        shown = redact_url(logged_url(location.decode(_CHARSET, _UNDECODABLE).strip(), asked_path))
    redirect_log.warning(
        "upstream %s answered a redirect (HTTP %d, Location %s): refused with a 502, not relayed",
        _logged_upstream(endpoint, upstream_name),
        upstream.status,
        shown,
    )
    return ExchangeResult(
        answer=gateway_error(
            "upstream_error",
            f"{upstream_name} answered a redirect (HTTP {upstream.status}), which an inference API "
            "never sends: not relayed",
            headers=extra,
        ),
        status=502,
        ok=False,
        error=f"redirect HTTP {upstream.status} to {shown}",
        redirect=True,
    )


def _upstream_failed(what: str, exc: BaseException, extra: Mapping[str, str]) -> ExchangeResult:
    """A 502 ``upstream_error`` for a request nothing of which was relayed yet: ``what`` and the
    exception's type for the client (never its text: it may name internal addresses), both for the log;
    ``extra``: the response headers the answer would have had (the request id among them)."""
    return ExchangeResult(
        answer=gateway_error("upstream_error", f"{what}: {type(exc).__name__}", headers=extra),
        status=502,
        ok=False,
        error=f"{type(exc).__name__}: {exc}",
    )


async def exchange(
    request: web.Request,
    *,
    session: UpstreamPool,
    endpoint: str,
    body: bytes,
    headers: CIMultiDict[str] | bytes,
    started: float,
    connect_timeout_s: float,
    idle_timeout_s: float | None,
    response_headers: Mapping[str, str],
    on_prepared: Callable[[web.StreamResponse], None],
    keepalive_s: float = 0.0,
    on_first_token: Callable[[float], None] | None = None,
    method: bytes = b"POST",
    strip_usage: bool = False,
    body_timeout_s: float | None = None,
    relay_whole_above: int | None = None,
    expect_id: str | None = None,
    upstream_name: str = UPSTREAM_NAME,
    head_timeout_s: float | None = None,
    hold_bytes: int | None = None,
    answer_timeout_s: float | None = None,
    discard_large_errors: bool = False,
    require_id: bool = False,
    json_answer: bool = False,
) -> ExchangeResult:
    """Forward to ``endpoint`` (with ``method``) and relay the answer (``headers``: the upstream
    request's fields, as a map or serialised by :func:`upstream_header_block`). Raises
    :class:`ConnectFailed` before anything was sent to the client; every later failure is turned
    into a response (or a terminal SSE event). ``on_first_token`` hears a streamed response's TTFT
    (seconds, to the first token's write) once its first token has been relayed and the relay
    waited for the next bytes, so the scheduler learns it without waiting for the whole response.
    ``strip_usage``: a stream's usage chunk is read and not relayed (the gateway asked for it).
    ``body_timeout_s``: bounds the wait for a whole (non-streamed) answer's body after its head (a
    504 ``upstream_timeout`` when it passes, nothing having been relayed): the global router, which
    runs no stall sweep, passes ``requestTimeoutSeconds``; ``None`` (tier 1, whose
    :mod:`~igw.gateway.upstream_watchdog` and ``routeTimeout`` bound it): no bound here.
    ``relay_whole_above``: a whole answer below status 400 is relayed as it arrives once more than
    this many of its bytes have (:func:`_relay_whole`; both tiers pass
    :data:`WHOLE_ANSWER_BUFFER_BYTES` or their own bound: neither retries such an answer), an error
    answer (400 and above, which either tier may retry elsewhere while nothing of it was relayed)
    once more than :data:`ERROR_ANSWER_BUFFER_BYTES` have (a JSON one relayed, any other answered
    with its status alone: :func:`_discarded_error`); ``None``: collected whole, up to
    :data:`~igw.gateway.upstream_client.MAX_WHOLE_BODY_BYTES`. ``expect_id``: the stored response a
    retrieval asks for (a replay's stream, a whole answer past ``relay_whole_above``): an answer
    naming another is returned unrelayed (:func:`_misnamed`) instead of being relayed as it arrives;
    ``None`` (every generation): relayed as it comes. ``upstream_name``: the upstream as the client's error
    messages name it (:data:`UPSTREAM_NAME`), never its address. ``head_timeout_s``: a shorter bound
    on the wait for the answer's head alone (the global router's search of a cluster,
    :data:`~igw.global_router.server.SEARCH_TIMEOUT_S`); ``None``: ``idle_timeout_s`` bounds it.
    ``hold_bytes``: nothing is written to the client here, whatever the answer (a hedged retrieval's
    attempt, one of several in flight: :func:`_held`); ``None``: relayed as above.
    ``answer_timeout_s``: bounds a whole answer (not an event stream) from this call to the last of
    its bytes held - a held answer's all of them, another's those collected before its relay starts -
    as a 504 ``upstream_timeout`` (:attr:`ExchangeResult.gave_up`), nothing relayed: a tier-1
    search's attempt (:data:`~igw.gateway.response_search.SEARCH_TIMEOUT_S`; a stored response's
    answer is small JSON sent at once), so that a pod that sends its head and then stalls or trickles
    the body is given up as one that sent no head is (since session s47; before, only
    ``responseTimeout``'s silence bounded it, 600 s by default, and a trickle nothing);
    ``None``: no such bound. ``discard_large_errors``: an error answer past
    :data:`ERROR_ANSWER_BUFFER_BYTES` is answered with its status alone (:func:`_discarded_error`),
    JSON or not, never relayed: the global router's search for a stored response, whose 404 is a miss
    to move on from (until session s48 a cluster's JSON 404 over 1 MiB was relayed, and the search
    ended there, the cluster storing the response never asked). ``require_id`` (with ``expect_id``:
    a search's retrieval or cancel): a whole answer below 400 past ``relay_whole_above`` whose held
    bytes do not show the response asked for (:func:`_shows`; no ``id``, or not JSON) is returned
    unrelayed too, as one naming another; without it such an answer naming none is relayed.
    ``json_answer``: the request's API answers a JSON document or an event stream (an inference
    path's ``POST``), so an answer that can be neither is the upstream's fault, a 502
    ``upstream_error`` the request path may retry elsewhere (:func:`_not_an_answer`): a bodiless
    status (:data:`BODILESS_STATUSES`) and a whole answer below 400 collected whole whose body is no
    JSON object (empty included)."""
    answered_by = None if answer_timeout_s is None else time.monotonic() + answer_timeout_s
    # ``endpoint`` is a pod's ``host:port``, or a base URL with its scheme (the global router's
    # clusters). Waiting for a free pooled connection is not a connect failure (it would turn pool
    # exhaustion under load into retries and 502s); routeTimeout bounds the wait.
    # A streamed request's wait for the head is bounded by streamIdleTimeout inside the pool (one
    # timer armed after the request is written, not a timeout context before it).
    try:
        upstream = await session.post(
            endpoint,
            request.path_qs,
            headers=headers,
            body=body,
            connect_timeout_s=connect_timeout_s,
            head_timeout_s=idle_timeout_s if head_timeout_s is None else head_timeout_s,
            method=method,
        )
    except UpstreamStalled as stalled:
        return _stalled(stalled, response_headers)
    except TimeoutError:
        # the head bound (a stream's streamIdleTimeout, the global router's requestTimeoutSeconds)
        bound = idle_timeout_s if head_timeout_s is None else head_timeout_s
        return _stalled(
            _timed_out(endpoint, upstream_name, "sent no response within", bound), response_headers
        )
    except (UpstreamBroken, OSError) as failed:
        return _upstream_failed(f"{upstream_name} failed before responding", failed, response_headers)
    if 300 <= upstream.status < 400 and upstream.status != 304:  # 304: a conditional GET's, no redirect
        upstream.close()
        return _refused_redirect(upstream, endpoint, upstream_name, response_headers, request.path)
    if json_answer and upstream.status in BODILESS_STATUSES:
        upstream.close()
        return _not_an_answer(
            "bodiless_status", f"status {upstream.status}", endpoint, upstream_name, response_headers
        )
    # what is left of answer_timeout_s for the bytes held after the head (None: no such bound)
    held_timeout_s = None if answered_by is None else max(0.0, answered_by - time.monotonic())
    # a collected answer's bound: answer_timeout_s's rest when shorter than body_timeout_s (named so)
    whole_timeout_s = _shorter(body_timeout_s, held_timeout_s)
    whole_bound_s = body_timeout_s if whole_timeout_s == body_timeout_s else answer_timeout_s
    try:
        if upstream.status == 304:  # no content, and only the fields a 304 is for
            return _not_modified(upstream, response_headers)
        if hold_bytes is not None:
            return await _held(
                request,
                upstream,
                hold_bytes=hold_bytes,
                extra=response_headers,
                timeout_s=held_timeout_s,
                bound_s=answer_timeout_s,
                endpoint=endpoint,
                upstream_name=upstream_name,
                discard_large_errors=discard_large_errors,
                required_id=expect_id if require_id else None,
            )
        # Status, not content type, makes an answer a refusal: an error answered as an event stream
        # (a 503 or 429 some servers send as ``text/event-stream``) is an error answer, wrapped and
        # retried as a JSON or plain one is (before session s42 it was relayed as a stream, never
        # retried, although the retry policy names the status alone).
        if upstream.content_type == "text/event-stream" and upstream.status < 400:
            coding = upstream.noted.get(b"content-encoding")
            if coding is not None and coding.strip().lower() != b"identity":
                return _compressed_stream(upstream_name, response_headers)
            return await _relay_stream(
                request,
                upstream,
                started=started,
                extra=response_headers,
                on_prepared=on_prepared,
                keepalive_s=keepalive_s,
                idle_timeout_s=idle_timeout_s,
                on_first_token=on_first_token,
                strip_usage=strip_usage,
                expect_id=expect_id,
                upstream_name=upstream_name,
            )
        # A complete answer, read in this coroutine: usually it came with its head (no wait at all)
        try:
            coding = upstream.noted.get(b"content-encoding")
            if (
                upstream.status < 400
                and compressed(coding)
                and not accepts_coding(request.headers.get("Accept-Encoding"), cast(bytes, coding))
            ):
                return await _relay_decoded(
                    request,
                    upstream,
                    endpoint=endpoint,
                    upstream_name=upstream_name,
                    extra=response_headers,
                    on_prepared=on_prepared,
                    body_timeout_s=body_timeout_s,
                    json_answer=json_answer,
                )
            payload = upstream.received()
            discarded = _wrapped(upstream) or (discard_large_errors and upstream.status >= 400)
            if payload is None and relay_whole_above is not None and discarded:
                async with asyncio.timeout(whole_timeout_s):
                    return await _discarded_error(upstream, extra=response_headers)
            if payload is None and relay_whole_above is not None:
                return await _relay_whole(
                    request,
                    upstream,
                    endpoint=endpoint,
                    upstream_name=upstream_name,
                    extra=response_headers,
                    on_prepared=on_prepared,
                    buffer_bytes=relay_whole_above if upstream.status < 400 else ERROR_ANSWER_BUFFER_BYTES,
                    body_timeout_s=body_timeout_s,
                    expect_id=expect_id,
                    require_id=require_id,
                    held_timeout_s=held_timeout_s,
                    held_bound_s=answer_timeout_s,
                    json_answer=json_answer,
                )
            if payload is None:
                if whole_timeout_s is None:
                    payload = await upstream.read()
                else:
                    async with asyncio.timeout(whole_timeout_s):
                        payload = await upstream.read()
        except (TimeoutError, UpstreamBroken) as answer_cut:  # UpstreamStalled too
            return _answer_failed(answer_cut, endpoint, upstream_name, whole_bound_s, response_headers)
        coded = await _decoded_scan(upstream, payload) if _coded_json(upstream) else None
        return _whole_answer(
            upstream,
            payload,
            extra=response_headers,
            coded=coded,
            not_json_refused=(endpoint, upstream_name) if json_answer else None,
            arrays=request.path in ARRAY_ANSWER_PATHS,
        )
    finally:
        upstream.close()


def _answer_failed(
    failed: TimeoutError | UpstreamBroken,
    endpoint: str,
    upstream_name: str,
    bound_s: float | None,
    extra: Mapping[str, str],
) -> ExchangeResult:
    """The result of a whole answer that did not arrive after its head (relayed or held alike): its
    bound ``bound_s`` passed (a 504 naming it), the pod stalled (a 504), or its connection broke (a
    502). One mapping for :func:`exchange` and :func:`_held`, so both tell a client the same."""
    if isinstance(failed, UpstreamStalled):
        return _stalled(failed, extra)
    if isinstance(failed, UpstreamBroken):
        return _upstream_failed(f"{upstream_name} failed while sending its response", failed, extra)
    return _stalled(_timed_out(endpoint, upstream_name, "did not finish its response within", bound_s), extra)


def _shorter(first: float | None, second: float | None) -> float | None:
    """The shorter of two bounds (``None``: none)."""
    if first is None:
        return second
    return first if second is None else min(first, second)


async def _held(
    request: web.Request,
    upstream: UpstreamResponse,
    *,
    hold_bytes: int,
    extra: Mapping[str, str],
    timeout_s: float | None = None,
    bound_s: float | None = None,
    endpoint: str = "",
    upstream_name: str = UPSTREAM_NAME,
    discard_large_errors: bool = False,
    required_id: str | None = None,
) -> ExchangeResult:
    """A whole answer collected, never written to the client (``hold_bytes`` of :func:`exchange`):
    one of a hedged retrieval's attempts (:mod:`igw.gateway.hedged_search`), several in flight, of
    which the request path relays one answer at most, after choosing it. Two writers to one client,
    or an answer relayed before the one that wins is known, would corrupt the client's response.
    An answer it cannot hold - an event stream, one past ``hold_bytes``, a compressed one the client
    does not accept (decoded as it is relayed, :func:`_relay_decoded`) - is closed unread
    (:attr:`ExchangeResult.unheld`; the caller asks that pod again, relaying). An upstream failure or
    stall is the exchange's result, as for any whole answer; so is a body not held whole within
    ``timeout_s`` (what is left of ``bound_s``, ``answer_timeout_s`` of :func:`exchange`): a 504.

    Past ``hold_bytes``, a search's answer (since session s48) is judged on what is held, as
    :func:`_relay_whole` judges it, rather than asked again: an error answer with
    ``discard_large_errors`` is answered with its status alone (:func:`_wrapped_error`), and a plain
    JSON answer below 400 that does not show ``required_id`` (``require_id`` of :func:`exchange`,
    :func:`_shows`) is returned as one naming another (:func:`_misnamed`). Before, each was unheld,
    that pod asked again relaying and the search ended on it, the pod storing the response never
    asked."""
    coding = upstream.noted.get(b"content-encoding")
    if upstream.status < 400 and (
        upstream.content_type == "text/event-stream"
        or (
            compressed(coding)
            and not accepts_coding(request.headers.get("Accept-Encoding"), cast(bytes, coding))
        )
    ):
        return _unheld(extra)
    try:
        async with asyncio.timeout(timeout_s):
            if _wrapped(upstream):
                return await _discarded_error(upstream, extra=extra)
            payload = upstream.received()
            if payload is None:
                parts: list[bytes] = []
                held = 0
                while chunk := await upstream.readany():
                    held += len(chunk)
                    parts.append(chunk)
                    if held > hold_bytes:
                        return _past_held(upstream, parts, extra, discard_large_errors, required_id)
                payload = b"".join(parts)
            elif len(payload) > hold_bytes:
                return _past_held(upstream, [payload], extra, discard_large_errors, required_id)
    except (TimeoutError, UpstreamBroken) as failed:  # UpstreamStalled too
        return _answer_failed(failed, endpoint, upstream_name, bound_s, extra)
    coded = await _decoded_scan(upstream, payload) if _coded_json(upstream) else None
    return _whole_answer(upstream, payload, extra=extra, coded=coded)


def _past_held(
    upstream: UpstreamResponse,
    parts: list[bytes],
    extra: Mapping[str, str],
    discard_large_errors: bool,
    required_id: str | None,
) -> ExchangeResult:
    """An answer :func:`_held` holds past its bound (``parts``: its bytes so far): a search's large
    error answered by its status alone, its large answer below 400 that does not show
    ``required_id`` a miss (:func:`_held`); any other unheld, as before."""
    if upstream.status >= 400 and discard_large_errors:
        return ExchangeResult(
            answer=_wrapped_error(upstream, extra), status=upstream.status, ok=upstream.status < 500
        )
    if required_id is not None and upstream.status < 400 and _plain_json(upstream):
        scan = AnswerScan()
        for part in parts:
            scan.feed(part)
        document = scan.document()
        if not _shows(document, required_id):
            named = _named_response(document)  # another's id, else none: never the one asked for
            return _misnamed(upstream.status, None if named == required_id else named, extra)
    return _unheld(extra)


def _unheld(extra: Mapping[str, str]) -> ExchangeResult:
    """An answer :func:`_held` could not hold, closed unread (never relayed: the placeholder 502)."""
    message = "the model server's answer could not be held"
    return ExchangeResult(
        answer=gateway_error("upstream_error", message, headers=extra), status=502, ok=True, unheld=True
    )


UPSTREAM_ACCEPT_ENCODING: Final = {"Accept-Encoding": "identity"}
"""What the gateway asks of a model server in place of the client's ``Accept-Encoding``: no content
coding. The relay reads what a pod answers (a stream's events and usage, a whole answer's usage)
and writes into a stream (keep-alive comments, the terminal error event): before session s40 the
client's ``gzip, deflate`` (the OpenAI SDK's, aiohttp's default) was forwarded, and a pod that
compressed (behind a compressing proxy) had its streams broken by the plain-text comments inside
the compressed body, and its whole answers' usage went unread (charged as no output)."""


def _unreadable_answer(scan: CodedScan, extra: Mapping[str, str]) -> ExchangeResult:
    """A 502 ``upstream_error`` for a whole answer a pod compressed though the gateway asked for none
    (:data:`UPSTREAM_ACCEPT_ENCODING`) in a way it cannot read (:mod:`igw.gateway.answer_coding`):
    forwarded, its usage would go uncharged."""
    message = f"the model server sent a compressed answer the gateway could not read: {scan.unreadable}"
    return ExchangeResult(
        answer=gateway_error("upstream_error", message, headers=extra),
        status=502,
        ok=False,
        error="unreadable compressed answer",
        usage_unread=scan.unread,
    )


def _compressed_stream(upstream_name: str, extra: Mapping[str, str]) -> ExchangeResult:
    """A 502 ``upstream_error`` for an event stream a pod sent compressed though the gateway asked
    for none (:data:`UPSTREAM_ACCEPT_ENCODING`): nothing of it is relayed. Relayed, the keep-alive
    comments and a terminal error event would be written as plain text inside the compressed body,
    which the client could not decode (before session s40), and its events could not be read."""
    message = f"{upstream_name} sent a compressed event stream; the gateway asks for none"
    return ExchangeResult(
        answer=gateway_error("upstream_error", message, headers=extra),
        status=502,
        ok=False,
        error="compressed event stream",
        usage_unread="coded_stream",
    )


def _coded_json(upstream: UpstreamResponse) -> bool:
    """Whether ``upstream`` is a JSON answer below 400 compressed though the gateway asked for none
    (:data:`UPSTREAM_ACCEPT_ENCODING`): its usage is read from its decoded bytes (:func:`_decoded_scan`)."""
    return (
        upstream.content_type == "application/json"
        and upstream.status < 400
        and compressed(upstream.noted.get(b"content-encoding"))
    )


async def _decoded_scan(upstream: UpstreamResponse, payload: bytes) -> CodedScan:
    """What a whole compressed JSON answer (:func:`_coded_json`) says of itself, read from its decoded
    bytes a piece at a time, the event loop served between the pieces (:meth:`CodedScan.feed`)."""
    coded = CodedScan(cast(bytes, upstream.noted.get(b"content-encoding")), relay=False)
    await coded.feed(payload)
    coded.finish()
    return coded


def _whole_answer(
    upstream: UpstreamResponse,
    payload: bytes,
    *,
    extra: Mapping[str, str],
    coded: CodedScan | None = None,
    not_json_refused: tuple[str, str] | None = None,
    arrays: bool = False,
) -> ExchangeResult:
    """A complete (non-streamed) upstream answer: forwarded as it came (a non-JSON error wrapped in
    the OpenAI shape), with the token usage its JSON body reports. ``coded``: what the caller read
    of it when it is compressed JSON (:func:`_coded_json`, :func:`_decoded_scan`), decoded there so
    that the decode may give the event loop turns; such an answer without it is read as no JSON.
    ``not_json_refused``: the upstream's endpoint and name when the request's API answers JSON
    (``json_answer`` of :func:`exchange`): an answer below 400, not coded, whose body is no JSON
    object (an empty body included; whatever its content type) is refused (:func:`_not_an_answer`),
    and so is a coded one whose decoded body does not start with ``{`` and end with ``}`` past
    whitespace (:meth:`~igw.gateway.answer_coding.CodedScan.json_edges`: its decoded bytes are not
    held to be parsed; until session s50 such an answer, an array or a page of text compressed
    though the gateway asked for none, was relayed as a success); ``arrays``: a JSON array is an
    answer too (:data:`ARRAY_ANSWER_PATHS`)."""
    usage = None
    response_id = None
    is_json = _plain_json(upstream)
    if not_json_refused is not None and coded is None and upstream.status < 400:
        answered = _json_answer_doc(payload, arrays=arrays)
        if answered is None:
            reason, what = (
                ("empty_body", "an empty body")
                if not payload
                else ("not_json_object", "a body that is not a JSON object")
            )
            return _not_an_answer(reason, what, *not_json_refused, extra)
        usage = _usage_from(answered)  # an array's: none
        response_id = _stored_response_id(answered)
        is_json = False  # read here already
    if coded is not None:
        # compressed though the gateway asked for none: its usage read from the decoded bytes
        if coded.unreadable is not None:
            return _unreadable_answer(coded, extra)
        edges = coded.json_edges()
        if not_json_refused is not None and upstream.status < 400 and edges not in _json_edges(arrays):
            reason, what = (
                ("empty_body", "an empty compressed body")
                if not edges
                else ("not_json_object", "a compressed body that is not a JSON object")
            )
            return _not_an_answer(reason, what, *not_json_refused, extra)
        doc = coded.document()
        usage = _usage_from(doc)
        response_id = _stored_response_id(doc)
    elif is_json:
        try:  # not contextlib.suppress: an object and two calls per answer
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            doc = None  # a JSON answer that does not parse reports no usage
        usage = _usage_from(doc)
        if upstream.status < 400:
            response_id = _stored_response_id(doc)
    answer: web.StreamResponse | ForwardedAnswer
    if _wrapped(upstream):
        answer = _wrapped_error(upstream, extra)
    else:
        answer = forwarded_answer(upstream.status, upstream.fields, payload, noted=upstream.noted, add=extra)
    return ExchangeResult(
        answer=answer, status=upstream.status, ok=upstream.status < 500, usage=usage, response_id=response_id
    )


def _json_edges(arrays: bool) -> tuple[bytes, ...]:
    """The first and last bytes (past whitespace) a JSON answer's decoded body may have: an
    object's, or an array's too with ``arrays`` (:data:`ARRAY_ANSWER_PATHS`)."""
    return (b"{}", b"[]") if arrays else (b"{}",)


def _plain_json(upstream: UpstreamResponse) -> bool:
    """Whether ``upstream``'s body is JSON the gateway reads as it is (no content coding)."""
    return upstream.content_type == "application/json" and b"content-encoding" not in upstream.noted


def _wrapped(upstream: UpstreamResponse) -> bool:
    """Whether ``upstream`` is an error answer whose body the client never gets: anything but plain
    JSON is answered in the OpenAI shape with its status alone (:func:`_wrapped_error`)."""
    return upstream.status >= 400 and not _plain_json(upstream)


async def _discarded_error(upstream: UpstreamResponse, *, extra: Mapping[str, str]) -> ExchangeResult:
    """An error answer whose body the client never gets (:func:`_wrapped`): its bytes are read and
    let go, so the connection may serve again, up to :data:`ERROR_ANSWER_BUFFER_BYTES`; past that it
    is answered without reading the rest (the connection is then closed, not reused). Still a
    refusal the request path may retry elsewhere. A connection that fails before the body's end
    (:class:`~igw.gateway.upstream_client.UpstreamBroken`), or a body the watchdog finds silent,
    raises, the exchange's failure as for a collected answer."""
    read = 0
    while read <= ERROR_ANSWER_BUFFER_BYTES:
        chunk = await upstream.readany()
        if not chunk:
            break
        read += len(chunk)
    answer = _wrapped_error(upstream, extra)
    return ExchangeResult(answer=answer, status=upstream.status, ok=upstream.status < 500)


async def _relay_whole(
    request: web.Request,
    upstream: UpstreamResponse,
    *,
    endpoint: str,
    upstream_name: str,
    extra: Mapping[str, str],
    on_prepared: Callable[[web.StreamResponse], None],
    buffer_bytes: int,
    body_timeout_s: float | None,
    expect_id: str | None = None,
    require_id: bool = False,
    held_timeout_s: float | None = None,
    held_bound_s: float | None = None,
    json_answer: bool = False,
) -> ExchangeResult:
    """A whole (non-streamed) answer that is final whatever it holds: collected while it stays within
    ``buffer_bytes`` (then forwarded as :func:`_whole_answer` forwards it), else relayed as it arrives
    - the bytes held first, then each read, with the upstream's ``Content-Length`` when it sent one -
    its usage and stored-response id read as they pass (:class:`~igw.gateway.answer_scan.AnswerScan`).

    Why: a whole answer collected before it is forwarded costs its size in memory, and joining its
    parts costs it again: at the global router, which never retries an answer below 400 once its
    head arrived, until session s40 twenty concurrent 50 MB answers took the process from 74 MB to
    2.2 GB resident. Relayed, each costs at most ``buffer_bytes`` and the reads in flight.

    ``body_timeout_s`` bounds the whole body after the head, as for a collected answer. An upstream
    that fails (or passes that bound) once the relay started cannot be answered with an error any
    more: the client's connection is closed before the body's end (what a client sees of any proxy
    whose upstream died mid-body), and the result is not ok.

    ``expect_id`` (a stored response's retrieval or cancel): the bytes held are read before the relay
    starts, and an answer whose first ``id`` (both APIs put it first) names another response is
    returned unrelayed (:func:`_misnamed`). Until session s45 such an answer past ``buffer_bytes``
    was relayed, and found misnamed only once the client had it. ``require_id`` (a search's): one
    whose held bytes - ``buffer_bytes`` of them, where a response object's ``id`` comes first - do
    not show that response (:func:`_shows`) is returned so as well: until session s48 a cluster's
    200 of 8 MiB naming no response was relayed, the search ended at it.

    ``held_timeout_s`` bounds the bytes held, before the relay starts, too (``answer_timeout_s`` of
    :func:`exchange`, whose whole is ``held_bound_s``, what the 504's message names): a search's
    attempt, given up while nothing of it reached the client. ``json_answer``: as :func:`exchange`'s,
    for an answer collected whole; one past ``buffer_bytes`` (below 400, not compressed) is refused
    unrelayed when its first byte past whitespace is not ``{`` (:func:`_json_start`): a cheap check
    of the start only, since the rest passes through unparsed (its usage scanned as it goes)."""
    loop = asyncio.get_running_loop()
    deadline = None if body_timeout_s is None else loop.time() + body_timeout_s
    held_by = None if held_timeout_s is None else loop.time() + held_timeout_s
    holding_by = deadline if held_by is None else held_by if deadline is None else min(deadline, held_by)

    def left() -> float | None:
        return None if deadline is None else max(0.0, deadline - loop.time())

    parts: list[bytes] = []
    held = 0
    try:
        while held <= buffer_bytes:
            chunk = await upstream.readany(None if holding_by is None else max(0.0, holding_by - loop.time()))
            if chunk is None:
                bound = held_bound_s if holding_by is not None and holding_by == held_by else body_timeout_s
                return _stalled(
                    _timed_out(endpoint, upstream_name, "did not finish its response within", bound),
                    extra,
                )
            if not chunk:
                payload = b"".join(parts)
                coded = await _decoded_scan(upstream, payload) if _coded_json(upstream) else None
                refused = (endpoint, upstream_name) if json_answer else None
                arrays = request.path in ARRAY_ANSWER_PATHS
                return _whole_answer(
                    upstream, payload, extra=extra, coded=coded, not_json_refused=refused, arrays=arrays
                )
            parts.append(chunk)
            held += len(chunk)
    except UpstreamStalled as stalled:
        return _stalled(stalled, extra)
    except UpstreamBroken as broken:
        return _upstream_failed(f"{upstream_name} failed while sending its response", broken, extra)
    # Too large to parse before it is relayed, so its start alone is read: a JSON object's first byte
    # past whitespace is ``{``. Until session s50 such an answer was relayed unchecked.
    plain = not compressed(upstream.noted.get(b"content-encoding"))
    starts = (b"{", b"[") if request.path in ARRAY_ANSWER_PATHS else (b"{",)
    if json_answer and upstream.status < 400 and plain and _json_start(parts) not in starts:
        return _not_an_answer(
            "not_json_object",
            "a body that does not start as a JSON object",
            endpoint,
            upstream_name,
            extra,
        )
    response = _RelayedStream(status=upstream.status)
    _response_headers(upstream, extra, response.headers)
    length = upstream.noted.get(b"content-length")
    # The lean server writes every relayed body chunked (:class:`~igw.gateway.lean_server.LeanStreamWriter`):
    # a length there would sit beside ``Transfer-Encoding: chunked``, a head clients refuse.
    lean = getattr(request, "start_stream", None) is not None
    if length is not None and b"transfer-encoding" not in upstream.noted and not lean:
        response.content_length = int(length)
    result = ExchangeResult(answer=response, status=upstream.status, ok=upstream.status < 500)
    response.relayed = result
    if upstream.status >= 400:  # past ERROR_ANSWER_BUFFER_BYTES: relayed, so not retried
        result.large_error = True
        large_error_log.warning(
            "upstream %s answered HTTP %d with an error body over %d bytes: relayed as it arrives, "
            "not retried",
            _logged_upstream(endpoint, upstream_name),
            upstream.status,
            ERROR_ANSWER_BUFFER_BYTES,
        )
    coding = upstream.noted.get(b"content-encoding")
    reads_json = upstream.content_type == "application/json"
    scan: AnswerScan | CodedScan = AnswerScan()
    if reads_json and compressed(coding):
        scan = CodedScan(cast(bytes, coding), relay=False)  # relayed coded: decoded for its usage alone
        if scan.unreadable is not None:  # a coding the gateway cannot decode: refused, nothing relayed
            response.relayed = None
            return _unreadable_answer(scan, extra)
        result.coded = True
    read_first = expect_id is not None and reads_json and upstream.status < 400
    if read_first:  # checked before anything of it leaves
        for chunk in parts:
            if isinstance(scan, CodedScan):
                await scan.feed(chunk)
            else:
                scan.feed(chunk)
        named = _named_response(scan.document())
        if named is not None and named != expect_id:
            response.relayed = None
            return _misnamed(upstream.status, named, extra)
    shown = read_first and _shows(scan.document(), cast(str, expect_id))
    if require_id and expect_id is not None and upstream.status < 400 and not shown:
        response.relayed = None  # not JSON, or no such id first: no proof the response is stored there
        return _misnamed(upstream.status, None, extra)
    try:
        await response.prepare(request)
        on_prepared(response)
        while parts:  # the bytes held, each let go once written
            chunk = parts.pop(0)
            if read_first:  # read before the relay started
                pass
            elif isinstance(scan, CodedScan):
                await scan.feed(chunk)  # in pieces, the loop served between them
            elif reads_json:
                scan.feed(chunk)
            await response.write(chunk)
            result.relayed_bytes += len(chunk)
        while chunk := await _read_more(upstream, left()):
            if isinstance(scan, CodedScan):
                await scan.feed(chunk)
            elif reads_json:
                scan.feed(chunk)
            await response.write(chunk)
            result.relayed_bytes += len(chunk)
        await response.write_eof()
        if isinstance(scan, CodedScan):
            scan.finish()
            if scan.unreadable is not None:  # relayed already: its usage is unknown, said loudly
                result.usage_unread = scan.unread
                _warn_usage_unread(_logged_upstream(endpoint, upstream_name), scan.unread, scan.unreadable)
                reads_json = False
    except (ConnectionResetError, aiohttp.ClientConnectionResetError) as reset:
        raise ClientGone() from reset
    except (UpstreamBroken, TimeoutError) as exc:
        _relay_cut(request, result, _logged_upstream(endpoint, upstream_name), exc)
    finally:
        if reads_json:
            doc = scan.document()
            result.usage = _usage_from(doc)
            if upstream.status < 400:
                result.response_id = _stored_response_id(doc)
    response.relayed = None  # relayed to its end: nothing left to charge (see _RelayedStream.relayed)
    return result


async def _relay_decoded(
    request: web.Request,
    upstream: UpstreamResponse,
    *,
    endpoint: str,
    upstream_name: str,
    extra: Mapping[str, str],
    on_prepared: Callable[[web.StreamResponse], None],
    body_timeout_s: float | None,
    json_answer: bool = False,
) -> ExchangeResult:
    """A whole answer below 400 a pod compressed though the gateway asked for none, for a client
    whose ``Accept-Encoding`` does not accept that coding (RFC 9110 12.5.3): relayed decoded, as it
    arrives, without ``Content-Encoding`` and ``Content-Length`` (chunked framing), a piece of at most
    :data:`~igw.gateway.answer_coding.PIECE_BYTES` at a time, its usage read as it passes
    (:class:`~igw.gateway.answer_coding.CodedScan`, bounded by its ``MAX_DECODED_BYTES``).

    A coding the gateway cannot decode, or a body that is not valid for it before anything was
    relayed, is a 502 ``upstream_error``; one found invalid (or past the bound, or cut short) once
    the relay started closes the client's connection before the body's end, as an upstream failing
    mid-body does (:func:`_relay_whole`). ``body_timeout_s`` bounds the body as there.
    ``json_answer``: as :func:`exchange`'s; a decoded body that is empty (or blank), or whose first
    byte past whitespace is not ``{`` (or ``[`` on :data:`ARRAY_ANSWER_PATHS`), is refused unrelayed
    (:func:`_not_an_answer`; its start alone is read, as :func:`_relay_whole`'s past its held bytes):
    until session s50 it was relayed as a success."""
    coding = cast(bytes, upstream.noted.get(b"content-encoding"))
    scan = CodedScan(coding)
    if scan.unreadable is not None:
        return _unreadable_answer(scan, extra)
    starts = ((b"{", b"[") if request.path in ARRAY_ANSWER_PATHS else (b"{",)) if json_answer else None
    blank: list[bytes] = []
    """Decoded whitespace held before the answer's first byte (at most a piece)."""
    loop = asyncio.get_running_loop()
    deadline = None if body_timeout_s is None else loop.time() + body_timeout_s

    def left() -> float | None:
        return None if deadline is None else max(0.0, deadline - loop.time())

    response = _RelayedStream(status=upstream.status)
    _response_headers(upstream, extra, response.headers, drop=_CODED_FIELDS)
    result = ExchangeResult(answer=response, status=upstream.status, ok=upstream.status < 500, coded=True)
    try:
        while True:
            try:
                chunk = await _read_more(upstream, left())
            except (UpstreamBroken, TimeoutError) as exc:
                if response.prepared:
                    raise
                if isinstance(exc, UpstreamStalled):
                    return _stalled(exc, extra)
                if isinstance(exc, TimeoutError):
                    return _stalled(
                        _timed_out(
                            endpoint, upstream_name, "did not finish its response within", body_timeout_s
                        ),
                        extra,
                    )
                return _upstream_failed(f"{upstream_name} failed while sending its response", exc, extra)
            # its end: what is held back of it (a raw deflate body read as zlib at first, read again)
            for piece in scan.decode(chunk) if chunk else scan.end():
                if piece and starts is not None and not response.prepared:
                    first = scan.json_edges()[:1]
                    if first and first not in starts:
                        what = "a compressed body that does not start as a JSON object"
                        return _not_an_answer("not_json_object", what, endpoint, upstream_name, extra)
                    if not first:  # whitespace so far: held until the answer's first byte
                        blank.append(piece)
                        if sum(map(len, blank)) > PIECE_BYTES:
                            what = "a compressed body that does not start as a JSON object"
                            return _not_an_answer("not_json_object", what, endpoint, upstream_name, extra)
                        piece = b""
                if piece:  # an empty one is only a turn for the loop (empty gzip members)
                    if not response.prepared:
                        response.relayed = result
                        await response.prepare(request)
                        on_prepared(response)
                        piece = b"".join([*blank, piece])
                    await response.write(piece)
                    result.relayed_bytes += len(piece)
                # a write to a client that reads as fast as it is written never waits: without this
                # turn a 300 KB gzip bomb held the loop for the whole 256 MiB (2.2 s, session s43)
                await asyncio.sleep(0)
            if scan.unreadable is not None:
                if not response.prepared:
                    return _unreadable_answer(scan, extra)
                raise UpstreamBroken(f"its compressed answer could not be decoded: {scan.unreadable}")
            if not chunk:
                break
        if not response.prepared:  # an empty body
            if starts is not None:
                what = "an empty compressed body"
                return _not_an_answer("empty_body", what, endpoint, upstream_name, extra)
            response.relayed = result
            await response.prepare(request)
            on_prepared(response)
        await response.write_eof()
        if scan.unread is not None:  # relayed to its end, its usage unknown (scanned to its ratio)
            detail = (
                f"it decodes to over {SCAN_RATIO} bytes per coded byte, relayed but not scanned past them"
            )
            _warn_usage_unread(_logged_upstream(endpoint, upstream_name), scan.unread, detail)
    except (ConnectionResetError, aiohttp.ClientConnectionResetError) as reset:
        raise ClientGone() from reset
    except (UpstreamBroken, TimeoutError) as exc:
        _relay_cut(request, result, _logged_upstream(endpoint, upstream_name), exc)
    finally:
        doc = scan.document()
        result.usage = _usage_from(doc)
        result.response_id = _stored_response_id(doc)
        result.usage_unread = scan.unread
    response.relayed = None  # relayed to its end: nothing left to charge (see _RelayedStream.relayed)
    return result


def _logged_upstream(endpoint: str, upstream_name: str) -> str:
    """How a WARNING names the upstream: by the name its caller gave (the global router's
    ``cluster 'east-1'``: its operators know clusters by name, and an endpoint is an internal URL;
    until session s48 the large-error, usage-unread and relay-cut WARNINGs named the URL), else -
    tier 1, whose upstream is :data:`UPSTREAM_NAME` - by ``endpoint``, the pod's ``host:port``."""
    return endpoint if upstream_name == UPSTREAM_NAME else upstream_name


def _warn_usage_unread(upstream: str, reason: str | None, detail: str | None) -> None:
    """The WARNING for a compressed answer relayed with its usage unread (``reason``, one of
    :data:`~igw.gateway.answer_coding.UNREAD_REASONS`; ``detail``, what the decode met), on
    :data:`usage_unread_log`: throttled per upstream (``upstream``, as :func:`_logged_upstream`
    names it) and reason, a hostile pod's flood one line a minute."""
    usage_unread_log.warning(
        "upstream %s sent a compressed answer whose usage could not be read (%s): %s",
        upstream,
        reason,
        detail,
    )


def _relay_cut(request: web.BaseRequest, result: ExchangeResult, upstream: str, exc: Exception) -> None:
    """An answer whose relay the upstream cut (broken or past its deadline) after the client had its
    head: ``result`` marked failed with the cause, a warning logged naming ``upstream`` (as
    :func:`_logged_upstream` names it), and the client's connection closed before the body's end
    (:func:`end_unfinished`). One place for :func:`_relay_whole` and :func:`_relay_decoded`, so both
    say the same thing the same way."""
    result.ok = False
    result.error = f"upstream failed while its answer was relayed: {type(exc).__name__}"
    log.warning("upstream %s: %s; the client's connection is closed", upstream, exc or result.error)
    end_unfinished(request)


async def _read_more(upstream: UpstreamResponse, timeout_s: float | None) -> bytes:
    """The body bytes that arrived next (``b""`` at its end); TimeoutError when none came within
    ``timeout_s``."""
    chunk = await upstream.readany(timeout_s)
    if chunk is None:
        raise TimeoutError
    return chunk


def end_unfinished(request: web.BaseRequest) -> None:
    """Close the client's connection under a response whose body cannot be completed (its head and
    part of it sent): the client sees the body end early, never a shorter body taken for whole."""
    transport = request.transport
    if transport is not None:
        transport.abort()


def _wrapped_error(upstream: UpstreamResponse, extra: Mapping[str, str]) -> web.Response:
    """A non-JSON upstream error in the OpenAI shape, keeping its status (the body is not relayed:
    it is not meant for API clients and may echo the request). Nor is the pod's reason phrase: the
    message names the status by its standard phrase. Before session s40 the reason phrase was copied
    into the message as it came, anything up to the response head's bound (256 KiB): terminal escape
    sequences, or another tenant's data a compromised pod chose to show this client."""
    keep = {k: v for k, v in upstream.headers.items() if k.lower() == "retry-after"}
    return gateway_error(
        "upstream_error",
        f"the model server answered HTTP {upstream.status} {_standard_phrase(upstream.status)}".rstrip(),
        status=upstream.status,
        headers={**keep, **extra},
    )


def _standard_phrase(status: int) -> str:
    """HTTP's reason phrase for ``status`` (RFC 9110's registry), empty for a status it has none for."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class ChunkSender(Protocol):
    """The writer :meth:`DirectStreams.start_stream` hands back can also frame and send a chunk
    without awaiting (the lean server's :class:`~igw.gateway.lean_server.LeanStreamWriter`)."""

    def send_chunk(self, data: bytes) -> None: ...


class DirectStreams(Protocol):
    """A request whose server writes a chunked response itself (the lean server's requests)."""

    keep_alive: bool

    def stream_head(self, response: web.StreamResponse, *, keep_alive: bool) -> bytes: ...

    def start_stream(
        self, response: web.StreamResponse, *, keep_alive: bool, head: bytes | None = None
    ) -> AbstractStreamWriter: ...


@mypyc_attr(native_class=False)  # mypyc: it subclasses aiohttp's response, so it stays a Python class
class _RelayedStream(web.StreamResponse):
    """The client's SSE response: its head leaves with the first event, in one write.

    aiohttp's :class:`~aiohttp.web.StreamResponse` sends its head on ``prepare`` (one write) and each
    event after it (another); the client then reads the head and waits for the event, which added
    the time between the two writes (and a second wake-up of the client) to every stream's TTFT.
    Holding the head back until the first body write is what :class:`~aiohttp.web.Response` does.
    ``tests/gateway/test_sse_relay_writes.py`` pins it over a real connection.

    On a request the lean server parsed (one with ``start_stream``, :class:`DirectStreams`),
    ``prepare`` skips aiohttp's header preparation and writer: the lean server writes the head and
    the chunked events itself, the head serialised ahead by :meth:`build_head` when the relay had
    the time (a model server sends its head before it computes the first token).
    """

    _send_headers_immediately = False
    _built_head: bytes | None = None
    body_bytes: int = 0
    """The body bytes written to the client so far (:meth:`write`, :meth:`send_now`): before any
    transfer coding (chunk framing), without the head - what an access log counts as the answer's
    bytes (:func:`sent_body_bytes`). A write that the client's leaving broke is counted."""
    relayed: ExchangeResult | None = None
    """The relay's record of this stream as it goes (its events, the usage they carried): what a
    client that leaves before the end is charged (:func:`igw.gateway.inference._charge_relayed`).

    Set only while the relay runs: the record's ``answer`` is this response, so the two form a
    reference cycle. The relay clears it when it returns, and the charge when it has read it (a relay
    cut short): until session s40 it stayed set, and every stream left that cycle (the response,
    its headers, the record) for the cyclic collector, which ``igw.gateway.gc_tuning`` runs less
    often - four unreachable objects per streamed request, in the interpreted and compiled builds."""

    # aiohttp's accessors, each a Python function the compiled build would call through the
    # interpreter (a frame each) several times per stream, most before its first event is written:
    # the same reads here, compiled. ``tests/gateway/test_sse_relay_writes.py`` checks them
    # against aiohttp's own.
    @property
    def prepared(self) -> bool:
        return self._eof_sent or self._payload_writer is not None

    @property
    def status(self) -> int:
        return self._status

    @property
    def reason(self) -> str:
        return self._reason

    @property
    def headers(self) -> CIMultiDict[str]:
        return self._headers

    def _lean_keep_alive(self, request: web.BaseRequest) -> bool:
        keep_alive = self._keep_alive
        if keep_alive is None:
            keep_alive = bool(cast(DirectStreams, request).keep_alive)
        self._keep_alive = keep_alive
        return keep_alive

    def build_head(self, request: web.BaseRequest) -> None:
        """Serialise the client's head now, off the first event's path (lean requests only: aiohttp's
        own ``prepare`` builds its head itself). Nothing is written and ``prepared`` stays false, so
        an upstream that fails before its first event still gets a plain HTTP error."""
        serialize = getattr(request, "stream_head", None)
        if serialize is None or self._payload_writer is not None or self.status in (204, 304):
            return
        self._built_head = serialize(self, keep_alive=self._lean_keep_alive(request))

    def start_now(self, request: web.BaseRequest) -> bool:
        """Start the response on a lean request without awaiting (what :meth:`prepare` does there);
        False, nothing done, for any other request or a response already started."""
        start = getattr(request, "start_stream", None)
        if start is None or self._payload_writer is not None or self._eof_sent or self.status in (204, 304):
            return False
        keep_alive = self._lean_keep_alive(request)
        self._req = request
        self._payload_writer = start(self, keep_alive=keep_alive, head=self._built_head)
        self._built_head = None
        return True

    def send_now(self, data: bytes) -> None:
        """Frame and send ``data`` (not empty) without awaiting, after :meth:`start_now`."""
        self.body_bytes += len(data)
        cast(ChunkSender, self._payload_writer).send_chunk(data)

    def write(self, data: bytes | bytearray | memoryview) -> Coroutine[Any, Any, None]:
        """aiohttp's write, counted in :attr:`body_bytes` (a plain function handing back aiohttp's
        coroutine: no frame of its own per event)."""
        self.body_bytes += len(data)  # bytes: what the relays write
        return super().write(data)

    def write_eof(self, data: bytes = b"") -> Coroutine[Any, Any, None]:
        """aiohttp's write_eof, its data counted in :attr:`body_bytes`: a relay sends the events that
        came with the model server's end together with the client's end (one write)."""
        if data and not self._eof_sent:
            self.body_bytes += len(data)
        return super().write_eof(data)

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self.start_now(request):
            return self._payload_writer
        if request.version < HttpVersion11:
            # No chunked framing on HTTP/1.0: the stream ends where the connection does. aiohttp
            # frames it so but keeps the connection open when the client asked for keep-alive
            # (``Connection: keep-alive``): before session s39 such a client, its stream over,
            # waited for the end of the body until the keep-alive timeout (75 s).
            self.force_close()
        return await super().prepare(request)


def sent_body_bytes(response: web.StreamResponse) -> int | None:
    """The body bytes written so far to ``response`` when it is a relayed answer (a stream, a large
    whole answer relayed as it came: :attr:`_RelayedStream.body_bytes`); ``None`` for any other."""
    return response.body_bytes if isinstance(response, _RelayedStream) else None


async def _relay_stream(
    request: web.Request,
    upstream: UpstreamResponse,
    *,
    started: float,
    extra: Mapping[str, str],
    on_prepared: Callable[[web.StreamResponse], None],
    keepalive_s: float,
    idle_timeout_s: float | None,
    on_first_token: Callable[[float], None] | None = None,
    strip_usage: bool = False,
    expect_id: str | None = None,
    upstream_name: str = UPSTREAM_NAME,
) -> ExchangeResult:
    """Relay an SSE response, complete events only (:class:`StreamEvents`; ``strip_usage``: the usage
    chunk the gateway asked for is read, not relayed). The client's response is started when the
    first upstream bytes arrive (headers and first event leave back to back, which keeps the added
    TTFT down), so an upstream that fails before sending anything still gets a proper HTTP error
    instead of a broken stream. On the lean side those first bytes are written without awaiting -
    from the upstream connection's read callback when they come after the head, so no loop turn or
    wake-up of this coroutine stands between their arrival and their write.

    ``expect_id`` (a stored response's replay, ``GET /v1/responses/{id}?stream=true``): no event is
    written until the first event with data has arrived and been checked; one naming another
    response than ``expect_id`` is returned unrelayed (:func:`_misnamed`), as a whole answer naming
    one is - unless ``keepalive_s`` passed first: the keep-alive starts the response (a client behind
    an idle-timeout proxy is not left silent), and such an event then ends it (:func:`_cut_replay`).
    Until session s45 a replay was relayed as its events came, whatever response they named.
    A generation (no ``expect_id``) keeps its first write in the read callback."""
    response = _RelayedStream(status=upstream.status)
    _response_headers(upstream, extra, response.headers)
    response.build_head(request)
    result = ExchangeResult(answer=response, status=upstream.status, ok=upstream.status < 500, streamed=True)
    response.relayed = result
    last: float | None = None
    # The chunk written last while no token had been seen, and when: whether it carries one (an
    # orjson parse) and the scheduler's first-token hook are judged once the relay has waited for
    # the next bytes. The client's read of that chunk is woken onto this process's CPU (loopback
    # wake-ups favour the writer's core); work done between the write and the wait delays it.
    unjudged: tuple[bytes, float] | None = None

    def judge() -> None:
        nonlocal last, unjudged
        if unjudged is None:
            return
        chunk, written = unjudged
        unjudged = None
        if _carries_token(chunk):
            result.ttft_s = written - started
            last = written
            if on_first_token is not None:
                on_first_token(result.ttft_s)

    # The first body bytes go to the client from the model server's read callback (a lean request):
    # the event loop's turn, the relay's wake-up and its awaits are then off the first token's path.
    # The relay still reads them: ``sent`` bytes of them consumed there, ``first`` the events of
    # them written at ``sent_at``.
    # a Responses API generation: its response id read from ``response.created``, usage or not (a
    # replay's is read by its check, below: no scan of its deltas for it)
    seeks_id = expect_id is None and request.path.startswith("/v1/responses")
    events = StreamEvents(strip_usage=strip_usage, seeks_id=seeks_id)
    sent = 0
    sent_at = 0.0
    first = b""
    gone = False
    said = False  # whether an event with data was relayed (a stream without one: EventlessStream)
    # A generation (POST) always has events; a stored response's replay (GET ``?stream=true``) past
    # its last event, or a HEAD, may rightly have none.
    generating = request.method == "POST"
    checking = expect_id is not None  # a replay's events held until the first with data is checked
    watching = checking  # and, once released, each later event naming another response cuts it
    unchecked = b""  # the events held meanwhile (comments, event names without data)
    ended = b""  # a replay's events held to its end (none with data came): relayed with the end
    # Events read with the model server's end of stream (its last read brought both): written with
    # the client's end of stream, one write (and one client wake-up) instead of two.
    last_events = b""

    def first_bytes(data: bytes) -> None:
        nonlocal sent, sent_at, first, gone
        if not response.start_now(request):
            return
        on_prepared(response)
        first = events.feed(data)
        sent = len(data)
        sent_at = time.perf_counter()
        if first:
            try:
                response.send_now(first)
            except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                gone = True  # ClientGone, raised by the relay

    if not checking:
        upstream.on_first_bytes(first_bytes)
    loop = asyncio.get_running_loop()
    # streamIdleTimeout counts from the last upstream bytes; keep-alive pings do not reset it. A
    # keep-alive is due keepalive_s after the last write to the client (``spoke``), not after the
    # last upstream bytes: an event arriving in small pieces writes nothing until it is whole (until
    # session s47 such a trickle, and a held replay, kept the client's stream silent).
    heard = spoke = loop.time()
    try:
        while True:
            now_t = loop.time()
            wait_s = max(spoke + keepalive_s - now_t, 0.0) if keepalive_s else None
            idle_left = None if idle_timeout_s is None else heard + idle_timeout_s - now_t
            idle_first = idle_left is not None and (wait_s is None or idle_left <= wait_s)
            chunk = await upstream.readany(idle_left if idle_first else wait_s)
            judge()
            if chunk is None:  # nothing arrived in time
                if idle_first or wait_s is None:
                    raise TimeoutError  # streamIdleTimeout, handled below
                # A held replay is started too (its held comments first): its check goes on, and
                # a first event naming another response is cut (_cut_replay), no longer a 404.
                await _keepalive(request, response, on_prepared, unchecked)
                unchecked = b""
                spoke = loop.time()
                continue
            heard = loop.time()
            if not chunk:
                if checking:  # no event with data before the end: what came (an unfinished event too)
                    named, shown = _another_in_events(unchecked + events.partial, cast(str, expect_id))
                    if shown:
                        result.response_id = expect_id
                    if named is not None and not response.prepared:
                        response.relayed = None
                        return _misnamed(upstream.status, named, extra)
                    if named is not None:  # started by a keep-alive while held
                        events.rest()
                        await _cut_replay(response, result, named, request)
                        break
                    ended, unchecked = unchecked, b""
                if not said and generating and b"data:" not in events.partial:
                    raise EventlessStream("the model server ended its stream without sending any event")
                break
            try:
                if not sent and not response.prepared and not checking:
                    first_bytes(chunk)  # they came with the head: written as the read callback would
                if sent:  # the first bytes went out without awaiting; the rest of them now
                    if gone:
                        raise ConnectionResetError
                    more = events.feed(chunk[sent:]) if len(chunk) > sent else b""
                    sent = 0
                    if more:
                        if upstream.ended:
                            last_events = more
                        else:
                            await response.write(more)
                    data = first + more if more else first
                    now = sent_at if first else time.perf_counter()  # when its first events left
                    spoke = heard
                else:
                    data = events.feed(chunk)
                    if checking and data:
                        unchecked += data
                        data = b""
                        if _first_event_in(unchecked):
                            named, shown = _another_in_events(unchecked, cast(str, expect_id))
                            if shown:
                                result.response_id = expect_id
                            if named is not None and not response.prepared:
                                response.relayed = None
                                return _misnamed(upstream.status, named, extra)
                            if named is not None:  # started by a keep-alive while held
                                events.rest()
                                await _cut_replay(response, result, named, request)
                                break
                            data, unchecked, checking = unchecked, b"", False
                    elif watching and data and b'"id"' in data:
                        named, shown = _another_in_events(data, cast(str, expect_id))
                        if shown:
                            result.response_id = expect_id
                        if named is not None:
                            events.rest()  # an unfinished event after it: not relayed either
                            await _cut_replay(response, result, named, request)
                            break
                    if data:
                        if not response.prepared:
                            await response.prepare(request)
                            on_prepared(response)
                        if upstream.ended:
                            last_events = data
                        else:
                            await response.write(data)
                        spoke = heard
                    now = time.perf_counter()
            except (ConnectionResetError, aiohttp.ClientConnectionResetError) as reset:
                raise ClientGone() from reset
            if data:  # written: judged for the first token, timed for the gaps
                if not said:
                    said = b"data:" in data
                if last is not None:
                    result.gaps.append(now - last)
                    last = now
                else:
                    unjudged = (data, now)
            result.events += chunk.count(b"\n\n")
            result.usage = events.usage
            if events.response_id is not None:
                result.response_id = events.response_id
    except (UpstreamBroken, TimeoutError) as exc:
        if isinstance(exc, TimeoutError):
            kind = "timed out (no data for streamIdleTimeout)"
        elif isinstance(exc, UpstreamStalled):
            kind = "stopped responding"
        elif isinstance(exc, EventlessStream):
            kind = "ended the stream without any event"
        else:
            kind = "closed the stream"
        # tier 1's wording kept; a cluster by its name (until session s48 "upstream model server")
        who = "upstream model server" if upstream_name == UPSTREAM_NAME else upstream_name
        message = f"{who} {kind} before the response was complete"
        code = "upstream_error"
        if isinstance(exc, UpstreamStalled):
            if not response.prepared:
                response.relayed = None
                return _stalled(exc, extra)
            message, code = f"{exc.public}; the response is incomplete", STALLED_CODES[exc.reason]
        if not response.prepared:  # nothing sent to the client yet: a plain HTTP error
            response.relayed = None
            return ExchangeResult(
                answer=gateway_error("upstream_error", message, headers=extra),
                status=502,
                ok=False,
                error=f"upstream {kind}: {type(exc).__name__}",
                gave_up=isinstance(exc, TimeoutError),
            )
        result.ok = False
        result.error = (
            f"{exc.reason}: {exc}"
            if isinstance(exc, UpstreamStalled)
            else f"upstream {kind}: {type(exc).__name__}"
        )
        events.rest()  # the unfinished event dropped: the error is an event of its own
        if last_events:
            await response.write(last_events)
            last_events = b""
        await _terminal_error(response, code=code, message=message, anthropic=anthropic_path(request.path))
    finally:
        judge()
    try:  # not contextlib.suppress: an object and three interpreted calls per stream
        if not response.prepared:
            await response.prepare(request)
            on_prepared(response)
        rest = events.rest()  # an unfinished last event: relayed as it came
        await response.write_eof(last_events + ended + rest)  # the events left and the end: one write
    except (ConnectionResetError, aiohttp.ClientConnectionResetError) as reset:
        if last_events or ended:  # the client left before events reached it: as from any other write
            raise ClientGone() from reset
    response.relayed = None  # relayed to its end: nothing left to charge (see _RelayedStream.relayed)
    return result


async def _keepalive(
    request: web.Request,
    response: web.StreamResponse,
    on_prepared: Callable[[web.StreamResponse], None],
    held: bytes = b"",
) -> None:
    """An SSE comment line (ignored by clients) so idle-timeout proxies keep a silent stream open,
    after ``held`` (a held replay's events so far: none with data, so none naming a response)."""
    try:
        if not response.prepared:
            await response.prepare(request)
            on_prepared(response)
        await response.write(held + b": ping\n\n")
    except (ConnectionResetError, aiohttp.ClientConnectionResetError) as exc:
        raise ClientGone() from exc


async def _cut_replay(
    response: web.StreamResponse, result: ExchangeResult, named: str, request: web.Request
) -> None:
    """A replay released after its first event (which named no response: a resumed replay's deltas)
    went on with an event naming ``named``, another response than the one asked for: that event and
    the rest are not relayed; the stream ends with an error event, and ``result`` names ``named``,
    so its caller counts the answer as misnamed and forgets the holder. Holding every replay until
    an event names its response would stop a resumed replay of a response still generating from
    streaming at all (its deltas name only their items), so the deltas before such an event are
    relayed as they come; what a lying pod can show is cut at its first event naming another."""
    result.ok = False
    result.response_id = named
    result.error = "the model server's replay went on with another response than the one asked for"
    message = "the model server's replay named another response than the one asked for: cut"
    await _terminal_error(
        response, code="upstream_error", message=message, anthropic=anthropic_path(request.path)
    )


async def _terminal_error(
    response: web.StreamResponse, *, code: str, message: str, anthropic: bool = False
) -> None:
    with contextlib.suppress(ConnectionResetError, aiohttp.ClientConnectionResetError):
        await response.write(sse_error_event(code, message, anthropic=anthropic))
