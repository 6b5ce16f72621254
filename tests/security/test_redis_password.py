"""Redis passwords from the environment (``redis.passwordEnv``), against a real Redis that requires one:
shared rate limits, tier-1 heartbeats and the global router's heartbeat reader; the refusals name the
field and never the password."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as redis_asyncio
import yaml

from igw.config.redis_password import RedisPasswordError, redis_password
from igw.gateway.heartbeat import HeartbeatSettings, heartbeat_password
from igw.global_router.heartbeats import HeartbeatReader
from igw.security.ratelimit.backend import BackendUnavailable
from igw.security.ratelimit.registry import BACKENDS
from igw.security.settings import RateLimitSettings
from tests.gateway.support import config_doc, scheduler
from tests.global_router.support import beat
from tests.security.helpers import ManualClock, RedisServer, start_redis

PASSWORD = "s3cret-redis-password-0123456789"


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"), password=PASSWORD)
    try:
        yield server
    finally:
        server.stop()


def test_the_password_comes_from_the_named_variable_and_refusals_name_the_field_only() -> None:
    env = {"IGW_REDIS_PASSWORD": PASSWORD}
    assert redis_password("redis://h:6379/0", None, path="p.redis", environ=env) is None
    assert (
        redis_password("rediss://user@h:6380/0", "IGW_REDIS_PASSWORD", path="p.redis", environ=env)
        == PASSWORD
    )
    with pytest.raises(
        RedisPasswordError, match=r"^p\.redis\.passwordEnv: environment variable MISSING is not set"
    ):
        redis_password("redis://h:6379/0", "MISSING", path="p.redis", environ=env)
    with pytest.raises(
        RedisPasswordError, match=r"^p\.redis\.passwordEnv: environment variable EMPTY is not set"
    ):
        redis_password("redis://h:6379/0", "EMPTY", path="p.redis", environ={"EMPTY": ""})
    with pytest.raises(
        RedisPasswordError, match=r"^p\.redis: url holds a password and passwordEnv names one"
    ) as both:
        redis_password(f"redis://:{PASSWORD}@h:6379/0", "IGW_REDIS_PASSWORD", path="p.redis", environ=env)
    assert PASSWORD not in str(both.value)
    with pytest.raises(RedisPasswordError, match=r"^p\.redis: url holds a password") as in_query:
        # redis-py reads ?password= as it reads the user-info, and the URL's would win over passwordEnv
        redis_password(
            f"rediss://h:6380/0?password={PASSWORD}", "IGW_REDIS_PASSWORD", path="p.redis", environ=env
        )
    assert PASSWORD not in str(in_query.value)


async def test_shared_rate_limits_authenticate_with_the_variables_password(
    locked_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IGW_RL_PASSWORD", PASSWORD)
    limits = {"requestsPerSecond": 0.001, "burst": 1}
    for password_env, works in (("IGW_RL_PASSWORD", True), (None, False)):
        redis = {"url": locked_redis.url, **({"passwordEnv": password_env} if password_env else {})}
        settings = RateLimitSettings.from_mapping({"backend": "redis", "redis": redis, "default": limits})
        backend = BACKENDS["redis"](settings, ManualClock())
        try:
            if works:
                first = await backend.admit(tenant="t", limits=settings.default, est_tokens=1)
                second = await backend.admit(tenant="t", limits=settings.default, est_tokens=1)
                assert (first.allowed, second.allowed) == (True, False)  # the bucket lives in Redis
            else:
                with pytest.raises(
                    BackendUnavailable, match=r"AuthenticationError|Authentication required|NOAUTH"
                ):
                    await backend.admit(tenant="u", limits=settings.default, est_tokens=1)
        finally:
            await backend.close()


async def test_heartbeats_are_written_and_read_with_the_variables_password(
    locked_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IGW_HB_PASSWORD", PASSWORD)
    settings = HeartbeatSettings.from_mapping(
        {"cluster": "a", "region": "r", "redis": {"url": locked_redis.url, "passwordEnv": "IGW_HB_PASSWORD"}}
    )
    assert heartbeat_password(settings) == PASSWORD
    client = redis_asyncio.Redis.from_url(locked_redis.url, password=PASSWORD)
    await client.hset("igw:hb:a", "gw-1", beat("a").encode())
    reader = HeartbeatReader(url=locked_redis.url, key_prefix="igw:hb:", clusters=["a"], password=PASSWORD)
    try:
        assert (await reader.read())["a"] is not None
    finally:
        await reader.close()
        await client.aclose()  # type: ignore[attr-defined]


def test_igw_serve_refuses_to_start_without_the_variable_naming_the_field(tmp_path: Path) -> None:
    doc = config_doc([scheduler("llama", "llama")])
    doc["spec"]["extensions"]["globalHeartbeat"] = {
        "cluster": "a",
        "region": "r",
        "redis": {"url": "redis://127.0.0.1:1/0", "passwordEnv": "IGW_UNSET_HB_PASSWORD"},
    }
    config = tmp_path / "igwc.yaml"
    config.write_text(yaml.safe_dump(doc))
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("schedulers: {llama: ['127.0.0.1:9']}\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "igw.cli.main",
            "serve",
            "--config",
            str(config),
            "--endpoints",
            str(endpoints),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        "igw serve: spec.extensions.globalHeartbeat.redis.passwordEnv: environment variable "
        "IGW_UNSET_HB_PASSWORD is not set or empty"
    ) in result.stderr
    assert "Traceback" not in result.stderr
