"""``IgwTenantLabelsFolding`` (since session s49): ``igw_tenant_labels_folded_total`` (s48) said how
many tenants lost their label to ``tenant="other"``, but no alert read it. Evaluated on synthetic
increases (firing, the near-misses, a router's series left out) and over a live gateway's
``/metrics`` page: new tenants past ``maxTenantLabels`` fire it, the same tenants again do not."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from igw.addon.alert_rules import ALERTS, ROUTER_MARKER, TENANT_FOLDS_PER_HOUR, Alert
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler
from tests.observability.promql_values import Given, fired

FOLDED = "igw_tenant_labels_folded_total"
LABELS = 2


def _alert() -> Alert:
    (alert,) = [a for a in ALERTS if a.name == "IgwTenantLabelsFolding"]
    return alert


def _folds(per_process: dict[tuple[str, str], int]) -> Given:
    """Each ``(pod, instance)`` process's folds in the last hour (the ``increase`` the test states)."""
    return [
        ({"__name__": FOLDED, "pod": pod, "instance": i}, float(n)) for (pod, i), n in per_process.items()
    ]


def test_sustained_folding_warns_per_pod_and_a_handful_does_not() -> None:
    alert = _alert()
    assert (alert.for_, alert.severity) == ("30m", "warning")
    assert "{{ $labels.pod }}" in alert.summary
    over = TENANT_FOLDS_PER_HOUR + 1
    given = _folds({("gw-0", "10.0.0.1:9090"): over, ("gw-1", "10.0.0.2:9090"): TENANT_FOLDS_PER_HOUR})
    assert fired(alert.expr, given) == {(("pod", "gw-0"),): over}
    # a pod's workers each count their own folds: the worst one, not their sum
    workers = _folds({("gw-0", "10.0.0.1:9090"): 6, ("gw-0", "10.0.0.1:9091"): 6})
    assert fired(alert.expr, workers) == {}
    assert fired(alert.expr, _folds({("gw-0", "10.0.0.1:9090"): 0})) == {}


def test_a_global_router_s_folds_are_left_out() -> None:
    """Both tiers export the counter; a Prometheus scraping a router too must not page as a gateway."""
    router = "10.0.9.9:9090"
    given = [*_folds({("router-0", router): 50}), ({"__name__": ROUTER_MARKER, "instance": router}, 1.0)]
    assert fired(_alert().expr, given) == {}


def _folded(page: str) -> float:
    (value,) = [s.value for f in text_string_to_metric_families(page) for s in f.samples if s.name == FOLDED]
    return value


async def test_new_tenants_past_the_budget_fire_over_a_live_gateway_page(gateway: Any) -> None:
    """A gateway whose flow control (``metrics.maxTenantLabels: 2``) refuses every request on arrival
    (``maxBytes: 1``, the pod saturated): callers with new fairness ids are folded as they are
    refused, and counted; the increase between two scrapes of the page fires the alert, the same
    tenants again (already folded) do not."""
    alert = _alert()
    doc = config_doc([scheduler("m", "m")])
    doc["spec"]["extensions"]["flowControl"] = {
        "maxRequests": 1,
        "maxBytes": 1,
        "pollInterval": "10ms",
        "metrics": {"maxTenantLabels": LABELS},
    }
    tenants = [f"team-{i}" for i in range(LABELS + TENANT_FOLDS_PER_HOUR + 1)]
    async with running(FakeModelServer("pod", waiting=9)) as (pod,), gateway(doc, {"m": [pod.key]}) as gw:

        async def scrape() -> float:
            return _folded(await (await gw.http.get(gw.url + "/metrics")).text())

        async def send_all() -> None:
            for tenant in tenants:
                body = {"model": "m", "prompt": "hi", "max_tokens": 2}
                headers = {"x-gateway-inference-fairness-id": tenant}
                resp = await gw.post("/v1/completions", body, headers=headers)
                await resp.read()
                assert resp.status == 429, await resp.text()

        first = await scrape()
        await send_all()
        second = await scrape()
        await send_all()
        third = await scrape()
    assert (first, second, third) == (0.0, TENANT_FOLDS_PER_HOUR + 1, TENANT_FOLDS_PER_HOUR + 1)
    scraped = {"instance": "10.0.0.1:9090", "pod": "gw-0", "job": "igw"}  # as Prometheus's scrape labels it
    new_tenants: Given = [({"__name__": FOLDED, **scraped}, second - first)]
    assert fired(alert.expr, new_tenants) == {(("pod", "gw-0"),): TENANT_FOLDS_PER_HOUR + 1}
    same_tenants: Given = [({"__name__": FOLDED, **scraped}, third - second)]
    assert fired(alert.expr, same_tenants) == {}
