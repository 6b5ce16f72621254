"""Read a model server's context window from its ``GET /v1/models`` answer.

vLLM lists each served model with ``max_model_len``; SGLang does the same in current versions and
older ones expose ``context_length`` instead. The entry for the scheduler's base model wins; when the
page names no such model (a served-model-name mismatch), the smallest limit listed is used, so the
gateway never believes a pod holds more than it does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

LIMIT_FIELDS: Final = ("max_model_len", "context_length")


def _limit(entry: Mapping[str, Any]) -> int | None:
    for name in LIMIT_FIELDS:
        value = entry.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def max_model_len(doc: object, *, model: str) -> int | None:
    """The context window for ``model`` in a ``/v1/models`` document, or ``None`` if it has none."""
    if not isinstance(doc, Mapping):
        return None
    data = doc.get("data")
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, Mapping)]
    for entry in entries:
        if model in (entry.get("id"), entry.get("root")) and (found := _limit(entry)) is not None:
            return found
    limits = [n for e in entries if (n := _limit(e)) is not None]
    return min(limits) if limits else None


def lists_model(doc: object, *, model: str) -> bool | None:
    """Whether a ``/v1/models`` document lists ``model`` (as an entry's ``id`` or ``root``); ``None``
    when it is not such a document. A pod that does not list its pool's model answers its requests
    404 (a served-model-name that differs from ``modelName``)."""
    if not isinstance(doc, Mapping) or not isinstance(data := doc.get("data"), list):
        return None
    return any(isinstance(e, Mapping) and model in (e.get("id"), e.get("root")) for e in data)
