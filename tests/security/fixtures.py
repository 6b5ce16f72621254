"""Shared fixtures for request-security tests, registered by this folder's conftest.py and importable by
other folders (helpers live in ``tests/security/helpers.py``)."""

from __future__ import annotations

import ssl
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tests.security.helpers import (
    GuardMaker,
    JwksServer,
    Keys,
    ManualClock,
    RedisServer,
    SigningKey,
    TokenFactory,
    server_ssl,
    start_redis,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(scope="session")
def keys() -> Keys:
    return Keys(
        rsa=SigningKey("rsa-1", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        rsa2=SigningKey("rsa-2", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        ec=SigningKey("ec-1", "ES256", ec.generate_private_key(ec.SECP256R1())),
        ed=SigningKey("ed-1", "EdDSA", ed25519.Ed25519PrivateKey.generate()),
        attacker=SigningKey("evil", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        weak_rsa=SigningKey("weak", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=1024)),
    )


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def client_ssl(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


@pytest.fixture
async def jwks_server(ca: trustme.CA, keys: Keys) -> AsyncIterator[JwksServer]:
    server = JwksServer()
    server.set_keys(keys.rsa, keys.ec, keys.ed)
    await server.start(server_ssl(ca))
    yield server
    await server.stop()


@pytest.fixture
def tokens(jwks_server: JwksServer, clock: ManualClock, keys: Keys) -> TokenFactory:
    return TokenFactory(issuer=jwks_server.issuer, clock=clock, keys=keys)


@pytest.fixture
async def make_guard(
    jwks_server: JwksServer, clock: ManualClock, client_ssl: ssl.SSLContext
) -> AsyncIterator[GuardMaker]:
    maker = GuardMaker(jwks_server=jwks_server, clock=clock, client_ssl=client_ssl)
    yield maker
    for guard in maker.started:
        await guard.close()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with tempfile.TemporaryDirectory(prefix="igw-redis-") as workdir:
        server = start_redis(Path(workdir))
        try:
            yield server
        finally:
            server.stop()
