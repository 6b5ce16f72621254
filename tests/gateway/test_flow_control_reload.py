"""Flow-control settings changed by a hot reload reach the queues that exist at once, over real
loopback HTTP and the gateway's own config reloader: a lowered bound sheds what no longer fits, a
lowered TTL expires what is past it, a raised headroom threshold lets a held request go - none of
them waiting for the pool's next arrival (which used to be when the queue took its settings)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
import yaml

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for

MODEL = "m1"


def doc(**flow: Any) -> dict[str, Any]:
    d = config_doc([scheduler("pool", MODEL)], routing={"retryAfter": {"minSeconds": 1, "maxSeconds": 9}})
    d["spec"]["extensions"]["flowControl"] = {"pollInterval": "10ms", **flow}
    return d


def queued(gw: Any) -> dict[int, int]:
    depths: dict[int, int] = gw.state.flow.depths("pool")
    return depths


def reload(gw: Any, new: dict[str, Any]) -> None:
    gw.config_path.write_text(yaml.safe_dump(new))


async def send(gw: Any, rid: str, objective: str | None = None) -> tuple[str, int, dict[str, str], Any]:
    headers = {"x-gateway-inference-fairness-id": "t1", "X-Request-Id": rid}
    if objective is not None:
        headers["x-gateway-inference-objective"] = objective
    resp = await gw.post("/v1/completions", {"model": MODEL, "prompt": "hello"}, headers=headers)
    return rid, resp.status, dict(resp.headers), await resp.json()


async def test_a_lowered_band_bound_sheds_the_newest_queued_requests_at_the_reload(gateway: Any) -> None:
    bands = [{"priority": 0, "maxRequests": 5, "ttl": "60s"}]
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(bands=bands), {"pool": [a.key]}, reload=True) as gw,
    ):
        tasks: list[asyncio.Task[tuple[str, int, dict[str, str], Any]]] = []
        for rid in ("first", "second", "third"):  # one at a time: their order in the band is known
            tasks.append(asyncio.create_task(send(gw, rid)))
            await wait_for(lambda: queued(gw) == {0: len(tasks)}, what=f"{rid} queued")
        lowered = [{"priority": 0, "maxRequests": 1, "ttl": "60s"}]
        reload(gw, doc(bands=lowered))
        done, _ = await asyncio.wait(tasks[1:], timeout=5)  # no new arrival: the reload alone sheds
        assert len(done) == 2, "the requests past the lowered bound were not answered at the reload"
        for rid, status, headers, body in (t.result() for t in done):
            assert rid in ("second", "third")
            assert (status, body["error"]["code"]) == (429, "request_shed")
            assert "band_full" in body["error"]["message"]
            assert headers["Retry-After"] == "9"  # nothing dispatched yet: retryAfter.maxSeconds
        assert queued(gw) == {0: 1}
        assert not tasks[0].done()
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert (
            'igw_flow_rejections_total{priority="0",reason="band_full",scheduler="pool",tenant="t1"} 2.0'
            in metrics
        )
        assert 'igw_flow_queue_depth{priority="0",scheduler="pool"} 1.0' in metrics
        a.waiting = 0  # the one left within the bound is served
        rid, status, _, _ = await asyncio.wait_for(tasks[0], timeout=15)
        assert (rid, status) == ("first", 200)


async def test_a_lowered_queue_bound_sheds_the_lowest_band_first_at_the_reload(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(), {"pool": [a.key]}, reload=True) as gw,
    ):
        critical = asyncio.create_task(send(gw, "critical", "Critical"))
        sheddable = asyncio.create_task(send(gw, "sheddable", "Sheddable"))
        await wait_for(lambda: queued(gw) == {1: 1, -1: 1}, what="both queued")
        reload(gw, doc(maxRequests=1))
        _, status, headers, body = await asyncio.wait_for(sheddable, timeout=5)
        assert (status, body["error"]["code"]) == (429, "request_shed")
        assert "queue_full" in body["error"]["message"]
        assert "priority -1" in body["error"]["message"]
        assert "Retry-After" in headers
        assert queued(gw) == {1: 1}
        a.waiting = 0
        assert (await asyncio.wait_for(critical, timeout=15))[1] == 200


async def test_a_lowered_ttl_expires_queued_requests_at_the_reload(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc(bands=[{"priority": 0, "ttl": "60s"}]), {"pool": [a.key]}, reload=True) as gw,
    ):
        task = asyncio.create_task(send(gw, "waiting"))
        await wait_for(lambda: queued(gw) == {0: 1}, what="queued")
        await asyncio.sleep(0.3)  # queued longer than the TTL about to be set
        reload(gw, doc(bands=[{"priority": 0, "ttl": "200ms"}]))
        _, status, headers, body = await asyncio.wait_for(task, timeout=5)
        assert (status, body["error"]["code"]) == (429, "request_shed")
        assert "ttl_expired" in body["error"]["message"]
        assert "Retry-After" in headers
        assert a.received == []


async def test_a_raised_headroom_threshold_lets_a_held_request_go_without_a_new_arrival(
    gateway: Any,
) -> None:
    """Default bands: Standard is held while the pod's KV (0.76, 0.95 of the 0.8 saturation point)
    is past its dispatchBelow 0.9; a reload raising it to 1.0 lets the held request go."""
    async with (
        running(FakeModelServer("a", kv=0.76)) as (a,),
        gateway(doc(), {"pool": [a.key]}, reload=True) as gw,
    ):
        standard = asyncio.create_task(send(gw, "standard", "Standard"))
        await wait_for(lambda: queued(gw) == {0: 1}, what="the Standard request held back")
        bands = [{"priority": p, "dispatchBelow": 1.0} for p in (1, 0, -1)]
        reload(gw, doc(bands=bands))
        _, status, _, _ = await asyncio.wait_for(standard, timeout=5)
        assert status == 200
        assert len(a.received) == 1


async def test_a_request_queued_for_a_scheduler_the_reload_removes_is_answered_at_once(gateway: Any) -> None:
    flow = {"pollInterval": "10ms", "bands": [{"priority": 0, "ttl": "60s"}]}
    before = config_doc([scheduler("old", "v1"), scheduler("new", "v2")])
    before["spec"]["extensions"]["flowControl"] = flow
    after = config_doc([scheduler("new", "v2")])  # e.g. the canary finished: the old pool goes
    after["spec"]["extensions"]["flowControl"] = flow
    async with (
        running(FakeModelServer("a", waiting=9), FakeModelServer("b")) as (a, b),
        gateway(before, {"old": [a.key], "new": [b.key]}, reload=True) as gw,
    ):
        queued_for_old = asyncio.create_task(
            gw.post("/v1/completions", {"model": "v1", "prompt": "hello"}, headers={"X-Request-Id": "q"})
        )
        await wait_for(lambda: gw.state.flow.depths("old") == {0: 1}, what="queued for old")
        reload(gw, after)
        # Before: nothing dispatched it (the removed pool is no longer scraped) and it waited its
        # whole TTL, then was told the gone pool was saturated (429, retry after the upper bound).
        resp = await asyncio.wait_for(queued_for_old, timeout=5)
        body = await resp.json()
        assert (resp.status, body["error"]["code"]) == (503, "no_endpoints")
        assert "'old' was removed by a configuration reload" in body["error"]["message"]
        assert a.received == []
        assert gw.state.flow.depths("old") == {}
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_flow_queue_depth{priority="0",scheduler="old"}' not in metrics
        # the new configuration routes what clients send now
        served = await gw.post("/v1/completions", {"model": "v2", "prompt": "hello"})
        assert served.status == 200


@pytest.mark.parametrize(
    ("server", "answer"),
    [
        pytest.param({"kv": 0.76}, (200, None), id="held-by-dispatchBelow-is-sent"),
        pytest.param({"waiting": 9}, (429, "pool_saturated"), id="saturated-is-refused-as-an-arrival"),
    ],
)
async def test_a_reload_that_removes_flow_control_answers_the_queued_requests_as_arrivals(
    gateway: Any, server: dict[str, Any], answer: tuple[int, str | None]
) -> None:
    """Flow control removed: the queued requests are answered at once as a request arriving now is.
    Until session s41 they stayed queued under the removed rules: a Standard request held back by
    dispatchBelow (the pod's KV at 0.95 of its saturation point) waited its whole TTL, 30 s, while a
    Standard request sent after the reload was served at once."""
    async with (
        running(FakeModelServer("a", **server)) as (a,),
        gateway(doc(), {"pool": [a.key]}, reload=True) as gw,
    ):
        standard = asyncio.create_task(send(gw, "standard", "Standard"))
        await wait_for(lambda: queued(gw) == {0: 1}, what="the Standard request queued")
        off = doc()
        del off["spec"]["extensions"]["flowControl"]
        reload(gw, off)
        _, status, headers, body = await asyncio.wait_for(standard, timeout=5)
        assert (status, body["error"]["code"] if status != 200 else None) == answer
        assert len(a.received) == (1 if status == 200 else 0)
        if status == 429:
            assert int(headers["Retry-After"]) >= 1
        assert queued(gw) == {}
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_flow_queue_depth{priority="0",scheduler="pool"}' not in metrics


async def test_a_raised_saturation_threshold_reaches_the_requests_already_queued(gateway: Any) -> None:
    def with_threshold(threshold: int) -> dict[str, Any]:
        d = doc(bands=[{"priority": 0, "ttl": "60s"}])
        d["spec"]["extensions"]["routing"]["saturation"] = {"queueDepthThreshold": threshold}
        return d

    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),  # saturated at the threshold of 5
        gateway(with_threshold(5), {"pool": [a.key]}, reload=True) as gw,
    ):
        first = asyncio.create_task(send(gw, "first"))
        await wait_for(lambda: queued(gw) == {0: 1}, what="first queued")
        before = gw.state.runtime
        reload(gw, with_threshold(20))  # the operator lets the pool's queue grow to relieve ours
        await wait_for(lambda: gw.state.runtime is not before, within=10, what="the reload")
        # Before: the queued request was still picked by the scheduler it arrived under (threshold
        # 5, saturated) until its TTL; a new arrival queued behind it (never overtaking its band)
        # waited as long, although the scheduler now in force places both at once.
        second = asyncio.create_task(send(gw, "second"))
        done = await asyncio.wait_for(asyncio.gather(first, second), timeout=5)
        assert [(rid, status) for rid, status, _, _ in done] == [("first", 200), ("second", 200)]
        assert len(a.received) == 2


async def test_a_reload_moves_a_queued_request_to_its_objectives_new_band(gateway: Any) -> None:
    """Objective ``batch`` at -5, one request of it queued under a queue bound of 1; a reload raises
    ``batch`` to 10. Before: the request stayed in band -5, and a Critical arrival displaced it
    (429 ``displaced``) although the new configuration ranks it above Critical."""

    def with_batch(priority: int) -> dict[str, Any]:
        d = doc(maxRequests=1, objectives=[{"name": "batch", "priority": priority}])
        d["spec"]["extensions"]["flowControl"]["enginePriority"] = [{"scheduler": "pool"}]
        return d

    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(with_batch(-5), {"pool": [a.key]}, reload=True) as gw,
    ):
        batch = asyncio.create_task(send(gw, "batch", "batch"))
        await wait_for(lambda: queued(gw) == {-5: 1}, what="batch queued in band -5")
        reload(gw, with_batch(10))
        await wait_for(lambda: queued(gw) == {10: 1}, within=10, what="batch moved to band 10")
        _, status, _, body = await asyncio.wait_for(send(gw, "critical", "Critical"), timeout=5)
        assert (status, body["error"]["code"]) == (429, "request_shed")
        assert "priority 1 request (queue_full)" in body["error"]["message"]  # nothing lower to displace
        assert not batch.done()
        a.waiting = 0
        rid, status, _, _ = await asyncio.wait_for(batch, timeout=15)
        assert (rid, status) == ("batch", 200)
        assert orjson.loads(a.received[0].body)["priority"] == -10  # vLLM: the lower value first
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_flow_wait_seconds_count{priority="10",scheduler="pool"} 1.0' in metrics
        assert 'igw_flow_queue_depth{priority="-5",scheduler="pool"} 0.0' in metrics
        assert 'reason="displaced"' not in metrics


async def test_a_reload_classifies_queued_requests_again_without_counting_a_denied_objective_twice(
    gateway: Any,
) -> None:
    def with_secret(priority: int) -> dict[str, Any]:
        return doc(
            objectives=[{"name": "secret", "priority": priority}],
            objectiveAccess=[{"objective": "secret", "tenants": ["vip"]}],
        )

    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(with_secret(5), {"pool": [a.key]}, reload=True) as gw,
    ):
        task = asyncio.create_task(send(gw, "denied", "secret"))  # no token: may not name it
        await wait_for(lambda: queued(gw) == {0: 1}, what="queued in Standard")
        before = gw.state.runtime
        reload(gw, with_secret(7))
        await wait_for(lambda: gw.state.runtime is not before, within=10, what="the reload")
        assert queued(gw) == {0: 1}  # still denied under the new configuration: it stays
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_flow_objective_denied_total{objective="secret",scheduler="pool"} 1.0' in metrics
        a.waiting = 0
        assert (await asyncio.wait_for(task, timeout=15))[1] == 200
