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

The parsing is bounded by the answer's size: the bytes handed to the JSON parser (a value being read
is parsed again as each chunk adds to it) are at most :data:`PARSE_ALLOWANCE_BYTES` plus
:data:`PARSE_BYTES_PER_BYTE` per byte fed; past that the scan stops reading (what it found stays).
Before session s43 a pod's answer of one MiB repeating ``"usage":[`` cost 23 s of the event loop
(each key read up to 16 KiB ahead, every value still pending parsed again at each key found), and a
value nested deeper than the JSON parser's recursion bound (``{"usage":[[[[...``) raised
``RecursionError`` out of the relay: a 500 ``internal_error`` with a traceback, or a connection cut
mid-answer. A well-formed answer parses a few values of a few hundred bytes, far below the bound.
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
PARSE_ALLOWANCE_BYTES: Final = 16 * MAX_VALUE_BYTES
"""The bytes parsed for free (the first keys of a short answer, each read up to its end)."""
PARSE_BYTES_PER_BYTE: Final = 2
"""The bytes parsed per byte fed, on top of :data:`PARSE_ALLOWANCE_BYTES`."""
_CLOSERS: Final = (b"}", b'"', b"]", b"e", b"l", b":")
"""The bytes one of which ends every value read (an object, a string, ``true``/``false``, and the
arrays and ``null`` that are no value read) or shows what follows a key: a value still being read
is parsed again only when its new bytes hold one."""
_DECODER: Final = json.JSONDecoder()
_NOT_A_VALUE: Final = object()
"""What follows a key's name when it is no key (no colon), or a value of a kind none of the keys has."""


class AnswerScan:
    """Feed it an answer's body bytes in order (:meth:`feed`); read :meth:`document` at any time."""

    __slots__ = ("_allowance", "_found", "_reading", "_tail")

    def __init__(self) -> None:
        self._allowance = PARSE_ALLOWANCE_BYTES
        """The bytes the JSON parser may still be handed; below 0 the scan reads nothing more."""
        self._tail = b""
        """The end of the bytes fed so far (a key split across two chunks is found in the next)."""
        self._found: dict[str, object] = {}
        self._reading: list[tuple[str, bytearray]] = []
        """Values being read: their key and their bytes so far (from the key's end)."""

    def feed(self, data: bytes) -> None:
        """Read ``data``, the bytes that follow those fed before."""
        if self._allowance < 0:
            return  # past its parsing bound: what was found stays, nothing more is read
        self._allowance += PARSE_BYTES_PER_BYTE * len(data)
        if self._reading:
            self._read_values(data)
        tail = self._tail
        window = tail + data
        for key, quoted in _KEYS:
            if key in self._found and key in FIRST:
                continue
            # from the first place where the key would end in ``data``: one ending in the tail was seen
            at = window.find(quoted, max(0, len(tail) - len(quoted) + 1))
            while at >= 0 and self._allowance >= 0:
                if at == 0 or window[at - 1] in _BEFORE_KEY:
                    end = at + len(quoted)
                    # the values already being read have not changed: only the new one is parsed
                    self._settle([(key, bytearray(window[end : end + MAX_VALUE_BYTES]))])
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
        if any(closer in data for closer in _CLOSERS):  # else none of them can have ended
            reading, self._reading = self._reading, []
            self._settle(reading)

    def _settle(self, values: list[tuple[str, bytearray]]) -> None:
        """Keep those of ``values`` that parse now; drop those that cannot (not a key, or too long);
        read the others further (:attr:`_reading`)."""
        pending = self._reading
        for key, value in values:
            self._allowance -= len(value)
            if self._allowance < 0:
                pending.clear()  # past the bound: no value is read further
                break
            parsed, complete = _value(value)
            if complete:
                if parsed is not _NOT_A_VALUE and (key not in self._found or key in LAST):
                    self._found[key] = parsed
            elif len(value) < MAX_VALUE_BYTES:
                pending.append((key, value))

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
    except RecursionError:
        return _NOT_A_VALUE, True  # nested past the parser's bound: no usage, store, id or object
    if not isinstance(value, dict | str | bool):
        return _NOT_A_VALUE, True  # none of the fields read is a number (which could go on in the next chunk)
    return value, True
