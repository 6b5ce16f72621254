"""The usage of a whole answer a model server compressed though the gateway asked for none.

The gateway asks pods for ``Accept-Encoding: identity``
(:data:`igw.gateway.upstream.UPSTREAM_ACCEPT_ENCODING`), but a pod behind a compressing proxy, or
one that ignores the header, may still answer ``gzip`` or ``deflate``. The answer is forwarded as
it came to a client whose ``Accept-Encoding`` accepts that coding (:func:`accepts_coding`), and
decoded for any other (:meth:`CodedScan.decode`); its ``usage`` - what the token rate limits and
quotas charge - is read from its decoded bytes here. Before session s41 it went unread: such an
answer was charged no output tokens at all, so a pod ignoring the header let every tenant past its
token budget. Before session s42 it was forwarded coded to every client, one that asked for
``identity`` (or sent no ``Accept-Encoding``, as curl does) included, which read compressed bytes
as its JSON answer.

Decoding is bounded: the decoded bytes go through an :class:`~igw.gateway.answer_scan.AnswerScan`
in pieces of at most :data:`PIECE_BYTES` (never held whole), and at most :data:`MAX_DECODED_BYTES`
are decoded (a small body that inflates without end, a zip bomb, costs that much CPU and no more;
an answer decoded only for its usage, the client taking it coded, stops at a decoded-to-coded ratio
no JSON reaches: :data:`SCAN_RATIO`),
the event loop given a turn after each piece (:meth:`CodedScan.feed`; the relay of a decoded answer
turns as it writes each piece), so a bomb delays no other request by more than a piece's decode.
A gzip body is decoded member after member (RFC 1952 2.2: a gzip file is a series of members, as
``gzip`` writes files appended to each other and as a compressor flushing per piece may send; Python's
``gzip`` and browsers read them all); before session s43 only the first member was, so a client that
does not accept gzip got the answer cut at its end with a 200, its ``usage`` (in a later member)
unread and uncharged. A coding the gateway cannot decode (``br``, ``zstd``, anything else), a body
that is not valid for its coding, or one that decodes past the bound is
:attr:`CodedScan.unreadable`: the caller refuses the answer when it still can (a 502) rather than
forward it uncharged. Bytes after the last member that start no gzip member are not read, as before.

Why an answer's usage went unread is also one of :data:`UNREAD_REASONS` (:attr:`CodedScan.unread`),
what ``igw_answer_usage_unread_total{reason}`` counts: before session s44 only a WARNING (an answer
relayed coded) or a 502's access-log ``error`` (one held whole) said so, and the token limits and
billing that read the usage had no series to watch. An answer relayed decoded stops being scanned
(not decoded: the client needs its bytes) past the same ratio as one decoded for its usage alone.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import Iterator
from typing import Final

from igw.gateway.answer_scan import AnswerScan

PIECE_BYTES: Final = 1024 * 1024
"""The most decoded bytes produced by one step (what the decoder holds at once)."""
INPUT_BYTES: Final = 16 * 1024
"""The most coded bytes handed to zlib at once (what it copies of its input at a member's end)."""
QUIET_STEPS: Final = 64
"""Decoding steps in a row that decode nothing (empty gzip members) after which the event loop gets
a turn (:meth:`CodedScan.decode` yields ``b""``)."""
MAX_DECODED_BYTES: Final = 256 * 1024 * 1024
"""The most bytes one answer is decoded to (the cap on a plain whole answer,
:data:`~igw.gateway.upstream_client.MAX_WHOLE_BODY_BYTES`)."""
SCAN_FREE_BYTES: Final = 16 * 1024 * 1024
"""The bytes an answer decoded only for its usage (``relay=False``) may decode to whatever its coded
size: far above any answer that is not a bomb and compresses well (a completion, its logprobs)."""
SCAN_RATIO: Final = 64
"""Decoded bytes per coded byte an answer decoded only for its usage may reach past
:data:`SCAN_FREE_BYTES`. JSON compresses a few times over; ``deflate`` reaches about 1000 only on
runs of one byte, which is what a bomb is made of."""
_GZIP_WBITS: Final = 31
"""zlib's window setting for one gzip member."""
_GZIP_MAGIC: Final = b"\x1f\x8b"
"""The first two bytes of a gzip member (RFC 1952 2.3.1)."""
_ZLIB_WBITS: Final = 15
"""zlib's window setting for a zlib stream (RFC 1950), what HTTP's ``deflate`` names."""
_WBITS: Final = {b"gzip": _GZIP_WBITS, b"x-gzip": _GZIP_WBITS, b"deflate": _ZLIB_WBITS}
"""zlib's window setting per content coding: a gzip member, or a zlib stream (HTTP's ``deflate``)."""
_ALIASES: Final = {"x-gzip": "gzip"}
"""Content-coding names HTTP holds equivalent (RFC 9110 8.4.1.3)."""
_RAW_DEFLATE: Final = -15
"""A raw deflate stream without the zlib wrapper, which some servers send as ``deflate``."""
RAW_RETRY_BYTES: Final = 64 * 1024
"""The most coded bytes of a ``deflate`` body with a zlib header held while it is read as zlib, to
read them again as raw deflate should zlib refuse them or end short of its stream's end
(:meth:`CodedScan.decode`, :meth:`CodedScan.end`). What zlib decodes of them is held too, up to
:data:`PIECE_BYTES`: past either bound the body is zlib for good."""
_JSON_SPACE: Final = b" \t\r\n"
_JSON_SPACE_RUN: Final = re.compile(rb"[ \t\r\n]*")
_EDGE_PROBE: Final = 64
"""The bytes at a decoded piece's end looked at first for its last byte past whitespace."""
UNREAD_REASONS: Final = ("unknown_coding", "decode_error", "truncated", "bomb_bound")
"""Why a compressed answer's usage went unread (:attr:`CodedScan.unread`), a bounded label value:
a coding the gateway cannot decode (``br``, ``zstd``), a body not valid for its coding, one that
ends early, one that decodes (or, relayed decoded, is scanned) past its bound."""


def zlib_header(head: bytes) -> bool:
    """Whether the first two bytes of a ``deflate`` body are a zlib header (RFC 1950 2.2): method 8,
    a window of at most 32 KiB, no preset dictionary, the check bits right. The first byte alone
    (before session s44) took a raw deflate stream starting with a stored block whose padding bits
    are set (``0x08``, ``0x78``) for a zlib one, and refused it as not valid (a 502)."""
    cmf, flg = head[0], head[1]
    return cmf & 0x0F == 8 and cmf >> 4 <= 7 and not flg & 0x20 and (cmf << 8 | flg) % 31 == 0


def accepts_coding(accept_encoding: str | None, coding: bytes) -> bool:
    """Whether a client's ``Accept-Encoding`` (RFC 9110 12.5.3) accepts ``coding``: named (``x-gzip``
    as ``gzip``) or covered by ``*`` with a weight above 0, a named entry over ``*``. Without the
    header the client is held not to: RFC 9110 lets a server send it any coding then, but
    ``identity`` is always acceptable and plain clients (curl, scripts reading JSON) cannot read
    anything else, so the gateway decodes for them."""
    if accept_encoding is None:
        return False
    wanted = coding.strip().lower().decode("latin-1")
    wanted = _ALIASES.get(wanted, wanted)
    named: float | None = None
    anything: float | None = None
    for entry in accept_encoding.split(","):
        name, _, params = entry.partition(";")
        name = name.strip().lower()
        name = _ALIASES.get(name, name)
        weight = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    weight = float(value.strip())
                except ValueError:
                    weight = 0.0  # a weight that does not parse accepts nothing
        if name == wanted:
            named = weight if named is None else max(named, weight)
        elif name == "*":
            anything = weight if anything is None else max(anything, weight)
    found = named if named is not None else anything
    return found is not None and found > 0


def compressed(coding: bytes | None) -> bool:
    """Whether a ``Content-Encoding`` value names a coding (absent and ``identity`` do not)."""
    return coding is not None and coding.strip().lower() not in (b"", b"identity")


class CodedScan:
    """Feed it a compressed answer's bytes in order (:meth:`feed`); :meth:`document` then holds
    what :class:`~igw.gateway.answer_scan.AnswerScan` read of the decoded answer, unless
    :attr:`unreadable` says why nothing could be."""

    __slots__ = (
        "_coded",
        "_decoded",
        "_decoder",
        "_edges",
        "_head",
        "_held",
        "_held_bytes",
        "_raw_retry",
        "_relay",
        "_trailing",
        "_wbits",
        "scan",
        "unread",
        "unreadable",
    )

    def __init__(self, coding: bytes, *, relay: bool = True) -> None:
        """``relay``: the decoded bytes go to the client (:meth:`decode`), so a legitimate answer must
        decode to its end, up to :data:`MAX_DECODED_BYTES`. Without it they serve the usage scan alone
        (the client takes the coded bytes as they came), and decoding stops, the answer
        :attr:`unreadable`, past :data:`SCAN_FREE_BYTES` plus :data:`SCAN_RATIO` per coded byte fed:
        before session s44 a pod's 300 KB gzip bomb cost 256 MiB of decoding and scanning (about a
        second of CPU) on every such answer, when its ratio alone gave it away. With it the decoded
        bytes past that ratio are still decoded for the client, but no longer scanned (:attr:`unread`
        ``bomb_bound``): before session s44 a bomb's 256 MiB were scanned too, half its CPU."""
        name = coding.strip().lower()
        self.scan = AnswerScan()
        self.unreadable: str | None = None
        """Why the answer cannot be decoded (a message for the client's 502 or the log)."""
        self.unread: str | None = None
        """Why its usage went unread, one of :data:`UNREAD_REASONS`: set with :attr:`unreadable`, and
        alone when a relayed answer stopped being scanned past its ratio (its bytes still relayed)."""
        self._raw_retry: bytearray | None = None
        """A ``deflate`` body with a zlib header: its coded bytes while it is read as zlib (up to
        :data:`RAW_RETRY_BYTES`), read again as raw deflate should zlib refuse them or end short."""
        self._held: list[bytes] = []
        """What zlib decoded of :attr:`_raw_retry`'s bytes, not yet scanned or yielded: a raw body
        zlib takes for a while (a stored block's length read as a zlib header, then its bytes as a
        stored block) decodes to garbage that must reach neither the client nor the usage scan."""
        self._held_bytes = 0
        self._edges = b""
        """The first and last bytes past JSON's whitespace of what was decoded and scanned (one byte
        while one was found; none while there is none): :meth:`json_edges`."""
        self._relay = relay
        self._coded = 0
        """The coded bytes fed so far."""
        self._decoded = 0
        self._trailing = False
        """The coded stream ended, and what followed is no gzip member: the rest is not read."""
        wbits = _WBITS.get(name)
        self._head: bytes | None = b"" if wbits == _ZLIB_WBITS else None
        """A ``deflate`` body's bytes until two have come, to tell a zlib stream from a raw one
        (:func:`zlib_header`); ``None`` once told (and for gzip)."""
        self._wbits = 0 if wbits is None else wbits
        self._decoder = None if wbits is None else zlib.decompressobj(wbits)
        if wbits is None:
            self.unreadable = f"content coding {name.decode('latin-1')[:40]!r} the gateway cannot decode"
            self.unread = "unknown_coding"

    async def feed(self, data: bytes) -> None:
        """Decode ``data`` (the bytes after those fed before) and read what it decodes to, giving the
        event loop a turn after each piece (:meth:`decode`): a body that inflates to the bound holds
        the loop for one piece at a time, not for the whole decode. Before session s43 this was one
        synchronous call: a pod's 300 KB gzip bomb answering a client that accepts gzip held the
        gateway's loop (every other request, ``/healthz`` included) for the 1.5 to 2.2 s zlib and the
        usage scan took over 256 MiB."""
        for _ in self.decode(data):
            await asyncio.sleep(0)

    def decode(self, data: bytes) -> Iterator[bytes]:
        """Decode ``data`` (the bytes after those fed before), reading what it decodes to, and yield
        the decoded bytes a piece (at most :data:`PIECE_BYTES`) at a time: what the gateway forwards
        to a client that does not accept the coding (:func:`accepts_coding`). After
        :data:`QUIET_STEPS` steps in a row that decode nothing (empty gzip members) it yields ``b""``:
        a turn for the event loop, nothing to forward. Stops, with :attr:`unreadable` set, at the
        first byte that is not valid or past the bound.

        zlib is handed at most :data:`INPUT_BYTES` of ``data`` at a time: it copies what it leaves
        of its input at each member's end, so before session s43 a MiB of empty gzip members (20
        bytes each) cost time growing with the square of their number, 1.9 s in one call."""
        decoder = self._decoder
        if decoder is None or self.unreadable is not None or self._trailing:
            return
        self._coded += len(data)
        if self._head is not None:  # a deflate body's first bytes: zlib-wrapped or raw?
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return
            self._head = None
            if zlib_header(data):
                self._raw_retry = bytearray()
            else:
                self._decoder = zlib.decompressobj(_RAW_DEFLATE)
        if self._raw_retry is None:
            try:
                yield from self._inflate(data)
            except zlib.error as exc:
                self._refuse(exc)
            return
        # read as zlib, but maybe raw: the bytes held to read again, what they decode to held back
        self._raw_retry += data
        try:
            for piece in self._inflate(data):
                if self._raw_retry is None:  # zlib for good (held past the bound), the rest as it comes
                    yield piece
                    continue
                self._held.append(piece)
                self._held_bytes += len(piece)
                if self._held_bytes > PIECE_BYTES:
                    yield from self._settle()
                else:
                    yield b""  # a turn for the loop, nothing to forward yet
        except zlib.error as exc:
            # a raw stream whose first bytes read as a zlib header (a stored block's length may
            # make them one): read again as raw, as browsers do, what zlib decoded thrown away
            if self._raw_retry is None:
                self._refuse(exc)
                return
            try:
                yield from self._read_raw()
            except zlib.error as raw_exc:
                self._refuse(raw_exc)
            return
        decoder = self._decoder
        ended = decoder is None or decoder.eof or self._trailing or self.unreadable is not None
        if self._raw_retry is not None and (ended or len(self._raw_retry) > RAW_RETRY_BYTES):
            # zlib ended its stream, or ran past the bytes held: before session s44 only the call
            # that saw the header could read again as raw; before session s45 only while zlib had
            # decoded nothing, so a raw body zlib read a stored block of was garbage, then cut
            yield from self._settle()

    def _settle(self) -> Iterator[bytes]:
        """The body is zlib for good: let go of the coded bytes held and yield what they decoded to."""
        self._raw_retry = None
        held, self._held, self._held_bytes = self._held, [], 0
        yield from held

    def _read_raw(self) -> Iterator[bytes]:
        """Read the held coded bytes again as raw deflate, from the start: what zlib decoded of them,
        and what the usage scan read of it, thrown away. Raises :class:`zlib.error` as
        :meth:`_inflate`."""
        body = bytes(self._raw_retry or b"")
        self._raw_retry, self._held, self._held_bytes = None, [], 0
        self._decoded = 0
        self.unread = None
        self.scan = AnswerScan()
        self._edges = b""
        self._decoder = zlib.decompressobj(_RAW_DEFLATE)
        yield from self._inflate(body)

    def _refuse(self, exc: zlib.error) -> None:
        """The body is not valid for its coding: nothing more of it is read."""
        self.unreadable = f"its body is not valid for its content coding ({exc})"
        self.unread = "decode_error"
        self._decoder = None
        self._raw_retry, self._held, self._held_bytes = None, [], 0

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        """:meth:`decode`'s steps over ``data`` with the decoder as it stands, up to the bound on the
        decoded bytes in all (:meth:`__init__`); raises :class:`zlib.error` at the first byte that is
        not valid."""
        decoder = self._decoder
        if decoder is None:  # unreachable: decode() checked it
            return
        scan_bound = SCAN_FREE_BYTES + SCAN_RATIO * self._coded
        bound = MAX_DECODED_BYTES if self._relay else min(MAX_DECODED_BYTES, scan_bound)
        taken = 0  # the bytes of ``data`` handed to zlib so far
        held = b""  # what zlib left of them, still to decode
        quiet = 0
        while held or taken < len(data):
            if not held:
                held = data[taken : taken + INPUT_BYTES]
                taken += len(held)
            if decoder.eof and self._wbits == _GZIP_WBITS:  # the next gzip member (RFC 1952 2.2)
                decoder = self._decoder = zlib.decompressobj(_GZIP_WBITS)
            piece = decoder.decompress(held, PIECE_BYTES)
            held = decoder.unconsumed_tail
            self._decoded += len(piece)
            if self._decoded > bound:
                self.unreadable = f"it decodes to more than {bound} bytes"
                if bound < MAX_DECODED_BYTES:
                    self.unreadable += f" (from {self._coded} coded bytes)"
                self.unread = "bomb_bound"
                self._decoder = None
                return
            if self._decoded > scan_bound:  # relayed decoded: the client needs the bytes, no scan does
                self.unread = "bomb_bound"
            if self.unread is None:
                self.scan.feed(piece)
                self._edge(piece)
            quiet = 0 if piece else quiet + 1
            if piece or quiet == QUIET_STEPS:
                quiet = 0
                yield piece
            if decoder.eof:
                held = decoder.unused_data
                after = (held + data[taken : taken + 2])[:2]
                if self._wbits != _GZIP_WBITS or not _GZIP_MAGIC.startswith(after):
                    self._trailing = True  # what follows the stream (no gzip member) is not read
                    return

    def end(self) -> Iterator[bytes]:
        """The answer ended: yield what is still held back of it, and find a stream cut short
        unreadable. A ``deflate`` body read as zlib that ends short of zlib's end, while its bytes
        are held (:data:`RAW_RETRY_BYTES`), is read again as raw deflate when it is a whole raw
        stream: a raw body zlib read a stored block of (its length's low byte a valid zlib ``FLG``)
        was reported ``truncated`` before session s45, and a client decoded for got garbage, then
        a cut. When it is not, zlib's reading stands (a zlib body cut short stays ``truncated``);
        a raw stream that runs past the probe's bound is read as raw too (:meth:`_whole_raw`)."""
        decoder = self._decoder
        if self._raw_retry is not None and decoder is not None and not decoder.eof:
            if self.unreadable is None and self._whole_raw(bytes(self._raw_retry)):
                try:
                    yield from self._read_raw()
                except zlib.error as exc:  # unreachable: _whole_raw read it
                    self._refuse(exc)
            else:
                yield from self._settle()
        decoder = self._decoder
        if decoder is not None and self.unreadable is None and not decoder.eof:
            self.unreadable = "its compressed body ends early"
            self.unread = "truncated"

    def finish(self) -> None:
        """The answer ended (:meth:`end`), for a caller that forwards none of the decoded bytes: a
        compressed stream cut short is unreadable too."""
        for _ in self.end():
            pass

    def _whole_raw(self, body: bytes) -> bool:
        """Whether ``body`` reads as raw deflate: to its end, or without a fault past the probe's
        bound - :data:`SCAN_RATIO` decoded bytes per coded byte plus a piece, what it decodes to
        thrown away a piece at a time (at most :data:`PIECE_BYTES` held), so the probe costs a few
        MiB of decoding at most. Past that bound the raw reading is taken, zlib's having failed (it
        ended short): the real reading (:meth:`_read_raw`) holds the answer to the decoded-size
        bound as any raw body - relayed decoded up to :data:`MAX_DECODED_BYTES`, or refused past
        the usage scan's bound naming it. Before session s46 a raw stream past the probe's bound
        kept zlib's reading: 2 MiB of one repeated record was reported ``truncated`` (a 502 saying
        the body ended early), and a client decoded for got zlib's garbage, then a cut."""
        probe = zlib.decompressobj(_RAW_DEFLATE)
        bound = SCAN_RATIO * len(body) + PIECE_BYTES
        decoded = 0
        data = body
        try:
            while not probe.eof and decoded <= bound:
                piece = probe.decompress(data, PIECE_BYTES)
                data = probe.unconsumed_tail
                decoded += len(piece)
                if not piece and not data:
                    break
        except zlib.error:
            return False
        return probe.eof or decoded > bound

    def document(self) -> dict[str, object]:
        """The fields read of the decoded answer (:meth:`AnswerScan.document`)."""
        return self.scan.document()

    def _edge(self, piece: bytes) -> None:
        """Note ``piece``'s first and last bytes past JSON's whitespace (:meth:`json_edges`)."""
        tail = piece[-_EDGE_PROBE:].rstrip(_JSON_SPACE) or piece.rstrip(_JSON_SPACE)
        if not tail:
            return  # whitespace alone (or nothing)
        first = self._edges[:1]
        if not first:
            start = _JSON_SPACE_RUN.match(piece)
            first = piece[start.end() : start.end() + 1] if start is not None else b""
        self._edges = first + tail[-1:]

    def json_edges(self) -> bytes:
        """The decoded answer's first and last bytes past JSON's whitespace (the same byte twice for
        a one-byte body; ``b""`` for an empty or blank one): ``{`` and ``}`` for a JSON object, a
        cheap check of its shape that holds none of the decoded bytes (the caller's:
        :func:`igw.gateway.upstream._whole_answer`)."""
        return self._edges
