"""Hop-by-hop headers: the fixed set plus every header a ``Connection`` header names, whatever the
mapping type and however many ``Connection`` fields the message has."""

from __future__ import annotations

from multidict import CIMultiDict, CIMultiDictProxy

from igw.gateway.upstream import HOP_BY_HOP, upstream_headers


def test_every_connection_field_is_honoured_in_a_multidict_and_a_plain_mapping() -> None:
    fields = [
        ("Connection", "keep-alive, X-Trace-Hop"),
        ("connection", " x-other "),
        ("X-Trace-Hop", "1"),
        ("X-Other", "2"),
        ("X-Kept", "3"),
        ("Keep-Alive", "timeout=5"),
    ]
    multi = CIMultiDictProxy(CIMultiDict(fields))
    plain = dict(fields)  # one Connection field survives in a dict; both spellings are distinct keys
    out = upstream_headers(multi, strip=frozenset(), add={"X-Request-Id": "r"})
    assert sorted(out.items()) == [("X-Kept", "3"), ("X-Request-Id", "r")]
    assert sorted(upstream_headers(plain, strip=frozenset(), add={}).items()) == [("X-Kept", "3")]


def test_without_a_connection_header_only_the_fixed_set_is_dropped() -> None:
    headers = CIMultiDictProxy(CIMultiDict([("Host", "a"), ("TE", "trailers"), ("Accept", "*/*")]))
    assert "te" in HOP_BY_HOP
    assert list(upstream_headers(headers, strip=frozenset(), add={}).items()) == [("Accept", "*/*")]
