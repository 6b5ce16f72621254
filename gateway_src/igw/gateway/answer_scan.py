"""What a JSON answer relayed as it arrives says about itself, read from its bytes as they pass.

A complete answer the gateway holds whole is parsed (:func:`igw.gateway.upstream._whole_answer`);
one relayed as it arrives (the global router's large answers: ``relay_whole_above`` of
:func:`igw.gateway.upstream.exchange`) is never held, so the few fields the request path reads -
the ``usage`` the token limits charge, and the ``id``, ``object`` and ``store`` by which a stored
Responses API answer is recognised - are picked out of the bytes instead, holding at most
:data:`MAX_VALUE_BYTES` per value being read and a few bytes of the previous chunk.

A field is found by its key: ``"usage"`` followed by ``:``, after ``{``, ``,`` or white space. Inside
a JSON string every ``"`` is escaped, so a generated text cannot contain such a key; an answer's own
nested objects could, so ``id`` and ``object`` are taken at their first occurrence (both APIs put
them first, before any output) and ``usage`` and ``store`` at their last (after the output; a nested
occurrence before them is replaced). A value that does not parse within :data:`MAX_VALUE_BYTES` is
skipped. What is read is a small document in the answer's shape (:meth:`AnswerScan.document`), which
the caller reads as it reads a parsed answer.
"""

from __future__ import annotations

import json
from typing import Final

MAX_VALUE_BYTES: Final = 16 * 1024
"""The most bytes of one value read (a ``usage`` object with its details is well under 1 KiB)."""
FIRST: Final = frozenset({"id", "object"})
"""Keys whose first occurrence is kept."""
LAST: Final = frozenset({"usage", "store"})
"""Keys whose last occurrence is kept."""
_KEYS: Final = tuple((key, f'"{key}"'.encode()) for key in sorted(FIRST | LAST))
_OVERLAP: Final = max(len(quoted) for _, quoted in _KEYS)
_BEFORE_KEY: Final = frozenset(b"{, \t\r\n")
_SPACE: Final = b" \t\r\n"
_DECODER: Final = json.JSONDecoder()
_NOT_A_VALUE: Final = object()
"""What follows a key's name when it is no key (no colon), or a value of a kind none of the keys has."""


class AnswerScan:
    """Feed it an answer's body bytes in order (:meth:`feed`); read :meth:`document` at any time."""

    __slots__ = ("_found", "_reading", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        """The end of the bytes fed so far (a key split across two chunks is found in the next)."""
        self._found: dict[str, object] = {}
        self._reading: list[tuple[str, bytearray]] = []
        """Values being read: their key and their bytes so far (from the key's end)."""

    def feed(self, data: bytes) -> None:
        """Read ``data``, the bytes that follow those fed before."""
        if self._reading:
            self._read_values(data)
        tail = self._tail
        window = tail + data
        for key, quoted in _KEYS:
            if key in self._found and key in FIRST:
                continue
            # from the first place where the key would end in ``data``: one ending in the tail was seen
            at = window.find(quoted, max(0, len(tail) - len(quoted) + 1))
            while at >= 0:
                if at == 0 or window[at - 1] in _BEFORE_KEY:
                    end = at + len(quoted)
                    self._reading.append((key, bytearray(window[end : end + MAX_VALUE_BYTES])))
                    self._settle()
                    if key in self._found and key in FIRST:
                        break
                at = window.find(quoted, at + 1)
        self._tail = window[-_OVERLAP:]

    def _read_values(self, data: bytes) -> None:
        """Add ``data`` to the values being read, and settle those that are complete."""
        for _, value in self._reading:
            room = MAX_VALUE_BYTES - len(value)
            if room > 0:
                value += data[:room]
        self._settle()

    def _settle(self) -> None:
        """Keep the values that parse now; drop those that cannot (not a key, or too long)."""
        pending: list[tuple[str, bytearray]] = []
        for key, value in self._reading:
            parsed, complete = _value(value)
            if complete:
                if parsed is not _NOT_A_VALUE and (key not in self._found or key in LAST):
                    self._found[key] = parsed
            elif len(value) < MAX_VALUE_BYTES:
                pending.append((key, value))
        self._reading = pending

    def document(self) -> dict[str, object]:
        """The fields read so far, as a document in the answer's shape (``{"usage": {...}, ...}``)."""
        return dict(self._found)


def _value(after_key: bytearray) -> tuple[object, bool]:
    """The JSON value after a key's closing quote (``: value``): ``(value, True)``;
    ``(_NOT_A_VALUE, True)`` when these bytes are no key's (no colon follows); ``(None, False)``
    while the value may be incomplete."""
    text = bytes(after_key).lstrip(_SPACE)
    if not text:
        return None, False
    if text[:1] != b":":
        return _NOT_A_VALUE, True
    text = text[1:].lstrip(_SPACE)
    if not text:
        return None, False
    try:
        value, _ = _DECODER.raw_decode(text.decode("utf-8", "replace"))
    except json.JSONDecodeError:
        return None, False
    if not isinstance(value, dict | str | bool):
        return _NOT_A_VALUE, True  # none of the fields read is a number (which could go on in the next chunk)
    return value, True
