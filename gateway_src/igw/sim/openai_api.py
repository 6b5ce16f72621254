"""The OpenAI-compatible request/response surface of a simulated model server (no engine logic).

Validation follows vLLM's behaviour for what routing and benchmarks send; unknown OpenAI parameters
(temperature, top_p, ...) are accepted and ignored, as vLLM does. Errors use vLLM's ``ErrorResponse``
shape and name the offending field in ``param``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson
from aiohttp import web

from igw.errors import IgwToolingError
from igw.sim.engine import EngineRequest
from igw.sim.tokens import VOCAB_SIZE, token_ids_text

MAX_BODY_BYTES: Final = 8 * 1024 * 1024
DEFAULT_MAX_TOKENS_COMPLETIONS: Final = 16
DEFAULT_MAX_TOKENS_CHAT: Final = 128


class ApiError(IgwToolingError):
    """An OpenAI-style error response (vLLM's ``ErrorResponse`` shape)."""

    def __init__(self, status: int, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    @property
    def error_type(self) -> str:
        """vLLM's error type for the status."""
        return {
            400: "BadRequestError",
            404: "NotFoundError",
            413: "BadRequestError",
            503: "ServiceUnavailableError",
        }.get(self.status, "InternalServerError")

    def response(self) -> web.Response:
        body = {
            "object": "error",
            "message": self.message,
            "type": self.error_type,
            "param": self.param,
            "code": self.status,
        }
        return web.json_response(body, status=self.status, dumps=lambda o: orjson.dumps(o).decode())


@dataclass(slots=True)
class ParsedRequest:
    model: str
    adapter: str | None
    prompt_text: str
    max_tokens: int
    stream: bool
    include_usage: bool
    chat: bool
    priority: int | None = None
    """The body's ``priority`` (vLLM and SGLang read it under priority scheduling); ``None`` if absent."""
    cache_salt: str | None = None
    """The body's ``cache_salt``: vLLM mixes it into the first block's hash, so blocks cached under
    another salt (or none) are not hits."""


def model_of(
    body: object, *, base_model: str, adapters: tuple[str, ...]
) -> tuple[dict[str, Any], str, str | None]:
    """A request body's JSON object, its ``model`` and the LoRA adapter that names (``None``: the
    base model); 400 for a body that is no object or a missing model, 404 for a model not served."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' is required and must be a string", param="model")
    adapter: str | None = None
    if model != base_model:
        if model not in adapters:
            raise ApiError(404, f"The model `{model}` does not exist.", param="model")
        adapter = model
    return body, model, adapter


def parse_request(body: object, *, chat: bool, base_model: str, adapters: tuple[str, ...]) -> ParsedRequest:
    """Validate an OpenAI completion / chat-completion body (errors name the field)."""
    body, model, adapter = model_of(body, base_model=base_model, adapters=adapters)
    if chat:
        prompt_text = chat_prompt(body.get("messages"))
        raw_max = body.get("max_completion_tokens", body.get("max_tokens"))
        default_max = DEFAULT_MAX_TOKENS_CHAT
    else:
        prompt_text = completion_prompt(body.get("prompt"))
        raw_max = body.get("max_tokens")
        default_max = DEFAULT_MAX_TOKENS_COMPLETIONS
    max_tokens = output_bound(raw_max, default=default_max, name="max_tokens")
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ApiError(400, "'n' must be a positive integer", param="n")
    if n is not None and n > 1:
        raise ApiError(400, NOT_SIMULATED_N, param="n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    include_usage = bool(options.get("include_usage", False))
    return ParsedRequest(
        model,
        adapter,
        prompt_text,
        max_tokens,
        stream,
        include_usage,
        chat,
        priority_of(body),
        cache_salt_of(body),
    )


NOT_SIMULATED_N: Final = "'n' > 1 (parallel sampling) is not simulated; send one request per completion"
"""The answer to ``n`` > 1: vLLM would generate ``n`` completions (``n`` choices, ``n``-fold decode
work, the usage of all of them); a simulator that returned one choice and one usage under-counted
load and tokens without a word, so it refuses instead."""


def completion_prompt(prompt: object) -> str:
    """The prompt text of a completion body's ``prompt``: a string, a token-id list, or either as a
    one-element list (the forms vLLM takes for one prompt); a batch of several prompts is a 400."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return prompt
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(p, int) and not isinstance(p, bool) for p in prompt)
    ):
        out_of_vocab = [i for i in prompt if not 0 <= i < VOCAB_SIZE]
        if out_of_vocab:
            raise ApiError(400, f"Token id {max(out_of_vocab)} is out of vocabulary", param="prompt")
        return token_ids_text(prompt)
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, (str, list)) for p in prompt):
        raise ApiError(
            400,
            f"a batch of {len(prompt)} prompts is not simulated; send one prompt per request",
            param="prompt",
        )
    raise ApiError(400, "'prompt' must be a non-empty string or list of token ids", param="prompt")


def cache_salt_of(body: dict[str, Any]) -> str | None:
    """The body's ``cache_salt`` (a string or ``null``, as vLLM's request models declare it)."""
    salt = body.get("cache_salt")
    if salt is not None and not isinstance(salt, str):
        raise ApiError(400, "'cache_salt' must be a string", param="cache_salt")
    return salt or None


def output_bound(raw: object, *, default: int, name: str) -> int:
    """The output bound the field ``name`` gives (``raw``), ``default`` when absent; a 400 naming
    it unless a positive integer."""
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise ApiError(400, f"'{name}' must be a positive integer", param=name)
    return raw


def priority_of(body: dict[str, Any]) -> int | None:
    """The body's ``priority`` (``None`` if absent); a 400 unless an integer."""
    priority = body.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise ApiError(400, "'priority' must be an integer", param="priority")
    return priority


def usage(req: EngineRequest) -> dict[str, Any]:
    """The ``usage`` object, cached prompt tokens included."""
    return {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.output_tokens,
        "total_tokens": req.prompt_tokens + req.output_tokens,
        "prompt_tokens_details": {"cached_tokens": req.cached_tokens},
    }


def sse_event(rid: str, obj: str, created: int, model: str, choice: dict[str, Any]) -> bytes:
    payload = {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]}
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def json_response(obj: object, *, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


async def read_json(request: web.Request) -> object:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, f"request body larger than {MAX_BODY_BYTES} bytes") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None


def chat_prompt(messages: object) -> str:
    """Flatten chat messages with a simple template (``<|role|>content``); roles are part of the prefix."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    parts: list[str] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(
                400, f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]"
            )
        content = m.get("content", "")
        if isinstance(content, list):
            texts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
            content = "".join(t for t in texts if isinstance(t, str))
        if not isinstance(content, str):
            raise ApiError(
                400, f"messages[{i}].content must be a string or text parts", param=f"messages[{i}].content"
            )
        parts.append(f"<|{m['role']}|>{content}")
    return "".join(parts) + "<|assistant|>"
