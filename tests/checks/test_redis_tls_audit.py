"""IGW-AU309: a Redis reached by plain ``redis://`` on another host is a finding, HIGH when the AUTH
password travels with it; ``rediss://``, sockets and loopback pass."""

from __future__ import annotations

from typing import Any

import pytest

from igw.checks.model import Command, Severity, Status
from tests.checks.helpers import of, router_doc, run
from tests.gateway.support import config_doc, scheduler


def _gateway(url: str, **redis: Any) -> dict[str, Any]:
    doc = config_doc([scheduler("llama", "llama")])
    doc["spec"]["extensions"]["rateLimits"] = {"backend": "redis", "redis": {"url": url, **redis}}
    return doc


@pytest.mark.parametrize(
    ("doc", "status", "severity", "needle"),
    [
        (_gateway("redis://cache.internal:6379/0"), Status.FAIL, Severity.MEDIUM, "rateLimits.redis.url"),
        (
            _gateway("redis://igw@cache.internal:6379/0", passwordEnv="REDIS_PASSWORD"),
            Status.FAIL,
            Severity.HIGH,
            "sends the Redis AUTH password",
        ),
        (
            router_doc("redis://cache.internal:6379/0?password=$TOKEN"),
            Status.FAIL,
            Severity.HIGH,
            "heartbeats",
        ),
        (_gateway("rediss://cache.internal:6380/0"), Status.PASS, None, None),
        (_gateway("redis://127.0.0.1:6379/0"), Status.PASS, None, None),
        (_gateway("redis://localhost:6379/0"), Status.PASS, None, None),
        (_gateway("unix:///var/run/redis.sock"), Status.PASS, None, None),
        (router_doc("rediss://global-router-cache.example.com:6379/0"), Status.PASS, None, None),
    ],
    ids=["plain", "plain-with-password", "router-plain-with-password", "tls", "loopback", "localhost",
         "socket", "router-tls"],
)  # fmt: skip
def test_redis_in_clear_is_named_by_field(
    doc: dict[str, Any], status: Status, severity: Severity | None, needle: str | None
) -> None:
    [result] = of(run([doc], Command.AUDIT), "IGW-AU309")
    assert result.status is status, result.message
    if severity is not None:
        assert result.severity is severity
    if needle is not None:
        assert needle in result.message


def test_without_either_kind_of_object_the_check_has_nothing_in_scope() -> None:
    [result] = of(run([], Command.AUDIT), "IGW-AU309")
    assert result.status is Status.SKIP
