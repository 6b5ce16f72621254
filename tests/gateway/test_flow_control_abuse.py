"""Flow control against what a client or a shutdown can throw at it, over real loopback HTTP: a
request id two requests share, malformed or absurd ``x-gateway-max-queue-ms`` values, a fairness
header naming a tenant whose objective the header may not claim, small bodies behind large heads
against the queue's byte bound, and a gateway stopping while requests wait in the queue."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry

from igw.config.loader import load_gateway_config
from igw.gateway.app import create_app
from igw.gateway.discovery.static_file import StaticFileDiscovery
from igw.gateway.flow_gate import FlowGates
from igw.gateway.inference import STATE_KEY
from igw.gateway.lean_server import SWITCH_ENV
from igw.gateway.serving import ServerLimits, serve_app
from igw.gateway.state import GatewayState
from igw.scheduling.flow_control import FlowControlSettings, header_tenant_denied
from tests.compiled.tree import skip_compiled
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import wait_for
from tests.gateway.test_flow_control_e2e import doc, queued, req

MAX_QUEUE = "x-gateway-max-queue-ms"


async def test_two_queued_requests_sharing_a_request_id_are_both_served(gateway: Any) -> None:
    """The client's X-Request-Id is no queue key: a second request carrying the id of one already
    queued (a retry, a client with one fixed id) queues too instead of failing with a 500, and its
    client going away does not take the other out of the queue."""
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(), {"pool": [a.key]}) as gw,
    ):
        same = {"x-request-id": "req-42"}
        first = asyncio.create_task(gw.post("/v1/completions", req(), headers=same))
        await wait_for(lambda: queued(gw) == {0: 1}, what="first queued")
        second = asyncio.create_task(gw.post("/v1/completions", req(), headers=same))
        await wait_for(lambda: queued(gw) == {0: 2}, what="second queued beside it")
        third = asyncio.create_task(gw.post("/v1/completions", req(), headers=same))
        await wait_for(lambda: queued(gw) == {0: 3}, what="third queued beside them")
        third.cancel()  # its client goes away: only its own entry leaves
        await asyncio.gather(third, return_exceptions=True)
        await wait_for(lambda: queued(gw) == {0: 2}, what="the third left")
        a.waiting = 0
        answers = await asyncio.wait_for(asyncio.gather(first, second), timeout=15)
        assert [r.status for r in answers] == [200, 200]
        assert [r.headers["X-Request-Id"] for r in answers] == ["req-42", "req-42"]
        assert len(a.received) == 2


def _raw_request(prompt: str, pad: int) -> tuple[bytes, bytes]:
    """A completions request's head and body as sent, with a ``x-pad`` field of ``pad`` bytes."""
    body = orjson.dumps({"model": "m1", "prompt": prompt, "max_tokens": 3})
    fields = [
        ("Host", "127.0.0.1"),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("x-gateway-inference-fairness-id", "t1"),
        ("x-pad", "p" * pad),
    ]
    head = "POST /v1/completions HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields) + "\r\n"
    return head.encode(), body


@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
async def test_a_queued_request_counts_its_head_and_prompt_text_against_max_bytes(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """The queue's byte count of a request is its body, the prompt text the router copied out of it
    (at its in-memory size) and its head twice (the fields as received and the decoded map), on
    both sides of the ``IGW_HTTP_SERVER`` switch: counting the body alone, a request with a tiny
    body and a head near the header limits held a hundred times what ``maxBytes`` saw."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    prompt = "héllo wörld"  # not ASCII: counted at its size in memory, not its UTF-8 length
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(), {"pool": [a.key]}) as gw,
    ):
        head, body = _raw_request(prompt, 4000)
        host, port = gw.url.removeprefix("http://").rsplit(":", 1)
        _, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(head + body)
            await writer.drain()
            await wait_for(lambda: queued(gw) == {0: 1}, what="queued")
            text = orjson.loads(body)["prompt"]  # as parsed: a literal's size may include a UTF-8 copy
            held = len(body) + sys.getsizeof(text) + 2 * len(head)
            assert gw.state.flow.queued_bytes("pool") == held
            assert held > 2 * 4000 > 50 * len(body)
        finally:
            writer.close()
        await wait_for(lambda: queued(gw) == {}, what="its client gone, it left the queue")
        assert gw.state.flow.queued_bytes("pool") == 0


async def test_large_heads_fill_a_bands_byte_bound_however_small_their_bodies(gateway: Any) -> None:
    """A band bounded to 16 KiB takes one request with a 5,000-byte header (over 10 KiB counted),
    refuses the next one as a full band (429 ``request_shed`` + ``Retry-After``), and still takes
    requests with small heads."""
    bands = [{"priority": 0, "maxRequests": 100, "maxBytes": 16384, "ttl": "60s"}]
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(bands=bands), {"pool": [a.key]}) as gw,
    ):
        padded = {"x-gateway-inference-fairness-id": "t1", "x-pad": "p" * 5000}
        first = asyncio.create_task(gw.post("/v1/completions", req(), headers=padded))
        await wait_for(lambda: queued(gw) == {0: 1}, what="the first padded request queued")
        resp = await asyncio.wait_for(gw.post("/v1/completions", req(), headers=padded), timeout=5)
        body = await resp.json()
        assert (resp.status, body["error"]["code"]) == (429, "request_shed")
        assert "band_full" in body["error"]["message"]
        assert "Retry-After" in resp.headers
        small = [asyncio.create_task(gw.post("/v1/completions", req())) for _ in range(3)]
        await wait_for(lambda: queued(gw) == {0: 4}, what="small heads still queued beside it")
        a.waiting = 0
        answers = await asyncio.wait_for(asyncio.gather(first, *small), timeout=15)
        assert [r.status for r in answers] == [200] * 4


@pytest.mark.parametrize("value", ["²", "١٠٠", "-5", "1.5", "abc", "10ms", "+100"])
async def test_a_malformed_queue_deadline_is_refused_naming_the_header(gateway: Any, value: str) -> None:
    """Unicode digits (``str.isdigit`` accepts them, ``int`` refuses some) answered 500, and the
    other malformed values were ignored without a word; each is now a 400 naming the header, whether
    or not the pool is busy enough for the request to queue."""
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(bands=[{"priority": 0, "ttl": "5s"}]), {"pool": [a.key]}) as gw,
    ):
        resp = await gw.post("/v1/completions", req(), headers={MAX_QUEUE: value})
        body = await resp.json()
        assert resp.status == 400, body
        assert body["error"]["code"] == "invalid_request"
        assert body["error"]["param"] == MAX_QUEUE
        assert MAX_QUEUE in body["error"]["message"]
        assert a.received == []
        assert queued(gw) == {}


async def test_a_malformed_queue_deadline_is_refused_on_an_idle_pool_too(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a")) as (a,),
        gateway(doc(), {"pool": [a.key]}) as gw,
    ):
        resp = await gw.post("/v1/completions", req(), headers={MAX_QUEUE: "-1"})
        assert resp.status == 400
        assert (await resp.json())["error"]["param"] == MAX_QUEUE
        ok = await gw.post("/v1/completions", req(), headers={MAX_QUEUE: "250"})
        assert ok.status == 200
        assert len(a.received) == 1


@pytest.mark.parametrize("value", ["9" * 400, "9" * 5000, "0" * 30 + "150"])
async def test_an_absurdly_long_queue_deadline_leaves_the_band_ttl_in_charge(
    gateway: Any, value: str
) -> None:
    """A deadline too long to convert to a float (or to an int at all) answered 500; longer than any
    TTL, it now leaves the band's TTL to decide (leading zeros do not count towards the length)."""
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(bands=[{"priority": 0, "ttl": "300ms"}]), {"pool": [a.key]}) as gw,
    ):
        resp = await gw.post("/v1/completions", req(), headers={MAX_QUEUE: value})
        body = await resp.json()
        assert (resp.status, body["error"]["code"]) == (429, "request_shed"), body
        assert "ttl_expired" in body["error"]["message"]
        assert "Retry-After" in resp.headers


def test_a_fairness_header_tenant_takes_its_objective_only_where_the_header_could_name_it() -> None:
    settings = FlowControlSettings.from_extension(
        {
            "headerPriorityLimit": 0,
            "objectives": [
                {"name": "front", "priority": 7, "tenants": ["chat-frontend"]},
                {"name": "bulk", "priority": -3, "tenants": ["nightly"]},
                {"name": "reserved", "priority": -2, "tenants": ["ops"]},
            ],
            "objectiveAccess": [{"objective": "reserved", "tenants": ["ops"]}],
        }
    )
    assert settings.tenant_objectives == {"chat-frontend": "front", "nightly": "bulk", "ops": "reserved"}
    assert header_tenant_denied("chat-frontend", settings) == "front"  # above headerPriorityLimit
    assert header_tenant_denied("ops", settings) == "reserved"  # reserved for the authenticated tenant
    assert header_tenant_denied("nightly", settings) is None  # a header could name it
    assert header_tenant_denied("nobody", settings) is None
    open_settings = FlowControlSettings.from_extension(
        {"objectives": [{"name": "front", "priority": 7, "tenants": ["chat-frontend"]}]}
    )
    assert header_tenant_denied("chat-frontend", open_settings) is None  # no limits: as before


def test_the_gate_gives_a_tenant_objective_to_the_authenticated_tenant_and_not_to_the_header() -> None:
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: 0.0)
    settings = FlowControlSettings.from_extension(
        {
            "headerPriorityLimit": 0,
            "objectives": [
                {"name": "front", "priority": 7, "tenants": ["chat-frontend"]},
                {"name": "fast-model", "priority": 2, "models": ["m-fast"]},
            ],
        }
    )
    gates.configure(settings, retry_after_bounds=(1, 30))

    def band(tenant: str, authenticated: str | None, model: str = "m1", objective: str | None = None) -> int:
        headers = {} if objective is None else {"x-gateway-inference-objective": objective}
        return gates.priority(
            headers, scheduler="pool", model=model, tenant=tenant, authenticated_tenant=authenticated
        )

    assert band("chat-frontend", "chat-frontend") == 7  # the claim: the operator's objective holds
    assert band("chat-frontend", None) == 0  # the header alone: as if it named no tenant
    assert band("chat-frontend", None, objective="Sheddable") == -1  # the header's own band decides
    assert band("chat-frontend", None, model="m-fast") == 2  # the model's objective decides
    assert band("someone", None) == 0
    denied = gates.metrics.objective_denied.labels("pool", "front")._value.get()
    assert denied == 1  # counted once: where the tenant's objective would have decided


async def test_a_fairness_header_naming_a_tenant_does_not_lift_a_request_past_the_header_limit(
    gateway: Any,
) -> None:
    """With ``headerPriorityLimit: 0`` the objective header cannot claim priority 7, and the fairness
    header naming the tenant the operator gave priority 7 did: an anonymous client took that band."""
    d = doc(
        headerPriorityLimit=0,
        objectives=[
            {"name": "front", "priority": 7, "tenants": ["chat-frontend"]},
            {"name": "bulk", "priority": -3, "tenants": ["nightly"]},
        ],
    )
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(d, {"pool": [a.key]}) as gw,
    ):

        async def send(tenant: str) -> int:
            headers = {"x-gateway-inference-fairness-id": tenant}
            resp = await gw.post("/v1/completions", req(), headers=headers)
            await resp.read()
            status: int = resp.status
            return status

        sent = [asyncio.create_task(send("chat-frontend")), asyncio.create_task(send("nightly"))]
        await wait_for(lambda: queued(gw) == {0: 1, -3: 1}, what="classified")
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_flow_objective_denied_total{objective="front",scheduler="pool"} 1.0' in metrics
        a.waiting = 0
        assert await asyncio.wait_for(asyncio.gather(*sent), timeout=15) == [200, 200]


@contextlib.asynccontextmanager
async def stoppable_gateway(
    tmp_path: Path, d: Mapping[str, Any], key: str, *, grace_s: float
) -> AsyncIterator[tuple[str, GatewayState, contextlib.AsyncExitStack]]:
    """A gateway in front of ``key`` whose serving the caller stops (``aclose`` on the stack) while
    requests are still open, with a stream grace of ``grace_s``."""
    config_path = tmp_path / "igwc.yaml"
    config_path.write_text(yaml.safe_dump(dict(d)))
    endpoints_path = tmp_path / "endpoints.yaml"
    endpoints_path.write_text(yaml.safe_dump({"schedulers": {"pool": [key]}}))
    config = load_gateway_config(config_path)
    app = create_app(
        config,
        discovery=StaticFileDiscovery.for_schedulers(endpoints_path, config.schedulers, poll_interval_s=0.05),
        rng=random.Random(42),
    )
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(
            serve_app(app, host="127.0.0.1", port=0, limits=ServerLimits(stream_grace_s=grace_s))
        )
        state = app[STATE_KEY]

        def fresh() -> bool:
            sr = state.runtime.schedulers["pool"]
            st = sr.pool.states.get(key)
            return st is not None and sr.scheduler.is_fresh(st.view(), state.clock())

        await wait_for(fresh, within=10, what=f"{key} scraped")
        yield url, state, stack


async def test_a_request_still_queued_when_the_grace_ends_is_answered_503(tmp_path: Path) -> None:
    """Queued requests were not counted in flight: the shutdown neither waited for them nor answered
    them, and the server's cleanup dropped their connections (the client saw a disconnect)."""
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        aiohttp.ClientSession() as http,
        stoppable_gateway(tmp_path, doc(), a.key, grace_s=0.2) as (url, state, stack),
    ):
        client = asyncio.create_task(http.post(url + "/v1/completions", json=req()))
        await wait_for(lambda: state.flow.depths("pool") == {0: 1}, what="queued")
        await stack.aclose()
        resp = await asyncio.wait_for(client, timeout=15)
        body = await resp.json()
        assert resp.status == 503
        assert body["error"]["code"] == "shutting_down"
        assert body["error"]["type"] == "service_unavailable"
        assert resp.headers["Connection"] == "close"  # an SDK's retry opens a new connection (s48)
        assert state.flow.depths("pool") == {}
        assert a.received == []


@skip_compiled(
    "igw.gateway.shutdown",
    "the test replaces InflightRequests.wait on the instance; a compiled (native) instance refuses it",
)
async def test_a_request_dispatched_from_the_queue_during_the_grace_is_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grace covers queued requests: one dispatched while the gateway stops is forwarded and
    answered in full, not cut the moment it moves from the queue to the model server."""
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        aiohttp.ClientSession() as http,
        stoppable_gateway(tmp_path, doc(), a.key, grace_s=20) as (url, state, stack),
    ):
        stopping = asyncio.Event()
        wait_in_flight = state.inflight.wait

        async def wait(grace_s: float) -> int:
            stopping.set()
            return await wait_in_flight(grace_s)

        monkeypatch.setattr(state.inflight, "wait", wait)
        client = asyncio.create_task(http.post(url + "/v1/completions", json=req()))
        await wait_for(lambda: state.flow.depths("pool") == {0: 1}, what="queued")
        stop = asyncio.create_task(stack.aclose())
        await asyncio.wait_for(stopping.wait(), timeout=10)
        a.waiting = 0  # capacity returns during the grace
        resp = await asyncio.wait_for(client, timeout=15)
        assert resp.status == 200, await resp.text()
        assert len(a.received) == 1
        await asyncio.wait_for(stop, timeout=15)
