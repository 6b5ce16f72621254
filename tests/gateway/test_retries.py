"""Retries of refused attempts (``spec.extensions.routing.retry``) over real loopback HTTP: which
refusals go on to the next-best endpoint, which reach the client, the budget, ``attempts`` and
``routeTimeout`` across attempts; and the classification and budget on their own."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import orjson
import pytest

from igw.gateway.forwarded_answer import forwarded_answer
from igw.gateway.retries import RetryBudget, retry_condition
from igw.gateway.upstream import ExchangeResult
from igw.scheduling.retry_policy import DEFAULT_RETRY_ON, RetryCondition, RetryPolicy, retried_for
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import (
    assert_pick_moved,
    config_doc,
    prefix_blocks,
    scheduler,
    unreflected_dispatches,
)

MODEL = "m1"
SLOW_SCRAPES = {"scrapeInterval": "10s", "staleThreshold": "30s"}
"""Scraped once: the pick order stays best, next for the whole test (next has 4 waiting)."""

Pair = tuple[FakeModelServer, FakeModelServer, Any]


def pair(
    gateway: Any, *, route_timeout: str = "5s", **routing: Any
) -> Callable[[], AbstractAsyncContextManager[Pair]]:
    """Two pods - ``best`` (idle, always picked first) and ``next`` (4 waiting) - behind a gateway."""

    @asynccontextmanager
    async def started() -> AsyncIterator[Pair]:
        doc = config_doc(
            [scheduler("pool", MODEL, routeTimeout=route_timeout)], routing={**SLOW_SCRAPES, **routing}
        )
        async with (
            running(FakeModelServer("best", waiting=0), FakeModelServer("next", waiting=4)) as (best, nxt),
            gateway(doc, {"pool": [best.key, nxt.key]}) as gw,
        ):
            yield best, nxt, gw

    return started


def req(stream: bool = False) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "hello", "max_tokens": 3, "stream": stream}


async def metrics_of(gw: Any) -> str:
    return str(await (await gw.http.get(gw.url + "/metrics")).text())


@pytest.mark.parametrize(
    ("status", "cause"),
    [(503, "unavailable"), (502, "unavailable"), (429, "rate-limited"), (404, "model-missing")],
)
async def test_a_refusal_the_defaults_cover_is_answered_by_the_next_best(
    gateway: Any, status: int, cause: str
) -> None:
    async with pair(gateway)() as (best, nxt, gw):
        best.infer_status = status
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["server"] == "next"
        assert (len(best.received), len(nxt.received)) == (1, 1)
        metrics = await metrics_of(gw)
        assert f'igw_upstream_retries_total{{cause="{cause}",scheduler="pool"}} 1.0' in metrics
        assert gw.state.retry_budget.active == 0  # given back when the retry's attempt ended


async def test_the_access_log_line_names_the_refusal_that_was_retried(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="igw.access")
    async with pair(gateway)() as (best, nxt, gw):
        best.infer_status = 503
        assert (await gw.post("/v1/completions", req())).status == 200
        (line,) = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
        assert (line["status"], line["endpoint"], line["attempts"]) == (200, nxt.key, 2)
        assert line["error"] == f"{best.key} answered 503: retried (unavailable)"


async def test_a_stream_refused_before_it_started_is_streamed_by_the_next_best(gateway: Any) -> None:
    async with pair(gateway)() as (best, _next, gw):
        best.infer_status = 503
        resp = await gw.post("/v1/completions", req(stream=True))
        assert resp.status == 200
        events = [e for e in (await resp.read()).split(b"\n\n") if e]
        assert orjson.loads(events[0][6:])["server"] == "next"
        assert events[-1] == b"data: [DONE]"


@pytest.mark.parametrize("status", [503, 429, 404])
async def test_a_refused_pick_is_counted_on_the_pod_that_served_it(gateway: Any, status: int) -> None:
    """A pod that refuses a request (a 503 from a full queue, a 429, a 404 for an adapter it lacks)
    never prefilled its prompt, and the request is not waiting there: the next-best pod that served
    it holds the prompt and the dispatch, as for a pick whose connection failed. Until session s41
    the prefix index placed the prompt (62 blocks) on the refusing pod and none on the pod that
    served, and the dispatch ledger counted a phantom dispatch there and none on the pod serving."""
    async with pair(gateway)() as (best, nxt, gw):
        best.infer_status = status
        resp = await gw.post("/v1/completions", {**req(), "prompt": "z" * 4000})
        assert (resp.status, (await resp.json())["server"]) == (200, "next")
        assert_pick_moved(gw, best.key, nxt.key)


async def test_a_continuation_s_pick_goes_on_to_the_pod_its_search_found(gateway: Any) -> None:
    """A continuation of a response no scheduler here remembers is asked of the pods in turn; the
    picked one answers 404 (it does not store that response: nothing prefilled) and the next, which
    stores it, serves: the prompt and the dispatch are counted there. Until session s41 they stayed
    on the pod that answered 404 (62 blocks there, none on the pod that served)."""
    async with pair(gateway)() as (best, nxt, gw):
        nxt.stored_responses["resp_stored_on_next"] = {"id": "resp_stored_on_next"}
        body = {"model": MODEL, "input": "z" * 4000, "previous_response_id": "resp_stored_on_next"}
        resp = await gw.post("/v1/responses", body)
        assert resp.status == 200, await resp.text()
        assert (len(best.received), len(nxt.received)) == (1, 1)
        assert_pick_moved(gw, best.key, nxt.key)


async def test_a_refusal_that_is_not_retried_keeps_its_pick(gateway: Any) -> None:
    """A refusal the client gets (a 500, which ``retryOn`` does not name by default) stays counted
    where it was picked: no other pod got the request."""
    async with pair(gateway)() as (best, nxt, gw):
        best.infer_status = 500
        resp = await gw.post("/v1/completions", {**req(), "prompt": "z" * 4000})
        assert resp.status == 500
        assert prefix_blocks(gw, best.key, nxt.key)[nxt.key] == 0
        assert unreflected_dispatches(gw, best.key, nxt.key) == {best.key: 1, nxt.key: 0}


async def test_a_500_reaches_the_client_unless_5xx_is_named(gateway: Any) -> None:
    # A request that crashes an engine would crash the next pod too: 500 is not retried by default.
    async with pair(gateway)() as (best, nxt, gw):
        best.infer_status = 500
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 500
        assert (await resp.json())["server"] == "best"  # the model server's own answer, relayed
        assert nxt.received == []
        assert "igw_upstream_retries_total{" not in await metrics_of(gw)
    async with pair(gateway, retry={"retryOn": ["5xx"]})() as (best, nxt, gw):
        best.infer_status = 500
        resp = await gw.post("/v1/completions", req())
        assert (resp.status, (await resp.json())["server"]) == (200, "next")
        assert 'igw_upstream_retries_total{cause="5xx",scheduler="pool"} 1.0' in await metrics_of(gw)


async def test_a_connection_closed_before_the_answer_is_retried_only_under_5xx(gateway: Any) -> None:
    async with pair(gateway)() as (best, nxt, gw):
        best.infer_reset = True
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 502
        assert (await resp.json())["error"]["code"] == "upstream_error"
        assert nxt.received == []
    async with pair(gateway, retry={"retryOn": ["5xx"]})() as (best, nxt, gw):
        best.infer_reset = True
        resp = await gw.post("/v1/completions", req())
        assert (resp.status, (await resp.json())["server"]) == (200, "next")


async def test_a_client_error_is_never_retried(gateway: Any) -> None:
    async with pair(
        gateway, retry={"retryOn": ["5xx", "unavailable", "model-missing", "rate-limited"]}
    )() as (
        best,
        nxt,
        gw,
    ):
        best.infer_status = 400
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 400
        assert nxt.received == []


async def test_both_refusing_gives_the_client_the_last_refusal(gateway: Any) -> None:
    async with pair(gateway)() as (best, nxt, gw):
        best.infer_status = nxt.infer_status = 503
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 503
        assert (await resp.json())["server"] == "next"
        assert (len(best.received), len(nxt.received)) == (1, 1)  # attempts 2: no third try


async def test_the_last_attempt_failing_to_connect_gives_the_client_the_refusal_before(gateway: Any) -> None:
    async with pair(gateway)() as (best, nxt, gw):
        best.infer_status = 503
        await nxt.stop()
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 503
        assert (await resp.json())["server"] == "best"


async def test_an_empty_budget_gives_the_client_the_refusal_and_counts_it(gateway: Any) -> None:
    async with pair(gateway, retry={"budgetPercent": 0, "minRetryConcurrency": 0})() as (best, nxt, gw):
        best.infer_status = 503
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 503
        assert nxt.received == []
        metrics = await metrics_of(gw)
        assert 'igw_upstream_retry_overflow_total{scheduler="pool"} 1.0' in metrics
        # A connect failure is not budgeted: no model server saw the request.
        await best.stop()
        resp = await gw.post("/v1/completions", req())
        assert (resp.status, (await resp.json())["server"]) == (200, "next")
        metrics = await metrics_of(gw)
        assert 'igw_upstream_retries_total{cause="connect-failure",scheduler="pool"} 1.0' in metrics


async def test_one_attempt_retries_nothing_and_an_empty_retry_on_nothing(gateway: Any) -> None:
    retries: list[dict[str, Any]] = [{"attempts": 1}, {"retryOn": []}]
    for retry in retries:
        async with pair(gateway, retry=retry)() as (best, nxt, gw):
            await best.stop()
            resp = await gw.post("/v1/completions", req())
            assert resp.status == 502, retry
            assert (await resp.json())["error"]["code"] == "upstream_connect_failed"
            assert nxt.received == []


async def test_route_timeout_bounds_the_attempts_together(gateway: Any) -> None:
    async with pair(gateway, route_timeout="600ms")() as (best, nxt, gw):
        best.infer_status = 503
        best.first_token_delay_s = nxt.first_token_delay_s = 0.4  # each alone within 600 ms
        resp = await gw.post("/v1/completions", req())
        assert resp.status == 504
        assert (await resp.json())["error"]["code"] == "route_timeout"
        assert len(nxt.received) == 1  # the retry was sent, with what was left of the 600 ms


# ---- classification and budget ----------------------------------------------------------------------
def answered(
    status: int, *, events: int = 0, error: str | None = None, gave_up: bool = False
) -> ExchangeResult:
    answer = forwarded_answer(status, [], b"{}", noted={}, add={})
    return ExchangeResult(
        answer=answer, status=status, ok=status < 500, events=events, error=error, gave_up=gave_up
    )


@pytest.mark.parametrize(
    ("result", "condition"),
    [
        (answered(503), RetryCondition.UNAVAILABLE),
        (answered(504), RetryCondition.UNAVAILABLE),
        (answered(429), RetryCondition.RATE_LIMITED),
        (answered(404), RetryCondition.MODEL_MISSING),
        (answered(500), RetryCondition.ANY_5XX),
        (answered(501), RetryCondition.ANY_5XX),
        (answered(502, error="UpstreamBroken: closed"), RetryCondition.ANY_5XX),
        (answered(504, error="response_timeout: silent", gave_up=True), None),
        (answered(502, error="upstream timed out: TimeoutError", gave_up=True), None),
        (answered(503, events=2), None),  # tokens were generated
        (answered(400), None),
        (answered(401), None),
        (answered(200), None),
    ],
)
def test_refusals_are_classified(result: ExchangeResult, condition: RetryCondition | None) -> None:
    assert retry_condition(result) == condition


def test_5xx_covers_unavailable_and_the_defaults_leave_5xx_out() -> None:
    assert retried_for(RetryCondition.UNAVAILABLE, frozenset({RetryCondition.ANY_5XX}))
    assert not retried_for(RetryCondition.ANY_5XX, DEFAULT_RETRY_ON)
    assert not retried_for(RetryCondition.RATE_LIMITED, frozenset({RetryCondition.ANY_5XX}))


def test_the_budget_is_a_share_of_the_requests_in_flight_with_a_floor() -> None:
    budget = RetryBudget()
    policy = RetryPolicy(budget_percent=20, min_retry_concurrency=2)
    # the floor, 2
    assert [budget.take(policy, "a", requests_in_flight=5) for _ in range(3)] == [True, True, False]
    assert budget.take(policy, "a", requests_in_flight=15)  # 20 % of 15 = 3
    assert not budget.take(policy, "a", requests_in_flight=15)
    budget.give_back("a")
    assert budget.take(policy, "a", requests_in_flight=15)
    assert budget.active_in("a") == 3
    empty = RetryPolicy(budget_percent=0, min_retry_concurrency=0)
    assert not budget.take(empty, "a", requests_in_flight=100)
    # another pool's budget is its own: pool a's three retries leave b its floor (since s50)
    assert [budget.take(policy, "b", requests_in_flight=1) for _ in range(3)] == [True, True, False]
    assert (budget.active_in("b"), budget.active) == (2, 5)
    for pool in ("a", "a", "a", "b", "b"):
        budget.give_back(pool)
    assert budget.active == 0
    assert budget._active == {}  # no entry left for a pool a reload removed


async def test_the_only_endpoint_of_a_pool_is_not_reported_ejected(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Outlier detection never leaves the last endpoint out: a pool of one failing pod keeps getting
    its requests, and the gateway says so instead of reporting an ejection that never applies."""
    caplog.set_level(logging.WARNING, logger="igw.gateway")
    routing = {**SLOW_SCRAPES, "outlierDetection": {"consecutiveFailures": 2}}
    async with (
        running(FakeModelServer("only", infer_status=500)) as (only,),
        gateway(config_doc([scheduler("pool", MODEL)], routing=routing), {"pool": [only.key]}) as gw,
    ):
        for _ in range(3):
            assert (await gw.post("/v1/completions", req())).status == 500
        assert len(only.received) == 3
        metrics = await metrics_of(gw)
        assert "igw_endpoint_ejections_total{" not in metrics
        assert "igw_endpoint_ejected_seconds{" not in metrics
        readyz = await (await gw.http.get(gw.url + "/readyz")).json()
        assert readyz["schedulers"]["pool"]["endpoints"][only.key]["ejected_s"] is None
        said = [r.getMessage() for r in caplog.records if "in a row" in r.getMessage()]
        assert said
        assert all("only endpoint of its pool: not ejected" in m for m in said), said
