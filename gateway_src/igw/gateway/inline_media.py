"""Images, audio and files sent inline (base64) in a request: counted as media, not as text.

The gateway estimates a prompt's tokens from its characters (4 per token,
:mod:`igw.gateway.request_body`). A picture sent the way the OpenAI, Anthropic and Responses APIs
send one inline - a ``data:image/jpeg;base64,...`` URL in a chat's ``image_url`` or a response's
``input_image``, an Anthropic ``{"type": "base64", "data": ...}`` source, a chat's ``input_audio``
``data`` - is hundreds of kilobytes of base64 that a vision or audio model reads as a bounded number
of tokens (a few hundred to a few thousand per image, whatever its file size). Counted as text,
one 450 KB phone photo was ~150,000 tokens: refused 400 ``context_length_exceeded`` before any pod
saw it (on a 128k-window Llama), routed only to the pods with the largest window, and charged to
the tenant's ``tokensPerMinute`` at admission a hundred times over (before session s39).

:func:`inline_media` finds those payloads so that the estimate counts each as :data:`MEDIA_TOKENS`
instead of its characters. The prefix text keeps them (two requests about the same picture share a
prefix; vLLM caches multimodal prefixes by the media's hash). Only a body whose text holds one of
:data:`MARKERS` is walked, so a text-only request costs one substring search.
"""

from __future__ import annotations

from typing import Final

MEDIA_TOKENS: Final = 1_600
"""Tokens one inline image, audio clip or file is estimated at: about what Anthropic documents for an
image at its largest size (``width * height / 750`` at 1.15 megapixels), within the range vLLM's
vision models take per image (Llama 3.2 Vision's tiles, Qwen2.5-VL's default pixel bounds). The
pod's usage replaces the estimate once it answers."""

MARKERS: Final = ("base64", "input_audio")
"""Text a body holds whenever it holds an inline payload: a data URL's ``;base64,``, an Anthropic
source's ``"type": "base64"``, a chat's ``input_audio`` part (whose ``data`` is bare base64)."""

_DATA_URL_HEAD: Final = 256
"""How far into a ``data:`` URL its ``;base64,`` is looked for (the media type comes before it)."""


def _is_data_url(value: str) -> bool:
    return value.startswith("data:") and ";base64," in value[:_DATA_URL_HEAD]


def inline_media(value: object) -> tuple[int, int]:
    """The inline media payloads in a parsed request field ``value``: how many, and how many
    characters they hold together. A payload is a base64 ``data:`` URL (wherever it sits: an
    ``image_url``'s ``url``, an ``input_image``'s ``image_url``, a ``file_data``), the ``data`` of
    an object whose ``type`` is ``base64`` (Anthropic's image and document sources) and the ``data``
    of an ``input_audio`` object. Walked without recursion (a body may nest 1,024 levels)."""
    items = chars = 0
    stack: list[tuple[object, bool]] = [(value, False)]
    while stack:
        node, audio = stack.pop()
        if isinstance(node, str):
            if _is_data_url(node):
                items += 1
                chars += len(node)
        elif isinstance(node, list):
            stack.extend((item, False) for item in node)
        elif isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, str) and (audio or node.get("type") == "base64"):
                items += 1
                chars += len(data)
                stack.extend((v, False) for k, v in node.items() if k != "data")
            else:
                stack.extend((v, k == "input_audio") for k, v in node.items())
    return items, chars


def holds_inline_media(text: str) -> bool:
    """Whether a request's serialised prompt ``text`` may hold an inline payload (worth a walk)."""
    return any(marker in text for marker in MARKERS)
