"""E9: the --probe JWKS check against a real HTTPS server on loopback (trustme CA, real keys)."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trustme
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from igw.checks.framework import CheckContext, CheckOptions, run_check
from igw.checks.model import Command, Severity, SkipKind, Status
from igw.checks.registry import select
from igw.checks.sources.manifests import inventory_from_documents


def _jwk(bits: int, kid: str) -> dict[str, Any]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits).public_key()
    jwk: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(key))
    return {**jwk, "kid": kid, "use": "sig", "alg": "RS256"}


GOOD = _jwk(2048, "k1")
WEAK = _jwk(1024, "weak")


class _Idp:
    """An HTTPS identity provider on 127.0.0.1 serving a JWKS and an OIDC discovery document."""

    def __init__(self, ca: trustme.CA) -> None:
        self.jwks: dict[str, Any] = {"keys": [GOOD]}
        self.discovery_issuer: str | None = None
        self.port = 0
        self._ca = ca
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def issuer(self) -> str:
        return f"https://127.0.0.1:{self.port}/"

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/jwks.json", self._jwks)
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ca.issue_cert("127.0.0.1").configure_cert(context)
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _jwks(self, _: web.Request) -> web.Response:
        return web.json_response(self.jwks)

    async def _discovery(self, _: web.Request) -> web.Response:
        if self.discovery_issuer is None:
            raise web.HTTPNotFound()
        return web.json_response({"issuer": self.discovery_issuer, "jwks_uri": f"{self.issuer}jwks.json"})

    def __enter__(self) -> _Idp:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
def idp(ca: trustme.CA) -> Iterator[_Idp]:
    with _Idp(ca) as server:
        yield server


def _probe(issuer: str, jwks_uri: str, *, ca_file: str | None, probe: bool = True) -> Any:
    config = {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "gw", "namespace": "ml"},
        "spec": {
            "auth": {
                "jwt": {
                    "provider": {
                        "name": "idp",
                        "issuer": issuer,
                        "remoteJWKS": {"uri": jwks_uri},
                        "audiences": ["igw"],
                    }
                }
            }
        },
    }
    inventory = inventory_from_documents([config], source="t")
    [check] = select(Command.PREFLIGHT, only=["IGW-PF015"])
    options = CheckOptions(probe=probe, probe_timeout_s=5, ca_bundle=ca_file)
    [result] = run_check(check, CheckContext(inventory=inventory, options=options))
    return result


def test_good_jwks_passes(idp: _Idp, ca_file: str) -> None:
    idp.discovery_issuer = idp.issuer
    result = _probe(idp.issuer, f"{idp.issuer}jwks.json", ca_file=ca_file)
    assert (result.status, result.message) == (Status.PASS, "1 usable signing key(s)")


def test_weak_keys_only_fail(idp: _Idp, ca_file: str) -> None:
    idp.jwks = {"keys": [WEAK]}
    result = _probe(idp.issuer, f"{idp.issuer}jwks.json", ca_file=ca_file)
    assert result.status is Status.FAIL
    assert "no usable signing key" in result.message
    assert "2048" in result.message


def test_duplicate_kids_and_weak_keys_warn_when_a_good_key_remains(idp: _Idp, ca_file: str) -> None:
    twin = {**_jwk(2048, "dup")}
    idp.jwks = {"keys": [GOOD, WEAK, twin, {**twin}]}
    result = _probe(idp.issuer, f"{idp.issuer}jwks.json", ca_file=ca_file)
    assert (result.status, result.severity) == (Status.WARN, Severity.LOW)
    assert "duplicate kid" in result.message


def test_discovery_issuer_mismatch_fails(idp: _Idp, ca_file: str) -> None:
    idp.discovery_issuer = "https://login.example.com/"
    result = _probe(idp.issuer, f"{idp.issuer}jwks.json", ca_file=ca_file)
    assert result.status is Status.FAIL
    assert "discovery says issuer 'https://login.example.com/'" in result.message


def test_untrusted_certificate_fails(idp: _Idp) -> None:
    result = _probe(idp.issuer, f"{idp.issuer}jwks.json", ca_file=None)
    assert result.status is Status.FAIL
    assert "TLS certificate verification failed" in result.message


def test_http_and_missing_endpoints_fail(idp: _Idp, ca_file: str) -> None:
    assert "not an https URL" in _probe(idp.issuer, "http://127.0.0.1:1/jwks.json", ca_file=ca_file).message
    assert "HTTP 404" in _probe(idp.issuer, f"{idp.issuer}missing.json", ca_file=ca_file).message


def test_probe_is_opt_in() -> None:
    result = _probe("https://idp.example.com/", "https://idp.example.com/jwks", ca_file=None, probe=False)
    assert (result.status, result.skip_kind) == (Status.SKIP, SkipKind.NOT_APPLICABLE)
