"""CDK token markers in a deployment file, refused before any construct sees them.

CDK encodes a value it will only know at deploy time (an ARN, a Ref, a list) as a marker inside an
ordinary string, list or number, and *every* string, key and number that reaches a construct is
searched for those markers when a template is synthesized (``aws-cdk-lib`` ``core/lib/private/
encoding``). A config value that merely looks like one is therefore not taken literally: an unknown
key ended synthesis in a jsii traceback (``UnrecognizedTokenKey``, ``EncodedRepresentationUnknownNumber``),
and a key CDK did know (``${Token[AWS.Region.7]}``) would have been replaced by another value. The
encodings, as aws-cdk-lib 2.275 matches them:

- a string token ``${Token[KEY]}`` and a list token ``#{Token[KEY]}`` anywhere in a string (a list token
  in a list is resolved, one in a scalar string ends synthesis), ``KEY`` of ``a-zA-Z0-9:._-``;
- a number token written into a string: ``-1.<10 to 16 digits>e+289``;
- a number token: a double whose upper 16 bits are ``0xFBFF`` (about ``-1.9e289``).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping
from typing import Any, Final

STRING_MARKER: Final = re.compile(r"[$#]\{Token\[[a-zA-Z0-9:._-]+\]\}|-1\.\d{10,16}e\+289")
"""A string or list token, or a stringified number token (CDK's ``STRING_TOKEN_REGEX``,
``LIST_TOKEN_REGEX`` and ``STRINGIFIED_NUMBER_PATTERN``)."""
NUMBER_MARKER_BITS: Final = 0xFBFF
"""The upper 16 bits of an encoded number token (CDK's ``DOUBLE_TOKEN_MARKER_BITS``)."""

Path = tuple[str | int, ...]


def _is_number_token(value: float) -> bool:
    """Whether jsii would hand ``value`` to CDK as a double that CDK decodes as a number token."""
    try:
        number = float(value)
    except OverflowError:  # an int beyond a double's range: not a token's bit pattern
        return False
    if math.isnan(number) or math.isinf(number):
        return False
    (bits,) = struct.unpack("<Q", struct.pack("<d", number))
    return bool(bits >> 48 == NUMBER_MARKER_BITS)


def _describe(value: str | float) -> str | None:
    """Why ``value`` would be read as a CDK token, or ``None``."""
    if isinstance(value, str):
        found = STRING_MARKER.search(value)
        if found is None:
            return None
        return f"{found.group()!r} is a CDK token marker"
    if _is_number_token(value):
        return f"{value!r} is the encoding of a CDK number token"
    return None


def problems(document: Any) -> list[tuple[Path, str]]:
    """Every string (mapping keys included) and number of ``document`` that CDK would read as a token,
    as ``(path, message)``; the path of a key is its mapping's. Walked without recursion: a caller may
    pass a document nested deeper than Python's stack."""
    found: list[tuple[Path, str]] = []
    stack: list[tuple[Path, Any]] = [((), document)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, Mapping):
            for key, value in reversed(list(node.items())):
                why = _describe(key) if isinstance(key, str) else None
                if why is not None:
                    found.append((path, f"the key {why}"))
                stack.append(((*path, str(key)), value))
        elif isinstance(node, list | tuple):
            stack.extend(((*path, i), item) for i, item in reversed(list(enumerate(node))))
        elif isinstance(node, str) or (isinstance(node, int | float) and not isinstance(node, bool)):
            why = _describe(node)
            if why is not None:
                found.append((path, why))
    return [
        (
            path,
            f"{why}: CDK would resolve it at synthesis instead of taking it literally (a known key becomes "
            "another value, an unknown one fails synthesis); write the literal value",
        )
        for path, why in found
    ]
