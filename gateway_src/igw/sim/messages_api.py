"""The Anthropic Messages API of a simulated vLLM pod (``POST /v1/messages`` and
``/v1/messages/count_tokens``, which vLLM serves from 0.11.1): the body's fields, the ``message``
object, its named event stream and vLLM's error shape on those routes.

What it mirrors of vLLM: a message runs as a chat request (``system`` first, then ``messages`` in
the chat template), so a conversation's next turn hits its prefix in the KV cache as a chat's does;
``max_tokens`` is required; fields outside Anthropic's API but vLLM's own (``priority`` among them)
are dropped unread, as vLLM's request model ignores them; errors are
``{"type": "error", "error": {"type", "message"}}`` with vLLM's own error type inside (its
``translate_error_response``). vLLM converts its chat stream, so the stream opens with the first
generated token, after the prefill: ``message_start`` (the input tokens) and ``content_block_start``
with the first ``content_block_delta``, one delta per token, then ``content_block_stop``,
``message_delta`` (stop reason, input and output tokens) and ``message_stop``; no ``ping``. Usage
is input and output tokens only (vLLM reports no cache reads). A token count only tokenizes: nothing
is generated or cached. Tools, images and thinking blocks are not simulated (their text parts are
read, the rest ignored).
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from igw.sim.engine import EngineRequest
from igw.sim.openai_api import ApiError, ParsedRequest, chat_prompt, model_of, output_bound
from igw.sim.tokens import output_token_text


def parse_messages_request(
    body: object, *, base_model: str, adapters: tuple[str, ...], counting: bool = False
) -> ParsedRequest:
    """Validate a ``/v1/messages`` body (``counting``: a ``count_tokens`` one, which has no
    ``max_tokens`` and is never streamed); errors name the field, as vLLM's validation does."""
    body, model, adapter = model_of(body, base_model=base_model, adapters=adapters)
    prompt = _system_text(body.get("system")) + chat_prompt(body.get("messages"))
    if counting:
        return ParsedRequest(model, adapter, prompt, 1, False, False, True)
    if body.get("max_tokens") is None:
        raise ApiError(400, "max_tokens: Field required", param="max_tokens")
    max_tokens = output_bound(body.get("max_tokens"), default=1, name="max_tokens")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean", param="stream")
    return ParsedRequest(model, adapter, prompt, max_tokens, stream, False, True)


def _system_text(system: object) -> str:
    """The system prompt as the chat template's first turn: a string, or its text blocks' text."""
    if system is None:
        return ""
    if isinstance(system, list):
        texts = [b.get("text", "") for b in system if isinstance(b, dict) and b.get("type") == "text"]
        system = "".join(t for t in texts if isinstance(t, str))
    if not isinstance(system, str):
        raise ApiError(400, "'system' must be a string or a list of text blocks", param="system")
    return f"<|system|>{system}" if system else ""


def error_response(error: ApiError) -> web.Response:
    """``error`` as vLLM answers it on the Messages API's routes: Anthropic's envelope, vLLM's type."""
    body = {"type": "error", "error": {"type": error.error_type, "message": error.message}}
    return web.Response(body=orjson.dumps(body), status=error.status, content_type="application/json")


def stop_reason(req: EngineRequest) -> str | None:
    """Anthropic's stop reason of a finished request: ``max_tokens`` when it hit its bound."""
    if req.finish_reason is None:
        return None
    return "max_tokens" if req.finish_reason == "length" else "end_turn"


def usage(req: EngineRequest, *, output_tokens: int | None = None) -> dict[str, int]:
    """The ``usage`` object: input and output tokens (vLLM fills nothing else)."""
    return {
        "input_tokens": req.prompt_tokens,
        "output_tokens": req.output_tokens if output_tokens is None else output_tokens,
    }


def message_object(req: EngineRequest, *, model: str, text: str) -> dict[str, Any]:
    """The ``message`` object of a whole answer (``text`` so far, for a stream's opening)."""
    return {
        "id": req.request_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}] if text else [],
        "stop_reason": stop_reason(req),
        "stop_sequence": None,
        "usage": usage(req),
    }


def _event(kind: str, **fields: Any) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"


def opening(req: EngineRequest, *, model: str) -> bytes:
    """``message_start`` (its usage: the input tokens) and the text block opened: sent with the first
    generated token, as vLLM converts its chat stream's first chunk."""
    started = {**message_object(req, model=model, text=""), "usage": usage(req, output_tokens=0)}
    return b"".join(
        (
            _event("message_start", message=started),
            _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        )
    )


def delta(index: int) -> bytes:
    """The event of the ``index``-th generated token (1-based, as the engine counts them)."""
    return _event(
        "content_block_delta", index=0, delta={"type": "text_delta", "text": output_token_text(index - 1)}
    )


def closing(req: EngineRequest) -> bytes:
    """The text block closed, the stop reason and the usage, the end."""
    return b"".join(
        (
            _event("content_block_stop", index=0),
            _event(
                "message_delta",
                delta={"stop_reason": stop_reason(req), "stop_sequence": None},
                usage=usage(req),
            ),
            _event("message_stop"),
        )
    )
