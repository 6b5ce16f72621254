"""Reading and understanding an inference request body, with the errors a client can act on.

* The body is read in chunks and abandoned as soon as it exceeds ``bbr.maxRequestBodyBytes`` (413);
  a ``Content-Length`` over the limit is refused before reading anything. At most ``limit`` bytes are
  ever held.
* It must be a JSON object (400 naming the problem); ``model`` comes from the body or, if absent,
  ``null`` or ``""``, the ``x-gateway-model-name`` header (then written into the body forwarded).
* What routing needs is extracted once, per API (:class:`~igw.gateway.inference_apis.InferenceApi`):
  the text used for prefix hashing (the ``prompt`` of a completion, the serialised ``messages`` of a
  chat completion - as GIE does -, the ``input`` of an embedding request, the ``instructions`` and
  ``input`` of a Responses API request), an estimate of prompt tokens (4 characters per token; an
  inline image, audio clip or file a fixed number, :mod:`igw.gateway.inline_media`), the
  output bound (``max_completion_tokens``/``max_tokens``; ``max_output_tokens`` of a response; none
  for embeddings), the answers asked for (``n`` of a completion or chat completion: each may run to
  the output bound) and ``stream`` (an embedding answer is never streamed).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson
from aiohttp import compression_utils, web
from multidict import MultiMapping

from igw.errors import IgwGatewayError
from igw.gateway.body_budget import BodyHold
from igw.gateway.cache_salt import SALTED_APIS
from igw.gateway.inference_apis import InferenceApi
from igw.gateway.inline_media import MEDIA_TOKENS, WALK_FIRST_CHARS, holds_inline_media, media_in
from igw.gateway.stream_usage import StreamUsage, stream_usage_of
from igw.gateway.tenant_fields import engine_fields

CHARS_PER_TOKEN: Final = 4
MAX_MODEL_NAME_LENGTH: Final = 256
MAX_RESPONSE_ID_LENGTH: Final = 256
"""The longest ``previous_response_id`` taken (the engines' ids are ``resp_`` and 32 hex digits, the
gateway's 61 characters): an id is kept in memory (the ids a search found nowhere, 4,096 of them)
and sent to every pod a search asks, so before session s35 a megabyte-long one was kept and sent
as it came."""
_CONTROL_CHARACTERS: Final = re.compile(r"[\x00-\x1f\x7f]")
"""Characters a model name may not hold: HTTP forbids them in a header field's value (RFC 9110 5.5)."""


# getattr: aiohttp before 3.12 (the pin allows 3.10) has no zstd support and no HAS_ZSTD to import
DECODED_CONTENT_CODINGS: Final = frozenset(
    {"gzip", "deflate", "identity"}
    | ({"br"} if getattr(compression_utils, "HAS_BROTLI", False) else set())
    | ({"zstd"} if getattr(compression_utils, "HAS_ZSTD", False) else set())
)
"""The ``Content-Encoding`` values of a request body the gateway reads: one coding aiohttp decodes
(gzip and deflate; br and zstd only where their decoders are installed, which the gateway image
does not ship), or ``identity``."""


class UnsupportedContentEncoding(IgwGatewayError):
    """A request body in a content coding the gateway does not decode: answered 415 naming the
    header (RFC 9110 15.5.16), with ``Accept-Encoding`` listing the codings it does decode.

    aiohttp decodes only one coding of its own list and passes any other value by (``junk``,
    ``compress``, ``gzip, deflate``): before session s39 such a body was read as if not encoded,
    and a compressed one answered 400 "request body is not valid JSON", naming nothing the
    client could change."""

    HEADER: Final = "Content-Encoding"

    def __init__(self, codings: list[str]) -> None:
        named = ", ".join(c[:40] for c in codings[:4])
        super().__init__(
            f"Content-Encoding {named!r} is not supported: send the request body uncompressed or in "
            f"one of {', '.join(sorted(DECODED_CONTENT_CODINGS - {'identity'}))}"
        )
        self.message = str(self)

    @staticmethod
    def accepted() -> str:
        """The ``Accept-Encoding`` of the 415: the codings a request body may be sent in."""
        return ", ".join(sorted(DECODED_CONTENT_CODINGS))


def check_content_encoding(headers: MultiMapping[str]) -> None:
    """:class:`UnsupportedContentEncoding` unless the request's ``Content-Encoding`` (every field of
    it) names at most one coding of :data:`DECODED_CONTENT_CODINGS`: aiohttp decoded that one, and
    a body in two codings (``gzip, br``) is decoded by none."""
    values = headers.getall(UnsupportedContentEncoding.HEADER, ())
    if not values:
        return
    codings = [c.strip().lower() for value in values for c in value.split(",") if c.strip()]
    if len(codings) > 1 or (codings and codings[0] not in DECODED_CONTENT_CODINGS):
        raise UnsupportedContentEncoding(codings)


BODY_LIMIT_SETTING: Final = "bbr.maxRequestBodyBytes"
"""The setting a tier-1 gateway's 413 names (the global router names its own:
``spec.routing.maxRequestBodyBytes``)."""


class BodyTooLarge(IgwGatewayError):
    """A request body over ``limit`` bytes; the message names ``setting``, the limit's config field."""

    def __init__(self, limit: int, *, setting: str = BODY_LIMIT_SETTING) -> None:
        super().__init__(f"request body exceeds {setting} ({limit} bytes)")
        self.limit = limit


class DeclaredBodyTooLarge(BodyTooLarge):
    """A chunked body whose chunk-size lines declare more than the limit (in all): refused when
    declared, without waiting for the bytes (:class:`igw.gateway.serving.ChunkSizes`); the
    connection closes after the answer."""

    def __init__(self, limit: int, *, setting: str = BODY_LIMIT_SETTING) -> None:
        super().__init__(limit, setting=setting)
        self.args = (f"{self.args[0]}: its chunk sizes declare more",)


MAX_CHUNK_EXTENSION_BYTES: Final = 16_384
"""Bytes a chunked request body's chunk-size lines may hold past their sizes (extensions and
spaces, all lines together): Node.js's bound (CVE-2024-22019). The parsers skip extensions without
counting them, so before session s47 a 2-byte body could carry 256 MiB of them, none counted against
the body limit."""


class ChunkExtensionsTooLarge(DeclaredBodyTooLarge):
    """A chunked body whose chunk extensions passed :data:`MAX_CHUNK_EXTENSION_BYTES`
    (:class:`igw.gateway.serving.ChunkSizes`): refused as a body over the limit is (413, the
    connection closed), with its own message."""

    def __init__(self, limit: int, *, setting: str = BODY_LIMIT_SETTING) -> None:
        super().__init__(limit, setting=setting)
        self.args = (
            f"request body's chunk extensions exceed {MAX_CHUNK_EXTENSION_BYTES} bytes (RFC 9112 7.1.1)",
        )


class BodyBudgetFull(IgwGatewayError):
    """A chunked body whose next chunk would pass ``serverLimits.maxBodyBytesHeld``
    (:mod:`igw.gateway.body_budget`): answered 503 ``server_busy``, the rest not read."""


class BadRequestBody(IgwGatewayError):
    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(slots=True, init=False, unsafe_hash=True)
class InferenceBody:
    """What routing reads of a request's body, and the body itself. Read-only (``Final`` fields:
    mypy refuses an assignment, the compiled build has no setter) and hashable by value, as the
    frozen dataclass it was; its ``__init__`` is written out so that the compiled build constructs
    it natively, once per request (``dataclasses``' generated one is interpreted code there: round
    12 of docs/gateway.md's lean data path, session s14 for this record)."""

    raw: Final[bytes]
    model: Final[str | None]
    stream: Final[bool]
    prefix_text: Final[str]
    prompt_tokens: Final[int]
    max_tokens: Final[int | None]
    previous_response_id: Final[str | None]
    """The stored response a Responses API request continues (only its pod can answer it)."""
    cache_salt: Final[str | None]
    """The client's ``cache_salt`` of a completion, chat or Responses API body (``""`` when it set
    the field to ``null`` or ``""``); ``None``: the body has no such field
    (:mod:`igw.gateway.cache_salt`)."""
    background: Final[bool]
    """A Responses API request with ``background: true``: answered at once, generated afterwards
    (its usage is not in the answer)."""
    stream_usage: Final[StreamUsage | None]
    """Whether its stream reports usage, or could be asked to (:mod:`igw.gateway.stream_usage`);
    ``None``: not a streamed completion or chat completion."""
    choices: Final[int]
    """How many answers the request generates: a completion's or chat completion's ``n`` (a
    completion's ``best_of`` when larger: the engine generates that many and returns ``n``), else
    1. Each may run to ``max_tokens`` (:func:`output_bound`)."""
    lora_path: Final[str | None]
    """The client's ``lora_path`` (SGLang's second way to name a LoRA adapter); ``None``: absent or
    ``null`` (:mod:`igw.gateway.lora_field`)."""
    tenant_fields: Final[tuple[str, ...]]
    """The fields of the body that no authenticated tenant may send unless allowed
    (:func:`~igw.gateway.tenant_fields.engine_fields`: code for the model server to run, its own
    request id, a session, KV transfer or data-parallel rank of its), those it carries (not
    ``null``); ``()`` when none."""

    def __init__(
        self,
        raw: bytes,
        model: str | None,
        stream: bool,
        prefix_text: str,
        prompt_tokens: int,
        max_tokens: int | None,
        previous_response_id: str | None = None,
        cache_salt: str | None = None,
        background: bool = False,
        stream_usage: StreamUsage | None = None,
        choices: int = 1,
        lora_path: str | None = None,
        tenant_fields: tuple[str, ...] = (),
    ) -> None:
        self.raw = raw
        self.model = model
        self.stream = stream
        self.prefix_text = prefix_text
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.previous_response_id = previous_response_id
        self.cache_salt = cache_salt
        self.background = background
        self.stream_usage = stream_usage
        self.choices = choices
        self.lora_path = lora_path
        self.tenant_fields = tenant_fields


def output_bound(body: InferenceBody) -> int:
    """The tokens ``body`` may generate in all: ``max_tokens`` for each of its ``n`` answers (0
    without a ``max_tokens``)."""
    return (body.max_tokens or 0) * body.choices


def relayed_tokens(relayed_bytes: int, body: InferenceBody) -> int:
    """The output tokens of a whole answer's ``relayed_bytes`` written to a client that left before
    its end (its usage, at the end, never read): counted as a prompt is
    (:data:`CHARS_PER_TOKEN`), at most ``body``'s :func:`output_bound` when it has one."""
    tokens = relayed_bytes // CHARS_PER_TOKEN
    bound = output_bound(body)
    return min(tokens, bound) if bound else tokens


def estimated_tokens(body: InferenceBody) -> int:
    """The tokens a request is estimated to cost before it runs: its prompt's estimate and its
    :func:`output_bound` - what admission charges a tenant's token limit and what the endpoint it is
    sent to counts in flight (``inflight_tokens``). Before session s39 ``n`` was not counted: a
    request for eight answers was admitted and counted as one."""
    return body.prompt_tokens + output_bound(body)


def received_whole(request: web.Request, *, limit: int) -> bytes:
    """The body of a request whose body has all arrived (``request.content.is_eof()``: the usual
    case, the body came with its head), read without a coroutine; :class:`BodyTooLarge` past
    ``limit`` as :func:`read_limited`."""
    length = request.content_length
    if length is not None and length > limit:
        raise BodyTooLarge(limit)
    whole = request.content.read_nowait()
    if len(whole) > limit:
        raise BodyTooLarge(limit)
    return whole


async def read_limited(request: web.Request, *, limit: int, hold: BodyHold | None = None) -> bytes:
    """The body, read in chunks (:class:`BodyTooLarge` past ``limit``). A body without a
    ``Content-Length`` (chunked) adds each chunk to ``hold`` as it arrives (:class:`BodyBudgetFull`
    when the process's budget has no room for it); a declared one was counted whole before."""
    if request.content.is_eof():  # the whole body arrived with the head (the usual case): no awaits needed
        return received_whole(request, limit=limit)
    length = request.content_length
    if length is not None and length > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        if hold is not None and length is None and not hold.budget.grow(hold, len(chunk)):
            raise BodyBudgetFull("request body budget full")
        chunks.append(chunk)
    return b"".join(chunks)


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "".join(p if isinstance(p, str) else orjson.dumps(p).decode() for p in prompt)
    return "" if prompt is None else orjson.dumps(prompt).decode()


MEDIA_FIELDS: Final[Mapping[InferenceApi, tuple[str, ...]]] = {
    InferenceApi.CHAT: ("messages",),
    InferenceApi.EMBEDDINGS: ("input", "messages"),
    InferenceApi.MESSAGES: ("system", "messages"),
    InferenceApi.RESPONSES: ("input",),
    InferenceApi.RERANK: ("documents",),
}
"""The fields whose inline images, audio and files (:mod:`igw.gateway.inline_media`) are counted as
media in the prompt's estimate, per API: those its prefix text is made of and a multimodal model
reads media in (vLLM's chat, embedding, Messages and Responses APIs, and its rerank's image
documents)."""


def parse_body(raw: bytes, *, api: InferenceApi, header_model: str | None) -> InferenceBody:
    """What routing reads of a request ``raw`` to ``api`` (:class:`BadRequestBody` naming the field
    when a field routing reads is missing or of the wrong type; the model server validates the rest)."""
    if not raw.strip():
        raise BadRequestBody("request body is empty: expected a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequestBody(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequestBody(f"request body must be a JSON object, got {type(body).__name__}")
    model = body.get("model")
    named_by_header = model is None or model == ""
    if named_by_header:
        # ``"model": null`` is no model, as vLLM and SGLang read it (their request models default
        # the field to None), and so is ``""`` (vLLM serves its base model for an empty name, as
        # for none: ``_is_model_supported``): the header's then. Before session s39 a null was
        # taken as the name, and a body with it and the header was answered 404 model_not_found;
        # an empty one ignored the header (404 at tier 1, 400 "'model' is required" at tier 2).
        model = header_model
    if model is not None and not isinstance(model, str):
        raise BadRequestBody("'model' must be a string", param="model")
    if model is not None and len(model) > MAX_MODEL_NAME_LENGTH:
        raise BadRequestBody(f"'model' is longer than {MAX_MODEL_NAME_LENGTH} characters", param="model")
    if model is not None and not model.isprintable() and _CONTROL_CHARACTERS.search(model):
        # The name travels in a header (X-Gateway-Model-Name, to the default backend too, where any
        # name goes): a line break in it wrote header fields and a whole second request into the
        # pooled upstream connection before session s34. isprintable() passes every ordinary name
        # without the search.
        raise BadRequestBody("'model' must not contain control characters", param="model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequestBody("'stream' must be true or false", param="stream")
    continues = None
    background = False
    extra_chars = 0  # what the engine reads besides ``text``: a rerank's query once per document
    choices = _choices(body) if api in CHOICE_APIS else 1
    if api is InferenceApi.COMPLETIONS:
        # vLLM generates best_of sequences and returns the n best (its V0 engine; V1 refuses
        # best_of > 1): admission counts what it generates. Before session s40 best_of was not
        # counted, so a completion of n=1, best_of=20 was charged one answer.
        choices = max(choices, _choices(body, "best_of"))
    if api is InferenceApi.CHAT:
        max_tokens = _output_bound(body, "max_completion_tokens", "max_tokens")
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise BadRequestBody("'messages' must be a list", param="messages")
        text = orjson.dumps(messages).decode()
    elif api is InferenceApi.COMPLETIONS:
        max_tokens = _output_bound(body, "max_completion_tokens", "max_tokens")
        if "prompt" not in body:
            raise BadRequestBody("'prompt' is required", param="prompt")
        text = _prompt_text(body["prompt"])
    elif api is InferenceApi.EMBEDDINGS:
        max_tokens = None  # nothing is generated
        stream = False  # an embedding is answered whole (the field is not part of the API)
        text = _embedding_text(body)
    elif api is InferenceApi.MESSAGES:
        max_tokens = _output_bound(body, "max_tokens")
        text = _messages_text(body)
    elif api is InferenceApi.COUNT_TOKENS:
        max_tokens = None  # nothing is generated
        stream = False
        _messages_text(body)  # checked as a message's; the pod only tokenizes it, nothing is cached
        text = ""
    elif api is InferenceApi.RESPONSES:
        max_tokens = _output_bound(body, "max_output_tokens")
        text = _response_text(body)
        background = body.get("background") is True
        continues = body.get("previous_response_id")
        if continues is not None and not isinstance(continues, str):
            raise BadRequestBody("'previous_response_id' must be a string", param="previous_response_id")
        if continues is not None and len(continues) > MAX_RESPONSE_ID_LENGTH:
            raise BadRequestBody(
                f"'previous_response_id' is longer than {MAX_RESPONSE_ID_LENGTH} characters",
                param="previous_response_id",
            )
        if "request_id" in body:
            # vLLM and SGLang store the response under it: a caller choosing it could overwrite
            # another's stored conversation (igw.gateway.response_ids, before session s35).
            raise BadRequestBody(
                "'request_id' may not be set: the gateway chooses a stored response's id",
                param="request_id",
            )
    else:  # rerank, score: pairs scored, nothing generated, answered whole
        max_tokens = None
        stream = False
        text, extra_chars = _pair_texts(body, api)
    cache_salt = None
    if api in SALTED_APIS and "cache_salt" in body:
        given = body["cache_salt"]
        if given is not None and not isinstance(given, str):
            raise BadRequestBody("'cache_salt' must be a string", param="cache_salt")
        cache_salt = given or ""
    lora_path = body.get("lora_path")
    if lora_path is not None and not isinstance(lora_path, str):
        # SGLang also takes a list (one adapter per prompt of a batch): never one the gateway authorized
        raise BadRequestBody(
            "'lora_path' must be a string naming the adapter 'model' names", param="lora_path"
        )
    if model and named_by_header:
        # Named by the x-gateway-model-name header only (the body has no model, a null or an empty one):
        # written into the body the model server gets, which otherwise serves its base model for a
        # body without one (vLLM's _check_model), while the gateway routed, authorized and
        # rate-limited the request as the header's model (an adapter a tenant may use answered by a
        # base model it may not; before session s34).
        raw = orjson.dumps({**body, "model": model})
    media_tokens = media_chars = 0
    if api in MEDIA_FIELDS and (len(text) >= WALK_FIRST_CHARS or holds_inline_media(text)):
        # an embedding's text is its ``input`` when it has one, else its ``messages``
        fields = ("input",) if api is InferenceApi.EMBEDDINGS and "input" in body else MEDIA_FIELDS[api]
        media, media_chars = media_in([body.get(name) for name in fields], text)
        media_tokens = media * MEDIA_TOKENS
    return InferenceBody(
        raw=raw,
        model=model or None,
        stream=stream,
        prefix_text=text,
        prompt_tokens=max(1, (len(text) + extra_chars - media_chars) // CHARS_PER_TOKEN + media_tokens),
        max_tokens=max_tokens,
        previous_response_id=continues or None,
        cache_salt=cache_salt,
        background=background,
        stream_usage=stream_usage_of(body, api=api, stream=stream) if stream else None,
        choices=choices,
        lora_path=lora_path,
        tenant_fields=engine_fields(body),
    )


CHOICE_APIS: Final = frozenset({InferenceApi.CHAT, InferenceApi.COMPLETIONS})
"""The APIs whose ``n`` asks for several answers to one prompt (vLLM and SGLang serve it on both)."""


def _choices(body: dict[str, Any], name: str = "n") -> int:
    """A completion's or chat completion's ``n`` (or a completion's ``best_of``: ``name``), 1 when
    absent or ``null``, as the engines default it; :class:`BadRequestBody` naming the field when it
    is not a positive integer (the engines refuse such a request too)."""
    value = body.get(name)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequestBody(f"'{name}' must be a positive integer", param=name)
    return value


def _output_bound(body: dict[str, Any], *names: str) -> int | None:
    """The first of the fields ``names`` the body sets (an integer or ``null``), the bound of the
    tokens the answer may generate; the error names ``max_tokens`` for the completion APIs' pair, as
    before the Responses API's ``max_output_tokens`` was read."""
    value = None
    for name in names:
        value = body.get(name)
        if value is not None:
            break
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        param = names[-1]
        raise BadRequestBody(f"'{param}' must be an integer", param=param)
    if value is not None and value < 0:
        # The engines refuse it too, but only after the gateway counted the request in flight on
        # its pod at ``prompt + max_tokens * n``: before session s46 a ``max_tokens`` of -5 with an
        # ``n`` of 10^9 made that pod look billions of tokens lighter to the picker while it lasted.
        # 0 is passed on (vLLM scores a prompt with ``echo`` and no output).
        param = names[-1]
        raise BadRequestBody(f"'{param}' must not be negative", param=param)
    return value


def _embedding_text(body: dict[str, Any]) -> str:
    """An embedding request's text: its ``input`` (a string, strings, token ids or lists of them),
    or, as vLLM also accepts, chat ``messages`` embedded as one conversation."""
    if "input" in body:
        value = body["input"]
        if not isinstance(value, str | list):
            raise BadRequestBody("'input' must be a string or a list", param="input")
        return _prompt_text(value)
    messages = body.get("messages")
    if isinstance(messages, list):
        return orjson.dumps(messages).decode()
    raise BadRequestBody("'input' is required", param="input")


def _pair_texts(body: dict[str, Any], api: InferenceApi) -> tuple[str, int]:
    """A rerank or score request's text (the query first, then the documents: requests about one
    query share its prefix) and the characters the engine reads besides that text (the query once
    more per further document: each pair is one sequence). Rerank: ``query`` and
    ``documents`` (strings, or objects whose ``text`` is read); score: ``text_1`` and ``text_2``
    (each a string or a list of them; one ``text_1`` is scored against every ``text_2``)."""
    first, second = ("query", "documents") if api is InferenceApi.RERANK else ("text_1", "text_2")
    query = body.get(first)
    documents = body.get(second)
    if api is InferenceApi.RERANK:
        if not isinstance(query, str):
            raise BadRequestBody(f"'{first}' must be a string", param=first)
        if not isinstance(documents, list) or not documents:
            raise BadRequestBody(f"'{second}' must be a non-empty list", param=second)
        queries = [query]
    else:
        queries = _texts(query, first)
        documents = _texts(documents, second)
    texts = [d if isinstance(d, str) else _document_text(d) for d in documents]
    lead = "".join(queries)
    repeated = len(lead) * (len(texts) - 1) if len(queries) == 1 else 0
    return lead + "".join(texts), repeated


def _texts(value: object, name: str) -> list[str]:
    """A score field: a string or a non-empty list of strings."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise BadRequestBody(f"'{name}' must be a string or a non-empty list of strings", param=name)


def _document_text(document: object) -> str:
    """A rerank document that is not a string: its ``text`` (Cohere's and Jina's object form), else
    the object serialised (a multimodal document: its length is what the estimate needs)."""
    if isinstance(document, dict) and isinstance(document.get("text"), str):
        return str(document["text"])
    return orjson.dumps(document).decode()


def _messages_text(body: dict[str, Any]) -> str:
    """An Anthropic Messages API request's text: ``system`` (a string, or content blocks serialised)
    then ``messages`` serialised with their roles, as a chat's are."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequestBody("'messages' must be a list", param="messages")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise BadRequestBody("'system' must be a string or a list of content blocks", param="system")
    lead = "" if system is None else system if isinstance(system, str) else orjson.dumps(system).decode()
    return lead + orjson.dumps(messages).decode()


def _response_text(body: dict[str, Any]) -> str:
    """A Responses API request's text: ``instructions`` (the system prompt, sent first) then
    ``input`` (a string, or a list of input items serialised as a chat's ``messages`` are)."""
    if "input" not in body:
        raise BadRequestBody("'input' is required", param="input")
    value = body["input"]
    if not isinstance(value, str | list):
        raise BadRequestBody("'input' must be a string or a list of input items", param="input")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequestBody("'instructions' must be a string", param="instructions")
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if not instructions else instructions + text


def with_leading_member(raw: bytes, name: str, value: object) -> bytes:
    """The JSON object ``raw`` with the top-level member ``name: value`` written first, every byte
    of ``raw`` after it: a copy, not a parse and serialisation. Only for a ``name`` the object does
    not hold (escaped spellings of it included), so that a reader takes this one."""
    start = raw.index(b"{") + 1  # a JSON object: nothing but whitespace before its brace
    member = orjson.dumps(name) + b":" + orjson.dumps(value)
    empty = raw[start:].lstrip().startswith(b"}")
    return raw[:start] + member + (b"" if empty else b",") + raw[start:]


def with_leading_field(body: InferenceBody, name: str, value: object) -> InferenceBody:
    """``body`` with the top-level member ``name: value`` written first (:func:`with_leading_member`:
    what ``authorization.prefixCacheIsolation`` costs every request), for a ``name`` the parsed
    body had no key of."""
    return InferenceBody(  # not dataclasses.replace: its field walk cost more than the copy
        with_leading_member(body.raw, name, value),
        body.model,
        body.stream,
        body.prefix_text,
        body.prompt_tokens,
        body.max_tokens,
        body.previous_response_id,
        body.cache_salt,
        body.background,
        body.stream_usage,
        body.choices,
        body.lora_path,
        body.tenant_fields,
    )


def with_fields(body: InferenceBody, fields: Mapping[str, Any]) -> InferenceBody:
    """``body`` with top-level JSON ``fields`` set (replaced or added), the rest exactly as sent.

    The one place the gateway rewrites a body it forwards (a canary's target ``model``, the engine
    ``priority`` of ``flowControl.enginePriority``): one parse and one serialisation, only for the
    requests that need it.
    """
    doc = orjson.loads(body.raw)
    doc.update(fields)
    model = fields.get("model", body.model)
    return dataclasses.replace(
        body, raw=orjson.dumps(doc), model=model if isinstance(model, str) else body.model
    )
