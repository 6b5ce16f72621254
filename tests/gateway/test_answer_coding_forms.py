""":class:`~igw.gateway.answer_coding.CodedScan`: which ``deflate`` form a body is, and how far an
answer decoded only for its usage is decoded.

HTTP's ``deflate`` is a zlib stream, but servers send raw deflate under that name too. Before session
s44 the first byte alone decided (method nibble 8: zlib), so a raw stream opening with a stored block
whose padding bits are set (``0x08``, ``0x78``) was decoded as zlib and refused (a 502); one whose
first two bytes form a valid zlib header (a stored block's length can) was too. And an answer the
client takes coded, decoded only for its usage, was decoded to 256 MiB as a relayed one is: a 300 KB
gzip bomb cost about a second of CPU per answer.
"""

from __future__ import annotations

import gzip
import random
import struct
import zlib

import orjson
import pytest

from igw.gateway.answer_coding import (
    MAX_DECODED_BYTES,
    SCAN_FREE_BYTES,
    SCAN_RATIO,
    CodedScan,
    zlib_header,
)

USAGE = {"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}
PLAIN = orjson.dumps({"object": "text_completion", "text": "hi " * 50, "usage": USAGE})


def _raw(data: bytes) -> bytes:
    squeezer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return squeezer.compress(data) + squeezer.flush()


def _stored_first(first: int, length: int) -> bytes:
    """A raw deflate stream: a stored block of ``PLAIN``'s first ``length`` bytes whose first byte
    (final bit, type and padding bits) is ``first``, then the rest compressed."""
    head = PLAIN[:length]
    return bytes([first]) + struct.pack("<HH", length, length ^ 0xFFFF) + head + _raw(PLAIN[length:])


FORMS = {
    "zlib": zlib.compress(PLAIN),
    "raw": _raw(PLAIN),
    "raw-first-byte-like-zlib": _stored_first(0x08, 40),  # method nibble 8, no valid zlib header
    "raw-first-bytes-a-zlib-header": _stored_first(0x78, 0x9C),  # 78 9c: a valid zlib header
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("first_alone", [False, True], ids=["whole", "first-byte-alone"])
def test_both_deflate_forms_decode(form: str, first_alone: bool) -> None:
    body = FORMS[form]
    if form != "zlib":
        assert zlib.decompress(body, -zlib.MAX_WBITS) == PLAIN  # valid raw deflate
    assert zlib_header(body[:2]) == (form in ("zlib", "raw-first-bytes-a-zlib-header"))
    coded = CodedScan(b"deflate")
    parts = [body[:1], body[1:]] if first_alone else [body]
    decoded = b"".join(piece for part in parts for piece in coded.decode(part))
    coded.finish()
    assert coded.unreadable is None
    assert decoded == PLAIN
    assert coded.document()["usage"] == USAGE


def test_a_deflate_body_of_one_byte_is_cut_short() -> None:
    coded = CodedScan(b"deflate")
    assert list(coded.decode(b"\x78")) == []
    coded.finish()
    assert coded.unreadable == "its compressed body ends early"


def _bomb(size: int) -> bytes:
    squeezer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    mib = b" " * (1 << 20)
    return b"".join(squeezer.compress(mib) for _ in range(size >> 20)) + squeezer.flush()


def test_a_bomb_decoded_for_its_usage_alone_stops_at_its_ratio() -> None:
    body = _bomb(300 << 20)
    coded = CodedScan(b"gzip", relay=False)
    decoded = 0
    for at in range(0, len(body), 64 * 1024):  # as a relay feeds it, in reads
        decoded += sum(len(piece) for piece in coded.decode(body[at : at + 64 * 1024]))
    assert coded.unreadable is not None
    assert "coded bytes" in coded.unreadable
    bound = SCAN_FREE_BYTES + SCAN_RATIO * len(body)
    assert SCAN_FREE_BYTES < decoded <= bound < MAX_DECODED_BYTES // 4  # 256 MiB before session s44


def test_a_large_answer_decoded_for_its_usage_alone_is_read_to_its_end() -> None:
    """JSON compresses a few times over: a 20 MiB answer, past the bytes decoded whatever the ratio,
    is read whole and its usage found."""
    text = random.Random(5).randbytes(10 << 20).hex()
    plain = orjson.dumps({"object": "text_completion", "text": text, "usage": USAGE})
    body = gzip.compress(plain, compresslevel=1)
    assert len(plain) > SCAN_FREE_BYTES
    coded = CodedScan(b"gzip", relay=False)
    decoded = sum(len(piece) for piece in coded.decode(body))
    coded.finish()
    assert coded.unreadable is None
    assert decoded == len(plain)
    assert coded.document()["usage"] == USAGE
