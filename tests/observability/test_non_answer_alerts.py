"""The alerts on answers that cannot be one (a pod's or a cluster's 204/205/304, an empty or non-JSON
success to an inference ``POST``, refused with a 502 since session s50): each tier's fires on the page
a gateway or router serves after refusing such answers, one series per reason, and stays quiet on a
page that refused none. Until this change the counters were on ``/metrics`` only: no alert, no
CloudWatch metric."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families

from igw.addon.alert_rules import ALERTS, GLOBAL_ALERTS, Alert
from igw.gateway.serving import serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from tests.global_router.support import global_doc
from tests.global_router.test_hostile_cluster import _cluster, _raw_post
from tests.observability.promql_values import Given, fired
from tests.reliability.harness import MODEL, gateway_doc, in_process_gateway
from tests.reliability.test_hostile_pod_framing import NOT_ANSWERS, RawPod, raw_pod


def _alert(alerts: tuple[Alert, ...], name: str) -> Alert:
    (alert,) = [a for a in alerts if a.name == name]
    return alert


def _series(page: str, **scrape: str) -> Given:
    """Every sample of a ``/metrics`` page with its value, labelled as the scrape stores it."""
    return [
        ({"__name__": s.name, **s.labels, **scrape}, s.value)
        for family in text_string_to_metric_families(page)
        for s in family.samples
    ]


async def test_a_pods_non_answers_fire_the_gateways_alert_per_reason(tmp_path: Path) -> None:
    """A pod answering a 204, then a text 200: both refused with a 502, and ``IgwUpstreamNonAnswers``
    fires over the gateway's own page for the pod and model, once per reason (the increase taken as
    the page's count: a fresh gateway's). A gateway that refused none fires nothing."""
    alert = _alert(ALERTS, "IgwUpstreamNonAnswers")
    pod = RawPod(NOT_ANSWERS["204"], NOT_ANSWERS["text-200"])
    async with raw_pod(pod) as key, in_process_gateway(tmp_path, gateway_doc(), [key]) as gw:
        quiet = await (await gw.http.get(gw.url + "/metrics")).text()
        for prompt in ("a", "b"):
            resp = await gw.complete(prompt)
            assert resp.status == 502, await resp.read()
        want = f'igw_upstream_non_answers_total{{model="{MODEL}",reason="not_json_object"}} 1.0'
        for _ in range(200):  # counted once the handler has finished its accounting
            page = await (await gw.http.get(gw.url + "/metrics")).text()
            if want in page:
                break
            await asyncio.sleep(0.02)
    scrape = {"pod": "gw-0", "instance": "gw:9090"}
    assert fired(alert.expr, _series(page, **scrape)) == {
        (("model", MODEL), ("pod", "gw-0"), ("reason", "bodiless_status")): 1.0,
        (("model", MODEL), ("pod", "gw-0"), ("reason", "not_json_object")): 1.0,
    }
    assert fired(alert.expr, _series(quiet, **scrape)) == {}
    for label in ("pod", "model", "reason"):
        assert f"{{{{ $labels.{label} }}}}" in alert.summary


async def test_a_clusters_non_answers_fire_the_routers_alert_per_reason() -> None:
    """A cluster answering a 304 to a completion: refused with a 502 naming it, and
    ``IgwGlobalUpstreamNonAnswers`` fires over the router's own page for the replica and cluster,
    reason ``bodiless_status``; the page before the request fires nothing."""
    alert = _alert(GLOBAL_ALERTS, "IgwGlobalUpstreamNonAnswers")
    async with _cluster(NOT_ANSWERS["304"]) as endpoint:
        clusters = [{"name": "east-na", "region": "east", "endpoint": endpoint, "models": [MODEL]}]
        router = create_global_app(
            parse_global_config(global_doc(clusters, heartbeats={"required": False})),
            read_heartbeats=False,
        )
        async with serve_app(router, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:
            async with http.get(url + "/metrics") as resp:
                quiet = await resp.text()
            head, body = await _raw_post(url, stream=False)
            assert head.startswith(b"HTTP/1.1 502 "), head
            assert orjson.loads(body)["error"]["code"] == "upstream_error"
            async with http.get(url + "/metrics") as resp:
                page = await resp.text()
    scrape = {"instance": "router:9090"}
    assert fired(alert.expr, _series(page, **scrape)) == {
        (("cluster", "east-na"), ("instance", "router:9090"), ("reason", "bodiless_status")): 1.0,
    }
    assert fired(alert.expr, _series(quiet, **scrape)) == {}
    assert "{{ $labels.cluster }}" in alert.summary
    assert "{{ $labels.reason }}" in alert.summary
