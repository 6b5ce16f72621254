"""Request security through the real gateway over loopback: the real ``create_app`` with the guard
from ``build_request_guard``, a real HTTPS issuer, real model servers (the gateway team's fake
servers: real aiohttp on loopback), configuration loaded and validated from a YAML file.

Proves: every catalogue failure is a 401 that never reaches a model server and is never a 5xx;
health, readiness and metrics stay open; forwarded identity headers are replaced; Authorization is
not forwarded; per-model 403; per-tenant 429 + Retry-After; query-string tokens are ignored; open
mode is loud; cold start without keys is unready and refuses; TLS termination serves HTTPS."""

from __future__ import annotations

import contextlib
import random
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import pytest
import trustme
import yaml
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry

from igw.config.loader import load_gateway_config
from igw.gateway.app import create_app
from igw.gateway.discovery.static_file import StaticFileDiscovery
from igw.gateway.inference import STATE_KEY
from igw.gateway.serving import serve_app
from igw.gateway.state import GatewayState
from igw.security.factory import build_request_guard
from igw.security.tls import build_server_ssl_context
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.security.helpers import AUDIENCE, JwksServer, Keys, TokenFactory, wait_until
from tests.security.test_catalogue import CASES, Ctx

ROUTING = {"scrapeInterval": "20ms", "staleThreshold": "400ms", "scrapeTimeout": "200ms"}
SECURITY = {
    "authorization": {
        "modelAccess": [{"claim": "tenant", "values": ["team-a"], "models": ["m"]}],
        "forwardClaims": [{"claim": "sub", "header": "x-igw-subject"}],
    },
}


def doc(
    *,
    issuer: str | None,
    jwks_uri: str = "",
    extensions: Mapping[str, Any] | None = None,
    pool: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The configuration: two pools, ``pool`` (model ``m``, with the fields ``pool`` adds: an
    ``engineType``, ``loraAdapters``) and ``other`` (model ``secret``)."""
    spec: dict[str, Any] = {
        "bbr": {"enabled": True},
        "schedulers": [
            {
                "name": "pool",
                "modelName": "m",
                "modelSelector": {"matchLabels": {"app": "pool"}},
                **(pool or {}),
            },
            {"name": "other", "modelName": "secret", "modelSelector": {"matchLabels": {"app": "other"}}},
        ],
        "extensions": {"routing": ROUTING, **(extensions or {})},
    }
    if issuer is not None:
        spec["auth"] = {
            "jwt": {
                "provider": {
                    "name": "idp",
                    "issuer": issuer,
                    "remoteJWKS": {"uri": jwks_uri},
                    "audiences": [AUDIENCE],
                }
            }
        }
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "secure-gw", "namespace": "inference"},
        "spec": spec,
    }


class Pod(Protocol):
    """A model server the gateway is pointed at: a fake one, or a simulated vLLM pod."""

    @property
    def key(self) -> str: ...


class Gw:
    def __init__(
        self, url: str, state: GatewayState, http: aiohttp.ClientSession, registry: CollectorRegistry
    ):
        self.url, self.state, self.http, self.registry = url, state, http, registry

    async def call(
        self, path: str = "/v1/completions", *, model: str = "m", headers: Any = None
    ) -> tuple[int, Any, Any]:
        async with self.http.post(
            self.url + path, json={"model": model, "prompt": "hello"}, headers=headers
        ) as resp:
            body = await resp.read()
            return resp.status, resp.headers, body

    def fresh(self, scheduler: str, key: str) -> bool:
        sr = self.state.runtime.schedulers[scheduler]
        st = sr.pool.states.get(key)
        return st is not None and sr.scheduler.is_fresh(st.view(), self.state.clock())


@contextlib.asynccontextmanager
async def secured_gateway(
    tmp_path: Path,
    servers: tuple[Pod, ...],
    *,
    issuer: JwksServer | None,
    client_ssl: ssl.SSLContext,
    extensions: Mapping[str, Any] | None = SECURITY,
    server_ssl: ssl.SSLContext | None = None,
    clock: Any = None,
    wait_ready: bool = True,
    pool: Mapping[str, Any] | None = None,
) -> AsyncIterator[Gw]:
    config_path = tmp_path / "igwc.yaml"
    config_path.write_text(
        yaml.safe_dump(
            doc(
                issuer=issuer.issuer if issuer else None,
                jwks_uri=issuer.jwks_uri if issuer else "",
                extensions=extensions,
                pool=pool,
            )
        )
    )
    endpoints = tmp_path / "endpoints.yaml"
    a, b = servers
    endpoints.write_text(yaml.safe_dump({"schedulers": {"pool": [a.key], "other": [b.key]}}))
    config = load_gateway_config(config_path)  # the project's real validation, with our extension schemas
    registry = CollectorRegistry()
    guard = build_request_guard(
        config, registry=registry, jwks_ssl_context=client_ssl, **({"clock": clock} if clock else {})
    )
    app = create_app(
        config,
        guard=guard,
        discovery=StaticFileDiscovery(
            endpoints, names={"pool": "pool", "other": "other"}, poll_interval_s=0.05
        ),
        rng=random.Random(1),
        registry=registry,
    )
    connector = aiohttp.TCPConnector(ssl=client_ssl)
    async with (
        serve_app(app, host="127.0.0.1", port=0, ssl_context=server_ssl) as url,
        aiohttp.ClientSession(connector=connector) as http,
    ):
        gw = Gw(url, app[STATE_KEY], http, registry)
        await wait_until(lambda: gw.fresh("pool", a.key) and gw.fresh("other", b.key), timeout_s=5)
        if wait_ready:
            await wait_until(lambda: gw.state.readiness()[0], timeout_s=5)
        yield gw


@contextlib.asynccontextmanager
async def tenant_gateway(
    tmp_path: Path,
    issuer: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    *,
    extensions: Mapping[str, Any] | None = SECURITY,
    pods: tuple[FakeModelServer, FakeModelServer] | None = None,
) -> AsyncIterator[tuple[tuple[FakeModelServer, ...], Gw]]:
    """:func:`secured_gateway` with JWT auth from ``issuer`` in front of ``pods`` (two fake model
    servers ``a`` and ``b`` unless given), running; ``tokens`` set to the wall clock (the gateway's),
    so that a token minted in the block is valid. Yields the servers and the gateway."""
    async with (
        running(*(pods or (FakeModelServer("a"), FakeModelServer("b")))) as servers,
        secured_gateway(tmp_path, servers, issuer=issuer, client_ssl=client_ssl, extensions=extensions) as gw,
    ):
        tokens.clock.now = time.time()
        yield servers, gw


def upstream_calls(*servers: FakeModelServer) -> int:
    return sum(len(s.received) for s in servers)


THROUGH_HTTP: dict[str, int] = {
    # RFC 9110 §5.5: the HTTP layer strips trailing whitespace from field values, so the guard sees
    # a well-formed "Bearer <valid token>" - a genuinely valid request.
    "J25-trailing-space": 200,
    "K1-api-key-trailing-space": 200,  # the same for the token of x-api-key
    # A header field over 16 KiB (igw.gateway.serving.ServerLimits.max_header_field_bytes) is refused by the
    # HTTP layer with 431 before any handler runs; smaller oversized tokens get the guard's 401
    # (maxTokenBytes), so J5-kid-10kb and J16-9kb are 401s.
    "J16-10mb-segment": 431,
}


async def test_catalogue_through_the_gateway_never_reaches_a_model_server(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory, keys: Keys
) -> None:
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl) as gw,
    ):
        ctx = Ctx(tokens=tokens, keys=keys, server=jwks_server)
        statuses: dict[str, int] = {}
        for case in CASES:
            tokens.clock.now = time.time()  # the gateway runs on the real clock
            headers = case.build(ctx)
            status, resp_headers, body = await gw.call(headers=headers if headers else None)
            statuses[case.id] = status
            assert status < 500, (case.id, status, body)
            if status == 401:
                assert resp_headers["WWW-Authenticate"] == 'Bearer error="invalid_token"', case.id
                assert b"missing or invalid bearer token" in body, case.id
        unexpected = {cid: st for cid, st in statuses.items() if st != THROUGH_HTTP.get(cid, 401)}
        assert unexpected == {}
        assert upstream_calls(*servers) == 2, (
            "only the (valid) trailing-space requests reached a model server"
        )


async def test_identity_headers_authorization_health_metrics_403_429(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl) as gw,
    ):
        a, b = servers
        tokens.clock.now = time.time()
        headers = CIMultiDict(
            {
                "Authorization": f"Bearer {tokens.token()}",
                "X-IGW-Tenant": "spoofed",
                "X-Igw-Subject": "spoofed",
            }
        )
        status, _, _ = await gw.call(headers=headers)
        assert status == 200
        sent = a.received[-1].headers
        assert [v for k, v in sent.items() if k.lower() == "x-igw-tenant"] == ["team-a"]
        assert [v for k, v in sent.items() if k.lower() == "x-igw-subject"] == ["user-1"]
        assert not [k for k in sent if k.lower() == "authorization"]

        status, _, body = await gw.call(model="secret", headers={"Authorization": f"Bearer {tokens.token()}"})
        assert status == 403
        assert b"not allowed to use model 'secret'" in body
        assert b.received == []
        # a name nobody serves is refused alike: the answer does not tell which models exist for
        # others (session s39: 404 model_not_found before, 403 for a served one)
        refusals = []
        for name in ("secret", "unserved-adapter"):
            status, _, body = await gw.call(model=name, headers={"Authorization": f"Bearer {tokens.token()}"})
            refusals.append((status, body.replace(name.encode(), b"NAME")))
        assert refusals[0] == refusals[1]
        # the models listed are those the caller may use: team-a's "m", not "secret" (session s34)
        auth = {"Authorization": f"Bearer {tokens.token()}"}
        async with gw.http.get(gw.url + "/v1/models", headers=auth) as resp:
            assert [m["id"] for m in (await resp.json())["data"]] == ["m"]
        # and retrieved alike: "secret", served but not team-a's, is answered as a name nobody serves
        # (session s39; no route before)
        async with gw.http.get(gw.url + "/v1/models/m", headers=auth) as resp:
            assert (resp.status, (await resp.json())["id"]) == (200, "m")
        answers = []
        for name in ("secret", "unserved"):
            async with gw.http.get(f"{gw.url}/v1/models/{name}", headers=auth) as resp:
                answers.append((resp.status, (await resp.read()).replace(name.encode(), b"NAME")))
        assert answers[0] == answers[1]
        assert answers[0][0] == 404
        assert b'"code":"model_not_found"' in answers[0][1]

        # query-string tokens are never read
        async with gw.http.post(
            f"{gw.url}/v1/completions?access_token={tokens.token()}", json={"model": "m", "prompt": "x"}
        ) as resp:
            assert resp.status == 401

        # open routes stay open without any token
        for path in ("/healthz", "/readyz", "/metrics"):
            async with gw.http.get(gw.url + path) as resp:
                assert resp.status == 200, path
                text = await resp.text()
        assert "igw_auth_enabled 1.0" in text
        assert 'igw_tenant_requests_total{outcome="admitted",tenant="team-a"} 1.0' in text
        async with gw.http.get(gw.url + "/readyz") as resp:
            assert "JWKS: 3 keys" in (await resp.json())["guard"]["detail"]
        async with gw.http.get(gw.url + "/v1/models") as resp:
            assert resp.status == 401
        async with gw.http.get(gw.url + "/v1/models/m") as resp:
            assert resp.status == 401


async def test_the_anthropic_sdk_authenticates_with_its_api_key_header(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """The Anthropic SDK sends its key as ``x-api-key`` (Claude Code's ``ANTHROPIC_API_KEY``): the
    JWT there is verified as a bearer token is, and never reaches the model server. Before session
    s32 such a client got 401 whatever its token."""
    import anthropic

    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl) as gw,
    ):
        a, b = servers
        tokens.clock.now = time.time()
        messages: Any = [{"role": "user", "content": "hi"}]
        kw: dict[str, Any] = {"base_url": gw.url, "max_retries": 0}
        async with anthropic.AsyncAnthropic(api_key=tokens.token(), **kw) as claude:
            answer = await claude.messages.create(model="m", max_tokens=8, messages=messages)
            assert answer.usage.output_tokens == 5
            with pytest.raises(anthropic.PermissionDeniedError):  # team-a may not use "secret"
                await claude.messages.create(model="secret", max_tokens=8, messages=messages)
        async with anthropic.AsyncAnthropic(api_key=tokens.token()[:-4] + "AAAA", **kw) as forged:
            with pytest.raises(anthropic.AuthenticationError):
                await forged.messages.create(model="m", max_tokens=8, messages=messages)
        assert [r.path for r in a.received] == ["/v1/messages"]
        assert b.received == []
        sent = {k.lower() for k in a.received[0].headers}
        assert not sent & {"x-api-key", "authorization"}
        assert [v for k, v in a.received[0].headers.items() if k.lower() == "x-igw-tenant"] == ["team-a"]


async def test_rate_limit_429_through_the_gateway(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    limits = {"rateLimits": {"default": {"requestsPerSecond": 0.001, "burst": 2}}}
    async with tenant_gateway(tmp_path, jwks_server, client_ssl, tokens, extensions=limits) as (servers, gw):
        headers = {"Authorization": f"Bearer {tokens.token()}"}
        results = [await gw.call(headers=headers) for _ in range(3)]
        assert [r[0] for r in results] == [200, 200, 429]
        assert 999 <= int(results[2][1]["Retry-After"]) <= 1100  # 1,000 s, spread by up to a tenth
        assert upstream_calls(*servers) == 2


async def test_open_mode_through_the_gateway(
    tmp_path: Path, client_ssl: ssl.SSLContext, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(
            tmp_path, servers, issuer=None, client_ssl=client_ssl, extensions={"authorization": {}}
        ) as gw,
    ):
        a, _ = servers
        status, _, _ = await gw.call(
            headers={"X-IGW-Tenant": "spoofed", "Authorization": "Bearer upstream-own"}
        )
        assert status == 200
        sent = a.received[-1].headers
        assert not [k for k in sent if k.lower() == "x-igw-tenant"]
        assert [v for k, v in sent.items() if k.lower() == "authorization"] == ["Bearer upstream-own"]
        async with gw.http.get(gw.url + "/readyz") as resp:
            assert "authentication DISABLED" in (await resp.json())["guard"]["detail"]
        async with gw.http.get(gw.url + "/metrics") as resp:
            assert "igw_auth_enabled 0.0" in await resp.text()
    assert "authentication DISABLED" in caplog.text


async def test_cold_start_without_keys_is_unready_and_refuses(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    jwks_server.mode, jwks_server.status = "status", 500
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, wait_ready=False) as gw,
    ):
        tokens.clock.now = time.time()
        async with gw.http.get(gw.url + "/readyz") as resp:
            assert resp.status == 503
        status, _, _ = await gw.call(headers={"Authorization": f"Bearer {tokens.token()}"})
        assert status == 401
        assert upstream_calls(*servers) == 0
        jwks_server.mode = "ok"
        await wait_until(lambda: gw.state.readiness()[0], timeout_s=5)
        status, _, _ = await gw.call(headers={"Authorization": f"Bearer {tokens.token()}"})
        assert status == 200


async def test_tls_termination_serves_https(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, ca: trustme.CA, tokens: TokenFactory
) -> None:
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(b"".join(b.bytes() for b in cert.cert_chain_pems))
    key_file.write_bytes(cert.private_key_pem.bytes())
    server_ssl = build_server_ssl_context(cert_file=cert_file, key_file=key_file)
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(
            tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, server_ssl=server_ssl
        ) as gw,
    ):
        assert gw.url.startswith("https://")
        tokens.clock.now = time.time()
        status, _, _ = await gw.call(headers={"Authorization": f"Bearer {tokens.token()}"})
        assert status == 200
