"""A model server's answer compressed with gzip although the scraper did not ask for it, read as the
bytes it holds.

The scrape client sends no ``Accept-Encoding`` (pages are small: the ``name[]`` filter makes them
about 2 KB), so a conforming server answers in plain text. Some do not: a hand-written exporter, or a
proxy in front of the pod that compresses whatever passes. Read as text, such a page held none of
the families routing reads: the endpoint stayed in scheduling with every signal imputed, each one
logged as not published with advice that did not apply ("upgrade to vLLM >= 0.9.2"), and the check
of the ``name[]`` filter logged bytes of the compressed stream as a sample name. A gzip stream is
recognised by its first two bytes (``1f 8b``), which no Prometheus text page starts with, so the
response headers need not be read on every scrape; it is decompressed up to the same size limit as
a plain page, so a small compressed answer cannot make the gateway hold a huge one.
"""

from __future__ import annotations

import zlib
from typing import Final

from igw.gateway.scrape_client import ScrapeRequestError

GZIP_MAGIC: Final = b"\x1f\x8b"
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
"""zlib's window-bits value for a gzip header and trailer."""


def plain_body(body: bytes, *, max_bytes: int) -> bytes:
    """``body`` itself, or what its gzip stream holds; :class:`ScrapeRequestError` (a failed scrape,
    naming why) for a gzip stream that is corrupt, truncated or over ``max_bytes`` decompressed."""
    if not body.startswith(GZIP_MAGIC):
        return body
    stream = zlib.decompressobj(_GZIP_WBITS)
    try:
        out = stream.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise ScrapeRequestError(f"gzip-compressed answer that does not decompress: {exc}") from None
    if len(out) > max_bytes:
        raise ScrapeRequestError(f"gzip-compressed answer larger than {max_bytes} bytes decompressed")
    if not stream.eof:
        raise ScrapeRequestError("gzip-compressed answer cut short")
    return out
