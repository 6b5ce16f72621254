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
:data:`MARKERS` is walked, so a text-only request costs one substring search; a long one whose few
JSON values are long strings is walked first instead, with the same answer (:func:`media_in`).
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
    found = _walk(value, -1)
    assert found is not None  # no bound: the walk always finishes
    return found


WALK_FIRST_CHARS: Final = 4096
"""From this many characters of prompt text, :func:`media_in` walks the fields before it searches
the text for :data:`MARKERS`: the search reads every character (about 80 µs for 100 kB of prose,
both markers), the walk every JSON value (a long prompt is a few long strings)."""

CHARS_PER_VALUE: Final = 1024
"""The walk goes first only where the fields' lists hold at most one item per this many characters of
text (a long prompt in a few messages, parts or documents); a body of many short ones (an agent's
transcript of 2,000 short messages) is searched first as before: its walk costs more than the search."""

CHARS_PER_NODE: Final = 512
"""The walk that goes first visits at most one JSON value per this many characters of text, then gives
way to the search: a value costs about what the search pays for 500 characters, so a body whose few
items nest many small values costs at most about twice the search alone."""


def media_in(fields: list[object], text: str) -> tuple[int, int]:
    """``inline_media(fields)`` when ``text`` (the request's prompt text, made of ``fields``) holds
    one of :data:`MARKERS`, else ``(0, 0)``: what ``inline_media(fields) if holds_inline_media(text)``
    gives. A long ``text`` is not searched first: a bounded walk of the fields goes first (a long prompt
    is mostly one or a few long strings), and the search is made only when the walk gives up or found
    media (so the answer is the same whatever ``text`` holds)."""
    size = len(text)
    if size >= WALK_FIRST_CHARS and _items(fields) * CHARS_PER_VALUE <= size:
        found = _walk(fields, size // CHARS_PER_NODE)
        if found is not None:
            if found[0] == 0 or holds_inline_media(text):
                return found
            return 0, 0
    if holds_inline_media(text):
        return inline_media(fields)
    return 0, 0


def _items(fields: list[object]) -> int:
    """The fields and the items of those that are lists (messages, input items, documents)."""
    count = len(fields)
    for value in fields:
        if isinstance(value, list):
            count += len(value)
    return count


def _walk(value: object, budget: int) -> tuple[int, int] | None:
    """:func:`inline_media`'s walk; ``None`` once more than ``budget`` values were visited
    (``budget`` < 0: no bound)."""
    items = chars = 0
    stack: list[tuple[object, bool]] = [(value, False)]
    while stack:
        if budget == 0:
            return None
        budget -= 1
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
