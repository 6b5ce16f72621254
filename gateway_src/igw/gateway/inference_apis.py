"""The OpenAI-compatible inference APIs the gateway routes, and the one table of their paths.

An OpenAI client pointed at the gateway calls more than the two completion APIs: ``embeddings.create``
(an embedding model's pool) and ``responses.create`` (the Responses API, which vLLM and SGLang serve
and which OpenAI's SDK and agent frameworks now default to). Until session s31 those answered 404
``not_found`` although the pool behind the gateway served them, and every router in front of vLLM
(the reference endpoint picker from v1.5, sglang-router, vllm-router) forwards them. A RAG pipeline
reranks its retrieved passages with a reranker that vLLM serves under the rerank and score APIs
(routed since session s32; sglang-router forwards ``/v1/rerank`` too), and an agent built on the
Anthropic SDK calls vLLM's Anthropic Messages API (routed since s32). Each API here is
routed as the completion APIs are (body-based routing by ``model``, the guard, flow control, the
scheduler, retries, the SSE relay); what differs per API is only which body fields carry the prompt
and the output bound (:func:`igw.gateway.request_body.parse_body`) and how a streamed answer shows its
first token and its usage (:mod:`igw.gateway.upstream`).

Every server surface reads :data:`INFERENCE_PATHS` (``igw serve``'s aiohttp routes and its lean
server's, ``igw global serve``), so a new API is one entry here plus its body fields.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final


class InferenceApi(enum.Enum):
    """One OpenAI-compatible inference API; its value is the OpenTelemetry GenAI operation name
    (``gen_ai.operation.name``) its requests' spans carry."""

    # Enum's own __hash__ is a Python method (the hash of the member's name): every set or dict look-up
    # keyed by an API (CHOICE_APIS, SALTED_APIS and MEDIA_FIELDS in parse_body, ANTHROPIC_APIS: five a
    # request) ran it as a Python call. Members are singletons compared by identity (Enum defines no
    # __eq__), so the identity hash is as exact, and it is object's C slot.
    __hash__ = object.__hash__

    CHAT = "chat"
    COMPLETIONS = "text_completion"
    EMBEDDINGS = "embeddings"
    RESPONSES = "responses"
    """``POST /v1/responses``. Not a GenAI operation name of its own in the conventions (they name
    operations, not endpoints); ``responses`` says which API the span is, as the path does."""
    RERANK = "rerank"
    """vLLM's Jina- and Cohere-compatible rerank API (``query`` and ``documents``; a cross-encoder or
    reranker pool), which RAG pipelines call between retrieval and generation. Named as
    ``responses`` is: no GenAI operation name covers it."""
    SCORE = "score"
    """vLLM's score API (``text_1`` against ``text_2``: pairs scored by a cross-encoder or an
    embedding model), named as ``rerank`` is."""
    MESSAGES = "messages"
    """The Anthropic Messages API (``POST /v1/messages``), which vLLM serves from 0.11.1 and which the
    Anthropic SDK and the agents built on it (Claude Code pointed at ``ANTHROPIC_BASE_URL``) call. Its
    spans' operation name is ``chat``, as the conventions name Anthropic's messages
    (:func:`operation_name`)."""
    COUNT_TOKENS = "count_tokens"
    """The Messages API's token count (``POST /v1/messages/count_tokens``, which vLLM serves beside
    ``/v1/messages``): the Anthropic SDK's ``messages.count_tokens``, which an agent calls to check
    that a conversation fits the context before it sends it (routed since session s33). The pod only
    tokenizes: nothing is generated and nothing enters its KV cache, so the request is routed by
    model without prefix affinity (its conversation is not recorded as cached on the pod) and counts
    no tokens."""


ANTHROPIC_APIS: Final = frozenset({InferenceApi.MESSAGES, InferenceApi.COUNT_TOKENS})
"""The APIs of Anthropic's shape: the gateway's own errors on their routes are Anthropic-shaped
(:func:`igw.gateway.errors.anthropic_shaped`), and no ``priority`` field is injected into their
bodies (vLLM's Anthropic request models ignore fields outside Anthropic's API but their own, so an
engine priority would silently not apply)."""

GENERATING_APIS: Final = frozenset(InferenceApi) - {InferenceApi.COUNT_TOKENS}
"""The APIs whose requests run the model (a prefill at least): their tokens are counted (token
metrics, the tenants' token limits), the prompt estimate where an answer reports no usage."""


INFERENCE_PATHS: Final[Mapping[str, InferenceApi]] = {
    "/v1/chat/completions": InferenceApi.CHAT,
    "/v1/completions": InferenceApi.COMPLETIONS,
    "/v1/embeddings": InferenceApi.EMBEDDINGS,
    "/v1/responses": InferenceApi.RESPONSES,
    # vLLM serves rerank under these three paths (Jina's and Cohere's v1, Cohere's v2) and score under
    # two; a client library calls whichever its vendor's API uses.
    "/rerank": InferenceApi.RERANK,
    "/v1/rerank": InferenceApi.RERANK,
    "/v2/rerank": InferenceApi.RERANK,
    "/score": InferenceApi.SCORE,
    "/v1/score": InferenceApi.SCORE,
    "/v1/messages": InferenceApi.MESSAGES,
    "/v1/messages/count_tokens": InferenceApi.COUNT_TOKENS,
}
"""``POST`` path -> the API it serves: the routes every inference server of the project registers."""

STORED_RESPONSE_ROUTES: Final = (
    ("GET", "/v1/responses/{response_id}"),
    ("DELETE", "/v1/responses/{response_id}"),
    ("POST", "/v1/responses/{response_id}/cancel"),
    ("GET", "/v1/responses/{response_id}/input_items"),
)
"""The Responses API's routes about one stored response (retrieve - also a background response's
poll and, with ``?stream=true``, its resumed events -, delete, cancel, its input items): forwarded to
the pod that stored it (``igw serve``; ``igw global serve``: to the cluster that stored it)."""


ANTHROPIC_SUBPATHS: Final = "/v1/messages/"
"""Paths under the Messages API's own: the Anthropic SDK's other calls there (``messages.batches``:
``/v1/messages/batches`` and its ids), which the gateway does not route; its 404 and 405 for them are
Anthropic-shaped, as for ``/v1/messages`` (before session s39 OpenAI-shaped: the SDK read no
``error.type``)."""


def anthropic_path(path: str) -> bool:
    """Whether ``path`` is a route of an API of Anthropic's shape or under the Messages API's path
    (read where an error is written, not per request)."""
    return INFERENCE_PATHS.get(path) in ANTHROPIC_APIS or path.startswith(ANTHROPIC_SUBPATHS)


def operation_name(path: str) -> str:
    """The ``gen_ai.operation.name`` of a request to ``path`` (an inference path, else ``chat``'s
    neighbour ``text_completion``, what any other path was named before the table existed)."""
    api = INFERENCE_PATHS.get(path)
    if api is None:
        return InferenceApi.COMPLETIONS.value
    return InferenceApi.CHAT.value if api is InferenceApi.MESSAGES else api.value
