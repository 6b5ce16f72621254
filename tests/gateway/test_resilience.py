"""Failure behaviour over real loopback HTTP: stale/failing endpoints, saturation, retries,
upstream death, client disconnect, routeTimeout."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import (
    assert_pick_moved,
    config_doc,
    data_events,
    prefix_blocks,
    scheduler,
    unreflected_dispatches,
    wait_for,
)

MODEL = "m1"


def doc(**routing: Any) -> dict[str, Any]:
    return config_doc([scheduler("pool", MODEL, routeTimeout="500ms")], routing=routing)


def req(stream: bool = False) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "hello", "max_tokens": 3, "stream": stream}


async def served_by(gw: Any, n: int = 6) -> list[str]:
    out = []
    for _ in range(n):
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 200, await resp.text()
        out.append((await resp.json())["server"])
    return out


async def test_failing_endpoint_is_excluded_and_recovers_by_itself(gateway: Any) -> None:
    async with (
        running(FakeModelServer("idle", waiting=0), FakeModelServer("busy", waiting=3, kv=0.5)) as (
            idle,
            busy,
        ),
        gateway(doc(), {"pool": [idle.key, busy.key]}) as gw,
    ):
        assert set(await served_by(gw)) == {"idle"}
        idle.metrics_status = 500
        await wait_for(lambda: not gw.fresh("pool", idle.key), what="idle excluded")
        assert set(await served_by(gw)) == {"busy"}
        idle.metrics_status = 200
        # Recovery needs no intervention; the bound is generous because scrapes (every 20 ms) can be
        # delayed on a loaded machine, and this asserts recovery, not its speed.
        await wait_for(lambda: gw.fresh("pool", idle.key), within=15.0, what="idle back")
        assert set(await served_by(gw)) == {"idle"}


async def test_hanging_scrape_goes_stale_then_all_stale_falls_back_to_inflight(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (a, b),
        gateway(doc(), {"pool": [a.key, b.key]}) as gw,
    ):
        a.metrics_frozen = b.metrics_frozen = True
        await wait_for(lambda: not gw.fresh("pool", a.key) and not gw.fresh("pool", b.key), what="all stale")
        served = await served_by(gw, 4)
        assert set(served) <= {"a", "b"}  # still served, not failed
        readyz = await (await gw.http.get(gw.url + "/readyz")).json()
        assert readyz["schedulers"]["pool"]["endpoints"][a.key]["fresh"] is False


async def test_saturated_pool_answers_429_with_computed_retry_after(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a", waiting=9), FakeModelServer("b", kv=0.95)) as (a, b),
        gateway(doc(retryAfter={"minSeconds": 2, "maxSeconds": 7}), {"pool": [a.key, b.key]}) as gw,
    ):
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 429  # answered at once: a queued request would end 504 (routeTimeout) or 200
        assert resp.headers["Retry-After"] == "7"  # nothing drained yet: the upper bound
        err = (await resp.json())["error"]
        assert err["code"] == "pool_saturated"
        assert a.received == []
        assert b.received == []
        b.kv = 0.2  # capacity returns
        await wait_for(lambda: gw.state.runtime.schedulers["pool"].pool.states[b.key].metrics.kv_usage == 0.2)
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 200
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_rejections_total{model="m1",reason="saturated"} 1.0' in metrics


async def test_connect_failure_is_retried_once_on_the_next_best(gateway: Any) -> None:
    slow_scrape = {"scrapeInterval": "10s", "staleThreshold": "30s"}
    async with (
        running(FakeModelServer("best", waiting=0), FakeModelServer("next", waiting=4)) as (best, nxt),
        gateway(doc(**slow_scrape), {"pool": [best.key, nxt.key]}) as gw,
    ):
        await best.stop()  # still "fresh" for 30 s, but nothing listens any more
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 200
        assert (await resp.json())["server"] == "next"
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_upstream_retries_total{cause="connect-failure",scheduler="pool"} 1.0' in metrics


async def test_a_pick_whose_connection_failed_is_counted_on_the_pod_that_served_it(gateway: Any) -> None:
    """The prompt goes to the next-best pod after the picked one refused the connection: the prefix
    index places it there, and the dispatch ledger counts it there. Until session s41 both kept the
    pick on the pod that never got it (62 blocks there, none on the pod that served; one phantom
    dispatch there, none on the pod serving), and the next requests with that prompt went back."""
    slow_scrape = {"scrapeInterval": "10s", "staleThreshold": "30s"}
    async with (
        running(FakeModelServer("best", waiting=0), FakeModelServer("next", waiting=4)) as (best, nxt),
        gateway(doc(**slow_scrape), {"pool": [best.key, nxt.key]}) as gw,
    ):
        await best.stop()  # still "fresh" for 30 s, but nothing listens any more
        resp = await gw.post("/v1/completions", {**req(), "prompt": "z" * 4000})
        assert (resp.status, (await resp.json())["server"]) == (200, "next")
        assert_pick_moved(gw, best.key, nxt.key)


async def test_a_pick_no_pod_accepted_is_given_back(gateway: Any) -> None:
    """Every candidate refused the connection: nobody got the prompt, so no pod holds it in the
    prefix index and no dispatch stays counted (until session s41 the first pod kept both)."""
    slow_scrape = {"scrapeInterval": "10s", "staleThreshold": "30s"}
    async with (
        running(FakeModelServer("best", waiting=0), FakeModelServer("next", waiting=4)) as (best, nxt),
        gateway(doc(**slow_scrape), {"pool": [best.key, nxt.key]}) as gw,
    ):
        await best.stop()
        await nxt.stop()
        resp = await gw.post("/v1/completions", {**req(), "prompt": "z" * 4000})
        assert (resp.status, (await resp.json())["error"]["code"]) == (502, "upstream_connect_failed")
        assert prefix_blocks(gw, best.key, nxt.key) == {best.key: 0, nxt.key: 0}
        assert unreflected_dispatches(gw, best.key, nxt.key) == {best.key: 0, nxt.key: 0}


async def test_upstream_death_mid_stream_ends_with_error_event_and_clean_close(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a", tokens=6, die_after=2, token_delay_s=0.01)) as (a,),
        gateway(doc(), {"pool": [a.key]}) as gw,
    ):
        resp = await gw.post("/v1/completions", req(stream=True))
        assert resp.status == 200
        body = await asyncio.wait_for(resp.read(), timeout=15)  # clean EOF, no exception, no hang
        events = data_events(body)
        assert [orjson.loads(e[6:])["choices"][0]["text"] for e in events[:2]] == ["tok0", "tok1"]
        assert orjson.loads(events[2][6:])["error"]["type"] == "upstream_error"
        assert events[3] == b"data: [DONE]"
        # an event named error (the Anthropic SDK raises on no other), typed as Anthropic's are
        assert b"\n\nevent: error\ndata: " + events[2][6:] + b"\n\n" in body
        assert orjson.loads(events[2][6:])["type"] == "error"
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_partial_stream_errors_total{model="m1"} 1.0' in metrics


async def test_client_disconnect_cancels_upstream_long_before_it_would_answer(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a", first_token_delay_s=30)) as (a,),
        gateway(config_doc([scheduler("pool", MODEL)]), {"pool": [a.key]}) as gw,
    ):
        task = asyncio.create_task(gw.post("/v1/completions", req(stream=True)))
        await wait_for(lambda: len(a.received) == 1, what="request reached upstream")
        task.cancel()  # the client goes away while the server is still "thinking"
        # The upstream would answer after 30 s; seeing its cancellation within 10 s proves the
        # disconnect was propagated (the margin absorbs a loaded machine's scheduling delays).
        await asyncio.wait_for(a.cancelled.wait(), timeout=10.0)
        inflight = gw.state.runtime.schedulers["pool"].pool.states[a.key]
        await wait_for(lambda: inflight.inflight == 0, what="in-flight count released")


async def test_route_timeout_gives_504_before_headers_and_terminal_event_after(gateway: Any) -> None:
    async with (
        running(FakeModelServer("slow", first_token_delay_s=5)) as (slow,),
        gateway(doc(), {"pool": [slow.key]}) as gw,
    ):
        t0 = time.perf_counter()
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 504
        # At least the 0.5 s routeTimeout, and well before the upstream's 5 s answer (margin for load).
        assert 0.4 < time.perf_counter() - t0 < 4.5
        assert "routeTimeout of 0.5s exceeded" in (await resp.json())["error"]["message"]
        assert resp.headers["X-Igw-Error-Code"] == "route_timeout"  # a tier-2 router retries it nowhere
    async with (
        running(FakeModelServer("dribble", tokens=20, token_delay_s=0.1)) as (dribble,),
        gateway(doc(), {"pool": [dribble.key]}) as gw,
    ):
        resp = await gw.post("/v1/completions", req(stream=True))
        body = await asyncio.wait_for(resp.read(), timeout=15)  # a hang never ends; generous for load
        events = data_events(body)
        assert 2 <= len(events) < 20
        assert b"routeTimeout of 0.5s exceeded" in events[-2]
        assert events[-1] == b"data: [DONE]"


async def test_a_stream_cut_by_route_timeout_is_charged_what_was_relayed(gateway: Any) -> None:
    """Before session s35 a stream ``routeTimeout`` cut was charged nothing: a client asking for more
    tokens than the timeout lets through was never charged those it got."""
    from tests.gateway.test_routing_and_guard import RecordingGuard

    guard = RecordingGuard()
    async with (
        running(FakeModelServer("dribble", tokens=20, token_delay_s=0.1)) as (dribble,),
        gateway(doc(), {"pool": [dribble.key]}, guard=guard) as gw,
    ):
        resp = await gw.post("/v1/completions", req(stream=True), headers={"Authorization": "Bearer good"})
        events = data_events(await asyncio.wait_for(resp.read(), timeout=15))
        relayed = len(events) - 2  # less the terminal error event and [DONE]
        assert 2 <= relayed < 20
        ((model, prompt_tokens, completion_tokens),) = guard.accounted
        assert (model, prompt_tokens) == (MODEL, 1)  # the prompt's estimate: "hello"
        assert relayed <= completion_tokens <= relayed + 1  # one per event relayed


async def test_route_timeout_zero_disables_it(gateway: Any) -> None:
    d = config_doc([scheduler("pool", MODEL, routeTimeout="0s")])
    async with (
        running(FakeModelServer("slowish", first_token_delay_s=0.3)) as (s,),
        gateway(d, {"pool": [s.key]}) as gw,
    ):
        assert gw.state.runtime.schedulers["pool"].route_timeout_s is None
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 200


async def test_health_and_readiness(gateway: Any) -> None:
    async with running(FakeModelServer("a")) as (a,), gateway(doc(), {"pool": [a.key]}) as gw:
        assert await (await gw.http.get(gw.url + "/healthz")).text() == "ok"
        ready = await gw.http.get(gw.url + "/readyz")
        assert ready.status == 200
        detail = await ready.json()
        assert detail["ready"] is True
        assert detail["schedulers"]["pool"]["endpoints"][a.key]["fresh"] is True
        assert detail["guard"] == {"ready": True, "detail": "authentication disabled: spec.auth is not set"}
    async with gateway(doc(), {"pool": []}, wait_fresh=False) as gw:
        empty = await gw.http.get(gw.url + "/readyz")
        assert empty.status == 503  # no endpoint anywhere: not ready


async def test_silent_prefill_gets_sse_keepalive_comments(gateway: Any) -> None:
    d = config_doc([scheduler("pool", MODEL)], routing={"sseKeepAliveInterval": "100ms"})
    async with (
        running(FakeModelServer("thinker", tokens=3, first_token_delay_s=0.45)) as (s,),
        gateway(d, {"pool": [s.key]}) as gw,
    ):
        t0 = time.perf_counter()
        resp = await gw.post("/v1/completions", req(stream=True))
        assert resp.status == 200
        body = await resp.read()
        elapsed = time.perf_counter() - t0
        pings = body.count(b": ping\n\n")
        # At least two pings during the 0.45 s of silence, and never more than one per 100 ms interval
        # of the time actually spent (a loaded machine stretches that time, not the rate).
        assert 2 <= pings <= elapsed / 0.1 + 1
        assert body.startswith(b": ping\n\n")
        events = data_events(body)
        assert [orjson.loads(e[6:])["choices"][0]["text"] for e in events[:3]] == ["tok0", "tok1", "tok2"]
        assert events[-1] == b"data: [DONE]"


async def test_the_fake_server_s_page_moves_with_its_requests_so_busy_pods_are_never_frozen(
    gateway: Any,
) -> None:
    """Requests for longer than ``staleThreshold`` (400 ms here): a live engine's counters move with
    them, and so do the fake's; a page that did not would be excluded as frozen mid-test."""
    async with running(FakeModelServer("a")) as (a,), gateway(doc(), {"pool": [a.key]}) as gw:
        await wait_for(lambda: gw.fresh("pool", a.key), what="first scrape")
        state = gw.state.runtime.schedulers["pool"].pool.states[a.key]
        loop = asyncio.get_running_loop()
        until = loop.time() + 1.5
        while loop.time() < until:
            assert (await gw.post("/v1/completions", req())).status == 200
            assert not state.page.frozen
            await asyncio.sleep(0.05)
        assert a.prompt_tokens_total == 7 * len(a.received)


async def test_a_streamed_request_whose_head_never_comes_gets_504_after_stream_idle_timeout(
    gateway: Any,
) -> None:
    # streamIdleTimeout bounds the wait for a streamed response's head (inside the upstream pool,
    # after the request was written): a model server that never answers is a 504, not a hang.
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            await reader.read()  # reads everything, answers nothing (the scrapes hang too)
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    key = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    d = config_doc([scheduler("pool", MODEL)], routing={"streamIdleTimeout": "300ms"})
    async with server, gateway(d, {"pool": [key]}, wait_fresh=False) as gw:
        pool = gw.state.runtime.schedulers["pool"].pool
        await wait_for(lambda: key in pool.states, what="endpoint discovered")
        t0 = time.perf_counter()
        resp = await gw.post("/v1/completions", req(stream=True))
        elapsed = time.perf_counter() - t0
        assert resp.status == 504
        error = (await resp.json())["error"]
        assert (error["type"], error["code"]) == ("timeout", "upstream_timeout")
        assert error["message"] == "the model server sent no response within 0.3s"  # never its address
        assert resp.headers["X-Request-Id"]
        assert 0.25 < elapsed < 4.5  # the 300 ms bound, with margin for a loaded machine


async def test_a_stored_responses_replay_left_early_is_charged_nothing() -> None:
    """``GET /v1/responses/{id}?stream=true`` replays what was generated (and charged) once: a client
    leaving it is charged nothing more, as its end would have counted nothing."""
    from igw.gateway import inference
    from igw.gateway.guards import Principal
    from igw.gateway.observer import RequestObserver
    from igw.gateway.telemetry import GatewayMetrics
    from igw.gateway.upstream import ExchangeResult, _RelayedStream
    from tests.gateway.test_routing_and_guard import RecordingGuard

    guard = RecordingGuard()
    replay = _RelayedStream(status=200)
    replay.relayed = ExchangeResult(replay, 200, True, streamed=True, events=40)
    plan = inference._Forward(
        candidates=["a:1"], sr=None, add_headers={}, timeout_s=None, what="x", method=b"GET", generates=False
    )
    principal = Principal(tenant="t1", authenticated=True)
    metrics = GatewayMetrics(lister=list, clock=lambda: 0.0)
    obs = RequestObserver(metrics, request_id="r", method="GET", path="/v1/responses/resp_1")
    await inference._charge_relayed({}, guard, principal, obs, inference.NO_BODY, plan, [replay])
    assert guard.accounted == []
    assert obs.record.completion_tokens is None  # nor shown as generated
