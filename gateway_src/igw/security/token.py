"""Strict parsing of a compact JWS, done before any key lookup or I/O.

Everything here is cheap and bounded by the token size cap, so a malformed or hostile token is
refused without touching the JWKS cache (Envoy's order: format, then claims, then keys).
What is refused, and why (RFC 7515, RFC 8725, attack cases J1-J21 of the security reference):

- more or fewer than three segments (JWE, JWS JSON serialization, truncated tokens), empty segments;
- anything but unpadded, canonical base64url (``=``, ``+``, ``/``, whitespace, non-ASCII, and a
  last character whose unused low bits are not zero: RFC 4648 §3.5 lets a decoder refuse it, and
  taking it let one signed token be sent under up to 16 spellings, each a token of its own to the
  verified-token cache and to anything that tells tokens apart by their text; before session s40);
- a header or payload that is not a UTF-8 JSON object, has duplicate member names, or uses NaN/Infinity;
- ``alg`` outside the configured allow-list (which never contains ``none`` or an HMAC algorithm);
- any ``crit`` (we implement no extension), ``b64`` (RFC 7797), ``zip``, nested JWTs (``cty: JWT``);
- a ``kid`` that is not a short string.

``jku``, ``x5u``, ``jwk`` and ``x5c`` are never read: keys come only from the configured issuer's JWKS.
"""

from __future__ import annotations

import binascii
import functools
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, NoReturn

from igw.errors import IgwSecurityError

MAX_KID_CHARS: Final = 256
MEMO_HEADER_CHARS: Final = 512
"""Longest header segment whose verdict is memoized. An issuer's headers are a few dozen to a couple
of hundred characters; a longer one is checked afresh each time, so tokens nobody signed cannot fill
the memo with large headers (up to ``maxTokenBytes`` each: 1,024 hostile headers of 6.8 KB held
about 52 MB before session s40)."""
_SEGMENT: Final = re.compile(r"[A-Za-z0-9_-]+")
_ALPHABET: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_CANONICAL_LAST: Final = {
    2: frozenset(_ALPHABET[::16]),  # one byte in the last quantum: 4 unused bits
    3: frozenset(_ALPHABET[::4]),  # two bytes: 2 unused bits
}
"""The characters that may end a segment of each length modulo 4 (its unused bits zero)."""
_URLSAFE_TO_STD: Final = bytes.maketrans(b"-_", b"+/")


class TokenRejected(IgwSecurityError):
    """The token is not acceptable; ``reason`` is for logs and metrics, never for the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ParsedJws:
    """A compact JWS whose structure and header passed every check (payload not interpreted)."""

    header: Mapping[str, Any]
    payload: bytes
    signing_input: bytes
    signature: bytes
    alg: str
    kid: str | None


@dataclass(frozen=True, slots=True)
class ParsedToken:
    """A JWT: a :class:`ParsedJws` whose payload is a JSON object of claims."""

    header: Mapping[str, Any]
    claims: Mapping[str, Any]
    signing_input: bytes
    signature: bytes
    alg: str
    kid: str | None


def reject(reason: str) -> NoReturn:
    raise TokenRejected(reason)


_Split = tuple[Mapping[str, Any], str, "str | None", str, str, bytes]


def _split(
    token: str, *, max_bytes: int, algorithms: Collection[str], allowed_types: Collection[str]
) -> _Split:
    if len(token) > max_bytes:
        reject("token_too_large")
    if not token.isascii():
        reject("malformed")
    parts = token.split(".")
    if len(parts) != 3:
        reject("not_compact_jws")
    header_b64, payload_b64, signature_b64 = parts
    check = _checked_header if len(header_b64) <= MEMO_HEADER_CHARS else _check_header
    header, alg, kid = check(header_b64, frozenset(algorithms), frozenset(allowed_types))
    payload = _b64decode(payload_b64)
    return header, alg, kid, f"{header_b64}.{payload_b64}", signature_b64, payload


def parse_jws(
    token: str,
    *,
    max_bytes: int,
    algorithms: Collection[str],
    allowed_types: Collection[str] = (),
) -> ParsedJws:
    """The JWS layer alone (what signature test vectors exercise); raises :class:`TokenRejected`."""
    header, alg, kid, signing_input, signature_b64, payload = _split(
        token, max_bytes=max_bytes, algorithms=algorithms, allowed_types=allowed_types
    )
    return ParsedJws(
        header=header,
        payload=payload,
        signing_input=signing_input.encode("ascii"),
        signature=_b64decode(signature_b64),
        alg=alg,
        kid=kid,
    )


def parse_compact_jws(
    token: str,
    *,
    max_bytes: int,
    algorithms: Collection[str],
    allowed_types: Collection[str] = (),
) -> ParsedToken:
    """Parse and pre-validate a JWT; raises :class:`TokenRejected` on anything unacceptable."""
    header, alg, kid, signing_input, signature_b64, payload = _split(
        token, max_bytes=max_bytes, algorithms=algorithms, allowed_types=allowed_types
    )
    claims = _json_object(payload)
    return ParsedToken(
        header=header,
        claims=claims,
        signing_input=signing_input.encode("ascii"),
        signature=_b64decode(signature_b64),
        alg=alg,
        kid=kid,
    )


def _check_header(
    header_b64: str, algorithms: frozenset[str], allowed_types: frozenset[str]
) -> tuple[Mapping[str, Any], str, str | None]:
    """The header checks; a pure function of the segment text (memoized as :func:`_checked_header`
    for segments up to :data:`MEMO_HEADER_CHARS`)."""
    header = _json_object(_b64decode(header_b64))
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in algorithms:
        reject("alg_not_allowed")
    if "crit" in header:
        reject("crit_unsupported")
    if "b64" in header or "zip" in header:
        reject("unsupported_header")
    cty = header.get("cty")
    if cty is not None and (not isinstance(cty, str) or _media_type(cty) == "jwt"):
        reject("nested_jwt")
    if allowed_types:
        typ = header.get("typ")
        if not isinstance(typ, str) or _media_type(typ) not in {_media_type(t) for t in allowed_types}:
            reject("typ_not_allowed")
    kid = header.get("kid")
    if kid is not None and (not isinstance(kid, str) or not kid or len(kid) > MAX_KID_CHARS):
        reject("bad_kid")
    return MappingProxyType(header), alg, kid


_checked_header: Final = functools.lru_cache(maxsize=1024)(_check_header)
""":func:`_check_header`, memoized: an issuer's tokens share a handful of distinct headers (a refusal
raises, and is not cached)."""


def _b64decode(segment: str) -> bytes:
    if not _SEGMENT.fullmatch(segment):
        reject("malformed")
    tail = len(segment) % 4
    if tail == 1 or (tail and segment[-1] not in _CANONICAL_LAST[tail]):
        reject("malformed")
    try:
        padded = (segment + "=" * (-len(segment) % 4)).encode("ascii")
        return binascii.a2b_base64(padded.translate(_URLSAFE_TO_STD))
    except (binascii.Error, ValueError):
        reject("malformed")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate member name")
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


_DECODER: Final = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")  # strict: invalid UTF-8 raises; a BOM makes the decoder fail below
        value = _DECODER.decode(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        reject("malformed_json")
    if not isinstance(value, dict):
        reject("not_json_object")
    return value


def _media_type(value: str) -> str:
    lowered = value.strip().lower()
    return lowered.removeprefix("application/")
