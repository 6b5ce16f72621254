"""``IgwGlobalTenantLabelsFolding`` (since session s49): routers export ``igw_tenant_labels_folded_total``
as tier 1 does (their ``igw_global_ratelimit_hits_total`` tenant label), but only the chart's
``IgwTenantLabelsFolding`` read it, and it leaves the routers' targets out. Evaluated as
``test_tenant_fold_alert.py`` evaluates tier 1's: on synthetic increases (firing, the near-miss, a
gateway's series left out) and over a live router's ``/metrics`` page: new tenants past
``maxTenantLabels`` fire it, the same tenants again do not."""

from __future__ import annotations

import ssl

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from igw.addon.alert_rules import GLOBAL_ALERTS, ROUTER_MARKER, TENANT_FOLDS_PER_HOUR, Alert
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.global_router.support import MODEL, guarded_router
from tests.global_router.test_auth import secured
from tests.observability.promql_values import Given, fired
from tests.security.helpers import JwksServer, ManualClock, TokenFactory, bearer

FOLDED = "igw_tenant_labels_folded_total"
LABELS = 2
ROUTER = "10.0.9.9:9090"


def _alert() -> Alert:
    (alert,) = [a for a in GLOBAL_ALERTS if a.name == "IgwGlobalTenantLabelsFolding"]
    return alert


def _folds(per_instance: dict[str, float], *, routers: tuple[str, ...]) -> Given:
    """Each instance's folds in the last hour, and the router marker of each of ``routers``."""
    given: Given = [({"__name__": FOLDED, "instance": i}, n) for i, n in per_instance.items()]
    return given + [({"__name__": ROUTER_MARKER, "instance": r}, 1.0) for r in routers]


def test_sustained_folding_warns_per_router_and_a_handful_does_not() -> None:
    alert = _alert()
    assert (alert.for_, alert.severity) == ("30m", "warning")
    assert "{{ $labels.instance }}" in alert.summary
    over = float(TENANT_FOLDS_PER_HOUR + 1)
    other = "10.0.9.8:9090"
    given = _folds({ROUTER: over, other: float(TENANT_FOLDS_PER_HOUR)}, routers=(ROUTER, other))
    assert fired(alert.expr, given) == {(("instance", ROUTER),): over}


def test_a_gateways_folds_are_left_out() -> None:
    """Both tiers export the counter; a Prometheus scraping a gateway too must not warn as a router."""
    given = _folds({"10.0.0.1:9090": 50.0}, routers=(ROUTER,))
    assert fired(_alert().expr, given) == {}


def _folded(page: str) -> float:
    (value,) = [s.value for f in text_string_to_metric_families(page) for s in f.samples if s.name == FOLDED]
    return value


async def test_new_tenants_past_the_budget_fire_over_a_live_router_page(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A router (``rateLimits.metrics.maxTenantLabels: 2``) whose ``modelRateLimits`` refuse each
    tenant's second request: tenants past the budget are folded as they are refused (a tenant is
    labelled on a refusal only), and counted;
    the increase between two scrapes fires the alert, the same tenants again (folded) do not."""
    alert = _alert()
    tenants = [f"team-{i}" for i in range(LABELS + TENANT_FOLDS_PER_HOUR + 1)]
    server = FakeModelServer("east-a")
    async with running(server):
        doc = secured(server, jwks_server)
        doc["spec"]["authorization"] = {"tenantClaim": "tenant"}
        doc["spec"]["rateLimits"] = {"metrics": {"maxTenantLabels": LABELS}}
        doc["spec"]["modelRateLimits"] = [
            {"tenant": "*", "model": MODEL, "requestsPerSecond": 0.001, "burst": 1}
        ]
        async with (
            guarded_router(doc, clock=clock, client_ssl=client_ssl) as (url, _),
            aiohttp.ClientSession() as http,
        ):

            async def scrape() -> float:
                return _folded(await (await http.get(url + "/metrics")).text())

            async def send_all() -> None:
                for tenant in tenants:
                    headers = bearer(tokens.token(tenant=tenant))
                    body = {"model": MODEL, "prompt": "x"}
                    async with http.post(url + "/v1/completions", json=body, headers=headers) as resp:
                        await resp.read()

            await send_all()  # each tenant's burst taken (answered): nothing refused, nothing folded
            first = await scrape()
            await send_all()  # every request refused: the tenants past the budget folded
            second = await scrape()
            await send_all()
            third = await scrape()
    assert (first, second, third) == (0.0, TENANT_FOLDS_PER_HOUR + 1, TENANT_FOLDS_PER_HOUR + 1)
    scraped = {"instance": ROUTER, "job": "igw-global"}  # as Prometheus's scrape labels it
    marker: Given = [({"__name__": ROUTER_MARKER, **scraped}, 1.0)]
    new_tenants: Given = [({"__name__": FOLDED, **scraped}, second - first), *marker]
    assert fired(alert.expr, new_tenants) == {(("instance", ROUTER),): TENANT_FOLDS_PER_HOUR + 1}
    same_tenants: Given = [({"__name__": FOLDED, **scraped}, third - second), *marker]
    assert fired(alert.expr, same_tenants) == {}
