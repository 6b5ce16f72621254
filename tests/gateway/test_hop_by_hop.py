"""Hop-by-hop headers: the fixed set plus every header a ``Connection`` header names, whatever the
mapping type and however many ``Connection`` fields the message has; and a pod's origin-scoped
answer fields, never relayed."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from igw.gateway.upstream import HOP_BY_HOP, upstream_headers
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler


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


ORIGIN_SCOPED = (
    ("Set-Cookie", "sess=evil; Domain=gateway.example; Path=/"),
    ("set-cookie", "other=1"),
    ("Strict-Transport-Security", "max-age=63072000; includeSubDomains; preload"),
    ("Alt-Svc", 'h3="evil.example:443"; ma=86400'),
)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_pods_origin_scoped_fields_never_reach_the_client(gateway: Any, stream: bool) -> None:
    """Tier 1 serves every pod from one address: a pod's ``Set-Cookie`` (the client's ``Cookie`` is
    then forwarded to whichever pod serves it next), ``Strict-Transport-Security`` (HTTPS pinned on
    the gateway's whole domain) and ``Alt-Svc`` (the client's later connections sent elsewhere) are
    dropped, in a whole answer and a stream alike; the pod's other fields kept."""
    pod = FakeModelServer("a", answer_fields=(*ORIGIN_SCOPED, ("X-Kept", "yes")))
    doc = config_doc([scheduler("llama", "llama")])
    async with running(pod) as (a,), gateway(doc, {"llama": [a.key]}) as gw:
        resp = await gw.post("/v1/completions", {"model": "llama", "prompt": "hi", "stream": stream})
        body = await resp.read()
    assert resp.status == 200, body
    assert resp.headers["X-Kept"] == "yes"
    assert not {"set-cookie", "strict-transport-security", "alt-svc"} & {n.lower() for n in resp.headers}
    assert (b"data: [DONE]" in body) if stream else orjson.loads(body)["choices"]
