"""Images, audio and files sent inline (base64) are estimated as media, not as text
(:mod:`igw.gateway.inline_media`).

Before session s39 the prompt estimate counted a base64 payload's characters at 4 per token: one
450 KB photo in a chat was ~150,000 tokens, and the gateway answered 400 ``context_length_exceeded``
to a vision request any 128k-window pod would serve."""

from __future__ import annotations

import base64
import random
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from igw.gateway import inline_media as inline_media_module
from igw.gateway import request_body
from igw.gateway.inference_apis import InferenceApi
from igw.gateway.inline_media import (
    CHARS_PER_NODE,
    MEDIA_TOKENS,
    WALK_FIRST_CHARS,
    holds_inline_media,
    inline_media,
    media_in,
)
from igw.gateway.request_body import parse_body
from igw.sim.live import run_fleet
from tests.compiled.tree import skip_compiled
from tests.reliability.harness import MODEL, fleet_spec, gateway_doc, in_process_gateway, wait_until

PHOTO = base64.b64encode(random.Random(39).randbytes(450 * 1024)).decode()
"""A 450 KB JPEG's base64 (600 KB): an ordinary phone photo, smaller than most."""
DATA_URL = "data:image/jpeg;base64," + PHOTO
QUESTION = "What is in this picture?"

BODIES: list[tuple[InferenceApi, dict[str, Any]]] = [
    (
        InferenceApi.CHAT,
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": QUESTION},
                        {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "high"}},
                    ],
                }
            ],
            "max_tokens": 64,
        },
    ),
    (
        InferenceApi.CHAT,
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": QUESTION},
                        {"type": "input_audio", "input_audio": {"data": PHOTO, "format": "wav"}},
                    ],
                }
            ],
        },
    ),
    (
        InferenceApi.MESSAGES,
        {
            "max_tokens": 64,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/jpeg", "data": PHOTO},
                        },
                        {"type": "text", "text": QUESTION},
                    ],
                }
            ],
        },
    ),
    (
        InferenceApi.RESPONSES,
        {
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": QUESTION},
                        {"type": "input_image", "image_url": DATA_URL},
                    ],
                }
            ]
        },
    ),
    (
        InferenceApi.EMBEDDINGS,
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": DATA_URL}}]}]},
    ),
]


@pytest.mark.parametrize(("api", "body"), BODIES, ids=lambda v: getattr(v, "value", ""))
def test_an_inline_picture_is_estimated_as_one_media_item_not_its_characters(
    api: InferenceApi, body: dict[str, Any]
) -> None:
    parsed = parse_body(orjson.dumps({"model": "m", **body}), api=api, header_model=None)
    assert MEDIA_TOKENS <= parsed.prompt_tokens < MEDIA_TOKENS + 100
    assert PHOTO in parsed.prefix_text  # two requests about one picture still share a prefix


def test_text_that_only_looks_like_media_is_counted_as_text() -> None:
    """A ``data`` field of a text document, a URL that is not base64, a question about base64:
    text, counted by its characters as before."""
    text = "base64 " * 2_000
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [document]}]}
    parsed = parse_body(orjson.dumps(body), api=InferenceApi.MESSAGES, header_model=None)
    assert parsed.prompt_tokens >= len(text) // 4
    assert inline_media([{"url": "data:text/plain," + text}, "https://example.com/x.jpg"]) == (0, 0)
    assert inline_media([[[{"url": DATA_URL}]], {"type": "base64", "data": "QUJD"}]) == (2, len(DATA_URL) + 4)


PROSE = "You are a helpful assistant. "
"""Prompt text without any marker (a long one: the walk goes first)."""


_PARTS = [{"type": "text", "text": "a few words of text"} for _ in range(3_000)]


def _searched_first(fields: list[object], text: str) -> tuple[int, int]:
    """What ``parse_body`` counted before session s50: the text searched, then the fields walked."""
    return inline_media(fields) if holds_inline_media(text) else (0, 0)


@pytest.mark.parametrize(
    "fields",
    [
        [[{"role": "user", "content": PROSE * 400}]],  # long prose: the walk finishes, no media
        [[{"role": "user", "content": "base64 " * 2_000}]],  # a marker word, no media
        [[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": DATA_URL}}]}]],
        [[{"role": "user", "content": PROSE * 400}, {"type": "base64", "data": "QUJD"}]],
        # many small values: the walk gives up at its bound and the text is searched, as before
        [[{"role": "user", "content": "hi"} for _ in range(2_000)] + [{"type": "base64", "data": "QUJD"}]],
        [[{"role": "user", "content": "hi"} for _ in range(2_000)]],
        [[{"role": "user", "content": "short"}, {"type": "base64", "data": "QUJD"}]],  # short text
        # one message of many small parts: the walk starts, gives up at its bound, the text is searched
        [[{"role": "user", "content": [*_PARTS, {"type": "base64", "data": "QUJD"}]}]],
        [[{"role": "user", "content": _PARTS}]],
    ],
    ids=[
        "prose",
        "marker-word",
        "photo",
        "prose-and-source",
        "many-with-source",
        "many",
        "short",
        "parts-with-source",
        "parts",
    ],
)
def test_media_counted_with_the_walk_first_equals_the_text_searched_first(fields: list[object]) -> None:
    text = orjson.dumps(fields[0]).decode()
    assert media_in(fields, text) == _searched_first(fields, text)


def test_media_the_walk_finds_in_fields_whose_text_holds_no_marker_is_not_counted() -> None:
    """The search decides as before: media the walk finds (a text, for instance, that an API builds
    from its fields otherwise) counts only when the text holds a marker."""
    fields: list[object] = [[{"type": "base64", "data": "QUJD"}, PROSE * 200]]
    text = PROSE * 200
    assert len(text) >= WALK_FIRST_CHARS
    assert media_in(fields, text) == (0, 0) == _searched_first(fields, text)
    assert media_in(fields, text + "base64") == (1, 4) == _searched_first(fields, text + "base64")


@skip_compiled("igw.gateway.request_body", "it replaces a module function the compiled module calls directly")
def test_a_long_chat_prompt_without_media_is_not_searched_for_markers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 100 kB chat message: the walk of its few JSON values answers, the text (searched twice,
    about 80 µs) is not read; a short prompt is still searched first."""
    searched: list[int] = []

    def counted(text: str) -> bool:
        searched.append(len(text))
        return holds_inline_media(text)

    for module in (inline_media_module, request_body):  # wherever parse_body looks the search up
        monkeypatch.setattr(module, "holds_inline_media", counted, raising=False)
    body = {"model": "m", "messages": [{"role": "user", "content": PROSE * 3_500}], "stream": True}
    parsed = parse_body(orjson.dumps(body), api=InferenceApi.CHAT, header_model=None)
    assert parsed.prompt_tokens == len(parsed.prefix_text) // 4
    assert searched == []
    assert len(parsed.prefix_text) // CHARS_PER_NODE > 5  # the bound was no reason to stop
    short = {"model": "m", "messages": [{"role": "user", "content": PROSE}]}
    parse_body(orjson.dumps(short), api=InferenceApi.CHAT, header_model=None)
    assert len(searched) == 1


async def test_a_vision_request_with_a_photo_is_served_not_refused_as_too_long(tmp_path: Path) -> None:
    """Through the gateway, with the OpenAI SDK, in front of a simulated 128k-window pod: a chat with
    one photo is answered by the pod (it was a 400 ``context_length_exceeded`` of ~150,000 tokens)."""
    async with run_fleet(fleet_spec("llama-3.1-8b/h100"), admin=False) as fleet:
        key = fleet.pods[0].key
        async with in_process_gateway(tmp_path, gateway_doc(), [key]) as gw:
            await wait_until(lambda: gw.endpoint(key).max_model_len == 131072, within=10, what="window")
            client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)
            async with client:
                answer = await client.chat.completions.create(model=MODEL, **BODIES[0][1])
            assert answer.choices[0].message.content
            assert fleet.pod(key).stats.requests_received == 1
