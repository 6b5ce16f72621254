"""Compressed answers a cluster's gateway sent though the router asked for none, whose usage the
router could not read: counted by cluster and reason in ``igw_global_answer_usage_unread_total``.

The router forwards with tier 1's exchange (:func:`igw.gateway.upstream.exchange`), which refuses
such an answer it holds whole (a 502, tried at the next cluster) and relays one past 1 MiB with its
usage unread; until session s44 tier 2 counted neither (tier 1 counts its own in
``igw_answer_usage_unread_total{model,reason}``). The cluster here is a small aiohttp app on
loopback standing in for a cluster's gateway.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import zlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from igw.gateway.serving import serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.server import ROUTER_KEY, create_global_app
from tests.global_router.support import MODEL, global_doc
from tests.log_capture import captured_records

NAME = "igw_global_answer_usage_unread_total"


def _gzip_bomb(size: int) -> bytes:
    """A gzip body that decodes to ``size`` spaces, compressed a MiB at a time."""
    squeezer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    mib = b" " * (1 << 20)
    return b"".join(squeezer.compress(mib) for _ in range(size >> 20)) + squeezer.flush()


def _coded_cluster(body: bytes, coding: str) -> web.Application:
    """A cluster's gateway answering every completion with ``body`` labelled ``Content-Encoding:
    coding``, whatever the router asked for."""

    async def complete(request: web.Request) -> web.Response:
        await request.read()
        headers = {"Content-Type": "application/json", "Content-Encoding": coding}
        return web.Response(body=body, headers=headers)

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    return app


@contextlib.asynccontextmanager
async def _router(
    cluster: web.Application, name: str = "big"
) -> AsyncIterator[tuple[str, CollectorRegistry]]:
    """A router in front of one cluster (``name``) serving ``cluster``, and the router's registry."""
    async with contextlib.AsyncExitStack() as stack:
        cluster_url = await stack.enter_async_context(serve_app(cluster, host="127.0.0.1", port=0))
        clusters = [{"name": name, "region": "east", "endpoint": cluster_url, "models": [MODEL]}]
        app = create_global_app(
            parse_global_config(global_doc(clusters, heartbeats={"required": False})),
            read_heartbeats=False,
        )
        url = await stack.enter_async_context(serve_app(app, host="127.0.0.1", port=0))
        yield url, app[ROUTER_KEY].metrics.registry


def _unread(registry: CollectorRegistry) -> dict[str, float]:
    """``igw_global_answer_usage_unread_total`` of cluster ``big``, by reason."""
    return {
        s.labels["reason"]: s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == NAME and s.labels["cluster"] == "big"
    }


@pytest.mark.parametrize(
    ("coding", "body", "reason"),
    [
        ("gzip", None, "bomb_bound"),  # _gzip_bomb(): 300 MiB in 300 KiB
        ("deflate", b"\x78\x9c" + b"\xff" * 20, "decode_error"),  # neither zlib nor raw deflate
    ],
    ids=["gzip-bomb", "corrupt-deflate"],
)
async def test_a_clusters_compressed_answer_it_cannot_read_is_refused_and_counted(
    coding: str, body: bytes | None, reason: str
) -> None:
    """Held whole (under 1 MiB) and unreadable: the client gets a 502 ``upstream_error`` and each
    attempt is counted by its cluster and reason (before session s44, counted nowhere at tier 2)."""
    if body is None:
        body = _gzip_bomb(300 << 20)
    async with _router(_coded_cluster(body, coding)) as (url, registry), aiohttp.ClientSession() as http:
        for _ in range(2):
            async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi"}) as resp:
                assert resp.status == 502
                assert (await resp.json())["error"]["code"] == "upstream_error"
        assert _unread(registry) == {reason: 2}


async def test_a_clusters_relayed_compressed_answer_whose_usage_went_unread_is_counted() -> None:
    """Past 1 MiB the answer is relayed as it came, coded, to a client that accepts gzip, its usage
    decoded alongside: a corrupt one reaches the client whole, uncharged, and is counted."""
    body = gzip.compress(b"{")[:10] + os.urandom(2 << 20)  # a gzip header, then no valid deflate
    async with (
        _router(_coded_cluster(body, "gzip")) as (url, registry),
        aiohttp.ClientSession(auto_decompress=False) as http,
    ):
        request = {"model": MODEL, "prompt": "hi"}
        async with http.post(
            url + "/v1/completions", json=request, headers={"Accept-Encoding": "gzip"}
        ) as resp:
            assert resp.status == 200
            assert await resp.read() == body
        assert _unread(registry) == {"decode_error": 1}


async def test_the_usage_unread_warning_names_the_cluster_not_its_endpoint() -> None:
    """The WARNING for a cluster's relayed answer whose usage went unread names the cluster as
    configured, not its endpoint (an internal URL): until session s48 it read ``upstream
    http://127.0.0.1:PORT sent a compressed answer ...``. Tier 1 names its pod's ``host:port`` as
    before. The cluster's name is this test's alone: the WARNING is throttled per upstream."""
    body = gzip.compress(b"{")[:10] + os.urandom(2 << 20)
    with captured_records("igw.gateway.usage_unread") as (_, records):
        async with (
            _router(_coded_cluster(body, "gzip"), name="unread-named") as (url, _),
            aiohttp.ClientSession(auto_decompress=False) as http,
            http.post(
                url + "/v1/completions",
                json={"model": MODEL, "prompt": "hi"},
                headers={"Accept-Encoding": "gzip"},
            ) as resp,
        ):
            assert resp.status == 200
            await resp.read()
    (line,) = [r.getMessage() for r in records]
    assert line.startswith("upstream cluster 'unread-named' sent a compressed answer"), line
    assert "127.0.0.1" not in line
