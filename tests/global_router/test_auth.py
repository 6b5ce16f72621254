"""The router's request security is tier 1's: JWT from spec.auth, 401/403 shapes, identity headers;
and the guard that ``igw global serve`` builds itself verifies tokens on the wall clock."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from prometheus_client import CollectorRegistry

from igw.gateway.flow_gate import FAIRNESS_HEADER
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.global_router.support import MODEL, global_doc, global_serve, guarded_router, post_part_of_a_body
from tests.security.helpers import DELETE, JwksServer, ManualClock, TokenFactory, bearer, jwt_auth


def secured(server: FakeModelServer, issuer: JwksServer) -> dict[str, Any]:
    """One cluster (``server``) behind JWT auth from ``issuer``."""
    return global_doc(
        [{"name": "east-a", "region": "east", "endpoint": f"http://{server.key}", "models": [MODEL]}],
        heartbeats={"required": False},
        auth=jwt_auth(issuer),
    )


async def test_jwt_is_required_and_identity_is_forwarded_not_the_token(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    server = FakeModelServer("east-a")
    async with running(server):
        doc = secured(server, jwks_server)
        doc["spec"]["clusters"][0]["models"] = [MODEL, "secret"]
        doc["spec"]["authorization"] = {
            "tenantClaim": "tenant",
            "tenantHeader": "x-igw-tenant",
            "modelAccess": [{"claim": "tenant", "values": ["team-a"], "models": [MODEL]}],
        }
        async with (
            guarded_router(doc, clock=clock, client_ssl=client_ssl) as (url, _),
            aiohttp.ClientSession() as http,
        ):
            body: dict[str, Any] = {"model": MODEL, "prompt": "x"}
            async with http.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 401
                assert resp.headers["WWW-Authenticate"].startswith("Bearer")
                assert (await resp.json())["error"]["type"] == "authentication_error"
            assert server.received == []
            # Refused from its head: the body (1,000 bytes announced, one sent) is never waited for.
            _, writer, head = await post_part_of_a_body(url, announced=1000, sent=b"{")  # body timeout: 60 s
            writer.close()
            assert head.startswith(b"HTTP/1.1 401 ")
            headers = {**bearer(tokens.token()), "x-igw-tenant": "spoofed"}
            async with http.post(url + "/v1/completions", json=body, headers=headers) as resp:
                assert resp.status == 200
                assert resp.headers["x-igw-cluster"] == "east-a"
            forwarded = {k.lower(): v for k, v in server.received[-1].headers.items()}
            assert "authorization" not in forwarded
            assert forwarded["x-igw-tenant"] == "team-a"
            # the models listed are those the caller may use (session s34: every served model before)
            async with http.get(url + "/v1/models", headers=bearer(tokens.token())) as resp:
                assert [m["id"] for m in (await resp.json())["data"]] == [MODEL]
            # and retrieved alike (session s39: no route before): "secret", served but not team-a's,
            # is answered as a name no cluster serves
            async with http.get(f"{url}/v1/models/{MODEL}", headers=bearer(tokens.token())) as resp:
                assert (resp.status, (await resp.json())["id"]) == (200, MODEL)
            answers = []
            for name in ("secret", "unserved"):
                async with http.get(f"{url}/v1/models/{name}", headers=bearer(tokens.token())) as resp:
                    answers.append((resp.status, (await resp.read()).replace(name.encode(), b"NAME")))
            assert answers[0] == answers[1]
            assert answers[0][0] == 404
            assert b'"code":"model_not_found"' in answers[0][1]
            async with http.get(f"{url}/v1/models/{MODEL}") as resp:
                assert resp.status == 401


def _fairness_ids(server: FakeModelServer) -> list[str]:
    """The fairness ids of the last request ``server`` received (each field, whatever its case)."""
    return [v for k, v in server.received[-1].headers.items() if k.lower() == FAIRNESS_HEADER]


async def test_a_verified_caller_s_fairness_id_is_its_tenant_not_the_header_it_sent(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """Behind a router that verifies tokens (and, by default, does not forward them), a cluster's
    gateway authenticates nobody, so its flow control takes the request's tenant from
    ``x-gateway-inference-fairness-id``. Until session s46 the router forwarded the client's own: a
    verified caller named another tenant there (its share and queue taken) or a new name per request
    (one fair-share turn each, the other tenants' queued requests displaced), as tier 1 no longer
    lets its own authenticated callers. The router now sends its verified tenant there (none for a
    token without one); an unauthenticating router forwards the header as it came."""
    server = FakeModelServer("east-a")
    async with running(server):
        doc = secured(server, jwks_server)
        doc["spec"]["authorization"] = {"tenantClaim": "tenant"}
        async with (
            guarded_router(doc, clock=clock, client_ssl=client_ssl) as (url, _),
            aiohttp.ClientSession() as http,
        ):
            body: dict[str, Any] = {"model": MODEL, "prompt": "x"}
            spoofed = {"X-Gateway-Inference-Fairness-Id": "team-b", "x-gateway-inference-fairness-id": "c"}
            sent = []
            for token in (tokens.token(), tokens.token(tenant=DELETE)):
                headers = {**bearer(token), **spoofed}
                async with http.post(url + "/v1/completions", json=body, headers=headers) as resp:
                    assert resp.status == 200
                sent.append(_fairness_ids(server))
            assert sent == [["team-a"], []]
    open_server = FakeModelServer("east-a")
    async with running(open_server):
        doc = secured(open_server, jwks_server)
        del doc["spec"]["auth"]
        async with (
            guarded_router(doc, clock=clock, client_ssl=client_ssl) as (url, _),
            aiohttp.ClientSession() as http,
        ):
            headers = {FAIRNESS_HEADER: "team-b"}
            async with http.post(url + "/v1/completions", json=body, headers=headers) as resp:
                assert resp.status == 200
            assert _fairness_ids(open_server) == ["team-b"]


async def test_igw_global_serve_accepts_a_valid_token_and_refuses_an_expired_one(
    tmp_path: Path, ca: trustme.CA, jwks_server: JwksServer, tokens: TokenFactory
) -> None:
    """The real command, its own guard, real time: the guard once got the fleet's monotonic clock and
    refused every valid token as issued in the future (seconds since boot against epoch seconds)."""
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    tokens.clock.now = time.time()
    now = int(tokens.clock.now)
    server = FakeModelServer("east-a")
    async with (
        running(server),
        global_serve(tmp_path, secured(server, jwks_server), env={"SSL_CERT_FILE": str(ca_file)}) as url,
        aiohttp.ClientSession() as http,
    ):
        body = {"model": MODEL, "prompt": "x"}
        for _ in range(500):  # until the JWKS is loaded: readiness
            async with http.get(url + "/readyz") as ready:
                if ready.status == 200:
                    break
            await asyncio.sleep(0.02)
        async with http.post(url + "/v1/completions", json=body, headers=bearer(tokens.token())) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.headers["x-igw-cluster"] == "east-a"
        expired = tokens.token(iat=now - 7200, exp=now - 3600)
        async with http.post(url + "/v1/completions", json=body, headers=bearer(expired)) as resp:
            assert resp.status == 401
            assert (await resp.json())["error"]["code"] == "invalid_token"
    assert len(server.received) == 1


async def test_model_labels_are_served_models_only_whatever_a_client_sends(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """Made-up model names (a header without a token, a body with one) count as ``(unknown)``: one
    series each per status, never one per name, so clients cannot grow the registry."""
    server = FakeModelServer("east-a")
    async with (
        running(server),
        guarded_router(secured(server, jwks_server), clock=clock, client_ssl=client_ssl) as (url, _),
        aiohttp.ClientSession() as http,
    ):
        for i in range(20):
            headers = {"x-gateway-model-name": f"made-up-{i}"}
            async with http.post(url + "/v1/completions", json={"prompt": "x"}, headers=headers) as resp:
                assert resp.status == 401
            made_up = {"model": f"made-up-{i}", "prompt": "x"}
            signed = bearer(tokens.token())
            async with http.post(url + "/v1/completions", json=made_up, headers=signed) as resp:
                assert resp.status == 404
        async with http.post(
            url + "/v1/completions", json={"model": MODEL, "prompt": "x"}, headers=bearer(tokens.token())
        ) as resp:
            assert resp.status == 200
        async with http.get(url + "/metrics") as resp:
            page = await resp.text()
    assert "made-up" not in page
    requests = {
        line.partition(" ")[0] for line in page.splitlines() if line.startswith("igw_global_requests_total{")
    }
    assert requests == {
        'igw_global_requests_total{code="401",model="(unknown)"}',
        'igw_global_requests_total{code="404",model="(unknown)"}',
        f'igw_global_requests_total{{code="200",model="{MODEL}"}}',
    }


def test_per_tenant_prefix_caches_are_said_to_be_the_clusters_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Tier 2 reads ``spec.authorization`` as tier 1 does, but writes nothing into request bodies:
    ``prefixCacheIsolation`` there would do nothing, silently, without the warning."""
    doc = global_doc(
        [{"name": "east-a", "region": "east", "endpoint": "http://127.0.0.1:9", "models": [MODEL]}],
        heartbeats={"required": False},
    )
    for isolation, warned in (("tenant", True), ("shared", False)):
        doc["spec"]["authorization"] = {"prefixCacheIsolation": isolation}
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="igw.global_router"):
            create_global_app(parse_global_config(doc), read_heartbeats=False, registry=CollectorRegistry())
        assert ("prefixCacheIsolation has no effect at tier 2" in caplog.text) is warned


def test_allowed_engine_fields_are_said_to_be_the_clusters_setting(caplog: pytest.LogCaptureFixture) -> None:
    """Tier 2 checks no engine fields (each cluster's gateway refuses them for its tenants):
    ``allowedEngineFields`` there would allow nothing, silently, without the warning."""
    doc = global_doc(
        [{"name": "east-a", "region": "east", "endpoint": "http://127.0.0.1:9", "models": [MODEL]}],
        heartbeats={"required": False},
    )
    for fields, warned in ((["rid"], True), ([], False)):
        doc["spec"]["authorization"] = {"allowedEngineFields": fields}
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="igw.global_router"):
            create_global_app(parse_global_config(doc), read_heartbeats=False, registry=CollectorRegistry())
        assert ("allowedEngineFields has no effect at tier 2" in caplog.text) is warned


@pytest.mark.parametrize(
    ("router", "status", "answered", "code"),
    [
        ("withholds", 401, 502, "upstream_auth_misconfigured"),
        ("withholds", 407, 502, "upstream_auth_misconfigured"),
        ("withholds", 403, 403, 403),  # tier 1's authorization refusal: the caller's, relayed
        ("forwards", 401, 401, 401),  # the token reached the cluster: its refusal is the caller's
        ("open", 401, 401, 401),  # the router verified nobody
    ],
)
async def test_a_cluster_s_auth_refusal_of_a_caller_the_router_verified_without_its_token_is_a_502(
    router: str,
    status: int,
    answered: int,
    code: str | int,
    jwks_server: JwksServer,
    tokens: TokenFactory,
    clock: ManualClock,
    client_ssl: ssl.SSLContext,
) -> None:
    """A cluster's 401 or 407 to a caller the router verified and whose token it did not forward
    (``forwardAuthorization`` false) is the deployment's fault: a 502 ``upstream_auth_misconfigured``
    (until session s47, relayed). A 403, a 401 to a forwarded token, and any answer behind a router
    that authenticates nobody are relayed as they came. The real tier-1 case:
    ``test_tier1_identity.py``."""
    refusing = FakeModelServer("east-a", infer_status=status)
    async with running(refusing):
        doc = secured(refusing, jwks_server)
        if router == "open":
            del doc["spec"]["auth"]
        doc["spec"]["authorization"] = {"forwardAuthorization": router == "forwards"}
        async with (
            guarded_router(doc, clock=clock, client_ssl=client_ssl) as (url, _),
            aiohttp.ClientSession() as http,
        ):
            body = {"model": MODEL, "prompt": "x"}
            async with http.post(url + "/v1/completions", json=body, headers=bearer(tokens.token())) as resp:
                assert (resp.status, (await resp.json())["error"]["code"]) == (answered, code)
            async with http.get(url + "/metrics") as resp:
                counted = 'igw_global_upstream_auth_refused_total{cluster="east-a"} 1.0' in await resp.text()
    assert counted is (answered == 502)
    assert len(refusing.received) == 1


async def test_a_cluster_refusing_callers_the_router_verified_is_passed_over_for_the_next(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """The 502 for a cluster's 401 to a verified caller whose token was withheld is an upstream error,
    tried at the next cluster (a fleet with one misconfigured cluster keeps serving)."""
    refusing, serving = FakeModelServer("east-a", infer_status=401), FakeModelServer("west-a")
    async with running(refusing, serving):
        doc = global_doc(
            [
                {"name": "east-a", "region": "east", "endpoint": f"http://{refusing.key}", "models": [MODEL]},
                {"name": "west-a", "region": "west", "endpoint": f"http://{serving.key}", "models": [MODEL]},
            ],
            heartbeats={"required": False},
            auth=jwt_auth(jwks_server),
        )
        async with (
            guarded_router(doc, clock=clock, client_ssl=client_ssl) as (url, _),
            aiohttp.ClientSession() as http,
        ):
            body = {"model": MODEL, "prompt": "x"}
            async with http.post(url + "/v1/completions", json=body, headers=bearer(tokens.token())) as resp:
                assert (resp.status, resp.headers["x-igw-cluster"]) == (200, "west-a")
    assert (len(refusing.received), len(serving.received)) == (1, 1)
