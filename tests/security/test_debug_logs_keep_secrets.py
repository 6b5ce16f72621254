"""``--log-level debug``, end to end: the real ``igw serve`` and ``igw global serve`` processes with every
credential they handle configured, sent requests that carry tokens, and their whole stdout and stderr
searched for each secret.

The gateway: JWT auth against a real JWKS over loopback HTTPS, shared rate limits in a Redis whose
password is in its URL, heartbeats to a second Redis whose password comes from ``passwordEnv``, the
decision debug token, and traces exported to a loopback OTLP receiver whose URL holds a user-info and
an ``?api_key=``. Requests: a good token (plain and streamed), one in ``x-api-key``, refused ones (wrong
key, expired, wrong audience, opaque, two headers, in the query string), a ``Proxy-Authorization`` and a
``Cookie``. The router: the same issuer, its heartbeat Redis's password from ``passwordEnv``, rate limits
in the password-URL Redis, a tenant's token. Both at the default and with ``IGW_DEBUG_THIRD_PARTY=1``.

Found so: the OTLP key, on every export that failed (urllib3's ``Max retries exceeded with url:
/v1/traces?api_key=...`` in the exporter's WARNING) and, opted in, on every export (urllib3's ``"POST
/v1/traces?api_key=... HTTP/1.1" 200``): :func:`igw.redaction.redact` masked URLs with a scheme only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
import yaml
from aiohttp import web

from igw.redaction import MASK, redact
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler
from tests.security.helpers import (
    JwksServer,
    Keys,
    ManualClock,
    RedisServer,
    TokenFactory,
    jwt_auth,
    start_redis,
    wait_until,
)

LIMITS_PASSWORD = "RlPassw0rdQ7xZ9kLm3N"
HEARTBEAT_PASSWORD = "HbPassw0rdW4vB8nJc2T"
DEBUG_TOKEN = "DbgT0kenA1b2C3d4E5f6G7"
OTLP_KEY = "OtelK3yZ8y7X6w5V4u3T"
OTLP_PASSWORD = "OtelPassw0rd5r4e3w2q"
OPAQUE_TOKEN = "notajwt" + "x9" * 20


async def _serving(proc: asyncio.subprocess.Process, pattern: str, lines: list[str]) -> str:
    """Read ``proc``'s stderr into ``lines`` up to the line matching ``pattern``; its URL."""
    assert proc.stderr is not None
    while True:
        line = (await asyncio.wait_for(proc.stderr.readline(), timeout=60)).decode()
        lines.append(line)
        assert line, "exited before serving:\n" + "".join(lines)
        if found := re.search(pattern, line):
            return found.group(1)


async def _drain(stream: asyncio.StreamReader | None, lines: list[str]) -> None:
    assert stream is not None
    while line := await stream.readline():
        lines.append(line.decode())


@contextlib.asynccontextmanager
async def _process(
    argv: Sequence[str], env: Mapping[str, str], pattern: str, lines: list[str]
) -> AsyncIterator[str]:
    """An igw command at ``--log-level debug``; yields its URL, its stdout and stderr going to ``lines``
    until it has stopped (SIGTERM) and exited 0."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", *argv, "--host", "127.0.0.1", "--port", "0",
        "--drain-seconds", "0", "--log-level", "debug",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=dict(env),
    )  # fmt: skip
    drains: list[asyncio.Task[None]] = []
    try:
        url = await _serving(proc, pattern, lines)
        drains = [asyncio.create_task(_drain(s, lines)) for s in (proc.stdout, proc.stderr)]
        yield url
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=60) == 0, "".join(lines)[-3000:]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for drain in drains:
            await drain


async def _ready(http: aiohttp.ClientSession, url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        async with http.get(url + "/readyz") as resp:
            if resp.status == 200:
                return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{url} not ready")


async def _post(
    http: aiohttp.ClientSession, url: str, headers: Any, *, stream: bool = False, query: str = ""
) -> int:
    body = {"model": "llama", "prompt": "hi", "stream": stream}
    async with http.post(f"{url}/v1/completions{query}", json=body, headers=headers) as resp:
        await resp.read()
        return resp.status


@contextlib.asynccontextmanager
async def _otlp_receiver(paths: list[str]) -> AsyncIterator[tuple[int, Callable[[], Awaitable[None]]]]:
    """A loopback OTLP/HTTP receiver accepting every export (its request targets go to ``paths``): its
    port, and a coroutine function that stops it early (the exports after that fail)."""

    async def accept(request: web.Request) -> web.Response:
        paths.append(request.path_qs)
        await request.read()
        return web.Response()

    app = web.Application()
    app.router.add_post("/{tail:.*}", accept)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    stopped = False

    async def stop() -> None:
        nonlocal stopped
        if not stopped:
            stopped = True
            await runner.cleanup()

    try:
        assert site._server is not None
        yield int(site._server.sockets[0].getsockname()[1]), stop  # type: ignore[attr-defined]
    finally:
        await stop()


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Any:
    limits = start_redis(tmp_path_factory.mktemp("limits"), password=LIMITS_PASSWORD)
    heartbeats = start_redis(tmp_path_factory.mktemp("heartbeats"), password=HEARTBEAT_PASSWORD)
    try:
        yield limits, heartbeats
    finally:
        limits.stop()
        heartbeats.stop()


def _pieces(secret: str) -> list[str]:
    """The secret and, for a JWT, each of its segments: any one of them in a log is a leak."""
    return (
        [secret, *(part for part in secret.split(".") if len(part) > 12)]
        if secret.count(".") == 2
        else [secret]
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("opt_in", [False, True], ids=["default", "IGW_DEBUG_THIRD_PARTY=1"])
async def test_no_secret_reaches_the_logs_of_igw_serve_or_igw_global_serve_at_debug(
    tmp_path: Path,
    ca: trustme.CA,
    keys: Keys,
    jwks_server: JwksServer,
    locked_redis: tuple[RedisServer, RedisServer],
    opt_in: bool,
) -> None:
    limits, heartbeats = locked_redis
    tokens = TokenFactory(issuer=jwks_server.issuer, clock=ManualClock(time.time()), keys=keys)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    limits_url = f"redis://:{LIMITS_PASSWORD}@127.0.0.1:{limits.port}"
    rate_limits = {"backend": "redis", "default": {"requestsPerSecond": 100, "burst": 100}}
    env = {k: v for k, v in os.environ.items() if k != "IGW_DEBUG_THIRD_PARTY"}
    env |= {"SSL_CERT_FILE": str(tmp_path / "ca.pem"), "HB_PASSWORD": HEARTBEAT_PASSWORD}
    env |= {"IGW_DEBUG_TOKEN": DEBUG_TOKEN, "PYTHONUNBUFFERED": "1"}
    if opt_in:
        env["IGW_DEBUG_THIRD_PARTY"] = "1"
    good, key_header, router = (tokens.token(sub=f"user-{n}") for n in range(3))
    refused = {
        "wrong key": tokens.token(keys.attacker),
        "expired": tokens.token(exp=1),
        "audience": tokens.token(aud="other"),
        "opaque": OPAQUE_TOKEN,
    }
    secrets = [
        LIMITS_PASSWORD,
        HEARTBEAT_PASSWORD,
        DEBUG_TOKEN,
        OTLP_KEY,
        OTLP_PASSWORD,
        good,
        key_header,
        router,
    ]
    secrets += refused.values()
    exported: list[str] = []
    lines: list[str] = []

    doc = config_doc([scheduler("llama", "llama")])
    doc["spec"]["auth"] = jwt_auth(jwks_server)
    doc["spec"]["extensions"]["rateLimits"] = {**rate_limits, "redis": {"url": f"{limits_url}/0"}}
    doc["spec"]["extensions"]["globalHeartbeat"] = {
        "cluster": "a",
        "region": "r",
        "redis": {"url": heartbeats.url, "passwordEnv": "HB_PASSWORD"},
    }
    (tmp_path / "igwc.yaml").write_text(yaml.safe_dump(doc))
    async with (
        _otlp_receiver(exported) as (otlp_port, stop_receiver),
        running(FakeModelServer("p0")) as (pod,),
    ):
        (tmp_path / "endpoints.yaml").write_text(yaml.safe_dump({"schedulers": {"llama": [pod.key]}}))
        otlp = f"http://igw:{OTLP_PASSWORD}@127.0.0.1:{otlp_port}/v1/traces?api_key={OTLP_KEY}"
        serve = [
            "serve",
            "--config",
            str(tmp_path / "igwc.yaml"),
            "--endpoints",
            str(tmp_path / "endpoints.yaml"),
        ]
        serve += ["--debug-decisions", "5", "--otel-endpoint", otlp]
        async with (
            aiohttp.ClientSession() as http,
            _process(serve, env, r"serving \d+ scheduler\(s\) at (http://\S+)", lines) as url,
        ):
            await _ready(http, url)
            assert await _post(http, url, {"Authorization": f"Bearer {good}"}) == 200
            assert await _post(http, url, {"Authorization": f"Bearer {good}"}, stream=True) == 200
            assert await _post(http, url, {"x-api-key": key_header}) == 200
            for token in refused.values():
                assert await _post(http, url, {"Authorization": f"Bearer {token}"}) == 401
            assert await _post(http, url, {"x-api-key": OPAQUE_TOKEN}) == 401
            twice = [("Authorization", f"Bearer {good}")] * 2
            assert await _post(http, url, twice) == 401
            assert await _post(http, url, {}, query=f"?access_token={good}") == 401
            extra = {"Authorization": f"Bearer {good}", "Proxy-Authorization": f"Bearer {key_header}"}
            assert await _post(http, url, {**extra, "Cookie": f"session={key_header}"}) == 200
            async with http.get(
                url + "/debug/decisions", headers={"Authorization": f"Bearer {DEBUG_TOKEN}"}
            ) as r:
                assert r.status == 200

            global_doc = {
                "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
                "kind": "GlobalRouterConfig",
                "metadata": {"name": "global"},
                "spec": {
                    "region": "r",
                    "clusters": [
                        {"name": "a", "region": "r", "endpoint": f"http://{pod.key}", "models": ["llama"]}
                    ],
                    "auth": jwt_auth(jwks_server),
                    "heartbeats": {"redis": {"url": heartbeats.url, "passwordEnv": "HB_PASSWORD"}},
                    "rateLimits": {**rate_limits, "redis": {"url": f"{limits_url}/1"}},
                },
            }
            (tmp_path / "global.yaml").write_text(yaml.safe_dump(global_doc))
            routed = ["global", "serve", "--config", str(tmp_path / "global.yaml")]
            async with _process(
                routed, env, r"serving \d+ cluster\(s\) at (http://\S+)", lines
            ) as global_url:
                await _ready(http, global_url)  # the tier-1 gateway's heartbeat was read
                for headers in ({"Authorization": f"Bearer {router}"}, {"x-api-key": router}):
                    assert await _post(http, global_url, headers) == 200
                assert (
                    await _post(http, global_url, {"Authorization": f"Bearer {router}"}, stream=True) == 200
                )
                assert (
                    await _post(http, global_url, {"Authorization": f"Bearer {refused['wrong key']}"}) == 401
                )
            await wait_until(lambda: bool(exported), timeout_s=15, interval_s=0.1)  # a batch every 5 s
            assert OTLP_KEY in exported[0]  # the key was sent: the receiver saw it
            await stop_receiver()  # the span of the next request is exported at exit, and fails
            assert await _post(http, url, {"Authorization": f"Bearer {good}"}) == 200

    log = "".join(lines)
    assert " DEBUG igw." in log  # both processes logged at debug
    assert "Max retries exceeded with url: /v1/traces?api_key=" in log  # the failed export was logged
    assert ("DEBUG urllib3" in log) is opt_in
    for secret in secrets:
        for piece in _pieces(secret):
            assert piece not in log, f"{secret[:6]}... in the log: " + next(
                line for line in lines if piece in line
            )


def test_a_request_target_without_scheme_has_its_query_and_secret_segments_masked() -> None:
    """urllib3 quotes the request target without scheme or host: in its DEBUG line and in the error
    the OTLP exporter logs at every failed export."""
    for text, kept in (
        (
            f'http://127.0.0.1:4318 "POST /v1/traces?api_key={OTLP_KEY} HTTP/1.1" 200 0',
            '"POST /v1/traces?api_key=',
        ),
        (
            f"Max retries exceeded with url: /v1/traces?api_key={OTLP_KEY} (Caused by",
            "url: /v1/traces?api_key=",
        ),
        (f'"POST /services/T0/B0/{OTLP_KEY}0a1b HTTP/1.1" 200', '"POST /services/T0/B0/'),
    ):
        shown = redact(text)
        assert OTLP_KEY not in shown, shown
        assert MASK in shown, shown
        assert kept in shown, shown
    for text in ('"GET /v1/models HTTP/1.1" 200', "GET /docs/security.md#jwt", "see /etc/igw/igwc.yaml?"):
        assert redact(text) == text


_FRAMEWORKS_PROBE = """
import logging, celpy
from igw.gateway.redaction import configure_logging
configure_logging("debug")
env = celpy.Environment()
program = env.program(env.compile("size(self.value) > 0"))
program.evaluate({"self": celpy.json_to_cel({"value": "%(secret)s"})})
env_var = {"name": "HF_TOKEN", "value": "%(secret)s"}
body = {"kind": "InferenceGatewayConfig", "spec": {"podDefaults": {"env": [env_var]}}}
# kopf's object logger (kopf/_core/actions/loggers.py) and the line kopf writes on every change
logging.getLogger("kopf.objects").debug("Creation is in progress: %%r", body)
logging.getLogger("igw.operator").debug("reconciled")
"""


@pytest.mark.parametrize("opt_in", [False, True], ids=["default", "IGW_DEBUG_THIRD_PARTY=1"])
def test_kopf_and_celpy_stay_at_info_under_debug(opt_in: bool) -> None:
    """kopf logs every watched object's body, its diff and its patches at DEBUG; celpy the operands
    it evaluates. Neither is a credential pattern redaction knows (``hf_...`` in an env value)."""
    secret = "hf_S3cr3tValueQwErTy0987"
    env = {k: v for k, v in os.environ.items() if k != "IGW_DEBUG_THIRD_PARTY"}
    if opt_in:
        env["IGW_DEBUG_THIRD_PARTY"] = "1"
    result = subprocess.run(
        [sys.executable, "-c", _FRAMEWORKS_PROBE % {"secret": secret}],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "DEBUG igw.operator: reconciled" in result.stderr
    # Opted in, both write the value (which is why they are capped); by default neither writes a line.
    assert (secret in result.stderr) is opt_in
    assert ("DEBUG celpy" in result.stderr) is opt_in
    assert ("DEBUG kopf.objects" in result.stderr) is opt_in
