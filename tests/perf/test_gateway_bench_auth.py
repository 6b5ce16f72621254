"""``igw perf gateway --auth jwt`` (the default): the gateway under test checks a real JWT on every
request, and the run proves it before measuring - over a real ``igw serve`` on loopback, its keys
fetched over HTTPS from :class:`igw.perf.perf_issuer.PerfIssuer`."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import jwt
import pytest
from aiohttp import web

from igw.perf.gateway import _auth_row
from igw.perf.gateway_backend import build_app
from igw.perf.gateway_load import closed_loop, gateway_process, wait_ready
from igw.perf.perf_issuer import AUDIENCE, PerfIssuer


@pytest.fixture
def issuer(tmp_path: Path) -> Iterator[PerfIssuer]:
    with PerfIssuer(tmp_path) as running:
        yield running


@pytest.fixture
async def backend() -> AsyncIterator[str]:
    runner = web.AppRunner(build_app(chunks=2, interval=0.001), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


def test_the_token_verifies_against_the_jwks_the_issuer_serves_over_https(issuer: PerfIssuer) -> None:
    client = jwt.PyJWKClient(issuer.jwks_uri, ssl_context=_trusting(issuer))
    key = client.get_signing_key_from_jwt(issuer.token)
    claims = jwt.decode(issuer.token, key.key, algorithms=["RS256"], audience=AUDIENCE, issuer=issuer.issuer)
    assert claims["sub"] == "perf-client"
    assert issuer.headers() == {"Authorization": f"Bearer {issuer.token}"}


def _trusting(issuer: PerfIssuer) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(issuer.ca_path))


async def test_the_gateway_refuses_requests_without_the_token_and_serves_them_with_it(
    tmp_path: Path, issuer: PerfIssuer, backend: str
) -> None:
    with gateway_process(tmp_path, backend=backend, issuer=issuer) as (gateway, _):
        await wait_ready(gateway)
        row = await _auth_row(gateway, issuer)
        assert row["value"].startswith("JWT checked on every request")
        result = await closed_loop(gateway, concurrency=2, requests=6, headers=issuer.headers())
        assert len(result.latencies_ms) == 6
        with pytest.raises(RuntimeError, match="HTTP 401"):
            await closed_loop(gateway, concurrency=1, requests=1)


async def test_a_gateway_that_serves_anonymously_stops_a_jwt_run(
    tmp_path: Path, issuer: PerfIssuer, backend: str
) -> None:
    """The check can fail: a gateway started without ``spec.auth`` answers 200 to the anonymous
    request, and the run refuses to call itself authenticated."""
    with gateway_process(tmp_path, backend=backend) as (gateway, _):
        await wait_ready(gateway)
        with pytest.raises(RuntimeError, match="answered 200 without a token"):
            await _auth_row(gateway, issuer)
        assert (await _auth_row(gateway, None))["value"] == "off (--auth none)"


async def test_the_jwks_endpoint_answers_only_its_path(issuer: PerfIssuer) -> None:
    connector = aiohttp.TCPConnector(ssl=_trusting(issuer))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(issuer.jwks_uri) as found:
            keys = (await found.json())["keys"]
        async with session.get(issuer.issuer + "/other") as other:
            assert other.status == 404
    assert [k["kid"] for k in keys] == ["igw-perf-1"]
    await asyncio.sleep(0)
