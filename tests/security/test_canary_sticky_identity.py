"""Canary stickiness (``modelRewrites`` ``stickyBy: tenant``) takes an authenticated caller's tenant
from its token, as flow control does: through the real gateway with real JWTs over loopback.

The hole it closes: for a verified token without a tenant claim the split was keyed by the
client-chosen ``x-gateway-inference-fairness-id``, which flow control ignores for such a caller, so
the caller picked its target (canary or stable) by picking a header value."""

from __future__ import annotations

import ssl
from collections import Counter
from pathlib import Path

from igw.gateway.model_rewrite import sticky_point
from tests.gateway.fake_model_server import FakeModelServer
from tests.security.helpers import DELETE, JwksServer, TokenFactory
from tests.security.test_gateway_e2e import Gw, tenant_gateway

RULE = {
    "model": "llama",
    "targets": [{"model": "m", "weight": 50}, {"model": "secret", "weight": 50}],
    "stickyBy": "tenant",
}


def header_for(target_secret: bool) -> str:
    """A fairness-header value whose sticky point falls on the ``secret`` target (or on ``m``)."""
    return next(
        value
        for value in (f"pick-{i}" for i in range(1000))
        if (sticky_point("llama", value) >= 0.5) is target_secret
    )


async def targets(gw: Gw, token: str, header: str, n: int = 24) -> Counter[str]:
    got: Counter[str] = Counter()
    headers = {"Authorization": f"Bearer {token}", "x-gateway-inference-fairness-id": header}
    for _ in range(n):
        async with gw.http.post(
            gw.url + "/v1/completions", json={"model": "llama", "prompt": "hi"}, headers=headers
        ) as resp:
            assert resp.status == 200, await resp.text()
            got[str((await resp.json())["server"])] += 1
    return got


async def test_the_fairness_header_does_not_pick_an_authenticated_callers_canary_target(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    pods = (FakeModelServer("stable"), FakeModelServer("canary"))
    rewrites = {"modelRewrites": {"rules": [RULE]}}
    gateway = tenant_gateway(tmp_path, jwks_server, client_ssl, tokens, extensions=rewrites, pods=pods)
    async with gateway as (_, gw):
        no_tenant = tokens.token(tenant=DELETE, sub="mallory")
        # Before: every request with the first value went to the canary, every one with the second
        # to the stable target (24 of 24 each). Now the caller is the anonymous tenant, as in flow
        # control: no sticky key, a random draw whatever the header says.
        for header in (header_for(True), header_for(False)):
            got = await targets(gw, no_tenant, header)
            assert set(got) == {"stable", "canary"}, got  # all on one side: 2 in 2**24
        # a tenant claim keys the split: the same target every time, whatever the header
        team_a = tokens.token(tenant="team-a", sub="alice")
        first = await targets(gw, team_a, header_for(True))
        second = await targets(gw, team_a, header_for(False))
        assert len(first) == 1
        assert first == second
