"""The router's per-tenant rate-limit series are bounded like tier 1's: ``tenant`` goes through the
registry's :class:`~igw.gateway.tenant_labels.TenantLabels`.

With ``authorization.tenantClaim: sub`` every user is a tenant. Until session s40
``igw_global_ratelimit_hits_total`` took the tenant as the token said it, so every user refused by a
``modelRateLimits`` entry added a series for the life of the replica, while ``igw_tenant_*_total`` on
the same page held the first ``rateLimits.metrics.maxTenantLabels`` and called the others ``other``.
"""

from __future__ import annotations

import ssl

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.global_router.support import MODEL, guarded_router
from tests.global_router.test_auth import secured
from tests.security.helpers import JwksServer, ManualClock, TokenFactory, bearer

USERS = 12
LABELS = 4


async def test_rate_limit_hits_name_a_bounded_set_of_tenants(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    server = FakeModelServer("east-a")
    async with running(server):
        doc = secured(server, jwks_server)
        doc["spec"]["authorization"] = {"tenantClaim": "tenant"}
        doc["spec"]["rateLimits"] = {
            "metrics": {"maxTenantLabels": LABELS},
            "tenants": [{"tenant": "vip", "requestsPerSecond": 100}],
        }
        doc["spec"]["modelRateLimits"] = [
            {"tenant": "*", "model": MODEL, "requestsPerSecond": 0.001, "burst": 1},
            {"tenant": "named", "model": MODEL, "requestsPerSecond": 0.001, "burst": 1},
        ]
        async with (
            guarded_router(doc, clock=clock, client_ssl=client_ssl) as (url, _),
            aiohttp.ClientSession() as http,
        ):
            body = {"model": MODEL, "prompt": "x"}
            users = [f"user-{i}" for i in range(USERS)] + ["named", "vip"]
            for user in users:
                statuses = []
                for _ in range(2):  # the second is over the entry's burst of 1
                    headers = bearer(tokens.token(tenant=user))
                    async with http.post(url + "/v1/completions", json=body, headers=headers) as resp:
                        statuses.append(resp.status)
                assert statuses == [200, 429], (user, statuses)
            page = await (await http.get(url + "/metrics")).text()
    hits = {
        s.labels["tenant"]: s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name == "igw_global_ratelimit_hits_total"
    }
    assert sum(hits.values()) == len(users)  # every refusal counted
    assert len(hits) == LABELS + 3, hits  # the first LABELS users, the two named tenants, the rest
    assert hits["other"] == USERS - LABELS
    assert hits["named"] == hits["vip"] == 1
    # tier 2 says how many tenants it folded into other too (counted once each, not per request)
    folded = [
        s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name == "igw_tenant_labels_folded_total"
    ]
    assert folded == [USERS - LABELS]
