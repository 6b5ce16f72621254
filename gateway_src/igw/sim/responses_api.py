"""The Responses API surface of a simulated vLLM pod (``/v1/responses``): the body's fields, the
``response`` object, its event stream, and the pod's in-memory store of the responses it made.

What it mirrors of vLLM (``VLLM_ENABLE_RESPONSES_API_STORE=1``): responses are stored in the serving
process's memory, so only the pod that made a response can continue it (``previous_response_id``:
404 ``Response with id ... not found`` anywhere else), return it (``GET /v1/responses/{id}``) or
cancel it (``POST .../cancel``, background responses only). A continuation's prompt is the stored
conversation (the previous prompt and its output) followed by the new input, so the stored pod holds
its prefix in the KV cache: what makes keeping a conversation on its pod pay besides correctness.
``background: true`` answers at once with status ``queued``; the pod generates on and the stored
object turns ``completed`` (or ``cancelled``). Tools, reasoning and structured output are not
simulated (their fields are accepted and ignored, as unknown sampling parameters are).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from igw.sim.engine import EngineRequest
from igw.sim.openai_api import (
    DEFAULT_MAX_TOKENS_CHAT,
    ApiError,
    ParsedRequest,
    cache_salt_of,
    chat_prompt,
    model_of,
    output_bound,
    priority_of,
)
from igw.sim.tokens import generated_text, output_token_text

STORE_CAPACITY: Final = 10_000
"""Responses a pod keeps, the oldest forgotten first (vLLM's store is unbounded; a long simulated
run must not grow without bound)."""

UNFINISHED: Final = ("queued", "in_progress")
"""Statuses of a background response the pod is still generating."""


@dataclass(slots=True)
class ResponsesRequest:
    """A ``/v1/responses`` body, validated; ``parsed`` is what the engine runs (as a chat request)."""

    parsed: ParsedRequest
    store: bool
    background: bool
    instructions: str | None
    previous_response_id: str | None
    response_id: str
    """The body's ``request_id``, else a new ``resp_<uuid4 hex>``: vLLM's ``ResponsesRequest``
    takes the stored response's id from that field when the caller sets it."""


@dataclass(slots=True)
class StoredResponse:
    """One response a pod made: its ``response`` object and the conversation a continuation extends."""

    body: dict[str, Any]
    conversation: str
    """The prompt text and the generated text: the start of a continuation's prompt."""
    background: bool
    request_id: str
    """The engine request generating it (a background response's cancel aborts it)."""
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once it is no longer generating (a resumed stream waits for it)."""
    generated: int = 0
    """Tokens generated so far (a background response's live event streams follow it)."""
    progress: asyncio.Event = field(default_factory=asyncio.Event)
    """Set (and replaced by a fresh one) at each new token and at the end: what a live event
    stream of a background response waits on, one wake-up for all its readers."""

    def advanced(self) -> None:
        """Wake the readers waiting for the next token (or the end)."""
        woken, self.progress = self.progress, asyncio.Event()
        woken.set()


class ResponseStore:
    """Response id -> :class:`StoredResponse`, bounded, oldest forgotten first."""

    def __init__(self, capacity: int = STORE_CAPACITY) -> None:
        self._capacity = capacity
        self._kept: OrderedDict[str, StoredResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._kept

    def put(self, response_id: str, stored: StoredResponse) -> None:
        self._kept[response_id] = stored
        self._kept.move_to_end(response_id)
        while len(self._kept) > self._capacity:
            self._kept.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse:
        """The stored response (404 in vLLM's words when this pod has none by that id)."""
        stored = self._kept.get(response_id)
        if stored is None:
            raise ApiError(404, f"Response with id '{response_id}' not found.")
        return stored


def parse_responses_request(
    body: object, *, base_model: str, adapters: tuple[str, ...], store: ResponseStore
) -> ResponsesRequest:
    """Validate a Responses API body (errors name the field); a continuation's prompt starts with
    the stored conversation of ``previous_response_id`` (404 when this pod does not store it)."""
    body, model, adapter = model_of(body, base_model=base_model, adapters=adapters)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ApiError(400, "'instructions' must be a string", param="instructions")
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise ApiError(400, "'previous_response_id' must be a non-empty string", param="previous_response_id")
    history = store.get(previous).conversation if previous else ""
    system = f"<|system|>{instructions}" if instructions else ""
    prompt_text = history + system + _input_text(body.get("input"))
    max_tokens = output_bound(
        body.get("max_output_tokens"), default=DEFAULT_MAX_TOKENS_CHAT, name="max_output_tokens"
    )
    flags = {
        name: body.get(name, default)
        for name, default in (("stream", False), ("store", True), ("background", False))
    }
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ApiError(400, f"'{name}' must be a boolean", param=name)
    if flags["background"] and not flags["store"]:
        raise ApiError(400, "background can only be used when `store` is true", param="background")
    priority = priority_of(body)
    response_id = body.get("request_id")
    if response_id is None:
        response_id = f"resp_{uuid.uuid4().hex}"
    elif not isinstance(response_id, str):
        raise ApiError(400, "'request_id' must be a string", param="request_id")
    parsed = ParsedRequest(
        model=model,
        adapter=adapter,
        prompt_text=prompt_text,
        max_tokens=max_tokens,
        stream=flags["stream"],
        include_usage=False,
        chat=True,
        priority=priority,
        cache_salt=cache_salt_of(body),
    )
    return ResponsesRequest(
        parsed=parsed,
        store=flags["store"],
        background=flags["background"],
        instructions=instructions,
        previous_response_id=previous or None,
        response_id=response_id,
    )


def _input_text(given: object) -> str:
    """``input``: a string (one user message) or a list of message items, flattened as chat is."""
    if isinstance(given, str) and given:
        return chat_prompt([{"role": "user", "content": given}])
    if not isinstance(given, list) or not given:
        raise ApiError(400, "'input' must be a non-empty string or a list of items", param="input")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(given):
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            raise ApiError(400, f"input[{i}] must be a message with a string 'role'", param=f"input[{i}]")
        content = item.get("content", "")
        if isinstance(content, list):  # input_text / output_text parts
            content = [{"type": "text", "text": p.get("text", "")} for p in content if isinstance(p, dict)]
        messages.append({"role": item["role"], "content": content})
    try:
        return chat_prompt(messages)
    except ApiError as bad:
        raise ApiError(400, bad.message.replace("messages[", "input["), param="input") from None


def response_object(
    *, response_id: str, req: ResponsesRequest, status: str, created_at: int, engine_req: EngineRequest | None
) -> dict[str, Any]:
    """The ``response`` object (``object: "response"``) in ``status``; its output and usage once
    ``engine_req`` has generated (``None``: a background response not started). A finished one is
    ``completed``: the simulated engine generates exactly its output bound, its stand-in for an
    end of sequence (its chat completions say ``finish_reason: "length"``)."""
    output: list[dict[str, Any]] = []
    usage: dict[str, Any] | None = None
    if engine_req is not None and status not in UNFINISHED:
        output.append(_message(response_id, generated_text(engine_req.output_tokens), "completed"))
        usage = {
            "input_tokens": engine_req.prompt_tokens,
            "input_tokens_details": {"cached_tokens": engine_req.cached_tokens},
            "output_tokens": engine_req.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": engine_req.prompt_tokens + engine_req.output_tokens,
        }
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "model": req.parsed.model,
        "status": status,
        "incomplete_details": None,
        "instructions": req.instructions,
        "max_output_tokens": req.parsed.max_tokens,
        "previous_response_id": req.previous_response_id,
        "background": req.background,
        "store": req.store,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "text": {"format": {"type": "text"}},
        "usage": usage,
        "error": None,
    }


def _message(response_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{response_id.removeprefix('resp_')}",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


class ResponseEvents:
    """The named SSE events of one streamed response, numbered in order (``sequence_number``)."""

    def __init__(self, response_id: str, *, starting_after: int = -1) -> None:
        """``starting_after``: events numbered up to it are left out (a resumed stream's)."""
        self._response_id = response_id
        self._sequence = 0
        self._starting_after = starting_after

    def event(self, kind: str, **fields: Any) -> bytes:
        sequence = self._sequence
        self._sequence += 1
        if sequence <= self._starting_after:
            return b""
        payload = {"type": kind, "sequence_number": sequence, **fields}
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    def opening(self, started: dict[str, Any]) -> bytes:
        """``response.created`` and ``response.in_progress`` (sent before the prefill), then the
        output item and its text part opened."""
        item_id = f"msg_{self._response_id.removeprefix('resp_')}"
        return b"".join(
            (
                self.event("response.created", response=started),
                self.event("response.in_progress", response=started),
                self.event(
                    "response.output_item.added",
                    output_index=0,
                    item=_message(self._response_id, "", "in_progress"),
                ),
                self.event(
                    "response.content_part.added",
                    item_id=item_id,
                    output_index=0,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []},
                ),
            )
        )

    def delta(self, token_index: int) -> bytes:
        """``response.output_text.delta`` of the ``token_index``-th (1-based) generated token."""
        item_id = f"msg_{self._response_id.removeprefix('resp_')}"
        return self.event(
            "response.output_text.delta",
            item_id=item_id,
            output_index=0,
            content_index=0,
            delta=output_token_text(token_index - 1),
            logprobs=[],
        )

    def closing(self, finished: dict[str, Any]) -> bytes:
        """The text, part and item done, then ``response.completed`` with the usage."""
        message = (
            finished["output"][0] if finished["output"] else _message(self._response_id, "", "completed")
        )
        part = message["content"][0]
        return b"".join(
            (
                self.event(
                    "response.output_text.done",
                    item_id=message["id"],
                    output_index=0,
                    content_index=0,
                    text=part["text"],
                    logprobs=[],
                ),
                self.event(
                    "response.content_part.done",
                    item_id=message["id"],
                    output_index=0,
                    content_index=0,
                    part=part,
                ),
                self.event("response.output_item.done", output_index=0, item=message),
                self.event("response.completed", response=finished),
            )
        )

    def replay(self, finished: dict[str, Any], *, tokens: int) -> Iterator[bytes]:
        """A stored, finished response's events from the start (``GET ...?stream=true``)."""
        started = {**finished, "status": "in_progress", "output": [], "usage": None}
        yield self.opening(started)
        for index in range(1, tokens + 1):
            yield self.delta(index)
        yield self.closing(finished)


def created_now() -> int:
    """``created_at``: whole seconds since the epoch, as the Responses API reports it."""
    return int(time.time())
