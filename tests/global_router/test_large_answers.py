"""Large whole (non-streamed) answers through the router: relayed as they arrive, not collected.

A cluster's whole answer below status 400 is final at tier 2 (never retried), so past
:data:`~igw.global_router.server.WHOLE_ANSWER_BUFFER_BYTES` it is relayed as it arrives, its usage
read as it passes (:mod:`igw.gateway.answer_scan`). Clusters are small aiohttp apps on loopback; the
memory test runs the real ``igw global serve`` and reads its peak resident set from ``/proc``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from igw.gateway.serving import serve_app
from igw.gateway.upstream import UPSTREAM_NAME, _timed_out
from igw.global_router.config import parse_global_config
from igw.global_router.server import ROUTER_KEY, WHOLE_ANSWER_BUFFER_BYTES, create_global_app
from tests.global_router.support import MODEL, global_doc, global_serve
from tests.log_capture import captured_records


def _answer(size: int, *, completion_tokens: int = 7) -> bytes:
    """A completion answer of about ``size`` bytes, its usage after its text (as vLLM orders them)
    and a field after the usage (vLLM's ``prompt_logprobs``)."""
    doc = {
        "id": "cmpl-1",
        "object": "text_completion",
        "choices": [{"index": 0, "text": "x" * size}],
        "usage": {
            "prompt_tokens": 5,
            "completion_tokens": completion_tokens,
            "total_tokens": 5 + completion_tokens,
        },
        "prompt_logprobs": None,
    }
    return orjson.dumps(doc)


def _completions(complete: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.Application:
    """A cluster's gateway whose completions ``complete`` answers."""
    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    return app


def _cluster(body: bytes) -> web.Application:
    """A cluster whose gateway answers every completion with ``body``."""

    async def complete(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, content_type="application/json")

    return _completions(complete)


def _peak_mb(pid: int) -> tuple[int, int]:
    """The process's peak and current resident set, in MB (``/proc/PID/status``)."""
    status = Path(f"/proc/{pid}/status").read_text()
    peak = re.search(r"VmHWM:\s+(\d+) kB", status)
    now = re.search(r"VmRSS:\s+(\d+) kB", status)
    assert peak is not None
    assert now is not None
    return int(peak.group(1)) // 1024, int(now.group(1)) // 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the resident set from /proc")
async def test_concurrent_large_answers_are_relayed_in_bounded_memory(tmp_path: Path) -> None:
    """Ten concurrent 20 MB answers through ``igw global serve``. Until session s40 each was collected
    whole (and joined: twice its size) before it was forwarded: the router's resident set grew by
    about 400 MB here (2.2 GB for twenty 50 MB answers); relayed as they arrive, by a few MB."""
    size, clients = 20_000_000, 10
    body = _answer(size)
    digest = hashlib.sha256(body).hexdigest()
    pids: list[int] = []
    async with contextlib.AsyncExitStack() as stack:
        cluster_url = await stack.enter_async_context(serve_app(_cluster(body), host="127.0.0.1", port=0))
        clusters = [{"name": "big", "region": "east", "endpoint": cluster_url, "models": [MODEL]}]
        doc = global_doc(clusters, heartbeats={"required": False})
        url = await stack.enter_async_context(global_serve(tmp_path, doc, pids=pids))
        http = await stack.enter_async_context(
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        )

        async def ask() -> tuple[int, str | None, str]:
            received = hashlib.sha256()
            async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi"}) as resp:
                async for chunk in resp.content.iter_chunked(1 << 20):
                    received.update(chunk)
                return resp.status, resp.headers.get("Content-Length"), received.hexdigest()

        async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi"}) as resp:
            assert resp.status == 200  # one answer first: what any first request allocates is settled
            await resp.read()
        _, before = _peak_mb(pids[0])
        answers = await asyncio.gather(*(ask() for _ in range(clients)))
        peak, _ = _peak_mb(pids[0])
    assert answers == [(200, str(len(body)), digest)] * clients  # whole, byte for byte, framed by length
    assert peak - before < 100, f"resident set {before} MB before, {peak} MB at its peak"


@contextlib.asynccontextmanager
async def _router(
    cluster: web.Application, name: str = "big", **spec: Any
) -> AsyncIterator[tuple[str, web.Application]]:
    """A router in front of one cluster (``name``) serving ``cluster`` (no heartbeats), both on
    loopback."""
    async with contextlib.AsyncExitStack() as stack:
        cluster_url = await stack.enter_async_context(serve_app(cluster, host="127.0.0.1", port=0))
        clusters = [{"name": name, "region": "east", "endpoint": cluster_url, "models": [MODEL]}]
        app = create_global_app(
            parse_global_config(global_doc(clusters, heartbeats={"required": False}, **spec)),
            read_heartbeats=False,
        )
        yield await stack.enter_async_context(serve_app(app, host="127.0.0.1", port=0)), app


async def test_a_large_answer_s_usage_is_charged_as_it_passes() -> None:
    """Relayed, not parsed whole, a large answer is still charged the usage it reports (read from its
    bytes as they pass): 505 tokens a request against a 600-token model limit."""
    limits = [
        {"tenant": "*", "model": MODEL, "requestsPerSecond": 100, "tokensPerMinute": 1, "tokenBurst": 600}
    ]
    body = _answer(3 * WHOLE_ANSWER_BUFFER_BYTES, completion_tokens=500)
    async with _router(_cluster(body), modelRateLimits=limits) as (url, _), aiohttp.ClientSession() as http:
        statuses = []
        for _ in range(3):
            request = {"model": MODEL, "prompt": "hi", "max_tokens": 1}
            async with http.post(url + "/v1/completions", json=request) as resp:
                statuses.append(resp.status)
                answer = await resp.read()
                assert resp.status != 200 or answer == body
    assert statuses == [200, 200, 429]  # 600 - 505 = 95 admit the second, which leaves the tenant in debt


def _breaking_cluster(*, sent: int, announced: int | None, hang: bool) -> web.Application:
    """A cluster that sends ``sent`` body bytes of the ``announced`` ones (``None``: chunked, no
    length), then closes the connection (``hang``: keeps it open, silent)."""

    async def complete(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        if announced is None:
            response.enable_chunked_encoding()
        else:
            response.content_length = announced
        await response.prepare(request)
        await response.write(b'{"choices":[{"text":"' + b"x" * sent)
        if hang:
            await asyncio.sleep(3600)
        assert request.transport is not None
        request.transport.abort()
        return response

    return _completions(complete)


@pytest.mark.parametrize("framing", ["length", "chunked"])
@pytest.mark.parametrize(
    ("hang", "spec"),
    [(False, {}), (True, {"upstream": {"maxRequestSeconds": 1}})],
    ids=["cluster-dies", "max-request-seconds"],
)
async def test_a_large_answer_cut_off_mid_body_ends_the_client_s_connection(
    hang: bool, spec: dict[str, Any], framing: str
) -> None:
    """A large answer whose cluster dies (or that ``maxRequestSeconds`` cuts off) after the router began
    relaying it: the client's connection closes before the body's end - a broken body, never a
    shorter one taken for whole, nor an SSE error event written into a JSON body - and the cluster's
    failure is counted."""
    sent = 2 * WHOLE_ANSWER_BUFFER_BYTES
    announced = 10 * WHOLE_ANSWER_BUFFER_BYTES if framing == "length" else None
    cluster = _breaking_cluster(sent=sent, announced=announced, hang=hang)
    async with _router(cluster, **spec) as (url, app), aiohttp.ClientSession() as http:
        received = bytearray()

        async def read_all(resp: aiohttp.ClientResponse) -> None:
            async for chunk in resp.content.iter_chunked(1 << 20):
                received.extend(chunk)

        async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi"}) as resp:
            assert resp.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await read_all(resp)
        assert received == b'{"choices":[{"text":"' + b"x" * (len(received) - 21)
        if not hang:
            assert app[ROUTER_KEY].fleet.health["big"].consecutive_failures == 1


def _large_error_cluster(release: asyncio.Event) -> web.Application:
    """A cluster that answers 400 with a JSON error over 1 MiB: whole for ``stored`` retrievals and
    its first completion, the second one's first 1.5 MiB and then nothing until ``release``."""
    huge = b'{"error":{"code":400,"message":"' + b"x" * (2 << 20) + b'"}}'
    calls = 0

    async def complete(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        await request.read()
        calls += 1
        if calls == 1 or request.method == "GET":
            return web.Response(status=400, body=huge, content_type="application/json")
        response = web.StreamResponse(status=400, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(huge[: 3 << 19])
        await release.wait()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    app.router.add_get("/v1/responses/{response_id}", complete)
    return app


async def test_large_error_answers_are_counted_by_cluster_however_their_relay_ends() -> None:
    """A cluster's JSON error answer over 1 MiB is relayed as it arrives, not retried: counted in
        ``igw_global_upstream_large_error_answers_total{cluster}``, relayed to its end or left by its
        client mid-relay; a stored response's search answers one with its status alone (since session s48,
    ``test_stored_search_answers.py``), not counted. Until session s42 tier 2 had only
        the throttled WARNING (tier 1 counts its own in ``igw_upstream_large_error_answers_total``)."""
    release = asyncio.Event()
    async with (
        _router(_large_error_cluster(release)) as (url, app),
        aiohttp.ClientSession() as http,
    ):
        registry = app[ROUTER_KEY].metrics.registry

        def counted() -> float | None:
            name = "igw_global_upstream_large_error_answers_total"
            return registry.get_sample_value(name, {"cluster": "big"})

        request = {"model": MODEL, "prompt": "hi"}
        async with http.post(url + "/v1/completions", json=request) as resp:
            assert resp.status == 400
            assert len(await resp.read()) > 2 << 20
        assert counted() == 1
        async with http.post(url + "/v1/completions", json=request) as resp:
            assert resp.status == 400
            assert await resp.content.readexactly(1 << 20)  # the first MiB relayed; the client leaves
        for _ in range(200):
            if counted() == 2:
                break
            await asyncio.sleep(0.05)
        assert counted() == 2
        release.set()
        async with http.get(url + "/v1/responses/resp_1") as resp:
            # a search's error answer over 1 MiB is a miss: answered with its status alone (OpenAI
            # shape, bounded), not relayed, so not counted here (since session s48)
            assert resp.status == 400
            assert len(await resp.read()) < 4096
        assert counted() == 2


async def test_the_large_error_warning_names_the_cluster_not_its_endpoint() -> None:
    """The WARNING for a cluster's error answer over 1 MiB names the cluster as configured, not its
    endpoint (an internal URL, and not how operators know it): until session s48 it read ``upstream
    http://127.0.0.1:PORT answered HTTP 400 ...``. Tier 1 names its pod's ``host:port`` as before
    (``tests/reliability/test_relay_answers.py``). The cluster's name is this test's alone: the
    WARNING is throttled per upstream for a minute."""
    release = asyncio.Event()
    release.set()
    with captured_records("igw.gateway.large_error_answers") as (_, records):
        async with (
            _router(_large_error_cluster(release), name="named-in-warning") as (url, _),
            aiohttp.ClientSession() as http,
            http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi"}) as resp,
        ):
            assert resp.status == 400
            await resp.read()
    (line,) = [r.getMessage() for r in records]
    assert line.startswith("upstream cluster 'named-in-warning' answered HTTP 400"), line
    assert "127.0.0.1" not in line


async def _relay_cut_warning(name: str) -> str:
    """The WARNING logged when the cluster ``name`` closes a large answer's connection mid-relay (the
    client's read of it fails)."""
    cluster = _breaking_cluster(sent=2 * WHOLE_ANSWER_BUFFER_BYTES, announced=None, hang=False)
    with captured_records("igw.gateway") as (_, records):
        async with (
            _router(cluster, name=name) as (url, _),
            aiohttp.ClientSession() as http,
            http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi"}) as resp,
        ):
            assert resp.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
    (line,) = [r.getMessage() for r in records if "the client's connection is closed" in r.getMessage()]
    return line


async def test_the_relay_cut_warning_names_the_cluster_not_its_endpoint() -> None:
    """The WARNING for a large answer whose cluster died mid-relay names the cluster as configured,
    not its endpoint (an internal URL): until session s48 it read ``upstream http://127.0.0.1:PORT:
    ...; the client's connection is closed``. Tier 1 names its pod's ``host:port`` as before."""
    line = await _relay_cut_warning("cut-named")
    assert line.startswith("upstream cluster 'cut-named': "), line
    assert "127.0.0.1" not in line


async def test_the_relay_cut_warning_s_cause_names_the_cluster_not_a_model_server() -> None:
    """The relay-cut WARNING's cause names what the router's pools connect to, a cluster: until
    session s48 it read ``upstream cluster 'x': the model server closed the connection``, naming a
    model server the router never talks to. Tier 1 keeps ``the model server`` (``peer`` of
    :class:`~igw.gateway.upstream_client.UpstreamPool`)."""
    line = await _relay_cut_warning("cut-cause")
    assert line.startswith("upstream cluster 'cut-cause': the cluster closed the connection"), line
    assert "model server" not in line


def _redirecting_cluster() -> web.Application:
    """A cluster whose gateway answers every completion with a redirect whose ``Location`` carries
    credentials and a query value."""

    async def complete(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=302, headers={"Location": "http://user:pw@10.0.0.9/x?sig=abc"})

    return _completions(complete)


async def test_the_refused_redirect_warning_names_the_cluster_not_its_endpoint() -> None:
    """The WARNING for a cluster's refused redirect names the cluster as configured, not its endpoint
    (an internal URL): until session s48 it read ``upstream http://127.0.0.1:PORT answered a
    redirect ...``. The ``Location`` stays masked; the client is told neither it nor the endpoint."""
    with captured_records("igw.gateway.upstream_redirects") as (_, records):
        async with (
            _router(_redirecting_cluster(), name="redirect-named") as (url, _),
            aiohttp.ClientSession() as http,
            http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi"}) as resp,
        ):
            assert resp.status == 502
            message = (await resp.json())["error"]["message"]
    assert message.startswith("cluster 'redirect-named' answered a redirect (HTTP 302)"), message
    assert "127.0.0.1" not in message
    assert "10.0.0.9" not in message
    (line,) = [r.getMessage() for r in records]
    assert line.startswith("upstream cluster 'redirect-named' answered a redirect (HTTP 302"), line
    assert "127.0.0.1" not in line
    assert "pw" not in line
    assert "abc" not in line


def _stream_cutting_cluster() -> web.Application:
    """A cluster whose gateway sends one event of a stream, then closes the connection."""

    async def complete(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"choices":[{"text":"a"}]}\n\n')
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return response

    return _completions(complete)


async def test_a_cut_stream_s_error_event_names_the_cluster_not_a_model_server() -> None:
    """A cluster's stream cut mid-answer ends with an error event naming the cluster: until session
    s48 it read ``upstream model server closed the stream ...`` at tier 2 too. Tier 1 keeps that
    wording (``tests/gateway/test_openai_apis.py``); neither names an address."""
    request = {"model": MODEL, "prompt": "hi", "stream": True}
    async with (
        _router(_stream_cutting_cluster(), name="stream-cut") as (url, _),
        aiohttp.ClientSession() as http,
        http.post(url + "/v1/completions", json=request) as resp,
    ):
        assert resp.status == 200
        text = await resp.text()
    assert "cluster 'stream-cut' closed the stream before the response was complete" in text, text
    assert "model server" not in text
    assert "127.0.0.1" not in text


def test_a_timeout_s_log_text_names_the_cluster_not_its_endpoint() -> None:
    """A cluster's timeout (:class:`~igw.gateway.upstream_client.UpstreamStalled`) names the cluster
    in its log text as in the client's message: until session s48 the log text (the exchange's
    ``error``) read ``upstream http://10.0.3.17:8000 sent no response within 1s``. A tier-1 pod is
    still named by its ``host:port``."""
    stalled = _timed_out("http://10.0.3.17:8000", "cluster 'east-1'", "sent no response within", 1.0)
    assert str(stalled) == "upstream cluster 'east-1' sent no response within 1s"
    assert stalled.public == "cluster 'east-1' sent no response within 1s"
    pod = _timed_out("10.0.3.17:8000", UPSTREAM_NAME, "sent no response within", 1.0)
    assert str(pod) == "upstream 10.0.3.17:8000 sent no response within 1s"
    assert pod.public == "the model server sent no response within 1s"
