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

from igw.gateway.inference_apis import InferenceApi
from igw.gateway.inline_media import MEDIA_TOKENS, inline_media
from igw.gateway.request_body import parse_body
from igw.sim.live import run_fleet
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
