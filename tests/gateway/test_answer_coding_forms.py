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
    PIECE_BYTES,
    RAW_RETRY_BYTES,
    SCAN_FREE_BYTES,
    SCAN_RATIO,
    UNREAD_REASONS,
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


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("cut", [2, 3, 4, 5, 6, 9])
def test_both_deflate_forms_decode_whatever_the_first_read_holds(form: str, cut: int) -> None:
    """A raw body whose first two bytes are a zlib header is read as zlib until zlib refuses it. A
    first read of a few bytes that zlib takes without decoding anything (``78 9c``, then the stored
    block's ``00`` read as a zlib block header), the refusal coming in a later one: before session
    s44 only the first read could fall back to raw, so this body was a 502 ``not valid``."""
    body = FORMS[form]
    coded = CodedScan(b"deflate")
    decoded = b"".join(piece for part in (body[:cut], body[cut:]) for piece in coded.decode(part))
    coded.finish()
    assert (coded.unreadable, coded.unread) == (None, None)
    assert decoded == PLAIN
    assert coded.document()["usage"] == USAGE


def test_a_deflate_body_neither_form_reads_is_refused_in_any_reads() -> None:
    """The fallback reads the held bytes as raw once: a body valid in neither form is still refused."""
    body = b"\x78\x9c" + b"\xff" * 40
    for cut in (2, 4, len(body)):
        coded = CodedScan(b"deflate")
        assert [p for part in (body[:cut], body[cut:]) for p in coded.decode(part)] == []
        assert coded.unreadable is not None
        assert "not valid for its content coding" in coded.unreadable
        assert coded.unread == "decode_error"


def test_the_raw_fallback_holds_a_bounded_prefix() -> None:
    """The bytes held for the fallback are bounded: a zlib-looking body zlib decodes nothing of for
    over :data:`RAW_RETRY_BYTES` (empty stored blocks) is no longer read again as raw."""
    empty_stored = b"\x00\x00\x00\xff\xff"  # a non-final stored block of no bytes
    coded = CodedScan(b"deflate")
    assert list(coded.decode(b"\x78\x9c")) == []
    for _ in range(RAW_RETRY_BYTES // len(empty_stored) + 2):
        assert [p for p in coded.decode(empty_stored) if p] == []
    assert coded._raw_retry is None  # the bytes held for the fallback: let go past the bound
    assert coded.unreadable is None


class _CountingScan:
    """Stands in for the :class:`~igw.gateway.answer_scan.AnswerScan`: the bytes it was fed."""

    def __init__(self) -> None:
        self.fed = 0

    def feed(self, data: bytes) -> None:
        self.fed += len(data)

    def document(self) -> dict[str, object]:
        return {}


def test_a_bomb_relayed_decoded_is_scanned_only_to_its_ratio() -> None:
    """A client that does not accept the coding gets the bomb decoded, up to :data:`MAX_DECODED_BYTES`
    (it asked for the bytes); the usage scan stops at the ratio an answer decoded only for its usage
    stops at, and says so (``bomb_bound``). Before session s44 all 256 MiB were scanned too: half
    the CPU of the relay (measured 1.0 s against 0.56 s for the decode alone)."""
    body = _bomb(300 << 20)
    coded = CodedScan(b"gzip")
    counting = _CountingScan()
    coded.scan = counting  # type: ignore[assignment]
    decoded = 0
    for at in range(0, len(body), 64 * 1024):
        decoded += sum(len(piece) for piece in coded.decode(body[at : at + 64 * 1024]))
    assert decoded > MAX_DECODED_BYTES - (1 << 20)  # relayed to the bound
    assert coded.unread == "bomb_bound"
    assert counting.fed <= SCAN_FREE_BYTES + SCAN_RATIO * len(body) < MAX_DECODED_BYTES // 4


def test_why_the_usage_went_unread_is_one_bounded_reason() -> None:
    cases = {
        "unknown_coding": (b"br", [b"\x0b\x02\x80hi\x03"]),
        "decode_error": (b"gzip", [b"not gzip at all"]),
        "truncated": (b"gzip", [gzip.compress(PLAIN)[:-9]]),
        "bomb_bound": (b"gzip", [_bomb(64 << 20)]),
    }
    assert set(cases) == set(UNREAD_REASONS)
    for reason, (coding, parts) in cases.items():
        coded = CodedScan(coding, relay=False)
        for part in parts:
            list(coded.decode(part))
        coded.finish()
        assert (coded.unread, coded.unreadable is not None) == (reason, True), reason
    fine = CodedScan(b"gzip", relay=False)
    list(fine.decode(gzip.compress(PLAIN)))
    fine.finish()
    assert (fine.unread, fine.unreadable) == (None, None)


@pytest.mark.parametrize("flg", [0x01, 0x5E, 0x9C, 0xDA])
@pytest.mark.parametrize("relay", [True, False])
def test_a_raw_json_stream_whose_first_bytes_are_any_zlib_header_decodes_to_its_end(
    flg: int, relay: bool
) -> None:
    """Session s44's probes listed a raw stream that starts like zlib and runs to its end as reported
    ``truncated``; session s45 found none. Such a stream opens with a non-final stored block (``0x78``:
    method nibble 8 is a stored block's type bits), whose length's low byte is the zlib ``FLG``; read
    as zlib, its next bytes are a stored block whose check fails unless the content's first two bytes
    repeat that length - never so for JSON, which starts with ``{`` or white space (the answers whose
    usage is read). This pins every valid ``FLG``: decoded whole, nothing unread."""
    content = PLAIN
    sq = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = b"\x78" + struct.pack("<HH", flg, flg ^ 0xFFFF) + content[:flg]
    body += sq.compress(content[flg:]) + sq.flush()
    assert zlib_header(body[:2])
    assert zlib.decompress(body, -zlib.MAX_WBITS) == content
    coded = CodedScan(b"deflate", relay=relay)
    decoded = b"".join(coded.decode(body))
    coded.finish()
    assert (coded.unreadable, coded.unread) == (None, None)
    assert decoded == content


def _raw_like_zlib(content: bytes, flg: int) -> bytes:
    """``content`` as a raw deflate stream opening with a non-final stored block of ``flg`` bytes
    (``0x78``: padding bits set), so its first two bytes are the zlib header ``78 flg``."""
    sq = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = b"\x78" + struct.pack("<HH", flg, flg ^ 0xFFFF) + content[:flg]
    return body + sq.compress(content[flg:]) + sq.flush()


def _decode_whole(coded: CodedScan, parts: list[bytes]) -> bytes:
    """What a relay decoding for its client forwards: each read's pieces, then those of the end."""
    return b"".join(p for part in parts for p in coded.decode(part)) + b"".join(coded.end())


@pytest.mark.parametrize("flg", [0x5E, 0x9C, 0xDA])
@pytest.mark.parametrize("relay", [True, False], ids=["relayed-decoded", "relayed-coded"])
@pytest.mark.parametrize("cut", [None, 2, 7], ids=["whole", "cut-2", "cut-7"])
def test_a_raw_stream_zlib_reads_a_stored_block_of_decodes_whole(
    flg: int, relay: bool, cut: int | None
) -> None:
    """Content whose first two bytes repeat the opening stored block's length (not JSON): read as
    zlib, the raw stream's ``LEN`` high byte ``00`` opens a stored block whose check holds, of about
    64 KiB - zlib copies the rest of the body out as garbage and waits for more. Before session s45
    the raw fallback ended once zlib had decoded anything, so the answer was ``truncated``: refused
    (a 502) while held, and a client decoded for got the garbage, then a cut. What zlib decodes of
    the bytes held for the fallback is held back too, and read again as raw at the end."""
    content = struct.pack("<H", flg) + PLAIN
    body = _raw_like_zlib(content, flg)
    assert zlib_header(body[:2])
    assert zlib.decompress(body, -zlib.MAX_WBITS) == content
    coded = CodedScan(b"deflate", relay=relay)
    decoded = _decode_whole(coded, [body] if cut is None else [body[:cut], body[cut:]])
    assert (coded.unreadable, coded.unread) == (None, None)
    assert decoded == content
    assert coded.document()["usage"] == USAGE


def test_a_raw_stream_zlib_reads_a_stored_block_of_is_read_whole_by_finish() -> None:
    """:meth:`CodedScan.finish` (a caller forwarding none of the decoded bytes) reads it whole too."""
    coded = CodedScan(b"deflate", relay=False)
    list(coded.decode(_raw_like_zlib(struct.pack("<H", 0x9C) + PLAIN, 0x9C)))
    coded.finish()
    assert (coded.unreadable, coded.unread) == (None, None)
    assert coded.document()["usage"] == USAGE


def test_a_zlib_body_cut_short_is_still_truncated_its_bytes_relayed() -> None:
    """The raw reading is taken at the end only when it is a whole raw stream: a zlib body cut short
    stays ``truncated``, what zlib decoded of it forwarded before the cut."""
    plain = PLAIN * 20
    body = zlib.compress(plain)[:-30]
    coded = CodedScan(b"deflate")
    decoded = _decode_whole(coded, [body])
    assert coded.unread == "truncated"
    assert decoded
    assert plain.startswith(decoded)


def test_what_the_raw_fallback_holds_back_is_bounded() -> None:
    """A zlib body is held for the fallback (its coded bytes and what they decode to) only up to
    :data:`RAW_RETRY_BYTES` coded and :data:`PIECE_BYTES` decoded: past either, what it decoded is
    forwarded before its end, as it comes."""
    # coded bytes past the bound: incompressible content, read 16 KiB at a time
    plain = random.Random(7).randbytes(4 * RAW_RETRY_BYTES)
    body = zlib.compress(plain)
    coded = CodedScan(b"deflate")
    forwarded = 0
    for at in range(0, len(body), 16 * 1024):
        forwarded += sum(len(p) for p in coded.decode(body[at : at + 16 * 1024]))
        assert coded._raw_retry is None or len(coded._raw_retry) <= RAW_RETRY_BYTES
        if at + 16 * 1024 > RAW_RETRY_BYTES:
            assert coded._raw_retry is None
            assert forwarded >= at - 64  # let go: forwarded as decoded, nothing held back
    assert list(coded.end()) == []
    assert (coded.unread, forwarded) == (None, len(plain))
    # decoded bytes past the bound from a few coded ones: one read of a well compressing body
    plain = b" " * (3 * PIECE_BYTES)
    body = zlib.compress(plain)
    assert len(body) < RAW_RETRY_BYTES
    coded = CodedScan(b"deflate")
    forwarded = 0
    for piece in coded.decode(body[:-8]):
        forwarded += len(piece)
        assert coded._held_bytes <= PIECE_BYTES
    assert coded._raw_retry is None  # zlib for good past a piece decoded
    assert forwarded >= 2 * PIECE_BYTES
    assert forwarded + sum(len(p) for p in coded.decode(body[-8:])) == len(plain)


RECORD = orjson.dumps({"object": "text_completion", "text": "hello world", "usage": USAGE}) + b"\n"


@pytest.mark.parametrize("relay", [True, False], ids=["relayed-decoded", "relayed-coded"])
def test_a_repetitive_raw_stream_zlib_reads_a_stored_block_of_decodes_past_the_probe(relay: bool) -> None:
    """2 MiB of one repeated record as raw deflate opening like zlib: it decodes past the end probe's
    bound (:data:`SCAN_RATIO` per coded byte plus a piece), far within :data:`MAX_DECODED_BYTES` and
    the usage scan's :data:`SCAN_FREE_BYTES`. Before session s46 the probe gave up there and zlib's
    reading stood: ``truncated``, the client decoded for given zlib's garbage, then a cut."""
    content = struct.pack("<H", 0x9C) + RECORD * ((2 << 20) // len(RECORD))
    body = _raw_like_zlib(content, 0x9C)
    assert len(content) > SCAN_RATIO * len(body) + PIECE_BYTES  # past the probe's bound
    coded = CodedScan(b"deflate", relay=relay)
    decoded = _decode_whole(coded, [body[:7], body[7:]])
    assert (coded.unreadable, coded.unread) == (None, None)
    assert decoded == content


@pytest.mark.parametrize("relay", [True, False], ids=["relayed-decoded", "relayed-coded"])
def test_a_raw_bomb_behind_a_zlib_header_is_bounded_as_any_raw_bomb(relay: bool) -> None:
    """A raw bomb zlib reads a stored block of is held to the decoded-size bounds as the same bomb
    without the zlib-like start: relayed decoded whole (its usage scan stopped past its ratio), or,
    decoded for its usage alone, refused naming the bound. Before session s46 it was ``truncated``
    (its end probe stopped past the ratio and zlib's garbage stood), neither decoded nor named."""
    content = struct.pack("<H", 0x9C) + b" " * (32 << 20)
    outcomes = []
    for body in (_raw_like_zlib(content, 0x9C), _raw(content)):
        assert len(body) < RAW_RETRY_BYTES
        coded = CodedScan(b"deflate", relay=relay)
        decoded = _decode_whole(coded, [body])
        outcomes.append((coded.unread, len(decoded) if relay else None))
        if relay:
            assert coded.unreadable is None
            assert decoded == content
        else:
            assert coded.unreadable is not None
            assert coded.unreadable.startswith("it decodes to more than ")
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == "bomb_bound"
