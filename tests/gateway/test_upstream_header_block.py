"""The upstream request's fields serialised straight from the client's raw fields (the lean server's
requests): byte for byte what the header-map path (:func:`upstream_headers`, then the client's
serialisation) writes for the same request, and used for every lean request without a trace."""

from __future__ import annotations

import random
from typing import Any

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

import igw.gateway.inference as inference
from igw.gateway.upstream import upstream_header_block, upstream_headers
from igw.gateway.upstream_client import UnsafeFieldValue, header_lines
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler

NAMES = [
    "Host",
    "Accept",
    "Content-Type",
    "Content-Length",
    "Content-Encoding",
    "Connection",
    "Keep-Alive",
    "TE",
    "Upgrade",
    "Authorization",
    "X-Request-Id",
    "X-Gateway-Model-Name",
    "X-Trace-Hop",
    "X-Kept",
    "Proxy-Authorization",
    "User-Agent",
    # an owned or hop-by-hop name spelt with underscores is dropped alike (session s46)
    "X_Gateway_Model_Name",
    "X_Request_Id",
    "Keep_Alive",
    "Content_Encoding",
    "X_Kept",
    "X_Trace_Hop",
]
VALUES = [
    b"1",
    b"a b",
    b"keep-alive, X-Trace-Hop",
    b" x-kept ",
    b"x_trace_hop",
    b"caf\xc3\xa9",
    b"\xff\xfe raw",
    b"",
    b"te",
]


def _by_maps(fields: list[tuple[bytes, bytes]], strip: frozenset[str], add: dict[str, str]) -> bytes:
    decoded = [
        (name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
        for name, value in fields
    ]
    headers = upstream_headers(CIMultiDictProxy(CIMultiDict(decoded)), strip=strip, add=add)
    return header_lines(headers)


def _block(fields: list[tuple[bytes, bytes]], strip: frozenset[str], add: dict[str, str]) -> bytes:
    return upstream_header_block(fields, strip=frozenset(name.encode() for name in strip), add=add)


def _cased(rng: random.Random, name: str) -> bytes:
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in name).encode()


def test_the_block_is_what_the_header_maps_serialise_for_random_requests() -> None:
    rng = random.Random(16)
    for _ in range(3000):
        fields = [(_cased(rng, rng.choice(NAMES)), rng.choice(VALUES)) for _ in range(rng.randrange(0, 9))]
        strip = frozenset(
            rng.sample(["authorization", "x-gateway-model-name", "x-kept"], rng.randrange(0, 3))
        )
        add = {
            name: f"v{i}"
            for i, name in enumerate(
                rng.sample(
                    ["X-Request-Id", "x-gateway-model-name", "X-Kept", "x-request-id"], rng.randrange(0, 4)
                )
            )
        }
        assert _block(fields, strip, add) == _by_maps(fields, strip, add), (fields, strip, add)


def test_hop_by_hop_connection_named_stripped_and_replaced_fields() -> None:
    fields = [
        (b"Host", b"gw"),
        (b"x-request-id", b"client-1"),
        (b"Connection", b"keep-alive, X-Trace-Hop"),
        (b"X-Trace-Hop", b"1"),
        (b"Authorization", b"Bearer t"),
        (b"X-Kept", b"caf\xc3\xa9 \xff"),
        (b"X-REQUEST-ID", b"client-2"),
        (b"Content-Length", b"12"),
        (b"Content-Encoding", b"gzip"),
    ]
    add = {"X-Gateway-Model-Name": "m", "X-Request-Id": "gw-1"}
    block = _block(fields, frozenset({"authorization"}), add)
    # the gateway's id takes the client's first id's place (its spelling), the second is dropped
    assert block == b"X-Request-Id: gw-1\r\nX-Kept: caf\xc3\xa9 \xff\r\nX-Gateway-Model-Name: m\r\n"
    assert block == _by_maps(fields, frozenset({"authorization"}), add)


DOC = config_doc([scheduler("qwen", "qwen3")])


async def test_a_lean_request_is_forwarded_without_building_header_maps(
    gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_maps(*args: object, **kwargs: object) -> object:
        raise AssertionError("the lean path built the upstream header map")

    monkeypatch.setattr(inference, "upstream_headers", no_maps)
    async with running(FakeModelServer("qwen")) as (qwen,), gateway(DOC, {"qwen": [qwen.key]}) as gw:
        headers = {
            "X-Gateway-Model-Name": "evil",
            "Connection": "X-Trace-Hop",
            "X-Trace-Hop": "1",
            "X-Kept": "yes",
            "X-Request-Id": "client-id-1",
        }
        resp = await gw.post("/v1/completions", {"model": "qwen3", "prompt": "hi"}, headers=headers)
        assert resp.status == 200, await resp.text()
        sent = CIMultiDict(qwen.received[-1].headers)
        assert sent["X-Gateway-Model-Name"] == "qwen3"
        assert sent["X-Kept"] == "yes"
        assert resp.headers["X-Request-Id"] == "client-id-1"
        assert sent["X-Request-Id"].startswith("client-id-1-")  # made unique for the engine
        assert "X-Trace-Hop" not in sent


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "a\nb", "a\rb", "a\x00b"])
def test_an_added_field_with_a_line_break_or_nul_is_never_written(value: str) -> None:
    with pytest.raises(UnsafeFieldValue, match="X-Gateway-Model-Name"):
        upstream_header_block([(b"Accept", b"*/*")], strip=frozenset(), add={"X-Gateway-Model-Name": value})
    with pytest.raises(UnsafeFieldValue, match="X-Gateway-Model-Name"):
        header_lines({"X-Gateway-Model-Name": value})


def test_values_in_any_script_and_with_tabs_are_written_as_they_are() -> None:
    add = {"X-Gateway-Model-Name": "模型\tü"}
    assert (
        upstream_header_block([], strip=frozenset(), add=add) == "X-Gateway-Model-Name: 模型\tü\r\n".encode()
    )
    assert header_lines(add) == "X-Gateway-Model-Name: 模型\tü\r\n".encode()
