"""A streamed completion's usage, asked of the engine whether or not the client asked for it.

A completion or chat completion stream reports its token usage only when the client sets
``stream_options.include_usage``: one more chunk before ``[DONE]``, its ``choices`` empty. Without
it the gateway counted one output token per relayed event, and an event holds one token only
without speculative decoding (EAGLE, n-gram and MTP drafts put every accepted token of a step into
one event) and without an engine's stream interval. Each such stream was then counted at a half
or a third of what it generated: by the tenant's token limit, by the token series and by the
access log (before session s36).

For a vLLM or SGLang pool the gateway now asks for the usage itself (:data:`UNASKED_OPTIONS` written
into the body, or :func:`with_usage_asked`: :func:`igw.gateway.inference._route`) and the relay
reads the usage chunk and does not write it (``strip_usage`` of
:func:`igw.gateway.upstream.exchange`), so the client receives the stream it asked for: both
engines add nothing else to the stream for ``include_usage`` alone (read in their sources). The
tier-2 router, which does not know its clusters' engines, sends :data:`RELAY_USAGE_HEADER` instead
of changing the body: the cluster's gateway then asks a vLLM or SGLang pool as above and relays the
usage chunk, which the router reads and keeps from its client; another engine's pool gets the body
as the client sent it (one that refuses unknown fields would refuse the request). A
client that set ``stream_options.continuous_usage_stats`` (usage in every chunk, once
``include_usage`` is on) is left as it is: turning ``include_usage`` on would change every chunk
it receives.
"""

from __future__ import annotations

import enum
from typing import Any, Final

import orjson

from igw.gateway.inference_apis import InferenceApi

USAGE_APIS: Final = frozenset({InferenceApi.CHAT, InferenceApi.COMPLETIONS})
"""The APIs whose streams report usage only when asked (the Responses API's ``response.completed``
and an Anthropic stream's ``message_delta`` always carry it)."""

USAGE_ENGINES: Final = frozenset({"vllm", "sglang"})
"""Engines whose ``include_usage`` adds only the usage chunk to a stream (read in their sources)."""


class StreamUsage(enum.Enum):
    """What a request's body says about its stream's usage report."""

    UNASKED = "unasked"
    """No ``stream_options``: the gateway writes ``{"include_usage": true}``."""
    OTHER_OPTIONS = "other-options"
    """``stream_options`` null, or without ``include_usage: true`` or ``continuous_usage_stats``: the
    gateway sets ``include_usage`` in them."""
    ASKED = "asked"
    """The client asked for the usage chunk: it receives it."""
    LEFT = "left"
    """Options the gateway leaves alone (``continuous_usage_stats``, or not an object: the engine
    answers those)."""


def stream_usage_of(body: dict[str, Any], *, api: InferenceApi, stream: bool) -> StreamUsage | None:
    """:class:`StreamUsage` of a parsed request body; None for a body that is not a streamed
    completion or chat completion (nothing to ask)."""
    if not stream or api not in USAGE_APIS:
        return None
    if "stream_options" not in body:
        return StreamUsage.UNASKED
    options = body["stream_options"]
    if options is None:  # null: replaced (a member written first would be read before it)
        return StreamUsage.OTHER_OPTIONS
    if not isinstance(options, dict):
        return StreamUsage.LEFT
    if options.get("include_usage") is True:
        return StreamUsage.ASKED
    if options.get("continuous_usage_stats"):
        return StreamUsage.LEFT
    return StreamUsage.OTHER_OPTIONS


RELAY_USAGE_HEADER: Final = "x-gateway-stream-usage"
"""Request header of the tier-2 router to a cluster's gateway: with :data:`RELAY_USAGE` the gateway
asks for the usage chunk where its pool's engine allows it and relays it (the router keeps it from
its client). A gateway never forwards the header to a model server."""

RELAY_USAGE: Final = "relay"

UNASKED_OPTIONS: Final = {"include_usage": True}
"""The ``stream_options`` written into a body that had none."""


def with_usage_asked(raw: bytes) -> bytes:
    """``raw`` (a body whose ``stream_options`` is an object or null) with ``include_usage`` set: one
    parse and one serialisation, for the few clients that send other stream options."""
    doc = orjson.loads(raw)
    doc["stream_options"] = {**(doc["stream_options"] or {}), "include_usage": True}
    return orjson.dumps(doc)
