"""Who a cluster's gateway (tier 1) believes the caller is, for a request the router (tier 2) sent:
its own verification of the caller's token, never a header the router or the client wrote.

``objectiveAccess`` (the tenants that alone may name an InferenceObjective) is granted by tier 1
only to the tenant of a token it verified itself. The documented deployment (docs/global-router.md,
"Caller identity at the clusters"): tier 1 verifies the same issuer as the router, and the router
forwards the caller's ``Authorization`` unchanged (``forwardAuthorization: true``). Real HTTP
throughout: a real tier-1 gateway (flow control, JWT guard) behind a real router, both verifying
tokens from one test issuer, in front of a saturated model server so every request queues in the
band tier 1 gave it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import pytest

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.fixtures import Gateway
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.global_router.support import MODEL, global_doc, guarded_router
from tests.security.helpers import GuardMaker, JwksServer, ManualClock, TokenFactory, bearer, jwt_auth

FLOW = {
    "pollInterval": "10ms",
    "headerPriorityLimit": 0,
    "objectives": [{"name": "chat", "priority": 10}],
    "objectiveAccess": [{"objective": "chat", "tenants": ["team-chat"]}],
}
"""Tier 1's flow control: ``chat`` (band 10) for ``team-chat`` alone; every other claim of it Standard (0)."""


@contextlib.asynccontextmanager
async def tiers(
    gateway: Callable[..., Any],
    issuer: JwksServer,
    clock: ManualClock,
    client_ssl: ssl.SSLContext,
    *,
    tier1_auth: bool,
    forward: bool = True,
) -> AsyncIterator[tuple[str, Gateway, FakeModelServer]]:
    """A router (JWT, ``forwardAuthorization: forward``) in front of one tier-1 gateway (JWT from the
    same issuer when ``tier1_auth``, else open) in front of a saturated pod; yields the router's URL,
    the gateway and the pod."""
    maker = GuardMaker(jwks_server=issuer, clock=clock, client_ssl=client_ssl)
    try:
        guard = await maker(extensions={"authorization": {"tenantClaim": "tenant"}}, auth=tier1_auth)
        doc = config_doc([scheduler("pool", MODEL)])
        doc["spec"]["extensions"]["flowControl"] = FLOW
        async with (
            running(FakeModelServer("a", waiting=9)) as (pod,),
            gateway(doc, {"pool": [pod.key]}, guard=guard) as gw,
        ):
            routed = global_doc(
                [{"name": "east-a", "region": "east", "endpoint": gw.url, "models": [MODEL]}],
                heartbeats={"required": False},
                auth=jwt_auth(issuer),
                authorization={"tenantClaim": "tenant", "forwardAuthorization": forward},
            )
            async with guarded_router(routed, clock=clock, client_ssl=client_ssl) as (url, _):
                yield url, gw, pod
    finally:
        for started in maker.started:
            await started.close()


async def _send(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> int:
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
    headers = {**headers, "x-gateway-inference-objective": "chat"}
    async with http.post(url + "/v1/completions", json=body, headers=headers) as resp:
        await resp.read()
        status: int = resp.status
        return status


async def test_tier1_verifying_the_router_s_issuer_grants_objective_access_to_the_token_s_tenant_only(
    gateway: Callable[..., Any],
    jwks_server: JwksServer,
    tokens: TokenFactory,
    clock: ManualClock,
    client_ssl: ssl.SSLContext,
) -> None:
    """``team-chat`` gets its reserved band through the router; ``team-batch`` naming ``team-chat`` in
    the fairness header (and in ``x-igw-tenant``) is placed in Standard and counted denied; no token
    is refused at the router, tier 1 never asked; the token stops at tier 1 (the pod never sees it)."""
    async with (
        tiers(gateway, jwks_server, clock, client_ssl, tier1_auth=True) as (url, gw, pod),
        aiohttp.ClientSession() as http,
    ):
        spoofed = {"x-gateway-inference-fairness-id": "team-chat", "x-igw-tenant": "team-chat"}
        assert await _send(http, url, spoofed) == 401  # no token: the router's 401
        spoofing = {**bearer(tokens.token(tenant="team-batch")), **spoofed}
        sent = [
            asyncio.create_task(_send(http, url, bearer(tokens.token(tenant="team-chat")))),
            asyncio.create_task(_send(http, url, spoofing)),
        ]
        await wait_for(lambda: gw.state.flow.depths("pool") == {10: 1, 0: 1}, within=10, what="banded")
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_flow_objective_denied_total{objective="chat",scheduler="pool"} 1.0' in metrics
        pod.waiting = 0
        assert await asyncio.wait_for(asyncio.gather(*sent), timeout=20) == [200, 200]
    assert len(pod.received) == 2
    for received in pod.received:
        assert "authorization" not in {k.lower() for k in received.headers}


async def test_an_open_tier1_grants_no_objective_access_whatever_the_router_forwards(
    gateway: Callable[..., Any],
    jwks_server: JwksServer,
    tokens: TokenFactory,
    clock: ManualClock,
    client_ssl: ssl.SSLContext,
) -> None:
    """A tier 1 that authenticates nobody has no verified tenant: the router-verified ``team-chat``
    reaches it with its token and ``x-gateway-inference-fairness-id: team-chat``, and still gets
    Standard - neither header is an identity tier 1 may trust (any client able to reach it could send
    both). Granting ``objectiveAccess`` behind the router takes tier 1's own ``spec.auth``."""
    async with (
        tiers(gateway, jwks_server, clock, client_ssl, tier1_auth=False) as (url, gw, pod),
        aiohttp.ClientSession() as http,
    ):
        sent = asyncio.create_task(_send(http, url, bearer(tokens.token(tenant="team-chat"))))
        await wait_for(lambda: gw.state.flow.depths("pool") == {0: 1}, within=10, what="classified")
        pod.waiting = 0
        assert await asyncio.wait_for(sent, timeout=20) == 200


async def test_a_tier1_that_authenticates_behind_a_router_that_withholds_tokens_answers_502_not_401(
    gateway: Callable[..., Any],
    jwks_server: JwksServer,
    tokens: TokenFactory,
    clock: ManualClock,
    client_ssl: ssl.SSLContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The router verifies callers and does not forward their token (``forwardAuthorization`` false,
    the default) while tier 1 authenticates too: tier 1's 401 ``invalid_token`` is the deployment's
    fault, so a caller with a valid token gets a 502 ``upstream_auth_misconfigured`` naming the fix,
    no ``WWW-Authenticate`` (until session s47: the 401 relayed, and clients refreshed their token and
    retried for ever) - for an inference request and a stored response's retrieval alike; counted by
    cluster, logged once. A caller without a token still gets the router's own 401."""
    token = tokens.token(tenant="team-chat")
    async with (
        tiers(gateway, jwks_server, clock, client_ssl, tier1_auth=True, forward=False) as (url, _, pod),
        aiohttp.ClientSession() as http,
    ):
        pod.waiting = 0
        assert await _send(http, url, {}) == 401  # no token: the router's 401, as before
        body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
        answers = []
        with caplog.at_level(logging.WARNING, logger="igw.global_router.upstream_auth"):
            for _ in range(2):
                async with http.post(url + "/v1/completions", json=body, headers=bearer(token)) as resp:
                    answers.append((resp.status, resp.headers.copy(), await resp.read()))
            async with http.get(url + "/v1/responses/resp_abc", headers=bearer(token)) as resp:
                answers.append((resp.status, resp.headers.copy(), await resp.read()))
        for status, headers, raw in answers:
            assert status == 502
            assert "WWW-Authenticate" not in headers
            assert headers["x-igw-cluster"] == "east-a"
            assert token.encode() not in raw
            error = orjson.loads(raw)["error"]
            assert (error["code"], error["type"]) == ("upstream_auth_misconfigured", "upstream_error")
            assert "forwardAuthorization" in error["message"]
        logged = [r for r in caplog.records if r.name == "igw.global_router.upstream_auth"]
        assert len(logged) == 1  # once per cluster per minute
        assert "east-a" in logged[0].getMessage()
        assert token not in logged[0].getMessage()
        async with http.get(url + "/metrics") as resp:
            page = await resp.text()
        assert "# HELP igw_global_upstream_auth_refused_total " in page
        assert 'igw_global_upstream_auth_refused_total{cluster="east-a"} 3.0' in page
    assert pod.received == []
