"""Flow control over real loopback HTTP: saturated requests wait in their band, shedding order,
Retry-After, TTL, and a disconnecting client leaving the queue."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for

MODEL = "m1"


def doc(**flow: Any) -> dict[str, Any]:
    d = config_doc([scheduler("pool", MODEL)], routing={"retryAfter": {"minSeconds": 1, "maxSeconds": 9}})
    d["spec"]["extensions"]["flowControl"] = {
        "pollInterval": "10ms",
        "objectives": [{"name": "chat", "priority": 10}, {"name": "batch", "priority": -5}],
        **flow,
    }
    return d


def req() -> dict[str, Any]:
    return {"model": MODEL, "prompt": "hello", "max_tokens": 3}


def queued(gw: Any) -> dict[int, int]:
    depths: dict[int, int] = gw.state.flow.depths("pool")
    return depths


async def send(gw: Any, objective: str | None, tenant: str = "t1") -> tuple[int, dict[str, str], Any]:
    headers = {"x-gateway-inference-fairness-id": tenant}
    if objective is not None:
        headers["x-gateway-inference-objective"] = objective
    resp = await gw.post("/v1/completions", req(), headers=headers)
    return resp.status, dict(resp.headers), await resp.json()


async def band_full_retry_after(gw: Any, waiting: list[asyncio.Task[tuple[int, dict[str, str], Any]]]) -> str:
    """Send one more Critical (``chat``) request, check that its full band refuses it (429
    ``request_shed``, ``band_full``), cancel the requests still ``waiting`` in the queue, and return
    the refusal's Retry-After: what the tests below are about."""
    status, headers, body = await send(gw, "chat")
    assert (status, body["error"]["code"]) == (429, "request_shed")
    assert "band_full" in body["error"]["message"]
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    return headers["Retry-After"]


async def test_saturated_requests_wait_and_shed_lowest_band_first(gateway: Any) -> None:
    bands = [
        {"priority": 10, "maxRequests": 5, "ttl": "60s"},
        {"priority": 0, "maxRequests": 5, "ttl": "60s"},
        {"priority": -5, "maxRequests": 5, "ttl": "60s"},
    ]
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(maxRequests=2, bands=bands), {"pool": [a.key]}) as gw,
    ):
        batch = asyncio.create_task(send(gw, "batch"))
        standard = asyncio.create_task(send(gw, "no-such-objective"))  # unknown objective: Standard
        await wait_for(lambda: queued(gw) == {-5: 1, 0: 1}, what="batch and standard queued")
        chat = asyncio.create_task(send(gw, "chat"))
        # the queue holds 2: the chat request displaces the batch one, which gets 429 + Retry-After
        status, headers, body = await asyncio.wait_for(batch, timeout=15)
        assert status == 429
        assert body["error"]["code"] == "request_shed"
        assert "priority -5" in body["error"]["message"]
        assert headers["Retry-After"] == "9"  # nothing dispatched yet: routing.retryAfter.maxSeconds
        await wait_for(lambda: queued(gw) == {10: 1, 0: 1}, what="chat queued")
        # a new batch request has nothing lower to displace: refused at once
        status, headers, body = await send(gw, "batch")
        assert (status, body["error"]["code"]) == (429, "request_shed")
        assert "Retry-After" in headers
        assert a.received == []
        a.waiting = 0  # capacity returns: both queued requests are served
        results = await asyncio.wait_for(asyncio.gather(chat, standard), timeout=15)
        assert [r[0] for r in results] == [200, 200]
        assert len(a.received) == 2
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert (
            'igw_flow_rejections_total{priority="-5",reason="displaced",scheduler="pool",tenant="t1"} 1.0'
            in metrics
        )
        assert (
            'igw_flow_rejections_total{priority="-5",reason="queue_full",scheduler="pool",tenant="t1"} 1.0'
            in metrics
        )
        assert 'igw_flow_queue_depth{priority="10",scheduler="pool"} 0.0' in metrics
        assert 'igw_flow_wait_seconds_count{priority="10",scheduler="pool"} 1.0' in metrics


async def test_retry_after_of_a_refused_critical_request_ignores_the_lower_bands_queued(gateway: Any) -> None:
    """10 requests dispatched from the queue in one pass (10/s: the rate's span is at least 1 s);
    then 2 Critical and 20 Sheddable requests queued. A Critical arrival refused by its full band
    waits behind the 2 only: Retry-After 1, not 3 (the whole queue, 23 at 10/s: what it told until
    session s42, when the rate's span was the whole 10 s window and the answers 3 and 9)."""
    bands = [
        {"priority": 10, "maxRequests": 2, "dispatchBelow": 1.0},
        {"priority": 0, "dispatchBelow": 1.0},
        {"priority": -5, "dispatchBelow": 1.0},
    ]
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(bands=bands, dispatchPerEndpoint=100), {"pool": [a.key]}) as gw,
    ):
        standard = [asyncio.create_task(send(gw, None)) for _ in range(10)]
        await wait_for(lambda: queued(gw) == {0: 10}, what="standard queued")
        a.waiting = 0
        assert [r[0] for r in await asyncio.wait_for(asyncio.gather(*standard), timeout=15)] == [200] * 10
        a.waiting = 9
        views = gw.state.runtime.schedulers["pool"].pool.views
        await wait_for(lambda: views()[0].metrics.waiting == 9, what="saturated again")
        waiting = [asyncio.create_task(send(gw, "batch")) for _ in range(20)]
        waiting += [asyncio.create_task(send(gw, "chat")) for _ in range(2)]
        await wait_for(lambda: queued(gw) == {-5: 20, 10: 2}, what="batch and chat queued")
        assert await band_full_retry_after(gw, waiting) in {"1", "2"}  # 1 s, spread (retry_spread)


async def test_a_burst_refused_at_once_is_told_different_retry_afters(gateway: Any) -> None:
    """30 Critical requests refused by their full band in a row, each told the same computed wait
    (1 s: capacity turned over at 20 requests in about a second): their ``Retry-After`` is spread
    over 1 and 2 s, so that they do not all come back in the same second. Until session s43 every
    one was told 1 (a thundering herd at the next second)."""
    bands = [{"priority": 10, "maxRequests": 2, "dispatchBelow": 1.0}, {"priority": 0, "dispatchBelow": 1.0}]
    async with (
        running(FakeModelServer("a", waiting=0)) as (a,),
        gateway(doc(bands=bands), {"pool": [a.key]}) as gw,
    ):
        assert [(await send(gw, "chat"))[0] for _ in range(20)] == [200] * 20
        a.waiting = 9
        views = gw.state.runtime.schedulers["pool"].pool.views
        await wait_for(lambda: views()[0].metrics.waiting == 9, what="saturated")
        waiting = [asyncio.create_task(send(gw, "chat")) for _ in range(2)]
        await wait_for(lambda: queued(gw) == {10: 2}, what="chat queued")
        told = []
        for _ in range(30):
            status, headers, body = await send(gw, "chat")
            assert (status, body["error"]["code"]) == (429, "request_shed")
            told.append(headers["Retry-After"])
            assert f"retry after {headers['Retry-After']}s" in body["error"]["message"]
        assert set(told) == {"1", "2"}
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)


async def test_retry_after_counts_the_requests_served_without_queueing(gateway: Any) -> None:
    """20 Critical requests served straight (none queued), then the pod fills up and a Critical
    arrival is refused by its full band (2 queued). Capacity turned over at 20 requests in about
    a second: Retry-After 1, not routing.retryAfter.maxSeconds (9), what it told until session s42,
    when only the queue's dispatches counted towards the rate."""
    bands = [{"priority": 10, "maxRequests": 2, "dispatchBelow": 1.0}, {"priority": 0, "dispatchBelow": 1.0}]
    async with (
        running(FakeModelServer("a", waiting=0)) as (a,),
        gateway(doc(bands=bands), {"pool": [a.key]}) as gw,
    ):
        assert [(await send(gw, "chat"))[0] for _ in range(20)] == [200] * 20
        assert queued(gw) == {}  # every one of them went straight
        a.waiting = 9
        views = gw.state.runtime.schedulers["pool"].pool.views
        await wait_for(lambda: views()[0].metrics.waiting == 9, what="saturated")
        waiting = [asyncio.create_task(send(gw, "chat")) for _ in range(2)]
        await wait_for(lambda: queued(gw) == {10: 2}, what="chat queued")
        assert await band_full_retry_after(gw, waiting) in {"1", "2"}  # 1 s, spread (retry_spread)


async def test_queued_request_past_its_ttl_is_shed(gateway: Any) -> None:
    bands = [{"priority": 0, "ttl": "200ms"}]
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(bands=bands), {"pool": [a.key]}) as gw,
    ):
        status, headers, body = await send(gw, None)
        assert status == 429
        assert "ttl_expired" in body["error"]["message"]
        assert "Retry-After" in headers
        assert a.received == []


async def test_client_deadline_header_shortens_the_wait(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(), {"pool": [a.key]}) as gw,
    ):
        resp = await gw.post("/v1/completions", req(), headers={"x-gateway-max-queue-ms": "100"})
        assert resp.status == 429
        assert "ttl_expired" in (await resp.json())["error"]["message"]


async def test_disconnected_client_leaves_the_queue_at_once(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(), {"pool": [a.key]}) as gw,
    ):
        task = asyncio.create_task(send(gw, "chat"))
        await wait_for(lambda: queued(gw) == {10: 1}, what="queued")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await wait_for(lambda: queued(gw) == {}, what="left the queue")
        a.waiting = 0
        await asyncio.sleep(0.1)
        assert a.received == []


async def test_a_client_leaving_the_queue_is_counted_and_logged_as_a_disconnect(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that gives up while queued is finished like one leaving a forward: 499 in
    igw_requests_total, igw_client_disconnects_total, and an access-log line with its band, tenant
    and queue time. Until session s42 it was counted nowhere (the probe: 92 clients left a saturated
    pool's queue; the metrics showed only the 22 requests answered and the access log had no line)."""
    caplog.set_level(logging.INFO, logger="igw.access")
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(), {"pool": [a.key]}) as gw,
    ):
        tasks = [asyncio.create_task(send(gw, "chat", tenant="acme")) for _ in range(3)]
        await wait_for(lambda: queued(gw) == {10: 3}, what="queued")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await wait_for(lambda: queued(gw) == {}, what="left the queue")

        def gone() -> list[dict[str, Any]]:
            entries = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
            return [e for e in entries if e["status"] == 499]

        await wait_for(lambda: len(gone()) == 3, within=10, what="three access-log lines")
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
    assert 'igw_client_disconnects_total{model="m1"} 3.0' in metrics
    assert 'igw_requests_total{code="499",model="m1",requested_model="m1"} 3.0' in metrics
    entry = gone()[0]
    assert (entry["priority"], entry["tenant"], entry["model"]) == (10, "acme", MODEL)
    assert entry["queue_ms"] > 0
    assert "while queued" in entry["error"]
    assert a.received == []


async def test_without_flow_control_a_saturated_pool_still_answers_429_at_once(gateway: Any) -> None:
    d = config_doc([scheduler("pool", MODEL)])
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(d, {"pool": [a.key]}) as gw,
    ):
        status, _, body = await send(gw, "chat")
        assert (status, body["error"]["code"]) == (429, "pool_saturated")
        assert queued(gw) == {}


async def test_access_log_names_band_tenant_and_queue_time(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="igw.access")
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(), {"pool": [a.key]}) as gw,
    ):
        task = asyncio.create_task(send(gw, "chat", tenant="acme"))
        await wait_for(lambda: queued(gw) == {10: 1}, what="queued")
        a.waiting = 0
        status, _, _ = await asyncio.wait_for(task, timeout=15)
        assert status == 200
    entries = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
    entry = next(e for e in entries if e.get("priority") is not None)
    assert (entry["priority"], entry["tenant"], entry["status"]) == (10, "acme", 200)
    assert entry["queue_ms"] > 0


async def test_lower_bands_leave_headroom_for_critical_below_saturation(gateway: Any) -> None:
    """Default bands: Standard dispatches only below 0.9 of the saturation point, Critical up to it.
    The pod's KV at 0.76 (0.95 of the 0.8 threshold) is not saturated, so without headroom both
    would be sent at once."""
    d = config_doc([scheduler("pool", MODEL)])
    d["spec"]["extensions"]["flowControl"] = {"pollInterval": "10ms"}
    async with running(FakeModelServer("a", kv=0.76)) as (a,), gateway(d, {"pool": [a.key]}) as gw:
        standard = asyncio.create_task(send(gw, "Standard"))
        await wait_for(lambda: queued(gw) == {0: 1}, what="the Standard request held back")
        status, _, _ = await asyncio.wait_for(send(gw, "Critical"), timeout=15)
        assert status == 200  # Critical uses the reserved room at once
        assert not standard.done()
        assert len(a.received) == 1
        a.kv = 0.1  # the pool drains below 0.9: the held request goes
        status, _, _ = await asyncio.wait_for(standard, timeout=15)
        assert status == 200
        assert len(a.received) == 2


async def test_every_band_at_one_dispatches_until_saturation_as_before(gateway: Any) -> None:
    d = config_doc([scheduler("pool", MODEL)])
    bands = [{"priority": p, "dispatchBelow": 1.0} for p in (1, 0, -1)]
    d["spec"]["extensions"]["flowControl"] = {"pollInterval": "10ms", "bands": bands}
    async with running(FakeModelServer("a", kv=0.76)) as (a,), gateway(d, {"pool": [a.key]}) as gw:
        status, _, _ = await asyncio.wait_for(send(gw, "Sheddable"), timeout=15)
        assert status == 200
        assert len(a.received) == 1


async def test_lower_bands_keep_a_batch_slot_for_critical_once_the_pod_was_seen_full(gateway: Any) -> None:
    """Default bands: once two scrapes showed the pod's batch full (8 running, 1 waiting), Standard
    dispatches only while fewer than 7 run there, so a Critical arrival finds a free slot."""
    d = config_doc([scheduler("pool", MODEL)])
    d["spec"]["extensions"]["flowControl"] = {"pollInterval": "10ms"}
    async with (
        running(FakeModelServer("a", running=8, waiting=1)) as (a,),
        gateway(d, {"pool": [a.key]}) as gw,
    ):
        views = gw.state.runtime.schedulers["pool"].pool.views
        status, _, _ = await asyncio.wait_for(send(gw, "Critical"), timeout=15)
        assert status == 200  # and the gate has seen one scrape with a queue behind 8 running
        a.waiting = 2  # a changed page (an unchanged one would soon count as frozen)
        await wait_for(lambda: views()[0].metrics.waiting == 2, what="the next scrape")
        status, _, _ = await asyncio.wait_for(send(gw, "Critical"), timeout=15)
        assert status == 200  # a second one: the queue lasted, the batch is full at 8
        a.running, a.waiting = 7, 0  # not saturated, queue empty: but only the kept slot is free
        await wait_for(lambda: views()[0].metrics.running == 7, what="scrape")
        standard = asyncio.create_task(send(gw, "Standard"))
        await wait_for(lambda: queued(gw) == {0: 1}, what="the Standard request held back")
        status, _, _ = await asyncio.wait_for(send(gw, "Critical"), timeout=15)
        assert status == 200  # Critical takes the kept slot at once
        assert not standard.done()
        assert len(a.received) == 3
        a.running = 5  # two slots free: the held request goes
        status, _, _ = await asyncio.wait_for(standard, timeout=15)
        assert status == 200
        assert len(a.received) == 4


async def test_critical_goes_to_the_pod_with_a_free_batch_slot_the_scheduler_did_not_rank_first(
    gateway: Any,
) -> None:
    # Pod a runs its whole batch (8 of the assumed 8) with a nearly empty KV cache, pod b runs 2 with
    # a fuller one: the scheduler ranks a first, where a Critical request would wait for a sequence
    # to finish; the top band goes to b, which has free slots. A Standard request keeps the pick.
    bands = [{"priority": 10, "ttl": "60s"}, {"priority": 0, "ttl": "60s"}]
    async with (
        running(FakeModelServer("a", running=8, kv=0.05), FakeModelServer("b", running=2, kv=0.7)) as (a, b),
        gateway(doc(bands=bands, assumedBatch=8), {"pool": [a.key, b.key]}) as gw,
    ):
        await wait_for(lambda: a.scrapes > 0 and b.scrapes > 0, what="both pods scraped")
        status, _, _ = await send(gw, None)
        assert status == 200
        assert (len(a.received), len(b.received)) == (1, 0)  # Standard: the scheduler's pick
        status, _, _ = await send(gw, "chat")
        assert status == 200
        assert (len(a.received), len(b.received)) == (1, 1)  # Critical: the pod with a free slot
