"""What the upstream client keeps of a response head (igw.gateway.upstream_client): the raw fields in
order, the noted values the forward path reads, the media type, and the decoded header map made only
when asked for."""

from __future__ import annotations

from multidict import CIMultiDict

from igw.gateway import upstream_client
from igw.gateway.upstream import _response_headers
from igw.gateway.upstream_client import UpstreamResponse, _media_type
from tests.gateway.support import parsing_connection


def _parsed(head: bytes) -> UpstreamResponse:
    conn = parsing_connection()
    assert conn._parser is not None  # dropped only when the connection is lost
    conn._parser.feed_data(head)
    assert conn.headers_done
    return UpstreamResponse(conn)


def test_fields_are_kept_raw_and_the_forward_paths_values_noted() -> None:
    response = _parsed(
        b"HTTP/1.1 200 OK\r\nContent-Type: Application/JSON; charset=utf-8\r\ncontent-type: text/plain\r\n"
        b"Connection: keep-alive\r\nX-Other: 1\r\nconnection: X-Other\r\nContent-Encoding: gzip\r\n"
        b"Server: s\r\nDate: d\r\nX-Value: caf\xe9 \r\nContent-Length: 0\r\n\r\n"
    )
    assert response.fields[0] == (b"Content-Type", b"Application/JSON; charset=utf-8")
    assert response.fields[-2] == (b"X-Value", b"caf\xe9 ")  # as received: not decoded, not stripped
    assert response.noted == {
        b"content-type": b"Application/JSON; charset=utf-8",  # the first one, as a lookup gave
        b"connection": b"keep-alive,X-Other",  # every Connection field
        b"content-encoding": b"gzip",
        b"date": b"d",
        b"content-length": b"0",
    }
    assert response.content_type == "application/json"
    assert response._headers is None  # not decoded until asked for
    assert response.headers == CIMultiDict(
        (n.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape"))
        for n, v in response.fields
    )
    assert response.headers is response.headers


def test_a_head_without_content_type_is_an_octet_stream_and_an_interim_head_is_forgotten() -> None:
    response = _parsed(
        b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\nHTTP/1.1 204 No Content\r\nX-Final: 1\r\n\r\n"
    )
    assert response.status == 204
    assert response.fields == [(b"X-Final", b"1")]
    assert response.noted == {}
    assert response.content_type == "application/octet-stream"


def test_media_types_are_cached_and_the_cache_is_bounded() -> None:
    upstream_client._MEDIA_TYPES.clear()
    assert _media_type(b"Text/Event-Stream ; charset=utf-8") == "text/event-stream"
    assert _media_type(b"Text/Event-Stream ; charset=utf-8") == "text/event-stream"
    for n in range(upstream_client.ORIGIN_CACHE_SIZE + 5):
        assert _media_type(b"application/x-%d" % n) == f"application/x-{n}"
    assert len(upstream_client._MEDIA_TYPES) <= upstream_client.ORIGIN_CACHE_SIZE


def test_a_relayed_streams_headers_are_the_decoded_fields_less_the_hop_by_hop_and_connection_named() -> None:
    # ``_response_headers`` reads the raw fields and the noted Connection values; the result is
    # what filtering the decoded header map gave (the relayed stream's head is built from it).
    response = _parsed(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive, X-Hop\r\n"
        b"X-Hop: 1\r\nconnection: x-other \r\nX-Other: 2\r\nTransfer-Encoding: chunked\r\n"
        b"Keep-Alive: timeout=5\r\nX-Value: caf\xe9\r\nx-request-id: upstream's\r\nX-Kept: a\r\n"
        b"X-Kept: b\r\n\r\n"
    )
    got = _response_headers(response, {"X-Request-Id": "gw"})
    assert list(got.items()) == [
        ("Content-Type", "text/event-stream"),
        ("X-Value", b"caf\xe9".decode("utf-8", "surrogateescape")),
        ("X-Request-Id", "gw"),  # the gateway's value replaces the upstream's, in its place
        ("X-Kept", "a"),
        ("X-Kept", "b"),
    ]
    assert response._headers is None  # the decoded map was not made for it
