"""Tokens nobody signed cannot make the gateway hold their headers (igw.security.token).

The header checks are memoized (1,024 entries) because an issuer's tokens share a handful of
headers. Before session s40 every header that passed them was kept, whatever its size, so an
unauthenticated client sending 1,024 tokens with distinct headers of ~6.8 KB (under the default
``maxTokenBytes``) left about 52 MB held per gateway process; up to the 64 KiB cap, ten times that.
"""

from __future__ import annotations

import contextlib
import gc
import tracemalloc
from collections.abc import Mapping

from igw.security.settings import DEFAULT_ALGORITHMS
from igw.security.token import MEMO_HEADER_CHARS, TokenRejected, _checked_header, parse_compact_jws
from tests.security.helpers import segment

PAYLOAD = segment({"iss": "https://issuer.example", "exp": 2_000_000_000})


def parse(header: Mapping[str, object]) -> None:
    with contextlib.suppress(TokenRejected):  # "AAAA" is no signature; only the header matters here
        parse_compact_jws(f"{segment(header)}.{PAYLOAD}.AAAA", max_bytes=8192, algorithms=DEFAULT_ALGORITHMS)


def test_large_headers_of_unsigned_tokens_are_not_kept() -> None:
    padding = {f"a{i}": 0 for i in range(560)}  # a 6.8 KB token, under maxTokenBytes
    parse({"alg": "RS256", "kid": "warm-up", **padding})
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(1100):
            parse({"alg": "RS256", "kid": f"k{n}", **padding})
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 2_000_000, f"{held / 1e6:.1f} MB held after 1,100 distinct large headers"


def test_an_issuers_header_is_still_memoized() -> None:
    header = {"alg": "RS256", "typ": "JWT", "kid": "k" * 43, "x5t": "t" * 27}
    assert len(segment(header)) <= MEMO_HEADER_CHARS
    _checked_header.cache_clear()
    parse(header)
    parse(header)
    assert _checked_header.cache_info().hits == 1
