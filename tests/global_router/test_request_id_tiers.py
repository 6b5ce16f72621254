"""One request id across the tiers: the router (tier 2) forwards the id it gives a request to the
cluster's gateway (tier 1), which answers, logs and forwards to the pod under that same id.

Real HTTP throughout: a router replica in front of a real tier-1 gateway in front of a fake pod. The
client's ``X-Request-Id`` is kept when it looks like an id (:func:`igw.gateway.inference.request_id_for`,
the one rule both tiers apply); any other value - 10 KiB long, non-ASCII, JSON quotes - is replaced
by one fresh id, the same at both tiers, and never reaches a log line or the pod.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import pytest

from igw.gateway.serving import serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.fixtures import Gateway
from tests.gateway.support import config_doc, scheduler
from tests.global_router.support import MODEL, global_doc

FRESH = re.compile(r"[0-9a-f]{32}")


@contextlib.asynccontextmanager
async def tiers(
    gateway: Callable[..., Any], *, pod_status: int = 200, west: FakeModelServer | None = None
) -> AsyncIterator[tuple[str, Gateway, FakeModelServer]]:
    """A router (open, in ``east``) in front of one tier-1 gateway (open) in front of one pod that
    answers ``pod_status``; with ``west`` that server is a second cluster, in the other region (tried
    after ``east-a``). Yields the router's URL, the gateway and the pod."""
    async with (
        running(FakeModelServer("a", infer_status=pod_status)) as (pod,),
        gateway(config_doc([scheduler("pool", MODEL)]), {"pool": [pod.key]}) as gw,
    ):
        clusters = [{"name": "east-a", "region": "east", "endpoint": gw.url, "models": [MODEL]}]
        if west is not None:
            clusters.append(
                {"name": "west-a", "region": "west", "endpoint": f"http://{west.key}", "models": [MODEL]}
            )
        doc = global_doc(clusters, heartbeats={"required": False})
        app = create_global_app(parse_global_config(doc), read_heartbeats=False)
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            yield url, gw, pod


def _access_ids(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The ``request_id`` of each tier-1 access log line captured."""
    return [orjson.loads(r.getMessage())["request_id"] for r in caplog.records if r.name == "igw.access"]


async def _ask(
    url: str, path: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, str, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(url + path, json=body, headers=headers) as resp:
        return resp.status, resp.headers.get("x-request-id", ""), dict(resp.headers)


COMPLETION = {"model": MODEL, "prompt": "x", "max_tokens": 2}


@pytest.mark.parametrize("client_id", [None, "client-run.7:42"])
async def test_the_answer_the_access_log_and_the_pod_share_one_id(
    gateway: Callable[..., Any], caplog: pytest.LogCaptureFixture, client_id: str | None
) -> None:
    caplog.set_level(logging.INFO, logger="igw.access")
    async with tiers(gateway) as (url, _, pod):
        headers = {} if client_id is None else {"X-Request-Id": client_id}
        status, answered, _ = await _ask(url, "/v1/completions", COMPLETION, headers)
    assert status == 200
    if client_id is None:
        assert FRESH.fullmatch(answered), answered
    else:
        assert answered == client_id
    assert _access_ids(caplog) == [answered]
    (received,) = [r for r in pod.received if r.path == "/v1/completions"]
    sent = {k.lower(): v for k, v in received.headers.items()}["x-request-id"]
    assert sent == answered or sent.startswith(answered + "-"), (sent, answered)


def _pod_id(pod: FakeModelServer) -> str:
    """The ``x-request-id`` the pod's one inference request came with."""
    (received,) = [r for r in pod.received if r.path.startswith("/v1/")]
    return {k.lower(): v for k, v in received.headers.items()}["x-request-id"]


async def test_a_failed_over_request_has_one_id_at_every_cluster(
    gateway: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """East's tier 1 answers 503 (its pod's), the router tries west: the client's answer (west's,
    the id written by the router), east's access log line and what west received name one id. Until
    session s48 east's tier 1 minted its own id, west got none, and the answer's id was in no log."""
    caplog.set_level(logging.INFO, logger="igw.access")
    async with (
        running(FakeModelServer("west")) as (west,),
        tiers(gateway, pod_status=503, west=west) as (url, _, _),
    ):
        status, answered, headers = await _ask(url, "/v1/completions", COMPLETION, {})
    assert (status, headers.get("x-igw-cluster")) == (200, "west-a")
    assert FRESH.fullmatch(answered), answered
    assert _access_ids(caplog) == [answered]
    assert _pod_id(west) == answered


HOSTILE = {
    "10 KiB": "a" * 10 * 1024,
    "non-ASCII": "caf\u00e9-\u00fc",
    "JSON quotes": 'x", "status": 200, "y": "',
    "a JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl",
}


@pytest.mark.parametrize("given", HOSTILE.values(), ids=HOSTILE.keys())
async def test_an_id_refused_is_replaced_by_one_fresh_id_at_both_tiers(
    gateway: Callable[..., Any], caplog: pytest.LogCaptureFixture, given: str
) -> None:
    """One rule (:func:`~igw.gateway.inference.request_id_for`) at both tiers: the router replaces
    a value that does not look like an id with a fresh one and forwards that; tier 1 keeps it. The
    value never reaches a cluster, a pod, or any log line. Failed over (east's pod answers 503), so
    that both clusters' copies and the router's own id are seen: until session s48 east's tier 1 and
    the router each minted a different id, and west got the client's value as sent."""
    caplog.set_level(logging.DEBUG)
    raw = given.encode("utf-8").decode("latin-1")  # the bytes as sent: aiohttp writes latin-1
    async with (
        running(FakeModelServer("west")) as (west,),
        tiers(gateway, pod_status=503, west=west) as (url, _, pod),
    ):
        status, answered, _ = await _ask(url, "/v1/completions", COMPLETION, {"X-Request-Id": raw})
    assert status == 200
    assert FRESH.fullmatch(answered), answered
    assert _access_ids(caplog) == [answered]
    assert _pod_id(pod).startswith(answered)
    assert _pod_id(west) == answered
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert given[:40] not in logged
    assert raw[:40] not in logged


@pytest.mark.parametrize("client_id", [None, "client-run.7:42"])
async def test_the_router_s_access_log_line_has_the_id_of_each_cluster_s_line(
    gateway: Callable[..., Any], caplog: pytest.LogCaptureFixture, client_id: str | None
) -> None:
    """The router's line (``igw.global_router.access``) and tier 1's line of the cluster it tried
    (east, whose pod answers 503, then west) carry one ``request_id``, the answer's: an operator
    joins them by it."""
    caplog.set_level(logging.INFO, logger="igw.access")
    caplog.set_level(logging.INFO, logger="igw.global_router.access")
    async with (
        running(FakeModelServer("west")) as (west,),
        tiers(gateway, pod_status=503, west=west) as (url, _, _),
    ):
        headers = {} if client_id is None else {"X-Request-Id": client_id}
        status, answered, _ = await _ask(url, "/v1/completions", COMPLETION, headers)
    assert status == 200
    [router_line] = [
        orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.global_router.access"
    ]
    assert _access_ids(caplog) == [answered] == [router_line["request_id"]]
    assert router_line["tried"] == [
        {"cluster": "east-a", "outcome": "503"},
        {"cluster": "west-a", "outcome": "200"},
    ]
