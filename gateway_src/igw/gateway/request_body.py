"""Reading and understanding an inference request body, with the errors a client can act on.

* The body is read in chunks and abandoned as soon as it exceeds ``bbr.maxRequestBodyBytes`` (413);
  a ``Content-Length`` over the limit is refused before reading anything. At most ``limit`` bytes are
  ever held.
* It must be a JSON object (400 naming the problem); ``model`` comes from the body or, if absent,
  the ``x-gateway-model-name`` header.
* What routing needs is extracted once: the text used for prefix hashing (the ``prompt`` of a
  completion, the serialised ``messages`` of a chat completion - as GIE does), an estimate of prompt
  tokens (4 characters per token), ``max_tokens`` and ``stream``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson
from aiohttp import web

from igw.errors import IgwGatewayError

CHARS_PER_TOKEN: Final = 4
MAX_MODEL_NAME_LENGTH: Final = 256


class BodyTooLarge(IgwGatewayError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds bbr.maxRequestBodyBytes ({limit} bytes)")
        self.limit = limit


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

    def __init__(
        self,
        raw: bytes,
        model: str | None,
        stream: bool,
        prefix_text: str,
        prompt_tokens: int,
        max_tokens: int | None,
    ) -> None:
        self.raw = raw
        self.model = model
        self.stream = stream
        self.prefix_text = prefix_text
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens


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


async def read_limited(request: web.Request, *, limit: int) -> bytes:
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
        chunks.append(chunk)
    return b"".join(chunks)


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "".join(p if isinstance(p, str) else orjson.dumps(p).decode() for p in prompt)
    return "" if prompt is None else orjson.dumps(prompt).decode()


def parse_body(raw: bytes, *, chat: bool, header_model: str | None) -> InferenceBody:
    if not raw.strip():
        raise BadRequestBody("request body is empty: expected a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequestBody(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequestBody(f"request body must be a JSON object, got {type(body).__name__}")
    model = body.get("model", header_model)
    if model is not None and not isinstance(model, str):
        raise BadRequestBody("'model' must be a string", param="model")
    if model is not None and len(model) > MAX_MODEL_NAME_LENGTH:
        raise BadRequestBody(f"'model' is longer than {MAX_MODEL_NAME_LENGTH} characters", param="model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequestBody("'stream' must be true or false", param="stream")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
        raise BadRequestBody("'max_tokens' must be an integer", param="max_tokens")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise BadRequestBody("'messages' must be a list", param="messages")
        text = orjson.dumps(messages).decode()
    else:
        if "prompt" not in body:
            raise BadRequestBody("'prompt' is required", param="prompt")
        text = _prompt_text(body["prompt"])
    return InferenceBody(
        raw=raw,
        model=model or None,
        stream=stream,
        prefix_text=text,
        prompt_tokens=max(1, len(text) // CHARS_PER_TOKEN),
        max_tokens=max_tokens,
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
